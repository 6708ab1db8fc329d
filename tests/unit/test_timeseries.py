"""Per-interval time series and drift: exact tiny runs (one request a second)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loadgen.engine.timeseries import drift, series


def _line(i: int, ttft_ms: float = 100.0, e2e_ms: float = 500.0, out: int = 10, status: str = "ok") -> dict:
    return {"index": i, "phase": "measure", "scheduled_s": float(i), "sent_s": float(i) + 0.001, "status": status,
            "ttft_ms": ttft_ms if status == "ok" else None, "e2e_ms": e2e_ms if status == "ok" else None,
            "error_e2e_ms": None if status == "ok" else e2e_ms, "output_tokens": out}  # fmt: skip


def test_steady_run() -> None:
    # 30 requests at t = 0..29 s, each 500 ms: ends 0.5..29.5 s
    ts = series([_line(i) for i in range(30)] + [{**_line(99), "phase": "warmup"}])
    assert ts is not None
    assert ts["start_s"] == 0.0 and ts["interval_s"] == pytest.approx(29.5 / 12)
    assert len(ts["intervals"]) == 12
    assert sum(b["completed"] for b in ts["intervals"]) == 30
    assert sum(b["output_tokens"] for b in ts["intervals"]) == 300
    f, la = ts["thirds"]["first"], ts["thirds"]["last"]
    # ends cut in thirds of [0.5, 29.5]: 10 completions each, 100 tokens over 29/3 s
    assert (f["completed"], la["completed"]) == (10, 10)
    assert f["output_tps"] == pytest.approx(100 / (29 / 3), abs=1e-4) == la["output_tps"]
    d = drift(ts)
    assert d["verdict"] == "steady" and d["drifting"] == [] and d["changes"]["output_tps"] == 0.0


def test_latency_drift_is_flagged(tmp_path: Path) -> None:
    # the last ten arrivals wait twice as long for their first token
    lines = [_line(i, ttft_ms=200.0 if i >= 20 else 100.0) for i in range(30)]
    p = tmp_path / "requests.jsonl"
    p.write_text("".join(json.dumps(x) + "\n" for x in lines) + '{"torn')
    d = drift(series(p))
    assert d["verdict"] == "drifting" and d["drifting"] == ["ttft_p50_ms"]
    assert d["changes"]["ttft_p50_ms"] == pytest.approx(1.0, rel=2e-3)  # HDR precision
    # the same relative change under 5 ms is no drift
    small = [_line(i, ttft_ms=4.0 if i >= 20 else 2.0) for i in range(30)]
    assert drift(series(small))["verdict"] == "steady"


def test_throughput_drop_failures_and_too_few() -> None:
    # the last ten requests fail: no output tokens in the last third
    lines = [_line(i, status="error" if i >= 20 else "ok") for i in range(30)]
    ts = series(lines)
    assert ts is not None
    assert ts["thirds"]["last"]["failed"] == 10 and ts["thirds"]["last"]["output_tps"] == 0.0
    d = drift(ts)
    assert "output_tps" in d["drifting"] and d["changes"]["output_tps"] == -1.0
    few = drift(series([_line(i) for i in range(6)]))
    assert few["verdict"] == "not measured" and "fewer than 10" in few["reason"]
    assert series([]) is None and drift(None)["verdict"] == "not measured"


def test_drain_is_not_drift_over_the_window() -> None:
    # 60 requests a second apart after 12 warm-up ones; every third one is long (10 s, 200 tokens):
    # over [first end, last end] the tail of long requests reads as +76 % output tok/s in the
    # last third; over the measurement window [0, 60 s] the run is steady (tokens where generated).
    def mk(i: int) -> dict:
        return _line(i, e2e_ms=10_000.0 if i % 3 == 2 else 500.0, out=200 if i % 3 == 2 else 10)

    lines = [{**mk(i), "phase": "warmup"} for i in range(-12, 0)] + [mk(i) for i in range(60)]
    old = drift(series(lines))
    assert old["verdict"] == "drifting" and "output_tps" in old["drifting"]
    d = drift(series(lines, window={"start_s": 0.0, "end_s": 60.0}))
    assert d["verdict"] == "steady" and abs(d["changes"]["output_tps"]) < 0.05, d


def test_in_flight_and_server_gauges_on_the_client_intervals() -> None:
    # 12 intervals of 1 s over [0, 12]: a request in flight 2.5 -> 4.5 s, the server sampled on the same axis
    from loadgen.engine.timeseries import series as ts_series

    lines = [
        {"index": 0, "phase": "measure", "status": "ok", "scheduled_s": 0.0, "sent_s": 0.0, "e2e_ms": 500.0,
         "ttft_ms": 10.0, "output_tokens": 4},
        {"index": 1, "phase": "measure", "status": "ok", "scheduled_s": 2.5, "sent_s": 2.5, "e2e_ms": 2000.0,
         "ttft_ms": 10.0, "output_tokens": 4},
        {"index": 2, "phase": "measure", "status": "ok", "scheduled_s": 11.0, "sent_s": 11.0, "e2e_ms": 1000.0,
         "ttft_ms": 10.0, "output_tokens": 4},
    ]  # fmt: skip
    server = {"series": {"t_s": [-0.5, 0.5, 2.7, 2.9, 3.5, 12.5],
                         "gauges": {"running": [9, 1, 0, 2, 1, 9], "kv_cache_usage": [None, 0.1, 0.2, 0.4, 0.3, 1]},
                         "gpu": {"t_s": [3.2], "power_w": [300.0]}}}  # fmt: skip
    ts = ts_series(lines, server=server)
    assert ts is not None and ts["interval_s"] == 1.0
    ivs = ts["intervals"]
    assert [iv["inflight_mean"] for iv in ivs[:5]] == [0.5, 0.0, 0.5, 1.0, 0.5]
    assert ivs[0]["server"] == {"samples": 1, "running": {"mean": 1.0, "max": 1.0},
                                "kv_cache_usage": {"mean": 0.1, "max": 0.1}, "power_w": None}  # fmt: skip
    assert ivs[2]["server"]["running"] == {"mean": 1.0, "max": 2.0}
    assert ivs[2]["server"]["kv_cache_usage"] == {"mean": 0.3, "max": 0.4}
    assert ivs[3]["server"]["power_w"] == {"mean": 300.0, "max": 300.0}
    assert ivs[5]["server"]["samples"] == 0 and ivs[5]["server"]["running"] is None  # no scrape fell in it
    assert "inflight_mean" not in ts["thirds"]["first"]
    plain = ts_series(lines)
    assert plain is not None
    assert "server" not in plain["intervals"][0]  # no server observed: no server block
