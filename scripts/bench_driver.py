"""The driver's ceiling (issue 34, item 6): CPU-seconds per 1,000 merged completions in the process that
collects every worker's records (``--workers`` processes, ``--cluster`` Ray actors).

Record once: the real worker body (:func:`loadgen.spread.workers.worker_body`, its record shipper and all)
runs a closed-loop shard in this process against ``loadgen sim --fast``, and every message it sends is
kept. Replay: the stream is fed ``--actors`` times (as that many actors) into the driver's own
:class:`~loadgen.spread.workers.Collector` (lines written to a file, summaries aggregated, per-token values
recorded), alone: no actor, no server, no Ray; then its outcome and ``result.json``'s figures are computed
as a run's end does. Printed: driver CPU-s (``time.process_time``) per 1,000 completions and per million
output tokens, for the whole replay and for its parts (the per-token values, the rest), medians of
``--repeat`` replays, and the completions per second one driver core can merge.

    scripts/bench_driver --requests 2000 --tokens 128 --actors 8 --repeat 5
"""

from __future__ import annotations

import argparse
import asyncio
import pickle
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import cpu_split

from loadgen.core.clock import now_ns
from loadgen.core.redact import Redactor
from loadgen.endpoints.openai import OpenAIConfig, OpenAIEndpoint
from loadgen.engine.results import Aggregator
from loadgen.engine.runplan import LoadConfig, build_plan
from loadgen.sim import SimProcess
from loadgen.spread.workers import Collector, worker_body


def record(url: str, requests: int, tokens: int, concurrency: int) -> list[tuple]:
    """The messages one worker sends for a closed-loop shard of ``requests`` (real worker body, real sim)."""
    load = LoadConfig(concurrency=concurrency, requests=requests, input_tokens=64, output_tokens=tokens, salt="d")
    out: list[tuple] = []

    async def go() -> None:
        ep = OpenAIEndpoint(OpenAIConfig(base_url=url, api="completions"))
        await ep.open()
        try:
            cfg = ep.worker_config(1)
        finally:
            await ep.close()
        await worker_body(0, 1, cfg, Redactor(), load, out.append, lambda: ("go", now_ns() + 100_000_000),
                          install_signal_handlers=False)  # fmt: skip

    asyncio.run(go())
    return out


def replay(msgs: list[bytes], actors: int, plan: Any, gaps: bool) -> tuple[float, int]:
    """Driver CPU-s of feeding ``msgs`` (pickled, as they cross a pipe or Ray) as ``actors`` actors into one
    Collector (``gaps`` False: the batches' per-token values left out) and computing the outcome; and the
    completions merged."""
    with tempfile.TemporaryDirectory(prefix="lgdrv-") as tmp:
        fh = open(Path(tmp) / "requests.jsonl", "wb")
        col = Collector(actors, Aggregator(spill_dir=Path(tmp)), fh)
        c0 = time.process_time()
        for w in range(actors):
            for b in msgs:
                m = pickle.loads(b)  # what the pipe's recv (or Ray's get) does
                col.handle(w, m if gaps or m[0] != "recs" else (m[0], m[1], {}))
        col.outcome(plan, 0, 0)
        col.agg.latency_ms()  # the percentiles a result.json reads
        cpu = time.process_time() - c0
        fh.close()
        return cpu, col.agg.requests + col.agg.warmup_requests


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--actors", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    sim_cpus, _ = cpu_split(1)
    with SimProcess(["--fast", "--ttft-ms", "2", "--itl-ms", "0.2", *sim_cpus]) as sim:
        assert sim.url is not None
        sent = record(sim.url, a.requests, a.tokens, a.concurrency)
    recs = sum(len(m[1]) for m in sent if m[0] == "recs")
    msgs = [pickle.dumps(m) for m in sent]
    print(
        f"recorded: {len(msgs)} messages ({sum(map(len, msgs)) / 1e6:.1f} MB pickled), {recs} records, {a.tokens} output tokens each (one worker, real sim)"
    )
    plan = build_plan(LoadConfig(concurrency=a.concurrency * a.actors, requests=a.requests * a.actors,
                                 input_tokens=64, output_tokens=a.tokens, salt="d"))  # fmt: skip
    rows = []
    for gaps in (True, False):
        runs = [replay(msgs, a.actors, plan, gaps) for _ in range(a.repeat)]
        cpu = statistics.median(r[0] for r in runs)
        n = runs[0][1]
        rows.append((gaps, cpu, n))
        what = "whole driver (records + per-token values)" if gaps else "without the per-token values"
        print(f"{what:45s} {cpu:7.3f} CPU-s for {n} completions: {cpu / n * 1000:.3f} CPU-s per 1,000, "
              f"{cpu / (n * a.tokens) * 1e6:.2f} per million output tokens, {n / cpu:,.0f} completions/s a core")  # fmt: skip
    (_, whole, n), (_, rest, _) = rows
    print(f"per-token values: {(whole - rest) / n * 1000:.3f} CPU-s per 1,000 completions "
          f"({(whole - rest) / whole * 100:.0f} % of the driver)")  # fmt: skip
    print(f"goal (issue 34): <= 1.0 CPU-s per 1,000 completions: {'met' if whole / n * 1000 <= 1.0 else 'NOT met'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
