"""Closed loop: a due user's send comes before background work (issue 22 item 2).

A wave of completions used to hand its records to the sink in 1 ms slices between the loop
passes each next send needs (aiohttp: the pooled connection, the headers, the body's own write
task), so the wave's last sends went out well after their users were due (C = 8: 7-15 ms).
Now a user counts as due from its send's start until its bytes are written, and the sink waits.

Checked with a fake endpoint whose send takes a few loop passes with some CPU in each (as
aiohttp's does) and a sink that costs 1.5 ms a record: every time the sink is called, no
request may be started and still unwritten. Logic, not timing: a machine stalled 50 ms in the
middle of a send lets one sink slice through (the sink's bound on how long records wait), so a
couple are tolerated; before the change nearly every wave had several.
"""

from __future__ import annotations

import asyncio
import itertools

import pytest

from loadgen.core.clock import now_ns
from loadgen.core.types import RequestRecord, RequestSpec
from loadgen.engine.runner import Runner, RunPlan

pytestmark = pytest.mark.timing  # asserts timing figures: the serial phase

MS = 1_000_000


def _busy(ns: int) -> None:
    t = now_ns() + ns
    while now_ns() < t:
        pass


class PassesFake:
    """A send that takes 5 loop passes of 0.3 ms CPU each before its bytes are 'written', then 20 ms."""

    def accepts_send_gate(self) -> bool:
        return False

    async def send(self, spec: RequestSpec, rec: RequestRecord, gate: object = None) -> None:
        for _ in range(5):
            _busy(300_000)
            await asyncio.sleep(0)
        rec.sent_ns = now_ns()
        await asyncio.sleep(0.02)
        rec.end_ns = now_ns()
        rec.status = "ok"


def test_the_sink_waits_while_a_user_is_due() -> None:
    counter = itertools.count()
    plan = RunPlan(
        mode="closed",
        concurrency=6,
        max_requests=60,
        make_spec=lambda i: RequestSpec(index=i, prompt="x", requested_output_tokens=4),
        ramp_s=0.0,  # one wave: every user due at the same moments
    )
    unsent_at_sink: list[int] = []
    runner: Runner | None = None

    def sink(rec: RequestRecord) -> None:
        assert runner is not None
        unsent_at_sink.append(sum(1 for r in runner.inflight_records.values() if r.sent_ns is None))
        next(counter)
        _busy(1_500_000)  # metrics, aggregation, a JSON line of a long record

    async def go() -> None:
        nonlocal runner
        runner = Runner(PassesFake(), plan, sink, install_signal_handlers=False)  # type: ignore[arg-type]  # a fake endpoint
        await runner.run()

    asyncio.run(go())
    assert len(unsent_at_sink) == 60
    bad = sum(1 for n in unsent_at_sink if n)
    assert bad <= 2, unsent_at_sink
