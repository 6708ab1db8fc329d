"""Honest client capacity: the highest output tok/s at which loadgen's own timing error stays small.

Against the simulated endpoint (own process, truth log, many slots so it queues nothing), closed
loop with C concurrent streams of T tokens at a fixed ITL, for C = 8, 16, 32, ...: loadgen's TTFT
and ITL are paired with the server's write times (same CLOCK_MONOTONIC). A level is *honest* when
the median TTFT error <= 2 ms and the p99 ITL error <= 2 ms. Two ITL errors are shown: "ITL p99
err", the reported ITL p99 minus the server's (what a user reads; a steep tail magnifies a few late
stamps: 3.6 ms paired became 8 ms here), and "paired p99", the p99 of |client ITL - server gap|
token by token (the stamps' own error). Prints, for 1 and N workers, each
level's delivered output tok/s, errors, client CPU (all client processes) and peak RSS, and the
honest capacity (the highest honest level) and the client's event-loop lag p99. On this 2-core
machine the simulated endpoint shares the cores with the client, so the figures are a floor;
``--pin`` puts the two on separate CPUs (``--cpus``) where there is a CPU per worker plus one.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import SimProcess, cpu_split, read_jsonl

REPO = Path(__file__).resolve().parents[1]


def level(c: int, workers: int, tokens: int, itl_ms: float, duration_s: float, pin: bool = False) -> dict[str, float]:
    d = Path(tempfile.mkdtemp(prefix=f"bench-client-c{c}-w{workers}-"))
    truth_path = d / "truth.jsonl"
    sim_cpus, client_cpus = cpu_split(workers, pin)
    with SimProcess(
        ["--slots", "4096", "--ttft-ms", "10", "--itl-ms", str(itl_ms), "--truth-log", str(truth_path), *sim_cpus]
    ) as sim:
        env = dict(os.environ, PYTHONPATH=str(REPO))
        cmd = [
            sys.executable,
            "-m",
            "loadgen.cli",
            "run",
            "--endpoint",
            sim.url,
            "--concurrency",
            str(c),
            "--duration",
            f"{duration_s}s",
            "--warmup",
            "2s",
            "--input-tokens",
            "16",
            "--output-tokens",
            str(tokens),
            "--workers",
            str(workers),
            "--out",
            str(d / "run"),
            *client_cpus,
        ]
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        p = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True, timeout=duration_s * 4 + 120)
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        if p.returncode not in (0, 1):
            raise SystemExit(p.stderr[-2000:])
    time.sleep(0.3)
    res = json.loads((d / "run" / "result.json").read_text())
    t0 = res["conditions"]["t0_monotonic_ns"]
    truth = {t["request_id"].rsplit("-", 1)[1]: t for t in read_jsonl(truth_path) if t.get("request_id")}
    ttft_err, itl_c, itl_t, paired = [], [], [], []
    for r in read_jsonl(d / "run" / "requests.jsonl"):
        if r["phase"] != "measure" or r["status"] != "ok":
            continue
        t = truth.get(str(r["index"]))
        if t is None or t["first_token_ns"] is None:
            continue
        sched = t0 + round(r["scheduled_s"] * 1e9)
        ttft_err.append(r["ttft_ms"] - (t["first_token_ns"] - sched) / 1e6)
        w = [x[0] for x in t["chunks"]]
        gaps = [(b - a) / 1e6 for a, b in zip(w, w[1:])]
        if len(gaps) == len(r["itl_ms"]):
            itl_c.extend(r["itl_ms"])
            itl_t.extend(gaps)
            paired.extend(abs(a - b) for a, b in zip(r["itl_ms"], gaps))
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    wall = res["client"]["wall_s"] if res["client"]["wall_s"] and workers == 1 else res["duration_s"]
    return {
        "streams": c,
        "output_tps": res["throughput"]["output_tps"] or 0.0,
        "ttft_p50_err_ms": float(np.median(ttft_err)) if ttft_err else float("nan"),
        "itl_p99_err_ms": float(abs(np.percentile(itl_c, 99) - np.percentile(itl_t, 99))) if itl_c else float("nan"),
        "itl_paired_p99_ms": float(np.percentile(paired, 99)) if paired else float("nan"),
        "client_cpu_cores": cpu / max(wall, 1e-9),
        "peak_rss_mib": r1.ru_maxrss / 1024,
        "valid": float(res["validity"]["valid"]),
        "loop_lag_p99_ms": res["client"].get("loop_lag_p99_ms") or float("nan"),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--levels", default="8,16,32,64,128")
    ap.add_argument("--workers", default="1,2")
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--itl-ms", type=float, default=5.0)
    ap.add_argument("--duration", type=float, default=8.0)
    ap.add_argument(
        "--pin",
        action="store_true",
        help="client and simulator on separate CPUs (when there is a CPU per worker plus one)",
    )
    a = ap.parse_args()
    for w in [int(x) for x in a.workers.split(",")]:
        print(f"\n== {w} worker(s): {a.tokens} tokens per stream at {a.itl_ms} ms ITL")
        print(
            f"{'streams':>8s} {'out tok/s':>10s} {'TTFT p50 err':>13s} {'ITL p99 err':>12s} {'paired p99':>11s} {'CPU cores':>10s} {'RSS MiB':>8s} {'valid':>6s} {'loop p99':>9s}"
        )
        honest = None
        for c in [int(x) for x in a.levels.split(",")]:
            r = level(c, w, a.tokens, a.itl_ms, a.duration, a.pin)
            ok = abs(r["ttft_p50_err_ms"]) <= 2 and r["itl_p99_err_ms"] <= 2
            print(
                f"{c:8d} {r['output_tps']:10.0f} {r['ttft_p50_err_ms']:13.3f} {r['itl_p99_err_ms']:12.3f} {r['itl_paired_p99_ms']:11.3f} "
                f"{r['client_cpu_cores']:10.2f} {r['peak_rss_mib']:8.0f} {bool(r['valid'])!s:>6s} {r['loop_lag_p99_ms']:9.2f}"
                + ("" if ok else "  <- over 2 ms")
            )
            if ok:
                honest = r["output_tps"]
        print(f"honest capacity with {w} worker(s): {honest or 0:.0f} output tok/s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
