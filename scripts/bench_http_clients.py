"""Hot-path choice: the client's CPU per SSE event on each read path, side by side in one run.

Every variant streams the same requests (``--requests`` at ``--concurrency``, ``--tokens`` tokens
each, continuous usage on) from one ``loadgen sim --fast`` server (own process, ``--cpus``: its
own CPU) and hands every read to loadgen's own parser (``OpenAIStreamParser.feed``, one monotonic
stamp per read), so the figure is the transport's cost plus the same parsing:

* ``iter_any``: aiohttp, the body read by ``resp.content.iter_any()`` in the request's task
  (loadgen's read loop before issue 22's pushed reads);
* ``pushed``: aiohttp, the body pushed into the parser as aiohttp decodes it
  (``loadgen.endpoints.reads.read_pushed``: no task wake-up per read);
* ``raw``: the local limit: an ``asyncio.Protocol`` on a raw socket, HTTP/1.1 chunked framing cut
  by hand, the same parser; no pool, no timing hooks, no error handling;
* ``httpx`` (``--httpx``): httpx's ``aiter_raw`` (measured once at 6.6x aiohttp's CPU per event).

Variants run in turn, ``--rounds`` times, so a shared machine's noise falls on all alike; the
CPU is this process's (``RUSAGE_SELF``: CPU time, not wall time). Prints µs of client CPU per
event (median of the rounds) and each variant / ``pushed``. Not a test (CONVENTIONS.md).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import sys
import time
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import SimProcess, cpu_split

from loadgen.core.clock import now_ns
from loadgen.core.redact import Redactor
from loadgen.core.types import RequestRecord
from loadgen.endpoints.openai_stream import OpenAIStreamParser
from loadgen.endpoints.reads import read_pushed

RED = Redactor([])


def body(tokens: int) -> bytes:
    return json.dumps(
        {
            "model": "sim-model",
            "prompt": "hello there",
            "max_tokens": tokens,
            "stream": True,
            "ignore_eos": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        }  # fmt: skip
    ).encode()


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def parser() -> OpenAIStreamParser:
    return OpenAIStreamParser(RequestRecord(index=0, phase="measure", scheduled_ns=0), chat=False, redact=RED)


async def gather_users(n: int, conc: int, one: Callable[[], Awaitable[int]]) -> int:
    left = [n]

    async def user() -> int:
        ev = 0
        while left[0] > 0:
            left[0] -= 1
            ev += await one()
        return ev

    return sum(await asyncio.gather(*(user() for _ in range(conc))))


async def with_aiohttp(url: str, n: int, conc: int, tokens: int, pushed: bool) -> int:
    import aiohttp

    data = body(tokens)
    hdr = {"Content-Type": "application/json"}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=conc)) as s:

        async def one() -> int:
            p = parser()
            async with s.post(url, data=data, headers=hdr) as r:
                if pushed:
                    await read_pushed(r, p.feed, None)
                else:
                    async for chunk in r.content.iter_any():
                        if p.feed(chunk, now_ns()):
                            break
            return len(p.record.events)

        return await gather_users(n, conc, one)


async def with_httpx(url: str, n: int, conc: int, tokens: int) -> int:
    import httpx

    data = body(tokens)
    limits = httpx.Limits(max_connections=conc, max_keepalive_connections=conc)
    async with httpx.AsyncClient(limits=limits, timeout=60) as c:

        async def one() -> int:
            p = parser()
            async with c.stream("POST", url, content=data, headers={"Content-Type": "application/json"}) as r:
                async for chunk in r.aiter_raw():
                    if p.feed(chunk, now_ns()):
                        break
            return len(p.record.events)

        return await gather_users(n, conc, one)


class _Raw(asyncio.Protocol):
    """HTTP/1.1 by hand: skip the response head, cut chunked framing, feed the payload."""

    def __init__(self) -> None:
        self.buf = b""
        self.head = True
        self.p: OpenAIStreamParser | None = None
        self.done: asyncio.Future[None] | None = None
        self.tr: asyncio.Transport | None = None

    def connection_made(self, tr: asyncio.BaseTransport) -> None:
        self.tr = tr  # type: ignore[assignment]  # a stream transport

    def start(self, req: bytes) -> asyncio.Future[None]:
        self.buf, self.head, self.p = b"", True, parser()
        self.done = asyncio.get_running_loop().create_future()
        assert self.tr is not None
        self.tr.write(req)
        return self.done

    def data_received(self, data: bytes) -> None:
        t = now_ns()
        buf = self.buf + data
        if self.head:
            i = buf.find(b"\r\n\r\n")
            if i < 0:
                self.buf = buf
                return
            buf, self.head = buf[i + 4 :], False
        payload = []
        while True:
            j = buf.find(b"\r\n")
            if j < 0:
                break
            size = int(buf[:j], 16)
            if len(buf) < j + 2 + size + 2:
                break
            payload.append(buf[j + 2 : j + 2 + size])
            buf = buf[j + 4 + size :]
            if size == 0:
                assert self.done is not None
                self.done.set_result(None)
                break
        self.buf = buf
        if payload and self.p is not None:
            self.p.feed(b"".join(payload), t)


async def with_raw(url: str, n: int, conc: int, tokens: int) -> int:
    host, port = url.split("//")[1].split("/")[0].split(":")
    data = body(tokens)
    req = (
        b"POST /v1/completions HTTP/1.1\r\nHost: %b\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
        % (host.encode(), len(data))
    ) + data
    loop = asyncio.get_running_loop()
    conns = [(await loop.create_connection(_Raw, host, int(port)))[1] for _ in range(conc)]
    free = list(conns)

    async def one() -> int:
        c = free.pop()
        try:
            await c.start(req)
            assert c.p is not None
            return len(c.p.record.events)
        finally:
            free.append(c)

    try:
        return await gather_users(n, conc, one)
    finally:
        for c in conns:
            assert c.tr is not None
            c.tr.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--requests", type=int, default=512)
    ap.add_argument("--concurrency", type=int, default=128)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--itl-ms", type=float, default=1.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--httpx", action="store_true", help="also httpx's aiter_raw")
    ap.add_argument("--cpus", action="store_true", help="server and client on separate CPUs")
    a = ap.parse_args()
    sim_cpus, client_cpus = cpu_split(1, a.cpus)
    variants: dict[str, Callable[[str, int, int, int], Coroutine[Any, Any, int]]] = {
        "iter_any": lambda u, n, c, t: with_aiohttp(u, n, c, t, False),
        "pushed": lambda u, n, c, t: with_aiohttp(u, n, c, t, True),
        "raw": with_raw,
    }
    if a.httpx:
        variants["httpx"] = with_httpx
    try:
        import uvloop

        run = uvloop.run
    except ImportError:
        run = asyncio.run  # type: ignore[assignment]  # the same call shape
    rows: dict[str, list[tuple[int, float, float]]] = {k: [] for k in variants}
    with SimProcess(["--fast", "--ttft-ms", "1", "--itl-ms", str(a.itl_ms), *sim_cpus]) as sim:
        url = (sim.url or "") + "/v1/completions"
        if client_cpus:  # after the server started: a child inherits its parent's CPUs
            from loadgen.core.affinity import parse_cpus, pin_process

            pin_process(parse_cpus(client_cpus[1]))
        for _ in range(a.rounds):
            for name, fn in variants.items():
                c0, t0 = cpu(), time.perf_counter()
                ev = run(fn(url, a.requests, a.concurrency, a.tokens))
                rows[name].append((ev, cpu() - c0, time.perf_counter() - t0))
    print(
        f"== {a.requests} requests x {a.tokens} tokens at {a.concurrency} streams, ITL {a.itl_ms} ms; "
        f"{a.rounds} rounds interleaved; " + (f"client on CPU {client_cpus[1]}" if client_cpus else "no pinning")
    )
    print(f"{'read path':10s} {'events':>8s} {'cpu s':>8s} {'wall s':>8s} {'cpu us/event':>13s} {'/ pushed':>9s}")
    med = {k: sorted(c / max(ev, 1) * 1e6 for ev, c, _ in v)[len(v) // 2] for k, v in rows.items()}
    for name, v in rows.items():
        ev, c, w = v[len(v) // 2]
        print(f"{name:10s} {ev:8d} {c:8.2f} {w:8.2f} {med[name]:13.2f} {med[name] / med['pushed']:9.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
