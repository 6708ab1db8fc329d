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
