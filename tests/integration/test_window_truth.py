"""``loadgen run``'s rates over the measurement window against the simulated endpoint's truth log.

A few seconds of open-loop load whose outputs are mostly short but a few are long, so the
drain after the last send is long: output tok/s must match the tokens the server generated
inside the window (its truth log's chunk times) within 3 %, goodput must be exactly the
conforming requests / window. The drain-inclusive figure (the old headline) misses the
truth by far more than 3 % on the same run: the run can tell the two definitions apart.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loadgen.sim.launch import SimProcess
from tests.fixtures.cli_proc import cli_run

pytestmark = pytest.mark.timing  # asserts timing figures: the serial phase


def truth_tokens_between(truth_log: Path, start_ns: int, end_ns: int) -> int:
    """Output tokens the simulated endpoint generated in [start_ns, end_ns] (its chunks' times)."""
    n = 0
    for line in truth_log.read_text().splitlines():
        for t_ns, k in json.loads(line).get("chunks") or ():
            if start_ns <= t_ns <= end_ns:
                n += k
    return n


def test_output_tps_and_goodput_over_the_window(tmp_path: Path) -> None:
    truth = tmp_path / "truth.jsonl"
    sim_args = ["--slots", "256", "--ttft-ms", "5", "--itl-ms", "20", "--truth-log", str(truth)]
    out = tmp_path / "run"
    with SimProcess(sim_args) as sim:
        assert sim.url is not None
        p = cli_run("run", "--endpoint", sim.url,
                    "--rate", "20", "--requests", "60", "--arrival", "constant", "--seed", "3",
                    "--input-tokens", "16", "--output-tokens", "uniform:4,150",
                    "--slo", "ttft:p99<=500ms", out=out, timeout=120)  # fmt: skip
    assert (out / "result.json").exists(), p.stderr[-3000:]
    res = json.loads((out / "result.json").read_text())
    w, thr = res["window"], res["throughput"]
    assert w["basis"] == "scheduled_sends" and w["requests"] == 60
    t0 = res["conditions"]["t0_monotonic_ns"]
    start_ns, end_ns = t0 + round(w["start_s"] * 1e9), t0 + round(w["end_s"] * 1e9)
    truth_tps = truth_tokens_between(truth, start_ns, end_ns) / w["duration_s"]
    assert abs(thr["output_tps"] / truth_tps - 1) <= 0.03, (thr["output_tps"], truth_tps)
    # the drain-inclusive figure would fail the same bar (the long outputs drain ~3 s after a 3 s window)
    assert abs(thr["output_tps_incl_drain"] / truth_tps - 1) > 0.03
    assert res["duration_s"] > w["duration_s"] * 1.5
    conforming = res["slo"]["conforming_requests"]
    assert thr["goodput_rps"] == conforming / w["duration_s"]
    assert thr["offered_rps"] * w["duration_s"] == pytest.approx(60)
    assert "window of scheduled sends" in p.stdout
