"""A plain ``loadgen run`` loads no heavy module it does not use (issue 22, must-show 4: memory).

Every module imported stays resident for the whole run: the run's memory starts at its imports
(~54 MiB on this path, numpy, aiohttp and uvloop included). The command the user types, ``loadgen
run`` against the simulated endpoint, runs here in its own process; at its exit it writes
``sys.modules`` to a file, and none of :data:`FORBIDDEN` may be there: optional extras a plain
run never uses (plots, tokenizers, exporters, Ray, Locust, Triton's client) and the rooms of
other commands (the simulated endpoint's servers, which bring ``aiohttp.web``; ``loadgen
check``; the sweep, capacity and report pages). Not a memory threshold: a list of names.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

FORBIDDEN = (
    # optional extras (pyproject.toml) and other heavy packages a plain run does not use
    "matplotlib",
    "tokenizers",
    "transformers",
    "torch",
    "jinja2",
    "yaml",
    "pydantic",
    "pandas",
    "scipy",
    "prometheus_client",
    "opentelemetry",
    "ray",
    "locust",
    "gevent",
    "tritonclient",
    "grpc",
    "playwright",
    "huggingface_hub",
    # other commands' rooms
    "aiohttp.web",  # a server's side of aiohttp: the simulated endpoint
    "loadgen.sim.server",
    "loadgen.sim.fast",
    "loadgen.sim.protocol",
    "loadgen.check",
    "loadgen.sweep",
    "loadgen.capacity",
    "loadgen.spread.cluster",
    "loadgen.locust",
    "loadgen.telemetry.prom",
    "loadgen.telemetry.otlp",
    "loadgen.report.sweep_html",
    "loadgen.report.run_html",
    "loadgen.report.plotting",
)

# the ``loadgen`` console script's own entry point, with sys.modules written at exit
PROG = (
    "import atexit, os, sys\n"
    "atexit.register(lambda: open(os.environ['LOADGEN_TEST_MODULES'], 'w').write('\\n'.join(sorted(sys.modules))))\n"
    "from loadgen.cli import main\n"
    "main()\n"
)


def test_plain_run_imports_no_heavy_module(sim_url: str, tmp_path: Path) -> None:
    mods = tmp_path / "modules.txt"
    out = tmp_path / "run"
    env = dict(os.environ, LOADGEN_TEST_MODULES=str(mods))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    args = ["run", "--endpoint", sim_url, "--rate", "20", "--requests", "4", "--output-tokens", "4", "--out", str(out)]
    p = subprocess.run(
        [sys.executable, "-c", PROG, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=120
    )
    # the run really ran (exit 0, or 1 where a busy machine made it INVALID) and wrote its result
    assert p.returncode in (0, 1), p.stdout[-2000:] + p.stderr[-2000:]
    assert json.loads((out / "result.json").read_text())["counts"]["requests"] == 4
    loaded = set(mods.read_text().split())
    assert "loadgen.measurement" in loaded and "numpy" in loaded  # the list is the run's, not the bare CLI's
    bad = sorted(m for m in loaded if m in FORBIDDEN or m.split(".")[0] in FORBIDDEN)
    assert bad == [], f"a plain `loadgen run` imported {bad}: import them where they are used"
