"""Shared pytest setup: the repo root on sys.path, hypothesis profiles, the ``scripted_server`` and ``sim_url`` fixtures.

Hypothesis profiles: ``ci`` (no per-example deadline: the default 200 ms failed at 405 ms on a busy
machine; derandomized, so a CI run is repeatable; on top of hypothesis' own ``ci`` profile, which also
drops the example database, prints reproduction blobs and skips the ``too_slow`` health check) and
``dev`` (hypothesis' defaults, even where ``CI`` is set). The env var ``HYPOTHESIS_PROFILE`` picks one;
without it, ``ci`` when ``CI`` is set (to any value, as hypothesis reads it), else ``dev``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

settings.register_profile("ci", settings.get_profile("ci"), deadline=None, derandomize=True)
settings.register_profile("dev", settings.get_profile("default"))
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if "CI" in os.environ else "dev"))

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from loadgen.sim.launch import SimProcess  # noqa: E402
from tests.fixtures.scripted_server import ScriptedServer  # noqa: E402

# The timing phase runs a test file to a worker, two at a time (scripts/test: --dist loadfile with
# --no-loadscope-reorder, so files go out in this order): the files that take longest go first, so the
# last ones are short and neither worker idles while the other ends on a minute-long file. xdist's own
# order (most tests first) sent the one-test files last, the 68 s busy-core sweep among them. Seconds in
# CI (session 21's log, two at a time; refresh from the durations .ci/run prints); unlisted files keep
# their place after these.
LONGEST_FILES_S = {
    "tests/integration/test_readme_commands.py": 110,
    "tests/integration/test_sweep.py": 100,
    "tests/integration/test_locust.py": 90,
    "tests/integration/test_sweep_busy_core.py": 68,
    "tests/integration/test_scale_cli.py": 35,
    "tests/integration/test_live.py": 30,
    "tests/integration/test_sweep_stability.py": 28,
    "tests/integration/test_capacity_cli.py": 25,
    "tests/integration/test_max_throughput.py": 22,
    "tests/integration/test_sweep_words.py": 22,
    "tests/integration/test_plan_validate_cli.py": 20,
    "tests/integration/test_check_128_streams.py": 15,
    "tests/integration/test_server_not_client.py": 14,
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The longest files first (:data:`LONGEST_FILES_S`), each file's tests in their own order."""
    items.sort(key=lambda item: -LONGEST_FILES_S.get(item.nodeid.split("::", 1)[0], 0))


@pytest.fixture
def scripted_server() -> Iterator[Callable[..., ScriptedServer]]:
    """A factory for :class:`tests.fixtures.scripted_server.ScriptedServer`.

    ``make(scripts=None, crlf=False)`` returns an unstarted server to use inside a test's
    event loop (``async with make(scripts) as srv: ... srv.url``);
    ``make(scripts, thread=True)`` returns one already serving from its own thread (for
    synchronous tests, e.g. driving the CLI in a subprocess). Threaded servers are
    stopped at teardown.
    """
    started: list[ScriptedServer] = []

    def make(
        scripts: list[dict[str, Any]] | None = None, *, crlf: bool = False, thread: bool = False, **kw: Any
    ) -> ScriptedServer:
        srv = ScriptedServer(scripts, crlf=crlf, **kw)
        if thread:
            srv.start_in_thread()
            started.append(srv)
        return srv

    yield make
    for srv in started:
        srv.stop_thread()


@pytest.fixture(scope="session")
def sim_url() -> Iterator[str]:
    """The URL of one simulated endpoint with default settings, shared by the whole session.

    For tests that only send ordinary traffic: it is started on first use and always
    stopped at the end of the session. Tests that need other settings (faults, slots,
    timing, a truth log, ``--strict``) start their own :class:`SimProcess`.
    """
    with SimProcess() as sim:
        assert sim.url is not None
        yield sim.url
