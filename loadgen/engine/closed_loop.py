"""Closed-loop users: N users, each sending its next request when its last one ends.

Users start staggered over a ramp (:func:`ramp_ns`); a request's ``scheduled_ns`` is its due
time (its user's previous end, or its place in the ramp): see :class:`ClosedLoopUsers`.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import itertools
import time

from loadgen.core.clock import now_ns
from loadgen.core.types import RequestSpec
from loadgen.engine.run_core import NO_DEADLINE_NS, RunnerCore

RAMP_PER_USER_NS = 2_000_000
"""Closed-loop start-up: user ``u`` of ``C`` starts at t0 + u * ramp / C, the ramp being this much a user..."""
RAMP_MAX_NS = 1_000_000_000
"""...and at most this long (see :func:`ramp_ns`)."""
SEND_WATCH_PASSES = 64
"""A due user watches its request for at most this many loop passes until its bytes are on the wire
(background work waits meanwhile: :meth:`ClosedLoopUsers._mark_due`); then it stops holding it back."""


def ramp_ns(concurrency: int, ramp_s: float | None = None) -> int:
    """The closed-loop start-up ramp: users start evenly over it (``ramp_s``, else the default rule).

    Default: ``min(C * RAMP_PER_USER_NS, RAMP_MAX_NS)`` (C = 8: 16 ms; C >= 500: 1 s). Users that start
    together finish together: with equal requests they stay in waves for the whole run, each wave's
    sends queue behind one another on the client and its reads arrive at once (a burst of stamps
    and of sink work), so the waves, not the server, decided the verdict. Staggered, the sends and
    the reads spread over the cycle as a real population's do.
    """
    if ramp_s is not None:
        return max(int(ramp_s * 1e9), 0)
    return min(concurrency * RAMP_PER_USER_NS, RAMP_MAX_NS)


class ClosedLoopUsers(RunnerCore):
    """The closed-loop users of a :class:`loadgen.engine.runner.Runner`.

    There is no offered schedule in closed loop: a user's request is *due* when its previous
    one is done (its body read to the end, its connection free again: a server that holds the
    body open after the last token delays the user, not the generator; its first one at the
    user's place in the start-up ramp). The record's
    ``scheduled_ns`` is that due time, so ``sent - scheduled`` is the generator's own due->send
    lag (judged by the validity checks as open loop judges schedule lag) and latency counts from
    the send (``LoadConfig.latency_origin``), as MLPerf's single-stream scenario and every peer do.
    With a duration, the ramp is warm-up: the measured time starts after it (and the warm-up).

    Sends come before background work: from its due time until its request's bytes are written
    (``sent_ns`` stamped), a user counts as *due* and the run's next deadline reads "now"
    (``_next_deadline_ns = 0``), so the sink and the GC steps, which run only away from a send
    deadline, wait (the sink at most ``SINK_MAX_DELAY_S``, then one slice). Without it a wave of
    completions handed its records to the sink in 1 ms slices between the loop passes each send
    needs, and the wave's last sends went out 7-15 ms after their users were due (C = 8, 256
    tokens a request): lag that was the sink's, not the generator's.
    """

    _due_users = 0

    def _mark_due(self, due: bool) -> None:
        """Count a user due (or no longer due); the run's next deadline is "now" while any is."""
        self._due_users += 1 if due else -1
        self._next_deadline_ns = 0 if self._due_users > 0 else NO_DEADLINE_NS

    async def _until_sent(self, task: asyncio.Task[int | None], index: int) -> None:
        """Yield until request ``index`` is written (``sent_ns``), ends, or SEND_WATCH_PASSES loop passes went by."""
        records = self.inflight_records
        for _ in range(SEND_WATCH_PASSES):
            rec = records.get(index)
            if task.done() or (rec is not None and rec.sent_ns is not None):
                return
            await asyncio.sleep(0)

    async def _run_closed(self, tg: asyncio.TaskGroup) -> None:
        plan = self.plan
        assert plan.make_spec is not None
        counter = itertools.count()
        t0 = self.t0_ns
        ramp = ramp_ns(plan.concurrency, plan.ramp_s)
        lead = ramp if plan.duration_s is not None else 0  # a timed run measures after the ramp
        end_ns = None
        if plan.duration_s is not None:
            end_ns = t0 + lead + int((plan.warmup_s + plan.duration_s) * 1e9)
        warm_end = t0 + lead + int(plan.warmup_s * 1e9)

        def index_of(k: int) -> int:
            return plan.index_start + plan.index_stride * k

        # requests built before t0 (loadgen.engine.prepare), taken in order; the rest at their user's turn
        prepared = self._prepared
        make = plan.make_spec
        prep = self.preparation

        def spec_of(k: int) -> RequestSpec:
            if k < len(prepared):
                spec = prepared[k]
                prepared[k] = None  # held no longer than its request
                if spec is not None:
                    return spec
            c0 = time.thread_time_ns()
            spec = make(index_of(k))
            if prep is not None:
                prep.charge(c0)
            return spec

        stage_at = [warm_end + off for off, _ in plan.stages]  # --stages: each stage's start
        stage_users = [c for _, c in plan.stages]

        async def user(u: int) -> None:
            due = t0 + ramp * u // max(plan.concurrency, 1)
            if u:
                await self._wait_until(due)
            while not self._stop.is_set():
                if stage_at:  # --stages: this user sends only in the stages with more than u users
                    i = bisect.bisect_right(stage_at, now_ns()) - 1
                    if stage_users[max(i, 0)] <= u:
                        nxt = next((j for j in range(i + 1, len(stage_at)) if stage_users[j] > u), None)
                        if nxt is None:
                            return
                        due = stage_at[nxt] + ramp * u // max(plan.concurrency, 1)  # joiners staggered as at t0
                        await self._wait_until(due)
                        continue
                k = next(counter)
                if plan.max_requests is not None and k >= plan.max_requests:
                    return
                now = now_ns()
                if self.lease_ns is not None and now >= self.lease_ns():
                    await self._await_lease()  # a worker: no send past its lease (loadgen.spread.lease)
                    if self._stop.is_set():
                        return
                    now = now_ns()
                if end_ns is not None and now >= end_ns:
                    return
                spec = spec_of(k)
                phase = "warmup" if (k < plan.warmup_requests or now < warm_end) else "measure"
                task = self._start(tg, spec, phase, min(due, now))
                self._mark_due(True)
                try:
                    await self._until_sent(task, spec.index)
                finally:
                    self._mark_due(False)
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.shield(task)
                if task.cancelled():
                    return
                due = task.result() or now_ns()  # the previous request was done (its body read to the end)

        await self._wait_until(t0)
        users = [asyncio.create_task(user(u)) for u in range(plan.concurrency)]
        self._users = users
        assert self._stop_fut is not None
        pending: set[asyncio.Future[None]] = set(users)
        while pending and not self._stop.is_set():
            _, pending = await asyncio.wait(pending | {self._stop_fut}, return_when=asyncio.FIRST_COMPLETED)
            pending.discard(self._stop_fut)
