"""The idle (inter-chunk) timeout of :mod:`loadgen.endpoints.reads`: expiry, reads that keep it
alive, and an outer deadline or cancel that passes through unchanged (no server needed)."""

from __future__ import annotations

import asyncio

import pytest

from loadgen.endpoints.reads import IdleTimeout, idle_guard


def test_quiet_body_expires_as_idle_timeout() -> None:
    async def main() -> None:
        async with idle_guard(0.05):
            await asyncio.sleep(5)

    with pytest.raises(IdleTimeout, match=r"no byte of the answer for 0.05 s"):
        asyncio.run(asyncio.wait_for(main(), 10))


@pytest.mark.timing
def test_reads_keep_it_alive_and_none_means_off() -> None:
    async def main() -> int:
        n = 0
        async with idle_guard(0.5) as guard:
            for _ in range(8):  # 0.8 s in all, never 0.5 s without a read
                await asyncio.sleep(0.1)
                guard.touch()
                n += 1
        async with idle_guard(None) as guard:
            await asyncio.sleep(0.05)
            guard.touch()
        return n

    assert asyncio.run(main()) == 8


def test_outer_deadline_and_cancel_pass_through() -> None:
    async def outer() -> None:
        async with asyncio.timeout(0.05):
            async with idle_guard(10.0):
                await asyncio.sleep(5)

    with pytest.raises(TimeoutError) as info:
        asyncio.run(outer())
    assert not isinstance(info.value, IdleTimeout)

    async def cancelled() -> None:
        task = asyncio.current_task()
        assert task is not None
        asyncio.get_running_loop().call_later(0.05, task.cancel)
        async with idle_guard(10.0):
            await asyncio.sleep(5)

    with pytest.raises(asyncio.CancelledError):
        asyncio.run(cancelled())
