"""Open loop on one client core: where a prepared request's bytes are written, and by which HTTP client.

Variants, interleaved in each round (issue 31, must-show 2):

* ``sendgate``: the lean client (the default), written inside the dispatcher's ``gate.set()``
  (:class:`loadgen.core.clock.SendGate`, as shipped);
* ``event``: the lean client with a plain :class:`asyncio.Event` as the gate: the request's own task writes
  when it next runs (a pass of the loop later; the behaviour before session 25);
* ``aiohttp``: ``--http-client aiohttp`` (its task writes after the gate, as always).

Each run: ``--rate`` constant for ``--duration`` s, 128 input and 16 output tokens, in process
(:func:`bench_common.run_against`) on the first CPU, against ``loadgen sim --fast --ttft-ms 10 --itl-ms 1`` on
the last. Printed per run: p99 schedule lag, busy client CPU (a fraction of the core), the verdict; then medians.

    scripts/bench_send_gate --rate 1000 --rounds 3
    scripts/bench_send_gate --rate 3500 --rounds 5 --variants event,sendgate
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import LoadConfig, SimProcess, cpu_split, run_against, tmpdir

import loadgen.engine.open_loop as open_loop
from loadgen.core.clock import SendGate

VARIANTS = ("sendgate", "event", "aiohttp")


def one(url: str, variant: str, rate: float, duration_s: float) -> dict[str, Any]:
    """One run of ``variant``; its p99 schedule lag (ms), busy client CPU and verdict."""
    open_loop.SendGate = asyncio.Event if variant == "event" else SendGate  # type: ignore[misc,assignment]  # this run only
    try:
        load = LoadConfig(rate_rps=rate, arrival="constant", duration_s=duration_s, input_tokens=128,
                          output_tokens=16, salt="b")  # fmt: skip
        d = tmpdir("bench-send-gate-")
        run_against(url, load, d, http_client="aiohttp" if variant == "aiohttp" else "lean")
    finally:
        open_loop.SendGate = SendGate  # type: ignore[misc]  # restored
    res = json.loads((d / "result.json").read_text())
    lag = next(float(c["detail"].split("lag ")[1].split(" ms")[0]) for c in res["validity"]["checks"]
               if c["name"] == "schedule_lag_p99")  # fmt: skip
    return {"lag_ms": lag, "busy": res["validity"].get("client_busy_cpu_fraction") or 0.0,
            "valid": bool(res["validity"]["valid"])}  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rate", type=float, default=1000.0)
    ap.add_argument("--duration", type=float, default=5.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--variants", default=",".join(VARIANTS), help=f"comma-separated, of {', '.join(VARIANTS)}")
    a = ap.parse_args()
    variants = [v for v in a.variants.split(",") if v]
    if not variants or any(v not in VARIANTS for v in variants):
        ap.error(f"--variants: of {', '.join(VARIANTS)}")
    sim_cpus, _ = cpu_split(1)
    got: dict[str, list[dict[str, Any]]] = {v: [] for v in variants}
    with SimProcess(["--fast", "--ttft-ms", "10", "--itl-ms", "1", *sim_cpus]) as sim:
        assert sim.url is not None
        if sim_cpus:
            os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})  # the client on one core
        for r in range(a.rounds):
            for v in variants:
                x = one(sim.url, v, a.rate, a.duration)
                got[v].append(x)
                print(f"round {r} {v:8s} p99 schedule lag {x['lag_ms']:7.2f} ms, busy {x['busy']:.2f} core, "
                      f"{'VALID' if x['valid'] else 'INVALID'}", flush=True)  # fmt: skip
    print(f"medians at {a.rate:g} req/s, {a.rounds} rounds of {a.duration:g} s:")
    for v, xs in got.items():
        print(f"  {v:8s} p99 schedule lag {statistics.median(x['lag_ms'] for x in xs):.2f} ms, busy "
              f"{statistics.median(x['busy'] for x in xs):.2f} core, {sum(x['valid'] for x in xs)}/{len(xs)} VALID")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
