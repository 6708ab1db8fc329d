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
import time

now_ns = time.perf_counter_ns
"""Monotonic clock in integer nanoseconds (CLOCK_MONOTONIC on Linux)."""


def wall_anchor() -> tuple[int, int]:
    """Return ``(monotonic_ns, wall_ns)`` read back to back: the run's anchor pair."""
    m0 = now_ns()
    w = time.time_ns()
    m1 = now_ns()
    return (m0 + m1) // 2, w


async def sleep_until(deadline_ns: int) -> None:
    """Sleep until the absolute monotonic deadline (never a relative interval).

    Drift cannot accumulate: each wait is computed from the deadline, not from
    the previous wake-up.
    """
    delay = deadline_ns - now_ns()
    if delay > 0:
        await asyncio.sleep(delay / 1e9)


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
