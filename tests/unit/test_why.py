"""The cause of each SLO miss (loadgen.engine.why): tiny exact cases in ms, one per phase."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from loadgen.core.slo import parse_slo
from loadgen.engine.why import Baseline, attribute, phases, why

BASE = Baseline(ttft_ms=20.0, itl_ms=5.0, source="test")


def line(**kw: Any) -> dict[str, Any]:
    d: dict[str, Any] = {"index": 0, "phase": "measure", "status": "ok", "sent_s": 0.0, "schedule_lag_ms": 0.0,
                         "connect_ms": 0.0, "ttft_ms": 25.0, "ttft_from_sent_ms": 25.0, "e2e_ms": 45.0,
                         "tpot_ms": 5.0, "itl_ms": [5.0, 5.0, 5.0, 5.0], "inter_chunk_ms": [5.0, 5.0, 5.0, 5.0],
                         "output_tokens": 5}  # fmt: skip
    d.update(kw)
    return d


def test_phases_split_the_lag_and_the_server_time() -> None:
    ph = phases(line(schedule_lag_ms=10.0, throttle_ms=3.0, connect_ms=4.0, ttft_from_sent_ms=50.0), BASE)
    assert ph["client_cap"] == 3.0 and ph["connect"] == 4.0 and ph["schedule_lag"] == 3.0
    assert ph["queueing"] == 30.0 and ph["prefill"] == 20.0 and ph["buffering"] == 0.0
    # a connection opened before the scheduled time (prepared) is not late: only the lag left counts
    assert phases(line(schedule_lag_ms=1.0, connect_ms=4.0), BASE)["connect"] == 1.0
    # origin "sent": the client's phases are outside the value
    assert phases(line(schedule_lag_ms=10.0), BASE, origin="sent")["schedule_lag"] == 0.0
    # a buffered stream's excess is buffering, not queueing
    ph = phases(line(ttft_from_sent_ms=50.0, buffered=True), BASE)
    assert ph["buffering"] == 30.0 and ph["queueing"] == 0.0


@pytest.mark.parametrize(
    ("kw", "slo", "cause"),
    [
        ({"ttft_ms": 63.0, "ttft_from_sent_ms": 60.0, "schedule_lag_ms": 3.0}, "ttft:p99<=40ms", "queueing"),
        ({"ttft_ms": 110.0, "ttft_from_sent_ms": 25.0, "schedule_lag_ms": 85.0, "connect_ms": 80.0},
         "ttft:p99<=40ms", "connect"),
        ({"ttft_ms": 110.0, "ttft_from_sent_ms": 25.0, "schedule_lag_ms": 85.0}, "ttft:p99<=40ms", "schedule_lag"),
        ({"ttft_ms": 1030.0, "ttft_from_sent_ms": 25.0,
          "attempts": [{"sent_s": 0.0, "end_s": 0.005, "waited_s": 1.0}]}, "ttft:p99<=40ms", "rate_limit"),
        ({"itl_ms": [5.0, 5.0, 300.0, 5.0], "inter_chunk_ms": [5.0, 5.0, 300.0, 5.0], "tpot_ms": 78.75},
         "itl:p99<=100ms", "decode_stall"),
        ({"itl_ms": [5.0, 5.0, 300.0, 5.0], "inter_chunk_ms": [5.0, 5.0, 300.0, 5.0], "e2e_ms": 340.0},
         "e2e:p99<=100ms", "decode_stall"),
        ({"itl_ms": [60.0] * 4, "inter_chunk_ms": [60.0] * 4, "tpot_ms": 60.0, "e2e_ms": 265.0},
         "e2e:p99<=100ms", "decode"),
        ({"status": "error", "error_kind": "rate_limited"}, "ttft:p99<=40ms", "rate_limit"),
        ({"status": "error", "error_kind": "timeout"}, "e2e:p99<=40ms", "error:timeout"),
        ({"output_tokens": 0, "ttft_ms": None, "e2e_ms": None}, "ttft:p99<=40ms", "no_output"),
    ],
)  # fmt: skip
def test_each_miss_goes_to_its_dominant_phase(kw: dict[str, Any], slo: str, cause: str) -> None:
    got = attribute(line(**kw), parse_slo(slo), BASE)
    assert got is not None and got[0] == cause, got


def test_a_request_that_met_the_target_is_no_miss() -> None:
    assert attribute(line(ttft_ms=40.0), parse_slo("ttft:p99<=40ms"), BASE) is None  # thresholds inclusive


def test_summary_counts_and_words() -> None:
    lines = [line(index=i) for i in range(10)]  # server TTFT 25 ms; p1 of the run stands for unloaded
    lines += [
        line(index=10, ttft_ms=200.0, ttft_from_sent_ms=200.0),
        line(index=11, status="error", error_kind="timeout"),
    ]
    lines.append(line(index=12, phase="warmup", ttft_ms=900.0))  # warm-up: never judged
    out = why(lines, [parse_slo("ttft:p99<=100ms")])
    assert out is not None
    t = out["targets"][0]
    assert (t["misses"], t["judged"]) == (2, 12)
    assert t["causes"] == {"queueing": 1, "error:timeout": 1}
    assert t["examples"] == {"queueing": [10], "error:timeout": [11]}
    assert t["text"] == (
        "2 of 12 missed ttft:p99<=100ms: 1 server queueing (inferred), 1 error (timeout) "
        "[over an unloaded TTFT of 25.0 ms: p1 of this run's server TTFT]"  # a plain run says which reference
    )
    assert out["baseline"]["unloaded_ttft_ms"] == 25.0
    assert why(lines, []) is None


def test_a_request_cancelled_in_flight_is_a_miss_only_when_known() -> None:
    t = parse_slo("ttft:p90<=200ms")
    gone = line(status="error", error_kind="cancelled", ttft_ms=None, e2e_ms=None, chunks=0, error_e2e_ms=300.0)
    got = attribute(gone, t, BASE)
    assert got is not None and got[0] == "queueing" and got[1]["queueing"] == 280.0  # 300 in flight - 20 unloaded
    assert attribute({**gone, "error_e2e_ms": 150.0}, t, BASE) == ("censored", {})  # could still have made it
    assert attribute({**gone, "chunks": 2}, t, BASE) == ("censored", {})  # a token came: its TTFT is not on the line
    out = why([line(index=0), {**gone, "index": 1}, {**gone, "index": 2, "error_e2e_ms": 150.0}], [t])
    assert out is not None
    tw = out["targets"][0]
    assert (tw["misses"], tw["judged"], tw["censored"]) == (1, 2, 1)
    assert tw["text"].endswith("(1 cancelled in flight, not judged)")


def test_a_stall_before_a_chunk_of_several_tokens_counts_in_full() -> None:
    # 5 tokens: one, then 300 ms of silence, then a chunk of 2 (per-token ITL splits that gap in two)
    d = line(itl_ms=[5.0, 5.0, 150.0, 150.0], inter_chunk_ms=[5.0, 5.0, 300.0], tpot_ms=77.5, e2e_ms=335.0)
    assert phases(d, BASE)["decode_stall"] == 295.0


def test_a_stall_target_miss_goes_to_the_stall_not_to_the_decode() -> None:
    # issue 18: a stall SLO judges the longest gap between arrivals; its miss is the gap's excess over a typical one
    t = parse_slo("stall:p99<=200ms")
    long_decode = line(output_tokens=40, tpot_ms=30.0, inter_chunk_ms=[30.0] * 20 + [250.0] + [30.0] * 18)
    got = attribute(long_decode, t, BASE)
    assert got is not None and got[0] == "decode_stall" and got[1]["decode_stall"] == 245.0  # 250 - 5 typical
    assert got[1]["decode"] == 5.0
    assert attribute(line(inter_chunk_ms=[5.0, 150.0]), t, BASE) is None  # within the target: no miss


def test_sweep_why_takes_each_probe_s_stated_latency_origin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A closed-loop session probe counts its turns from their due times (result.json says
    ``scheduled``): ``why`` must decompose from there, not from the send as for closed-loop users."""
    import json as _json

    import loadgen.engine.why as why_mod

    seen: dict[str, str] = {}

    def fake(dirs: list[Path], targets: Any, *, origin: str, unloaded_ttft_ms: Any) -> dict[str, Any]:
        seen[dirs[0].name] = origin
        return {}

    monkeypatch.setattr(why_mod, "why_of_dirs", fake)
    for name, stated in (("sessions-c4", "scheduled"), ("users-c4", "sent"), ("old-c4", None)):
        (tmp_path / name).mkdir()
        cond = {"latency_origin": stated} if stated else {}
        (tmp_path / name / "result.json").write_text(_json.dumps({"conditions": cond}))
    result = {"probes": [{"dir": n, "concurrency": 4} for n in ("sessions-c4", "users-c4", "old-c4")]}
    why_mod.sweep_why(result, tmp_path, [], "scheduled")
    assert seen == {"sessions-c4": "scheduled", "users-c4": "sent", "old-c4": "sent"}
