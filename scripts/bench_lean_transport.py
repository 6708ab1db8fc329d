"""``--http-client aiohttp`` vs ``lean`` against the truth (issue 31, item 2): is loadgen's own HTTP/1.1 client
cheaper per request and closer to the server's true TTFT and ITL than aiohttp under load?

Both clients run the same loads, in turn, ``--rounds`` times (so a shared machine's noise falls on both alike),
in this process (:func:`loadgen.measurement.measure`, its own CPU), against one ``loadgen sim --fast`` on the
last CPU with its truth log (the CLOCK_MONOTONIC time it wrote each chunk):

* closed loop at each of ``--levels`` streams (64 and 128), ``--tokens`` tokens at 1 ms ITL after a 10 ms TTFT;
* open loop at ``--rate`` req/s (1000), constant arrivals, 128 input and 16 output tokens.

For each: TTFT p50 / p99 and ITL p99 error (reported - true, ms, :func:`loadgen.sim.truth.truth_errors`), the
client's CPU per request (``result.client.cpu_s`` / completed, ms; "busy": less the senders' idle spin to
their deadlines, ``spin_idle_s``), output tok/s, p99 schedule lag (ms), and the verdict (VALID runs of all).
Medians over the rounds. Each round also times the transport alone: ``--transport-requests`` requests through
``endpoint.send`` (16 at a time, 16 tokens, no engine, no records), this process's CPU a request. Not a test (CONVENTIONS.md): figures for the issue.

    scripts/bench_lean_transport --rounds 3 --seconds 5
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import LoadConfig, SimProcess, cpu_split, median, run_against, tmpdir

from loadgen.endpoints.openai import OpenAIConfig, OpenAIEndpoint
from loadgen.measurement import MeasuredRun
from loadgen.sim.truth import truth_errors

TTFT_MS, ITL_MS = 10, 1
CLIENTS = ("aiohttp", "lean")


def run_with(url: str, client: str, load: LoadConfig, out: Path, prefix: str) -> MeasuredRun:
    """One in-process run of ``load`` through ``client`` (``--http-client``)."""
    return run_against(url, load, out, prefix=prefix, http_client=client)


def transport_only(url: str, client: str, n: int, streams: int) -> float:
    """Microseconds of this process's CPU a request for ``n`` requests sent with ``endpoint.send`` alone (no
    engine, no records: the transport and the stream reader), ``streams`` at a time, 16 output tokens."""
    import resource

    from loadgen.core.clock import now_ns
    from loadgen.core.types import RequestRecord, RequestSpec

    async def go() -> float:
        ep = OpenAIEndpoint(OpenAIConfig(base_url=url, request_id_prefix="t", http_client=client, preflight=False))
        await ep.open()

        async def user(k: int) -> None:
            for i in range(k, n, streams):
                rec = RequestRecord(index=i, scheduled_ns=now_ns(), phase="measure")
                await ep.send(RequestSpec(index=i, prompt="hello " * 100, requested_output_tokens=16), rec)

        try:
            await asyncio.gather(*(user(k) for k in range(streams)))  # warm: the pool's connections opened
            ru0 = resource.getrusage(resource.RUSAGE_SELF)
            await asyncio.gather(*(user(k) for k in range(streams)))
            ru1 = resource.getrusage(resource.RUSAGE_SELF)
        finally:
            await ep.close()
        return 1e6 * ((ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)) / n

    try:
        import uvloop

        return uvloop.run(go())
    except ImportError:
        return asyncio.run(go())


def figures(run: MeasuredRun, out: Path, truth_log: Path) -> dict[str, float]:
    """The row of one run: truth errors, CPU per request, output tok/s, p99 schedule lag, verdict."""
    e = truth_errors(out, truth_log)
    res = json.loads((out / "result.json").read_text(encoding="utf-8"))
    done = max(run.result.counts["completed"], 1)
    e["cpu_ms_per_request"] = 1e3 * run.result.client["cpu_s"] / done
    e["busy_ms_per_request"] = 1e3 * (run.result.client["cpu_s"] - run.result.client.get("spin_idle_s", 0.0)) / done
    e["output_tps"] = float(res["throughput"]["output_tps"] or 0.0)
    e["lag_p99_ms"] = float((res["latency_ms"].get("schedule_lag") or {}).get("p99") or float("nan"))
    e["failed"] = float(res["counts"]["failed"])
    return e


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--levels", default="64,128", help="closed-loop stream counts")
    ap.add_argument("--rate", type=float, default=1000.0, help="open-loop req/s (0: none)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--tokens", type=int, default=64, help="closed-loop output tokens a request")
    ap.add_argument(
        "--transport-requests", type=int, default=2000, help="requests of the transport-only runs (0: none)"
    )
    a = ap.parse_args()
    sim_cpus, client_cpus = cpu_split(1)
    d = tmpdir("bench-lean-")
    truth_log = d / "truth.jsonl"
    loads: list[tuple[str, LoadConfig]] = [
        (
            f"closed {n}",
            LoadConfig(concurrency=n, duration_s=a.seconds, warmup_s=1.0, input_tokens=16, output_tokens=a.tokens),
        )  # fmt: skip
        for n in (int(x) for x in a.levels.split(",") if x)
    ]
    if a.rate:
        loads.append((f"open {a.rate:g}/s", LoadConfig(rate_rps=a.rate, arrival="constant", duration_s=a.seconds,
                                                       warmup_s=1.0, input_tokens=128, output_tokens=16, salt="b")))  # fmt: skip
    rows: dict[tuple[str, str], list[dict[str, float]]] = {}
    bare: dict[str, list[float]] = {c: [] for c in CLIENTS}
    with SimProcess(["--fast", "--ttft-ms", str(TTFT_MS), "--itl-ms", str(ITL_MS), "--truth-log", str(truth_log),
                     *sim_cpus]) as sim:  # fmt: skip
        assert sim.url is not None
        if client_cpus:
            os.sched_setaffinity(0, {int(x) for x in client_cpus[1].split(",")})
        for r in range(a.rounds):
            for client in CLIENTS if a.transport_requests else ():
                bare[client].append(transport_only(sim.url, client, a.transport_requests, 16))
            for name, load in loads:
                for i, client in enumerate(CLIENTS if r % 2 == 0 else CLIENTS[::-1]):  # alternate who goes first
                    out = d / f"{client}-{r}-{name.replace(' ', '_').replace('/', '')}"
                    run = run_with(sim.url, client, load, out, prefix=f"{client[0]}{r}{i}")
                    time.sleep(0.3)  # the sim's truth log flushed
                    e = figures(run, out, truth_log)
                    rows.setdefault((name, client), []).append(e)
                    print(f"round {r} {name:<12s} {client:<7s} TTFT p99 err {e['ttft_p99_err_ms']:+.3f} ms, ITL p99 err "
                          f"{e['itl_p99_err_ms']:+.3f} ms, {e['cpu_ms_per_request']:.3f} ms CPU/req, "
                          f"{'VALID' if e['valid'] else 'INVALID'}", flush=True)  # fmt: skip
    print(f"\n== {a.rounds} rounds of {a.seconds:g} s a run, medians; closed loop: {a.tokens} tokens at {ITL_MS} ms "
          f"ITL after {TTFT_MS} ms TTFT; open loop: 128 in / 16 out tokens")  # fmt: skip
    print(f"{'load':<12s} {'client':<8s} {'TTFT p50 err':>12s} {'TTFT p99 err':>12s} {'ITL p99 err':>11s} "
          f"{'CPU ms/req':>10s} {'busy ms/req':>11s} {'out tok/s':>9s} {'lag p99':>8s} {'VALID':>5s}")  # fmt: skip
    for (name, client), es in rows.items():
        m: dict[str, Any] = {k: median([e[k] for e in es]) for k in es[0]}
        valid = f"{sum(int(e['valid']) for e in es)}/{len(es)}"
        print(f"{name:<12s} {client:<8s} {m['ttft_p50_err_ms']:+12.3f} {m['ttft_p99_err_ms']:+12.3f} "
              f"{m['itl_p99_err_ms']:+11.3f} {m['cpu_ms_per_request']:10.3f} {m['busy_ms_per_request']:11.3f} "
              f"{m['output_tps']:9.0f} "
              f"{m['lag_p99_ms']:8.2f} {valid:>5s}")  # fmt: skip
    for client, us in bare.items():
        if us:
            print(f"transport only (endpoint.send, 16 streams, 16 tokens, no engine): {client:<8s} "
                  f"{median(us):7.1f} us CPU a request (rounds: {', '.join(f'{u:.0f}' for u in us)})")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
