"""Clocks: one monotonic source for intervals, one wall-clock anchor per run.

All intervals in loadgen are integer nanoseconds from :func:`now_ns`
(``time.perf_counter_ns``; on Linux this is CLOCK_MONOTONIC, the same clock as
``time.monotonic_ns`` in every process on the host, which is what lets the
simulated endpoint's truth log be compared with the client's timestamps).
Wall-clock time (``time.time_ns``) is read once per run as an anchor for
``started_at`` and for aligning hosts; never for intervals.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable

now_ns: Callable[[], int] = time.perf_counter_ns
"""Monotonic clock in integer nanoseconds (CLOCK_MONOTONIC on Linux)."""

TEST_CLOCK_SHIFT_ENV = "LOADGEN_TEST_CLOCK_SHIFT_NS"
"""Tests only: a process started with this set reads its monotonic clock moved by that many ns, as a process
on another host (or in a time namespace) does; read once at import, so it costs nothing otherwise."""
if os.environ.get(TEST_CLOCK_SHIFT_ENV):
    _SHIFT_NS = int(os.environ[TEST_CLOCK_SHIFT_ENV])

    def _shifted_ns() -> int:
        return time.perf_counter_ns() + _SHIFT_NS

    now_ns = _shifted_ns


TEST_WALL_SHIFT_ENV = "LOADGEN_TEST_WALL_SHIFT_NS"
"""Tests only: a process started with this set reads its wall clock (in :func:`wall_anchor`) moved by that many
ns, as a host whose NTP is off does (the multi-host test's skewed worker); read once at import."""
_WALL_SHIFT_NS = int(os.environ.get(TEST_WALL_SHIFT_ENV) or 0)


def wall_ns() -> int:
    """The wall clock (``time.time_ns``), moved by ``LOADGEN_TEST_WALL_SHIFT_NS`` in tests only: every wall
    reading that places a run in time (anchors, a cluster's t0 and clock pings) goes through it."""
    return time.time_ns() + _WALL_SHIFT_NS


def wall_anchor() -> tuple[int, int]:
    """Return ``(monotonic_ns, wall_ns)`` read back to back: the run's anchor pair."""
    m0 = now_ns()
    w = wall_ns()
    m1 = now_ns()
    return (m0 + m1) // 2, w


UVLOOP_TIMER_SLACK_NS = 2_000_000
"""How early a uvloop timer can fire, at most: libuv keeps its loop time in whole
milliseconds, cached per iteration, and rounds each delay to a millisecond, so a
timer lands up to ~1.5 ms before the monotonic time it was set for (measured:
``asyncio.sleep(0.0023)`` returned after 1.2 ms; ``asyncio.timeout(1.0)`` fired
at 998.9 ms). Python's own loop reads CLOCK_MONOTONIC as a float and epoll
rounds its wait up, so its timers never fire early (slack 0)."""


def timer_slack_ns(loop: asyncio.AbstractEventLoop | None = None) -> int:
    """How early the running (or given) event loop's timers may fire, in ns.

    0 for Python's own loops; :data:`UVLOOP_TIMER_SLACK_NS` for any other
    (uvloop, or a loop we do not know). Every deadline that must not end early
    (a request's deadline, a Retry-After wait, a rate cap's wait) adds this.
    """
    loop = loop or asyncio.get_running_loop()
    if isinstance(loop, asyncio.BaseEventLoop):
        return 0
    return UVLOOP_TIMER_SLACK_NS


def deadline_after(timeout_s: float) -> asyncio.Timeout:
    """``asyncio.timeout`` that never expires before ``timeout_s`` of monotonic time.

    The event loop's timer is set :func:`timer_slack_ns` late, so the deadline
    ends between ``timeout_s`` and ``timeout_s + 2 ms`` after the call (uvloop),
    never before: a request given 1 s is not failed at 998.9 ms.
    """
    loop = asyncio.get_running_loop()
    return asyncio.timeout_at(loop.time() + timeout_s + timer_slack_ns(loop) / 1e9)


async def sleep_until(deadline_ns: int) -> None:
    """Sleep until the absolute monotonic deadline (never a relative interval).

    Returns at or after ``deadline_ns`` (:func:`now_ns`), never before, on any
    event loop: a timer that fires early (uvloop, see :data:`UVLOOP_TIMER_SLACK_NS`)
    is followed by another sleep for what is left. Drift cannot accumulate: each
    wait is computed from the deadline, not from the previous wake-up.
    """
    slack_ns = timer_slack_ns()
    while (delay := deadline_ns - now_ns()) > 0:  # one pass, unless a timer fires earlier than its slack
        await asyncio.sleep((delay + slack_ns) / 1e9)


class SendGate(asyncio.Event):
    """The gate of a prepared request, opened at its scheduled send (open loop, session turns).

    A client that can write without awaiting (``--http-client lean``) sets :attr:`on_open` while it
    waits at the gate; :meth:`set` calls it at once, in the step of whoever opens the gate, so the
    request's bytes go out then, not when the request's own task next gets its turn on the loop (a
    pass of the loop later: at 1,000 sends a second a pass holds many reads). ``on_open`` must not
    raise; it is called once, and cleared."""

    on_open: Callable[[], None] | None = None

    def set(self) -> None:
        fire, self.on_open = self.on_open, None
        if fire is not None and not self.is_set():
            fire()
        super().set()


class VirtualClock:
    """A clock that only moves when told to; for deterministic tests and simulations."""

    def __init__(self, start_ns: int = 0) -> None:
        self.t_ns = start_ns

    def __call__(self) -> int:
        return self.t_ns

    def advance(self, delta_ns: int) -> None:
        if delta_ns < 0:
            raise ValueError("a clock cannot go backwards")
        self.t_ns += delta_ns

    def set(self, t_ns: int) -> None:
        if t_ns < self.t_ns:
            raise ValueError("a clock cannot go backwards")
        self.t_ns = t_ns
