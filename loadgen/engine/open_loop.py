"""Open-loop dispatch on absolute deadlines, with specs built ahead and prepared sends.

Open loop (MLPerf LoadGen Server, wrk2): the send times are fixed first (a
:class:`~loadgen.core.schedule.Schedule`: arrays); the dispatcher sleeps until
``t0 + offset`` for each entry (never a relative ``sleep(interval)``, so no
drift), and each request's latency origin is its scheduled time. Each request's
spec (prompt) is built before t0 (:mod:`loadgen.engine.prepare`, within its budgets) or else
just in time: in the dispatcher's slack before a deadline,
up to ``LOOKAHEAD_NS`` (and ``MAX_AHEAD`` specs) ahead of the next send, never
within ``BUILD_GUARD_NS`` of it, so building never delays a send unless the
generator is already overloaded; a spec is dropped when its request ends. If
the dispatcher falls more than ``abort_lag_s`` behind, it stops sending, counts
the rest as unsent and the run is INVALID (the client, not the server, limited it).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque

from loadgen.core.clock import SendGate, now_ns
from loadgen.core.schedule import Schedule, as_schedule
from loadgen.core.types import RequestSpec
from loadgen.engine.run_core import RunnerCore

PRESTART_NS = 10_000_000  # open loop: a request is prepared this long before its deadline (gated send)...
PREP_COST_NS = 1_000_000  # ...plus this much per request of the burst it opens (preparing one takes ~0.3-1 ms)...
PREP_BURST_MAX_NS = 40_000_000  # ...at most this much more...
PREP_EARLY_NS = 3_000_000  # ...or up to this much earlier, so that the dispatcher never sleeps across a send
LOOKAHEAD_NS = 500_000_000  # open loop: specs are built up to this far ahead of the next send...
MAX_AHEAD = 1024  # ...and at most this many (bounds the memory of long prompts at high rates)
BUILD_GUARD_NS = 2_000_000  # no spec is built this close to a send deadline (one costs ~10-100 µs)


class OpenLoopDispatch(RunnerCore):
    """The open-loop dispatcher of a :class:`loadgen.engine.runner.Runner`."""

    async def _dispatch_open(self, tg: asyncio.TaskGroup) -> None:
        plan = self.plan
        sem = asyncio.Semaphore(plan.max_concurrency) if plan.max_concurrency else None
        abort_ns = int(plan.abort_lag_s * 1e9)
        schedule = as_schedule(plan.schedule)
        n = len(schedule)
        offsets = schedule.offsets_ns
        t0 = self.t0_ns
        # built specs of positions pos, pos + 1, ... (in order): first those built before t0
        ahead: deque[RequestSpec] = deque(s for s in self._prepared if s is not None)
        self._prepared = []
        built = len(ahead)  # the next position to build
        prep = self.preparation
        cpu_clock = time.thread_time_ns

        def build(p: int) -> RequestSpec:
            c0 = cpu_clock()
            spec = schedule.spec(p)
            if prep is not None:
                prep.charge(c0)
            return spec

        def build_ahead(deadline: int) -> None:
            """Build specs in the slack before ``deadline`` (never within BUILD_GUARD_NS of it)."""
            nonlocal built
            if built >= n:
                return
            horizon = deadline - t0 + LOOKAHEAD_NS
            while built < n and len(ahead) < MAX_AHEAD and offsets[built] <= horizon:
                if now_ns() > deadline - BUILD_GUARD_NS:
                    return
                ahead.append(build(built))
                built += 1

        # Prepared sends (endpoints that accept a gate; not under --max-concurrency): each
        # request is started PRESTART_NS before its deadline (spec, body, pool connection,
        # headers) and parked; at the deadline the dispatcher only opens its gate and the
        # bytes go out. A burst costs one gate per request at its deadline, not one whole
        # send path each.
        gated = sem is None and self.endpoint.accepts_send_gate()
        capped: deque[tuple[int, int]] = deque()  # (start, end) of each time the dispatcher waited on the cap
        prepared: dict[int, tuple[asyncio.Event, asyncio.Task[int | None]]] = {}
        nxt = 0  # the next position to prepare

        def take(p: int) -> RequestSpec:
            """The spec of position ``p``, the next one not yet taken."""
            nonlocal built
            if ahead:
                return ahead.popleft()
            built = p + 1  # no slack to build it earlier: the generator is behind anyway
            return build(p)

        def due_of(k: int) -> int:
            """When request ``k`` is prepared: PRESTART_NS before its deadline, earlier by
            PREP_COST_NS for each request due within PRESTART_NS from it (itself included), so a
            burst's preparations are spread out and all done before its first send."""
            off = int(offsets[k])
            burst = int(offsets.searchsorted(off + PRESTART_NS, side="right")) - k
            return t0 + off - PRESTART_NS - min(burst * PREP_COST_NS, PREP_BURST_MAX_NS)

        nxt_due = due_of(0) if gated and n else 0  # due_of(nxt), computed once per request

        def prepare(p: int) -> None:
            nonlocal nxt, nxt_due
            gate = SendGate()
            task = self._start(tg, take(p), schedule.phase(p), t0 + int(offsets[p]), None, gate)
            prepared[p] = (gate, task)
            nxt = p + 1
            if nxt < n:
                nxt_due = due_of(nxt)

        for pos in range(n):
            deadline = t0 + int(offsets[pos])
            self._next_deadline_ns = deadline
            build_ahead(min(deadline - PRESTART_NS, nxt_due if nxt < n else deadline) if gated else deadline)
            if gated:
                # A rolling horizon: every request is prepared ahead of its own deadline (see
                # due_of), also while this one waits (a burst is ready before its first send),
                # and one whose preparing time falls within PREP_EARLY_NS of this deadline is
                # prepared now rather than after it (never sleep across a send).
                while nxt < n and not self._stop.is_set():
                    due = nxt_due
                    if due > now_ns():
                        if nxt > pos and due > deadline:
                            break
                        if nxt == pos or due < deadline - PREP_EARLY_NS:
                            await self._wait_until(due, precise=False)
                            continue
                    prepare(nxt)
            await self._wait_until(deadline)
            if self.lease_ns is not None and now_ns() >= self.lease_ns():
                await self._await_lease()  # a worker: no send past its lease (loadgen.spread.lease)
            # time the --max-concurrency cap held the dispatcher since this deadline is the server's
            # backlog (in flight there), not the generator falling behind
            held = sum(b1 - max(b0, deadline) for b0, b1 in capped if b1 > deadline)
            if not self._stop.is_set() and now_ns() - deadline - held > abort_ns:
                self.aborted_reason = (
                    f"the generator fell {(now_ns() - deadline) / 1e9:.2f} s behind its schedule at request "
                    f"{pos} of {n}; it stopped sending"
                )
                self._stop.set()
            if self._stop.is_set():
                for _gate, task in prepared.values():
                    task.cancel()  # never sent: no record, counted unsent below
                self._count_unsent(schedule, pos)
                return
            if gated:
                prepared.pop(pos)[0].set()
                if pos + 1 < n and t0 + int(offsets[pos + 1]) > now_ns():
                    await asyncio.sleep(0)  # the released write runs now, before building ahead
                continue
            cap_wait = 0
            if sem is not None:
                if sem.locked():
                    b0 = now_ns()
                    await sem.acquire()
                    capped.append((b0, now_ns()))
                else:
                    await sem.acquire()
                if self._stop.is_set():
                    sem.release()
                    self._count_unsent(schedule, pos)
                    return
                # the part of this request's delay spent with the dispatcher held by the cap (its own
                # wait, and a wait for an earlier request that ran past this one's deadline)
                while capped and capped[0][1] <= deadline:
                    capped.popleft()
                cap_wait = sum(b1 - max(b0, deadline) for b0, b1 in capped)
            spec = take(pos)
            self._start(tg, spec, schedule.phase(pos), deadline, sem, cap_wait_ns=cap_wait)
            del spec

    def _count_unsent(self, schedule: Schedule, pos: int) -> None:
        measured, warm = schedule.count_phases(pos)
        self.unsent += measured
        self.unsent_warmup += warm


def realized_send_rps(schedule: Schedule, unsent: int = 0) -> float | None:
    """The schedule's own rate over the measured sends that went out: (n - 1) / (last - first).

    The last ``unsent`` measured entries are left out (a stop ends the sends). None
    for fewer than two sends or no time between them.
    """
    sched = schedule.measure_offsets_ns()
    if unsent:
        sched = sched[: max(len(sched) - unsent, 0)]
    if len(sched) < 2 or sched[-1] <= sched[0]:
        return None
    return (len(sched) - 1) / ((int(sched[-1]) - int(sched[0])) / 1e9)
