"""Deadlines and sleeps never end before the monotonic time asked for, on any loop.

uvloop keeps loop time in whole milliseconds and rounds delays, so its timers can
fire up to ~1.5 ms early (a 1 s request deadline fired at 998.9 ms in CI). Each
case runs many short timers at varied phases within a millisecond, on Python's
loop and on uvloop; a timer that ended early by any amount fails.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import pytest

from loadgen.core.clock import UVLOOP_TIMER_SLACK_NS, deadline_after, now_ns, sleep_until, timer_slack_ns

uvloop = pytest.importorskip("uvloop")

LOOPS = {"asyncio": asyncio.new_event_loop, "uvloop": uvloop.new_event_loop}
TRIALS = 120  # ~0.5 s a case
T = TypeVar("T")


def _run(factory: Callable[[], asyncio.AbstractEventLoop], coro: Coroutine[Any, Any, T]) -> T:
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(coro)


async def _phase(i: int) -> None:
    """Start the next trial at a different point inside a millisecond."""
    await sleep_until(now_ns() + 137_000 * (i % 9))


@pytest.mark.parametrize("loop", sorted(LOOPS))
def test_deadline_after_never_expires_early(loop: str) -> None:
    async def trials() -> list[int]:
        out = []
        for i in range(TRIALS):
            await _phase(i)
            t0 = now_ns()
            with pytest.raises(TimeoutError):
                async with deadline_after(0.0023):
                    await asyncio.sleep(1.0)
            out.append(now_ns() - t0)
        return out

    took = _run(LOOPS[loop], trials())
    early = [t for t in took if t < 2_300_000]
    assert not early, f"{len(early)} of {TRIALS} deadlines of 2.3 ms ended early: min {min(took) / 1e6:.3f} ms"


@pytest.mark.parametrize("loop", sorted(LOOPS))
def test_sleep_until_never_returns_early(loop: str) -> None:
    async def trials() -> list[int]:
        out = []
        for i in range(TRIALS):
            await _phase(i)
            due = now_ns() + 2_300_000
            await sleep_until(due)
            out.append(now_ns() - due)
        return out

    late = _run(LOOPS[loop], trials())
    assert min(late) >= 0, f"sleep_until returned {-min(late) / 1e6:.3f} ms before its deadline"


def test_timer_slack_names_the_loop() -> None:
    assert _run(LOOPS["asyncio"], _slack()) == 0
    assert _run(LOOPS["uvloop"], _slack()) == UVLOOP_TIMER_SLACK_NS


async def _slack() -> int:
    return timer_slack_ns()


@pytest.mark.timing
def test_the_fault_exists_without_the_slack() -> None:
    """The reason for the slack: a plain uvloop sleep of 2.3 ms ends early (if it never
    did, the slack would cost up to 2 ms of every deadline for nothing)."""

    async def trials() -> int:
        early = 0
        for i in range(TRIALS):
            await _phase(i)
            t0 = now_ns()
            await asyncio.sleep(0.0023)
            early += now_ns() - t0 < 2_300_000
        return early

    assert _run(LOOPS["uvloop"], trials()) > 0
