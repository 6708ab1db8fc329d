"""Kernel receive stamps against the truth (issue 31, item 3): would stamping each read in the kernel make
TTFT and ITL exact under load, and what does it cost?

Three clients stream the same closed-loop load (``--levels`` streams, ``--tokens`` tokens a request at 1 ms
ITL after a 10 ms TTFT) from one ``loadgen sim --fast`` (its own CPU; its truth log: the CLOCK_MONOTONIC
time it wrote each chunk), in turn, ``--rounds`` times, so a shared machine's noise falls on all alike:

* ``loadgen``: loadgen itself (aiohttp, its pushed reads, its stamps), errors by :func:`loadgen.sim.truth.truth_errors`;
* ``recv``: a bare client: one socket a stream, ``loop.add_reader`` and ``sock.recv``, HTTP/1.1 chunks cut by
  hand, each event stamped with ``time.monotonic_ns()`` when its read returns (the best a user-space reader does);
* ``kernel``: the same client reading with ``recvmsg`` on sockets with ``SO_TIMESTAMPNS`` (35; Python 3.11 names
  no constant): each read also carries the kernel's receive time (CLOCK_REALTIME, moved to the monotonic clock
  by an offset read at start), one stamp per read.

For each: TTFT p50 / p99 error and ITL p99 error (reported - true, ms, over every measured request), and the
client's CPU per request (``RUSAGE_SELF`` of this process for the bare clients; loadgen's own figure).
``--hog`` keeps the client's core busy with ``yes`` at the same priority (a user's shared machine).
Not a test (CONVENTIONS.md): figures for the issue's item 3.

    scripts/bench_kernel_stamps --levels 8,64 --rounds 3 --seconds 6 [--hog]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import LoadConfig, SimProcess, cpu_split, median, pct, read_jsonl, run_against, tmpdir

from loadgen.sim.truth import truth_errors

SO_TIMESTAMPNS = SCM_TIMESTAMPNS = 35  # <asm-generic/socket.h>
TTFT_MS, ITL_MS = 10, 1


def realtime_offset_ns() -> int:
    """CLOCK_REALTIME - CLOCK_MONOTONIC, the tightest of 50 paired readings."""
    best: tuple[int, int] | None = None
    for _ in range(50):
        a = time.monotonic_ns()
        w = time.time_ns()
        b = time.monotonic_ns()
        if best is None or b - a < best[0]:
            best = (b - a, w - (a + b) // 2)
    assert best is not None
    return best[1]


class Stream:
    """One keep-alive connection; :meth:`request` sends one streamed completion and returns each token event's
    (user stamp, kernel stamp or None)."""

    def __init__(self, host: str, port: int, kernel: bool, offset_ns: int) -> None:
        self.host, self.port, self.kernel, self.offset_ns = host, port, kernel, offset_ns
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setblocking(False)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if kernel:
            self.sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        self.loop = asyncio.get_running_loop()

    async def connect(self) -> None:
        await self.loop.sock_connect(self.sock, (self.host, self.port))

    async def request(self, rid: str, tokens: int) -> list[tuple[int, int | None]]:
        body = json.dumps({"model": "sim-model", "prompt": "hello there", "max_tokens": tokens, "stream": True,
                           "ignore_eos": True}).encode()  # fmt: skip
        head = (f"POST /v1/completions HTTP/1.1\r\nHost: {self.host}:{self.port}\r\nContent-Type: application/json\r\n"
                f"X-Request-Id: {rid}\r\nContent-Length: {len(body)}\r\n\r\n").encode()  # fmt: skip
        events: list[tuple[int, int | None]] = []
        buf = bytearray()
        done: asyncio.Future[None] = self.loop.create_future()
        fd = self.sock.fileno()

        def readable() -> None:
            try:
                if self.kernel:
                    data, anc, _flags, _addr = self.sock.recvmsg(65536, 64)
                else:
                    data, anc = self.sock.recv(65536), []
            except BlockingIOError:
                return
            t_user = time.monotonic_ns()
            t_kernel = None
            for level, kind, raw in anc:
                if level == socket.SOL_SOCKET and kind == SCM_TIMESTAMPNS:
                    sec, nsec = struct.unpack("qq", raw[:16])
                    t_kernel = sec * 1_000_000_000 + nsec - self.offset_ns
            if not data:
                done.set_exception(ConnectionError("closed"))
                return
            buf.extend(data)
            while True:  # whole SSE events: one per chunk in loadgen sim --fast
                end = buf.find(b"\n\n")
                if end < 0:
                    break
                event = bytes(buf[: end + 2])
                del buf[: end + 2]
                if b'"text"' in event:
                    events.append((t_user, t_kernel))
            if len(events) >= tokens and not done.done():
                done.set_result(None)

        self.loop.add_reader(fd, readable)
        try:
            await self.loop.sock_sendall(self.sock, head + body)
            await asyncio.wait_for(done, 30)
            # the tail ([DONE], the last chunk) arrives within the token's read or just after: drain it
            await asyncio.sleep(0)
        finally:
            self.loop.remove_reader(fd)
        self._drain()
        return events

    def _drain(self) -> None:
        try:
            while self.sock.recv(65536):
                pass
        except BlockingIOError:
            pass

    def close(self) -> None:
        self.sock.close()


async def bare_client(url: str, streams: int, seconds: float, tokens: int, kernel: bool, tag: str) -> dict[str, Any]:
    host, port = url.split("//")[1].split("/")[0].split(":")
    offset = realtime_offset_ns()
    conns = [Stream(host, int(port), kernel, offset) for _ in range(streams)]
    for c in conns:
        await c.connect()
    stamps: dict[str, list[tuple[int, int | None]]] = {}
    sent: dict[str, int] = {}
    stop = time.monotonic() + seconds
    n = 0
    ru0 = resource.getrusage(resource.RUSAGE_SELF)

    async def user(c: Stream) -> None:
        nonlocal n
        while time.monotonic() < stop:
            n += 1
            rid = f"{tag}-{n}"
            sent[rid] = time.monotonic_ns()
            stamps[rid] = await c.request(rid, tokens)

    await asyncio.gather(*(user(c) for c in conns))
    ru1 = resource.getrusage(resource.RUSAGE_SELF)
    for c in conns:
        c.close()
    cpu_s = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
    return {"stamps": stamps, "sent": sent, "cpu_ms_per_request": 1e3 * cpu_s / max(len(stamps), 1)}


def bare_errors(run: dict[str, Any], truth_log: Path, which: int, warm_s: float = 1.0) -> dict[str, float]:
    """TTFT p50 / p99 and ITL p99 errors (ms) of stamp ``which`` (0: user, 1: kernel) against the truth."""
    truth = {t["request_id"]: t for t in read_jsonl(truth_log) if t.get("request_id") in run["stamps"]}
    first_sent = min(run["sent"].values())
    rep_ttft: list[float] = []
    true_ttft: list[float] = []
    rep_itl: list[float] = []
    true_itl: list[float] = []
    for rid, ev in run["stamps"].items():
        t = truth.get(rid)
        if t is None or not ev or t.get("first_token_ns") is None or run["sent"][rid] - first_sent < warm_s * 1e9:
            continue
        st = [e[which] for e in ev]
        if any(s is None for s in st):
            continue
        st_ns = [int(s) for s in st if s is not None]
        sent = run["sent"][rid]
        rep_ttft.append((st_ns[0] - sent) / 1e6)
        true_ttft.append((t["first_token_ns"] - sent) / 1e6)
        w = [c[0] for c in t["chunks"]]
        if len(w) == len(st_ns):
            rep_itl.extend((b - a) / 1e6 for a, b in zip(st_ns, st_ns[1:]))
            true_itl.extend((b - a) / 1e6 for a, b in zip(w, w[1:]))
    return {
        "ttft_p50_err_ms": pct(rep_ttft, 50) - pct(true_ttft, 50),
        "ttft_p99_err_ms": pct(rep_ttft, 99) - pct(true_ttft, 99),
        "itl_p99_err_ms": pct(rep_itl, 99) - pct(true_itl, 99),
        "requests": float(len(rep_ttft)),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--levels", default="8,64")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=6.0)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--hog", action="store_true", help="keep the client's core busy with `yes` (same priority)")
    a = ap.parse_args()
    sim_cpus, client_cpus = cpu_split(1)
    d = tmpdir("bench-kstamps-")
    truth_log = d / "truth.jsonl"
    rows: dict[tuple[int, str], list[dict[str, float]]] = {}
    hog = None
    with SimProcess(["--fast", "--ttft-ms", str(TTFT_MS), "--itl-ms", str(ITL_MS), "--truth-log", str(truth_log),
                     *sim_cpus]) as sim:  # fmt: skip
        if client_cpus:
            os.sched_setaffinity(0, {int(x) for x in client_cpus[1].split(",")})
        if a.hog:
            hog = subprocess.Popen(["yes"], stdout=subprocess.DEVNULL)  # inherits the client's CPUs
        try:
            for r in range(a.rounds):
                for level in [int(x) for x in a.levels.split(",")]:
                    load = LoadConfig(concurrency=level, duration_s=a.seconds, warmup_s=1.0, input_tokens=16,
                                      output_tokens=a.tokens)  # fmt: skip
                    run = run_against(sim.url or "", load, d / f"lg-{r}-{level}", prefix=f"lg{r}x{level}")
                    time.sleep(0.3)
                    e = truth_errors(d / f"lg-{r}-{level}", truth_log)
                    reqs = run.result.counts["completed"]
                    e["cpu_ms_per_request"] = 1e3 * run.result.client["cpu_s"] / max(reqs, 1)
                    rows.setdefault((level, "loadgen"), []).append(e)
                    for kind, kernel in (("recv", False), ("kernel", True)):
                        got = asyncio.run(bare_client(sim.url or "", level, a.seconds + 1, a.tokens, kernel,
                                                      f"{kind}{r}x{level}"))  # fmt: skip
                        time.sleep(0.3)
                        e = bare_errors(got, truth_log, 0)
                        e["cpu_ms_per_request"] = got["cpu_ms_per_request"]
                        rows.setdefault((level, kind), []).append(e)
                        if kernel:
                            k = bare_errors(got, truth_log, 1)
                            k["cpu_ms_per_request"] = got["cpu_ms_per_request"]
                            rows.setdefault((level, "kernel stamp"), []).append(k)
        finally:
            if hog is not None:
                hog.kill()
    print(f"== closed loop, {a.tokens} tokens at {ITL_MS} ms ITL after {TTFT_MS} ms TTFT, {a.seconds:g} s a run, "
          f"{a.rounds} rounds, medians{' , client core shared with `yes`' if a.hog else ''}")  # fmt: skip
    print(f"{'streams':>7s} {'client / stamp':<22s} {'TTFT p50 err':>12s} {'TTFT p99 err':>12s} {'ITL p99 err':>11s} "
          f"{'CPU ms/req':>10s} {'requests':>8s}")  # fmt: skip
    for (level, kind), es in rows.items():
        m = {k: median([e[k] for e in es]) for k in es[0]}
        label = {"loadgen": "loadgen (aiohttp)", "recv": "bare, recv + user stamp", "kernel": "bare, recvmsg + user",
                 "kernel stamp": "bare, kernel stamp"}[kind]  # fmt: skip
        print(f"{level:7d} {label:<22s} {m['ttft_p50_err_ms']:+12.3f} {m['ttft_p99_err_ms']:+12.3f} "
              f"{m['itl_p99_err_ms']:+11.3f} {m['cpu_ms_per_request']:10.3f} {m['requests']:8.0f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
