"""Open-loop fidelity (issue: measurement core, check 3).

Constant and Poisson arrivals at 200 req/s for 30 s, 8 output tokens each, against the simulated
endpoint in its own process (truth log on). Prints, side by side: achieved send rate against the
schedule's own realized rate (bar: within 1 %), p99 schedule lag (bar: <= 2 ms), the inter-arrival
CV seen by the server (Poisson bar: within 0.05 of 1), and the client's CPU. Then asks for far
more than the machine can send (20,000 req/s) and shows that the run is INVALID, limited by the
client, with the reason.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import LoadConfig, SimProcess, pct, read_jsonl, run_against, tmpdir

SIM = ["--slots", "512", "--ttft-ms", "2", "--itl-ms", "5", "--default-max-tokens", "8"]


def one(arrival: str, rate: float, duration_s: float) -> dict[str, Any]:
    d = tmpdir(f"bench-open-{arrival}-")
    truth_path = d / "truth.jsonl"
    with SimProcess(SIM + ["--truth-log", str(truth_path)]) as sim:
        load = LoadConfig(
            rate_rps=rate, arrival=arrival, duration_s=duration_s, input_tokens=16, output_tokens=8, seed=1
        )
        run = run_against(sim.url, load, d / "run", prefix=arrival[:1])
    res = run.result.to_dict()
    truth = sorted(
        t["arrival_ns"]
        for t in read_jsonl(truth_path)
        if t.get("request_id", "") and t["request_id"].startswith(arrival[:1] + "-")
    )
    gaps = np.diff(np.asarray(truth, dtype=np.float64))
    cv = float(gaps.std() / gaps.mean()) if len(gaps) > 1 else float("nan")
    lags = [r["schedule_lag_ms"] for r in read_jsonl(d / "run" / "requests.jsonl") if r["schedule_lag_ms"] is not None]
    ach = res["throughput"]["achieved_send_rps"]
    want = res["client"]["schedule_realized_rps"]
    return {
        "arrival": arrival,
        "requests": res["counts"]["requests"],
        "failed": res["counts"]["failed"],
        "schedule_rps": want,
        "achieved_send_rps": ach,
        "send_rate_err_pct": abs(ach - want) / want * 100,
        "lag_p50_ms": pct(lags, 50),
        "lag_p99_ms": pct(lags, 99),
        "server_cv": cv,
        "client_cpu_pct": res["client"]["cpu_fraction"] * 100,
        "valid": res["validity"]["valid"],
    }


def overload(rate: float) -> dict[str, Any]:
    d = tmpdir("bench-open-overload-")
    with SimProcess(SIM) as sim:
        load = LoadConfig(rate_rps=rate, arrival="constant", duration_s=5.0, input_tokens=8, output_tokens=2)
        run = run_against(sim.url, load, d / "run")
    v = run.result.validity
    failed = [c["detail"] for c in v["checks"] if not c["ok"] and c["group"] == "generator"]
    return {
        "valid": v["valid"],
        "limited_by": v["limited_by"],
        "reasons": failed,
        "unsent": run.result.counts["unsent"],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rate", type=float, default=200.0)
    ap.add_argument("--duration", type=float, default=30.0)
    ap.add_argument("--overload-rate", type=float, default=20000.0)
    a = ap.parse_args()
    rows = [one("constant", a.rate, a.duration), one("poisson", a.rate, a.duration)]
    keys = list(rows[0])
    print(f"{'':22s}" + "".join(f"{r['arrival']:>14s}" for r in rows))
    for k in keys[1:]:
        print(f"{k:22s}" + "".join(f"{r[k]:14.3f}" if isinstance(r[k], float) else f"{str(r[k]):>14s}" for r in rows))
    ok = (
        all(r["send_rate_err_pct"] <= 1 and r["lag_p99_ms"] <= 2 for r in rows)
        and abs(rows[1]["server_cv"] - 1) <= 0.05
    )
    print(
        f"bars: send rate within 1 %, p99 schedule lag <= 2 ms, Poisson CV within 0.05 of 1: {'PASS' if ok else 'FAIL'}"
    )
    o = overload(a.overload_rate)
    print(
        f"\nasking for {a.overload_rate:,.0f} req/s: valid={o['valid']} limited_by={o['limited_by']} unsent={o['unsent']}"
    )
    for r in o["reasons"]:
        print(f"  - {r}")
    ok2 = o["valid"] is False and o["limited_by"] == "client"
    print(f"overload gives INVALID, limited_by client: {'PASS' if ok2 else 'FAIL'}")
    return 0 if ok and ok2 else 1


if __name__ == "__main__":
    raise SystemExit(main())
