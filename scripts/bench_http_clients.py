"""Hot-path choice: aiohttp vs httpx streaming the same SSE load (client CPU per event).

Both clients stream the same requests from the simulated endpoint (own process) with the same
concurrency; each chunk is only counted (no parsing), so the figure is the HTTP client's own cost.
Prints client CPU seconds, CPU per 1,000 events and the ratio, side by side, in one run.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import SimProcess

BODY = '{"model":"sim-model","prompt":"hello there","max_tokens":%d,"stream":true}'


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


async def with_aiohttp(url: str, n: int, conc: int, tokens: int) -> int:
    import aiohttp

    events = 0
    sem = asyncio.Semaphore(conc)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=conc)) as s:

        async def one() -> None:
            nonlocal events
            async with sem:
                async with s.post(url, data=BODY % tokens, headers={"Content-Type": "application/json"}) as r:
                    async for chunk in r.content.iter_any():
                        events += chunk.count(b"\n\n")

        await asyncio.gather(*(one() for _ in range(n)))
    return events


async def with_httpx(url: str, n: int, conc: int, tokens: int) -> int:
    import httpx

    events = 0
    sem = asyncio.Semaphore(conc)
    limits = httpx.Limits(max_connections=conc, max_keepalive_connections=conc)
    async with httpx.AsyncClient(limits=limits, timeout=60) as c:

        async def one() -> None:
            nonlocal events
            async with sem:
                async with c.stream(
                    "POST", url, content=BODY % tokens, headers={"Content-Type": "application/json"}
                ) as r:
                    async for chunk in r.aiter_raw():
                        events += chunk.count(b"\n\n")

        await asyncio.gather(*(one() for _ in range(n)))
    return events


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--requests", type=int, default=256)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--tokens", type=int, default=128)
    a = ap.parse_args()
    rows = []
    with SimProcess(["--slots", "1024", "--ttft-ms", "1", "--itl-ms", "2"]) as sim:
        url = sim.url + "/v1/completions"
        for name, fn in (
            ("aiohttp", with_aiohttp),
            ("httpx", with_httpx),
            ("aiohttp", with_aiohttp),
            ("httpx", with_httpx),
        ):
            c0, t0 = cpu(), time.perf_counter()
            ev = asyncio.run(fn(url, a.requests, a.concurrency, a.tokens))
            rows.append((name, ev, cpu() - c0, time.perf_counter() - t0))
    print(f"{'client':10s} {'events':>8s} {'cpu s':>8s} {'wall s':>8s} {'cpu us/event':>13s}")
    for name, ev, c, w in rows:
        print(f"{name:10s} {ev:8d} {c:8.2f} {w:8.2f} {c / ev * 1e6:13.1f}")
    med = {}
    for name in ("aiohttp", "httpx"):
        vals = sorted(c / ev for n, ev, c, _ in rows if n == name)
        med[name] = vals[len(vals) // 2]
    print(f"httpx / aiohttp CPU per event (median of runs): {med['httpx'] / med['aiohttp']:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
