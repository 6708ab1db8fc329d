"""Timing accuracy against the simulated endpoint's truth log (issue: measurement core, check 2).

The simulated endpoint (own process) serves TTFT 100 ms, ITL 20 ms, 64 tokens; loadgen sends one
request at a time. For every request and every token, loadgen's timestamps are paired with the
server's write times from its truth log (same CLOCK_MONOTONIC):

* TTFT truth = server's first-token write - loadgen's request start (scheduled time);
* ITL truth  = gaps between the server's token writes.

Prints, per run and as the median of three runs, the error of loadgen's mean and p99 TTFT and ITL
against the truth (bars: mean within 1 ms, p99 within 2 ms), plus the per-sample error.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import LoadConfig, SimProcess, median, pct, read_jsonl, run_against, tmpdir


def one_run(i: int, requests: int) -> dict[str, float]:
    d = tmpdir(f"bench-timing-{i}-")
    truth_path = d / "truth.jsonl"
    with SimProcess(
        ["--ttft-ms", "100", "--itl-ms", "20", "--default-max-tokens", "64", "--truth-log", str(truth_path)]
    ) as sim:
        load = LoadConfig(concurrency=1, requests=requests, input_tokens=32, output_tokens=64, warmup_requests=1)
        run = run_against(sim.url, load, d / "run", prefix=f"t{i}")
    t0 = run.result.conditions["t0_monotonic_ns"]
    truth = {t["request_id"]: t for t in read_jsonl(truth_path) if t.get("request_id")}
    ttft_c, ttft_t, itl_c, itl_t, err_ttft = [], [], [], [], []
    err_itl: list[float] = []
    for r in read_jsonl(d / "run" / "requests.jsonl"):
        if r["phase"] != "measure" or r["status"] != "ok":
            continue
        t = truth[f"t{i}-{r['index']}"]
        sched_ns = t0 + round(r["scheduled_s"] * 1e9)
        true_ttft_ms = (t["first_token_ns"] - sched_ns) / 1e6
        ttft_c.append(r["ttft_ms"])
        ttft_t.append(true_ttft_ms)
        err_ttft.append(r["ttft_ms"] - true_ttft_ms)
        writes = [c[0] for c in t["chunks"]]
        gaps = [(b - a) / 1e6 for a, b in zip(writes, writes[1:])]
        if len(gaps) != len(r["itl_ms"]):
            raise SystemExit(f"request {r['index']}: {len(r['itl_ms'])} ITL samples vs {len(gaps)} true gaps")
        itl_c.extend(r["itl_ms"])
        itl_t.extend(gaps)
        err_itl.extend(c - g for c, g in zip(r["itl_ms"], gaps))
    return {
        "n_requests": len(ttft_c),
        "n_tokens": len(itl_c),
        "ttft_mean_err_ms": sum(ttft_c) / len(ttft_c) - sum(ttft_t) / len(ttft_t),
        "ttft_p99_err_ms": pct(ttft_c, 99) - pct(ttft_t, 99),
        "itl_mean_err_ms": sum(itl_c) / len(itl_c) - sum(itl_t) / len(itl_t),
        "itl_p99_err_ms": pct(itl_c, 99) - pct(itl_t, 99),
        "ttft_sample_err_p50_ms": pct(err_ttft, 50),
        "ttft_sample_err_max_ms": max(err_ttft),
        "itl_sample_abs_err_p99_ms": pct([abs(e) for e in err_itl], 99),
        "ttft_mean_ms": sum(ttft_c) / len(ttft_c),
        "itl_mean_ms": sum(itl_c) / len(itl_c),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--requests", type=int, default=30)
    a = ap.parse_args()
    rows = [one_run(i, a.requests) for i in range(a.runs)]
    keys = list(rows[0])
    print(f"{'metric':28s} " + " ".join(f"{'run ' + str(i + 1):>10s}" for i in range(len(rows))) + f" {'median':>10s}")
    for k in keys:
        vals = [r[k] for r in rows]
        print(f"{k:28s} " + " ".join(f"{v:10.3f}" for v in vals) + f" {median(vals):10.3f}")
    med = {k: median([r[k] for r in rows]) for k in keys}
    ok = (
        abs(med["ttft_mean_err_ms"]) <= 1
        and abs(med["itl_mean_err_ms"]) <= 1
        and abs(med["ttft_p99_err_ms"]) <= 2
        and abs(med["itl_p99_err_ms"]) <= 2
    )
    print(f"bars (median of runs): mean error <= 1 ms, p99 error <= 2 ms: {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
