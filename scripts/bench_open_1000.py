"""Open loop at 1,000 req/s on one client core (issue 31, must-show 2): p99 schedule lag and the verdict,
with the sink's open-loop hand-over delay at today's value and at the former 50 ms, interleaved in one run.

Each run: ``--rate 1000`` constant for ``--duration`` s, 128 input and 16 output tokens, against ``loadgen sim
--fast`` on the last CPU, the client pinned to the first (the run's own process, in-process
:func:`loadgen.measurement.measure`). Printed per run: the variant, p99 schedule lag, busy client CPU, the
failed checks, the sink's hand-overs (count, p99 and max duration, most records in one); then the medians.

    scripts/bench_open_1000 --pairs 4
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import LoadConfig, SimProcess, cpu_split, run_against, tmpdir

import loadgen.engine.lifecycle as lc


def one(url: str, delay_s: float, duration_s: float) -> dict[str, Any]:
    """One in-process run with the open-loop hand-over delay ``delay_s``; its figures."""
    flushes: list[tuple[int, int]] = []
    orig = lc.RunEngine._flush_done

    def timed(self: Any, until_ns: int | None = None) -> None:
        t, n = time.perf_counter_ns(), len(self._done)
        orig(self, until_ns)
        flushes.append((time.perf_counter_ns() - t, n - len(self._done)))

    saved = lc.SINK_MAX_DELAY_OPEN_S
    lc.RunEngine._flush_done = timed  # type: ignore[method-assign]  # timing each hand-over, this run only
    lc.SINK_MAX_DELAY_OPEN_S = delay_s
    try:
        load = LoadConfig(rate_rps=1000, arrival="constant", duration_s=duration_s, input_tokens=128,
                          output_tokens=16, salt="b")  # fmt: skip
        d = tmpdir("bench-1000-")
        run_against(url, load, d)
    finally:
        lc.RunEngine._flush_done = orig  # type: ignore[method-assign]  # restored
        lc.SINK_MAX_DELAY_OPEN_S = saved
    r = json.loads((d / "result.json").read_text())
    lag = next(float(c["detail"].split("lag ")[1].split(" ms")[0]) for c in r["validity"]["checks"]
               if c["name"] == "schedule_lag_p99")  # fmt: skip
    f = np.array([x[0] for x in flushes]) / 1e6 if flushes else np.zeros(1)
    return {
        "lag_ms": lag, "busy": r["validity"].get("client_busy_cpu_fraction"), "valid": r["validity"]["valid"],
        "failed": [c["name"] for c in r["validity"]["checks"] if not c["ok"] and c["group"] == "generator"],
        "flushes": len(flushes), "flush_p99_ms": float(np.percentile(f, 99)), "flush_max_ms": float(f.max()),
        "most": max((x[1] for x in flushes), default=0),
    }  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pairs", type=int, default=4)
    ap.add_argument("--duration", type=float, default=8.0)
    a = ap.parse_args()
    sim_cpus, _ = cpu_split(1)
    variants = {"today": lc.SINK_MAX_DELAY_OPEN_S, "50 ms": 0.05}
    got: dict[str, list[dict[str, Any]]] = {k: [] for k in variants}
    with SimProcess(["--fast", "--ttft-ms", "10", "--itl-ms", "1", *sim_cpus]) as sim:
        assert sim.url is not None
        cpus = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cpus[0]})  # the client on one core (the sim was started on the last)
        for _ in range(a.pairs):
            for name, delay in variants.items():
                x = one(sim.url, delay, a.duration)
                got[name].append(x)
                print(f"{name:6s} p99 lag {x['lag_ms']:6.2f} ms, busy {x['busy'] or 0:.2f} core, "
                      f"{'VALID' if x['valid'] else 'INVALID'} {x['failed']}; hand-overs {x['flushes']}, "
                      f"p99 {x['flush_p99_ms']:.2f} ms, max {x['flush_max_ms']:.2f} ms, most {x['most']} records")  # fmt: skip
    for name, xs in got.items():
        print(f"median {name:6s}: p99 schedule lag {statistics.median(x['lag_ms'] for x in xs):.2f} ms, "
              f"{sum(x['valid'] for x in xs)} of {len(xs)} VALID")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
