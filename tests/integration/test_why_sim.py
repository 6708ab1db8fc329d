"""The cause of each SLO miss names the fault the simulated endpoint was scripted to cause.

One ``loadgen run`` against a simulated endpoint with 4 slots offered more than it serves
(a growing queue), a mid-stream stall on ~10 % of requests and HTTP 429 on ~5 %. The
attribution (:mod:`loadgen.engine.why`) reads only the client's records; the test alone reads the
simulator's truth log to know which requests queued, stalled or were rate limited.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from loadgen.core.slo import parse_slo
from loadgen.engine.why import attribute, baseline
from loadgen.sim.launch import SimProcess
from tests.fixtures.cli_proc import cli_run

pytestmark = pytest.mark.timing  # asserts timing figures: the serial phase

TTFT_MS = 20.0  # the simulator's prefill cost: a request whose first token came later than this + slack queued


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


@pytest.mark.alone  # beside another test 2 of its 15 stalled requests' misses were put down to something else (session 23's CI, 2b7bb09); it passed alone
def test_misses_name_queueing_stall_and_rate_limit(tmp_path: Path) -> None:
    truth_path = tmp_path / "truth.jsonl"
    sim_args = ["--slots", "4", "--ttft-ms", str(TTFT_MS), "--itl-ms", "5", "--itl-per-seq-ms", "0",
                "--fault-stall", "0.1", "--stall-ms", "300", "--fault-429", "0.05", "--seed", "3",
                "--truth-log", str(truth_path)]  # fmt: skip
    out = tmp_path / "run"
    with SimProcess(sim_args) as sim:
        assert sim.url is not None
        proc = cli_run("run", "--endpoint", sim.url,
                       "--rate", "50", "--requests", "150", "--warmup", "10",
                       "--input-tokens", "16", "--output-tokens", "20", "--no-progress",
                       "--slo", "ttft:p99<=100ms", "--slo", "itl:p99<=100ms", "--slo", "stall:p99<=150ms",
                       out=out, timeout=180)  # fmt: skip
    assert (out / "result.json").exists(), proc.stderr[-2000:]
    res = json.loads((out / "result.json").read_text())
    why = res["why"]
    assert [t["target"] for t in why["targets"]] == ["ttft:p99<=100ms", "itl:p99<=100ms", "stall:p99<=150ms"]
    # the console summary says it too
    assert "missed ttft:p99<=100ms" in proc.stdout

    truth = {int(t["request_id"].rsplit("-", 1)[1]): t for t in _lines(truth_path) if t.get("request_id")}
    lines = [d for d in _lines(out / "requests.jsonl")]
    base = baseline([d for d in lines if d.get("sent_s") is not None])
    measured = [d for d in lines if d["phase"] == "measure"]
    ttft_t, itl_t = parse_slo("ttft:p99<=100ms"), parse_slo("itl:p99<=100ms")

    def causes(t: Any, want: Any) -> list[str]:
        got = []
        for d in measured:
            tr = truth.get(d["index"])
            if tr is None or not want(tr):
                continue
            a = attribute(d, t, base)
            if a is not None:
                got.append(a[0])
        return got

    # queued: the server held the request (first token well after arrival + prefill), no fault
    queued = causes(
        ttft_t,
        lambda tr: tr["status"] == "ok" and (tr["first_token_ns"] - tr["arrival_ns"]) / 1e6 > TTFT_MS + 150,
    )
    assert len(queued) >= 10, "the scripted overload did not queue"
    assert queued.count("queueing") >= 0.95 * len(queued), queued
    stalled = causes(itl_t, lambda tr: tr["status"] == "fault:stall")
    assert len(stalled) >= 3, "no stalled request missed the ITL target"
    assert stalled.count("decode_stall") >= 0.95 * len(stalled), stalled
    limited = causes(ttft_t, lambda tr: tr["status"] == "fault:429")
    assert limited and set(limited) == {"rate_limit"}, limited
    # and the run's summary counts them
    itl_summary = why["targets"][1]["causes"]
    assert itl_summary.get("decode_stall", 0) >= len(stalled) * 0.95
    # the stall SLO (the longest pause between token arrivals): every scripted 300 ms stall is over 150 ms and
    # goes to decode stall; beside them only failures (the 429s) and at most a few client hiccups on a busy machine
    stall_t = parse_slo("stall:p99<=150ms")
    stalled_ok = causes(stall_t, lambda tr: tr["status"] == "fault:stall")
    n_stalled = sum(
        1 for d in measured if d["status"] == "ok" and truth.get(d["index"], {}).get("status") == "fault:stall"
    )
    assert n_stalled >= 3 and len(stalled_ok) == n_stalled and set(stalled_ok) == {"decode_stall"}, stalled_ok
    slo = {t["target"]: t for t in res["slo"]["targets"]}["stall:p99<=150ms"]
    failed = sum(1 for d in measured if d["status"] != "ok")
    assert n_stalled + failed <= slo["exceedances"] <= n_stalled + failed + max(2, 0.03 * len(measured)), slo
