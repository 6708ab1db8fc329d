"""Collector pauses at 128 streams (issue 31, must-show 4): how long each garbage collection stops the client.

One closed-loop run in this process (``--concurrency``, 256 tokens a stream at 1 ms ITL, TTFT 10 ms)
against ``loadgen sim --fast`` on its own CPU (the client on the others), with ``gc.callbacks`` timing
every collection from its start to its stop: printed per generation, the count, the median, the
p99 and the longest pause, and how many exceeded 1 ms (the issue's bar: none). The run's own figures
(output tok/s, verdict) are printed beside them.

    scripts/bench_gc_pauses --concurrency 128 --duration 8
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import LoadConfig, SimProcess, cpu_split, pct, run_against, tmpdir


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--concurrency", type=int, default=128)
    ap.add_argument("--duration", type=float, default=8.0)
    ap.add_argument("--tokens", type=int, default=256)
    a = ap.parse_args()
    sim_cpus, client_cpus = cpu_split(1)
    pauses: dict[int, list[float]] = {0: [], 1: [], 2: []}
    started: dict[str, Any] = {}

    def cb(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            started["t"] = time.perf_counter_ns()
        elif "t" in started:
            pauses[info["generation"]].append((time.perf_counter_ns() - started.pop("t")) / 1e6)

    d = tmpdir("bench-gc-")
    with SimProcess(["--fast", "--slots", "8192", "--ttft-ms", "10", "--itl-ms", "1", *sim_cpus]) as sim:
        if client_cpus:  # after the simulator started (it inherits this process's CPUs)
            os.sched_setaffinity(0, {int(x) for x in client_cpus[1].split(",")})
        load = LoadConfig(concurrency=a.concurrency, duration_s=a.duration, warmup_s=2.0, input_tokens=16,
                          output_tokens=a.tokens)  # fmt: skip
        gc.callbacks.append(cb)
        try:
            run = run_against(sim.url or "", load, d / "run")
        finally:
            gc.callbacks.remove(cb)
    res = run.result.to_dict()
    print(f"== {a.concurrency} streams, {a.tokens} tokens at 1 ms ITL, {a.duration:g} s after 2 s warm-up: "
          f"{res['throughput']['output_tps']:,.0f} output tok/s, {'VALID' if res['validity']['valid'] else 'INVALID'}, "
          f"client {res['client'].get('busy_cpu_fraction') or res['client']['cpu_fraction']:.2f} cores busy")  # fmt: skip
    print(f"{'gen':>3s} {'count':>6s} {'p50 ms':>7s} {'p99 ms':>7s} {'max ms':>7s} {'> 1 ms':>6s}")
    for g, v in pauses.items():
        if v:
            print(f"{g:>3d} {len(v):6d} {pct(v, 50):7.3f} {pct(v, 99):7.3f} {max(v):7.3f} {sum(x > 1 for x in v):6d}")
        else:
            print(f"{g:>3d} {0:6d}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
