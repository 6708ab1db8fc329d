"""Validation by replay (loadgen.capacity.validate): the slice, the replayed trace and the verdict, by hand."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from loadgen.capacity import load_sweep
from loadgen.capacity.validate import judge_replay, replay_load, replay_slice, sim_profile
from loadgen.core.errors import ConfigError
from loadgen.workload.traces import read_trace

FIX = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "capacity"


def _plan(rates: list[float], replicas: list[int], dur: float = 3600.0) -> dict[str, Any]:
    return {"intervals": [{"start_s": i * dur, "duration_s": dur, "demand": r, "replicas": n, "requests": r * dur}
                          for i, (r, n) in enumerate(zip(rates, replicas, strict=True))]}  # fmt: skip


def test_the_peak_interval_compressed_into_the_replay() -> None:
    sl = replay_slice(_plan([10, 40, 40, 20], [1, 3, 3, 2]), seconds=12)
    assert sl.peak and sl.start_s == 3600 and sl.time_scale == 300  # 3600 trace s in 12 s
    assert [(s.rate_rps, s.replay_s, s.replicas) for s in sl.segments] == [(40, 12, 3)]
    assert sl.planned_replicas == 3 and sl.expected_requests == 480


def test_a_stated_slice_keeps_each_interval_rate_and_takes_the_largest_fleet() -> None:
    sl = replay_slice(_plan([10, 40, 20], [1, 3, 2]), seconds=10, time_scale=540, start_s=1800)
    # trace [1800, 7200): 1800 s of interval 0, 3600 s of interval 1, each replayed 540x faster
    assert [(s.start_s, s.rate_rps, s.replay_start_s, s.replay_s) for s in sl.segments] == [
        (1800, 10, 0, 1800 / 540), (3600, 40, 1800 / 540, 3600 / 540)]  # fmt: skip
    assert sl.planned_replicas == 3 and sl.replay_s == pytest.approx(10)
    with pytest.raises(ConfigError, match="outside the demand"):
        replay_slice(_plan([10], [1]), seconds=10, start_s=4000)
    end = replay_slice(_plan([10, 20], [1, 1]), seconds=10, time_scale=720, start_s=3600)
    assert end.replay_s == pytest.approx(5)  # cut by the demand's end


def test_replay_trace_is_the_sweeps_workload_at_the_slice_rate(tmp_path: Path) -> None:
    cap = load_sweep(str(FIX / "sim4"))
    assert sim_profile(cap) == "--fifo --slots 4 --ttft-ms 20 --itl-ms 2".split()
    sl = replay_slice(_plan([50], [2]), seconds=20)
    load = replay_load(cap, sl, tmp_path / "replay.jsonl")
    rows = [json.loads(x) for x in (tmp_path / "replay.jsonl").read_text().splitlines()]
    assert 800 < len(rows) < 1200  # Poisson, 50/s over 20 s: 1000 +- 3.3 sd
    assert {(r["input_tokens"], r["output_tokens"]) for r in rows} == {(32, 16)}  # the sweep's lengths
    assert rows[-1]["timestamp_ms"] < 20_000
    assert [t.label for t in load.slos] == ["ttft:p99<=120ms"]
    assert load.bounds.max_schedule_lag_p99_ms == 5.0  # the sweep's own bound
    assert read_trace(str(tmp_path / "replay.jsonl"), "loadgen").offset_ns.size == len(rows)  # a trace loadgen reads


def _judge(tmp_path: Path, *, valid: bool, met: bool, ttft_lag: list[tuple[float, float]]) -> dict[str, Any]:
    cap = load_sweep(str(FIX / "sim4"))
    lines = [{"phase": "measure", "status": "ok", "output_tokens": 16, "ttft_ms": t, "schedule_lag_ms": lag}
             for t, lag in ttft_lag]  # fmt: skip
    (tmp_path / "requests.jsonl").write_text("".join(json.dumps(d) + "\n" for d in lines))
    target = {"target": "ttft:p99<=120ms", "met": met, "value_ms": 1.0, "exceedances": 0, "denominator": len(lines)}
    res = {"validity": {"valid": valid}, "slo": {"met": met, "targets": [target]}}
    return judge_replay(res, tmp_path, cap)


def test_verdicts(tmp_path: Path) -> None:
    assert _judge(tmp_path, valid=True, met=True, ttft_lag=[(50, 0)] * 10)["verdict"] == "held"
    assert _judge(tmp_path, valid=True, met=False, ttft_lag=[(500, 0)] * 10)["verdict"] == "not held"
    # INVALID: misses the lag explains (200 ms late, 250 ms TTFT: 50 ms the server's) prove nothing
    v = _judge(tmp_path, valid=False, met=False, ttft_lag=[(250, 200)] * 10)
    assert v["verdict"] == "invalid" and v["lag_free_misses"] == []
    # INVALID but still over the threshold with each request's own lag taken off: the server's miss
    v = _judge(tmp_path, valid=False, met=False, ttft_lag=[(900, 20)] * 10)
    assert v["verdict"] == "not held" and v["lag_free_misses"] == ["ttft:p99<=120ms"]
    assert _judge(tmp_path, valid=False, met=True, ttft_lag=[(50, 30)] * 10)["verdict"] == "invalid"
