"""Issue 34, item 3: the README's node set-up installs what an actor imports, and an actor's failure
reaches the driver with its cause; a worker that never started has its whole shard counted unsent."""

from __future__ import annotations

import re
import shlex
import tomllib
from pathlib import Path

from packaging.requirements import Requirement

from loadgen.spread.cluster import root_cause

REPO = Path(__file__).resolve().parents[2]


def _names(reqs: list[str]) -> set[str]:
    return {re.sub(r"[-_.]+", "-", Requirement(r).name).lower() for r in reqs}


def test_the_readmes_node_command_names_every_dependency_of_loadgen() -> None:
    m = re.search(r"`pip install ('ray[^`]*)`", (REPO / "README.md").read_text())
    assert m, "README: the node set-up command is gone"
    listed = _names(shlex.split(m.group(1)))
    needed = _names(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"])
    # before issue 34 the README lacked msgspec (every actor failed to import: 0 requests)
    assert needed - listed == set(), f"the README's node command lacks {sorted(needed - listed)}"
    assert "ray" in listed


RAY_IMPORT_FAILURE = (
    "The actor died because of an error raised in its creation task, \x1b[36mray::_WorkerActor.__init__()\x1b[39m "
    "(pid=22110, ip=192.0.2.2, actor_id=66e0, repr=<TemporaryActor object at 0x7f1e>)\n"
    '  File "/tmp/x/ray/_private/function_manager.py", line 602, in temporary_actor_method\n'
    "    raise RuntimeError(\n"
    "           ^^^^^^^^^^^^^^\n"
    "RuntimeError: The actor with name _WorkerActor failed to import on the worker. This may be because needed "
    "library dependencies are not installed in the worker environment or cannot be found from sys.path "
    "['/tmp/x', '/tmp/x/node-site']:\n\n"
    "Traceback (most recent call last):\n"
    '  File "/tmp/x/ray/_private/function_manager.py", line 641, in _load_actor_class_from_gcs\n'
    "    actor_class = pickle.loads(pickled_class)\n"
    '  File "/tmp/x/_ray_pkg/loadgen/core/types.py", line 12, in <module>\n'
    "    import msgspec\n"
    "ModuleNotFoundError: No module named 'msgspec'\n"
)


def test_an_actors_import_failure_names_the_missing_module() -> None:
    cause = root_cause(RAY_IMPORT_FAILURE)
    assert cause.startswith("ModuleNotFoundError: No module named 'msgspec'"), cause
    assert "install loadgen's dependencies" in cause
    assert root_cause("ValueError: bad\nmore") == "ValueError: bad"
    assert root_cause("plain text\nsecond") == "plain text"


def test_a_worker_that_never_started_has_its_whole_shard_unsent(tmp_path: Path) -> None:
    """Before: a worker that failed before "ready" counted 0 unsent (a run of 20 planned, 0 sent, read
    "0 unsent" in the issue-34 node test)."""
    import io

    from loadgen.engine.results import Aggregator
    from loadgen.engine.runplan import LoadConfig, build_plan
    from loadgen.spread.workers import Collector, shard_size

    load = LoadConfig(rate_rps=20, arrival="constant", requests=21, input_tokens=8, output_tokens=3, salt="s")
    plan = build_plan(load)
    assert [shard_size(plan, w, 2) for w in range(2)] == [11, 10]
    col = Collector(2, Aggregator(spill_dir=tmp_path), io.BytesIO())
    col.fail(0, "failed to start: ModuleNotFoundError: No module named 'msgspec'")
    col.fail(1, "failed to start: ModuleNotFoundError: No module named 'msgspec'")
    out = col.outcome(plan, 0, 0)
    assert out.unsent + out.unsent_warmup == 21 and len(out.client.worker_failures) == 2
    closed = build_plan(LoadConfig(concurrency=3, requests=7, input_tokens=8, output_tokens=3, salt="s"))
    assert [shard_size(closed, w, 2) for w in range(2)] == [4, 3]
    assert shard_size(type("Shape", (), {"mode": "sessions", "schedule": []})(), 0, 2) == 0  # sessions: by "ready"
