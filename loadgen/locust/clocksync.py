"""Each Locust worker's clock offset to the master, measured over the master channel (issue 34, item 1).

A worker's monotonic clock is its own: another host's, or the same host's in another time namespace,
may read 100,000 s apart, and a host name says nothing about it. Right after it connects, a worker
pings the master (``loadgen_ping``: its send time t1; the master answers ``loadgen_pong`` with its
receive time t2; the worker reads t3 on the answer) at least :data:`MIN_PINGS` times and keeps the
sample of the smallest round trip (NTP's rule): ``offset = t2 - (t1 + t3) / 2`` (the master's clock
minus the worker's), known within half that round trip. It reports the offset to the master
(``loadgen_clock``); the master keeps it per worker id, gives each worker its offset with its shard
(its t0 is then ``t0_master - offset`` on its own clock) and adds it to every record the worker ships
(``LocustCollector.offsets``). An offset is accepted when half the smallest round trip is at most
:data:`MAX_HALF_RTT_NS` (1 ms); a worker with none (no answer, or the bound never met within
:data:`MAX_PINGS` pings) gets no shard: the master refuses it in one line. The local single-process
mode has one clock: offset 0.
"""

from __future__ import annotations

from typing import Any, Protocol

import gevent
import gevent.event

from loadgen.core.clock import now_ns


class _Sender(Protocol):
    """The worker's ``WorkerRunner`` (only its ``send_message``)."""

    def send_message(self, msg_type: str, data: dict[str, object] | None, /) -> None: ...


__all__ = ["MAX_HALF_RTT_NS", "MAX_PINGS", "MIN_PINGS", "ClockProbe", "best_offset", "clock_refusal"]

MIN_PINGS = 10
MAX_PINGS = 60
MAX_HALF_RTT_NS = 1_000_000
PONG_WAIT_S = 0.5


def best_offset(samples: list[tuple[int, int, int]]) -> dict[str, Any] | None:
    """The offset (master - worker, ns) of the smallest-round-trip sample of ``(t1, t2, t3)`` pings, with
    its uncertainty (half that round trip) and the count; None without a sample."""
    if not samples:
        return None
    t1, t2, t3 = min(samples, key=lambda s: s[2] - s[0])
    half = (t3 - t1) // 2
    return {"offset_ns": t2 - (t1 + t3) // 2, "half_rtt_ns": half, "pings": len(samples)}


def clock_refusal(clock: dict[str, Any] | None) -> str | None:
    """Why a worker's measured clock cannot be used (None: it can)."""
    if clock is None:
        return "its clock offset to the master was not measured (no answer to its pings)"
    if clock.get("half_rtt_ns") is None or clock["half_rtt_ns"] > MAX_HALF_RTT_NS:
        half = (clock.get("half_rtt_ns") or 0) / 1e6
        return (
            f"its clock offset to the master is known only within {half:.3f} ms over {clock.get('pings')} pings "
            f"(the bound: {MAX_HALF_RTT_NS / 1e6:g} ms): a busy or distant link"
        )
    return None


class ClockProbe:
    """The worker's side: pings the master until the bound holds (at least :data:`MIN_PINGS`, at most
    :data:`MAX_PINGS`), then sends the result (``loadgen_clock``)."""

    def __init__(self, runner: _Sender) -> None:
        self.runner = runner
        self.samples: list[tuple[int, int, int]] = []
        self._waiting: dict[int, gevent.event.AsyncResult] = {}
        self.result: dict[str, Any] | None = None

    def on_pong(self, data: dict[str, Any]) -> None:
        """The master's answer (``loadgen_pong``: the ping's seq and the master's receive time t2)."""
        waiter = self._waiting.pop(int(data["seq"]), None)
        if waiter is not None:
            waiter.set((int(data["t2"]), now_ns()))

    def run(self) -> dict[str, Any] | None:
        for seq in range(MAX_PINGS):
            waiter = gevent.event.AsyncResult()
            self._waiting[seq] = waiter
            t1 = now_ns()
            self.runner.send_message("loadgen_ping", {"seq": seq, "t1": t1})
            try:
                t2, t3 = waiter.get(timeout=PONG_WAIT_S)
            except gevent.Timeout:
                self._waiting.pop(seq, None)
                continue
            self.samples.append((t1, t2, t3))
            best = best_offset(self.samples)
            if best is not None and len(self.samples) >= MIN_PINGS and best["half_rtt_ns"] <= MAX_HALF_RTT_NS:
                break
        self.result = best_offset(self.samples)
        self.runner.send_message("loadgen_clock", self.result)
        return self.result
