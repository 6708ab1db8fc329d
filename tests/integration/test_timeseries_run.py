"""A real run against the simulated endpoint (the session's ``sim_url``) carries a time series that adds up."""

from __future__ import annotations

import json
from pathlib import Path

from loadgen.engine.timeseries import INTERVALS
from tests.fixtures.cli_proc import cli_run


def test_run_writes_timeseries(tmp_path: Path, sim_url: str) -> None:
    out = tmp_path / "run"
    cli_run("run", "--endpoint", sim_url, "--rate", "40", "--requests", "80", "--warmup", "10",
            "--input-tokens", "16", "--output-tokens", "8", out=out, timeout=120)  # fmt: skip
    res = json.loads((out / "result.json").read_text())
    ts = res["timeseries"]
    assert len(ts["intervals"]) == INTERVALS and ts["latency_origin"] == "scheduled"
    # every measured request ends in exactly one interval and arrives in exactly one
    assert sum(b["completed"] + b["failed"] for b in ts["intervals"]) == res["counts"]["requests"] == 80
    assert sum(b["arrivals"] for b in ts["intervals"]) == 80
    assert sum(b["output_tokens"] for b in ts["intervals"]) == res["tokens"]["output"]
    assert abs(ts["interval_s"] * INTERVALS - res["duration_s"]) < 1e-3
