"""``loadgen run --abandon SHARE,AFTER``: users who walk away, against the simulated endpoint's truth log.

A share of the requests is cancelled mid-reply (after a time, or after a token count); each ends as a
record of kind ``abandoned``, counted apart (never a failure, an SLO miss or a latency), its send still
counted as offered. The server's truth log shows each cancelled stream (``client_gone``) and when its
generation stopped: within a few token times of the walk-away, with no more tokens than the client saw
plus those already on the wire. The others complete.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from loadgen.sim.launch import SimProcess
from tests.fixtures.cli_proc import cli_run

ITL_MS = 5.0


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


@pytest.mark.timing  # a VALID run, walk-aways at their times: the serial phase
@pytest.mark.parametrize("after", ["15tok", "120ms"])
def test_walk_aways_are_counted_apart_and_the_server_stops(tmp_path: Path, after: str) -> None:
    truth_path = tmp_path / "truth.jsonl"
    out = tmp_path / "run"
    sim_args = ["--ttft-ms", "20", "--itl-ms", str(ITL_MS), "--itl-per-seq-ms", "0", "--truth-log", str(truth_path)]
    with SimProcess(sim_args) as sim:
        assert sim.url is not None
        proc = cli_run("run", "--endpoint", sim.url,
                       "--rate", "30", "--requests", "90", "--input-tokens", "16", "--output-tokens", "60",
                       "--abandon", f"30%,{after}", "--slo", "ttft:p99<=2s", "--no-progress",
                       out=out, timeout=120)  # fmt: skip
    assert (out / "result.json").exists(), proc.stderr[-2000:]
    res = json.loads((out / "result.json").read_text())
    t0 = res["conditions"]["t0_monotonic_ns"]
    rows = [r for r in _lines(out / "requests.jsonl") if r["phase"] == "measure"]
    walked = [r for r in rows if r.get("error_kind") == "abandoned"]
    # counted apart: not failed, not measured requests, not SLO misses; the share near 30 %
    assert res["counts"]["abandoned"] == res["abandon"]["abandoned"] == len(walked)
    assert 15 <= len(walked) <= 40, len(walked)
    assert res["counts"]["failed"] == 0 and res["counts"]["requests"] == 90 - len(walked) == res["counts"]["completed"]
    assert res["slo"]["denominator"] == res["counts"]["requests"] and res["slo"]["met"]
    assert abs(res["throughput"]["offered_rps"] - 30) < 0.5  # the abandoned were offered too
    assert res["validity"]["valid"], res["validity"]
    assert "abandoned:" in proc.stdout
    truth = {t["request_id"].rsplit("-", 1)[1]: t for t in _lines(truth_path) if t.get("request_id")}
    for r in walked:
        t = truth[str(r["index"])]
        assert t["status"] == "client_gone", t["status"]  # the server saw the stream cancelled
        walked_ns = t0 + round((r["scheduled_s"] + r["error_e2e_ms"] / 1e3) * 1e9)
        # generation stopped within a few token times of the walk-away (the disconnect seen at its next write)
        assert t["end_ns"] - walked_ns <= 4 * ITL_MS * 1e6 + 20e6, (t["end_ns"] - walked_ns) / 1e6
        made = sum(c[1] for c in t["chunks"])
        assert made < 60 and made <= r["output_tokens"] + 4, (made, r["output_tokens"])
        if after == "15tok":
            assert r["output_tokens"] == 15
        else:
            assert abs(r["error_e2e_ms"] - 120) < 25, r["error_e2e_ms"]
    for r in rows:
        if r.get("error_kind") != "abandoned":
            assert r["status"] == "ok" and truth[str(r["index"])]["status"] == "ok"
