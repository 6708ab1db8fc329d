"""``--cluster`` with nodes that have no loadgen: the driver's package is shipped to the actors.

loadgen is not on a public index, so ``pip install 'loadgen[cluster]'`` fails on a fresh node.
The path that works with only Ray and loadgen's dependencies on the nodes: the driver connects,
finds that the actors cannot import loadgen (or import another one) and reconnects with its own
package as Ray ``runtime_env`` ``py_modules``. Here the Ray head runs from a virtualenv that
sees only the packages of the README's node set-up (``pip install 'ray>=2.40' ...``, parsed from the
README) and what they require, linked from this environment into a directory of their own (no
index needed), and not loadgen; the CLI run on it must finish with every request and say
``conditions.cluster.code: shipped ...``. (Before issue 34 the README's command lacked ``msgspec``: every
actor failed to import and the run ended with 0 requests.)

Skipped without Ray. About 30 s (a head node, two actors, a short run).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

import pytest

from tests.fixtures.cli_proc import cli_run
from tests.fixtures.node_env import node_python, readme_node_packages
from tests.fixtures.ray_head import ray_head as start_ray_head

pytest.importorskip("ray", reason="Ray is not installed: pip install 'loadgen[cluster]' to run the --cluster tests")

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture()
def bare_head() -> Iterator[tuple[str, str]]:
    """A one-node Ray cluster on 127.0.0.1 whose Python has no loadgen; yields (address, its python)."""
    tmp = Path(tempfile.mkdtemp(prefix="lgship-", dir="/tmp"))  # short: Ray's socket paths have a length limit
    py = node_python(tmp / "venv", readme_node_packages())  # the README's node set-up, as written
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    probe = subprocess.run([py, "-c", "import ray, numpy, aiohttp, orjson, hdrh; import loadgen"], cwd=tmp, env=env,
                           capture_output=True, text=True, timeout=60)  # fmt: skip
    assert "No module named 'loadgen'" in probe.stderr, probe.stderr  # the node's Python: deps yes, loadgen no
    try:
        with start_ray_head(py, num_cpus=3, env=env, cwd=tmp) as address:
            yield address, py
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.mark.timing
def test_cli_run_on_nodes_without_loadgen_ships_the_drivers_package(bare_head: tuple[str, str], tmp_path: Path) -> None:
    address, _ = bare_head
    # the driver runs its installed loadgen from another directory: Ray hands the driver's sys.path[0]
    # (here the checkout, with -m from it) to the actors of a one-host cluster, which would hide the test;
    # so not this checkout on PYTHONPATH either
    out = tmp_path / "run"
    p = cli_run(
        "run", "--cluster", address, "--workers", "2", "--rate", "20",
        "--requests", "20", "--input-tokens", "8", "--output-tokens", "4", "--arrival", "constant", out=out,
        cwd=tmp_path, env={"PYTHONPATH": None, "RAY_USAGE_STATS_ENABLED": "0", "COLUMNS": "200"}, timeout=240,
    )  # fmt: skip
    assert p.returncode in (0, 1), p.stderr[-3000:]  # 1: INVALID on a busy machine; the run happened
    assert "shipping the driver's package" in p.stderr
    res = json.loads((out / "result.json").read_text())
    assert res["counts"]["requests"] == 20 and res["counts"]["completed"] == 20, p.stdout[-3000:] + p.stderr[-3000:]
    assert res["conditions"]["cluster"]["code"].startswith("shipped from the driver")


def test_wheel_from_the_script_installs_on_a_node_and_runs_the_drivers_code(tmp_path: Path) -> None:
    """The other path: ``scripts/build_wheel`` builds a wheel that installs on a node with only its
    dependencies (here from this environment, no index) and holds the driver's very code (the same
    source hash, so the actors use it and nothing is shipped)."""
    from loadgen.spread.cluster import code_hash

    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    p = subprocess.run([str(REPO / "scripts" / "build_wheel"), str(tmp_path / "dist")], capture_output=True,
                       text=True, timeout=180, env=env)  # fmt: skip
    assert p.returncode == 0, p.stderr
    wheel = p.stdout.strip().splitlines()[-1]
    assert Path(wheel).name.startswith("loadgen-") and not (REPO / "build").exists()
    needs = [r for r in metadata.requires("loadgen") or [] if "extra ==" not in r]  # the wheel's own dependencies
    py = node_python(tmp_path / "node", [*needs, "ray>=2.40"])
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", "--target",
                    str(tmp_path / "node-site"), wheel], check=True, timeout=180, env=env)  # fmt: skip
    node_env = dict(env, PYTHONPATH=str(tmp_path / "node-site"))
    out = subprocess.run([py, "-c", "from loadgen.spread.cluster import code_hash; print(code_hash())"], cwd=tmp_path,
                         env=node_env, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == code_hash()
