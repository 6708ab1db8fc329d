"""A plain run: one plan of independent requests against an endpoint, on the one engine.

Open loop (:mod:`loadgen.engine.open_loop`): dispatch on absolute deadlines with prepared
sends; closed loop (:mod:`loadgen.engine.closed_loop`): N users; the record path and the
run's state (:mod:`loadgen.engine.run_core`). The engine (:mod:`loadgen.engine.lifecycle`) sets
t0 and runs the background work (event-loop probe, GC, stamp lateness, the sink); :class:`Runner`
is its dispatcher for a :class:`RunPlan` and drains its in-flight requests.

One ``asyncio.TaskGroup`` owns every in-flight request. Every request ends as one
record passed to ``sink`` (ok, or an error of a named kind). A stop (SIGINT or
SIGTERM, or :meth:`Runner.request_stop`) ends sending; in-flight requests get
``drain_grace_s`` to finish, then are cancelled and recorded as ``cancelled``;
never-sent requests are counted as ``unsent``.
"""

from __future__ import annotations

import asyncio

from loadgen.core.clock import timer_slack_ns
from loadgen.core.schedule import as_schedule
from loadgen.engine.closed_loop import ClosedLoopUsers
from loadgen.engine.lifecycle import warm_record_path
from loadgen.engine.open_loop import (
    BUILD_GUARD_NS,
    LOOKAHEAD_NS,
    MAX_AHEAD,
    PREP_BURST_MAX_NS,
    PREP_COST_NS,
    PREP_EARLY_NS,
    PRESTART_NS,
    OpenLoopDispatch,
    realized_send_rps,
)
from loadgen.engine.run_core import (
    LEAD_IN_NS,
    NO_DEADLINE_NS,
    SINK_GUARD_NS,
    SINK_MAX_DELAY_S,
    SINK_PERIOD_S,
    SPIN_NS,
    ClientStats,
    RunOutcome,
    RunPlan,
)

__all__ = [
    "BUILD_GUARD_NS",
    "LEAD_IN_NS",
    "LOOKAHEAD_NS",
    "MAX_AHEAD",
    "NO_DEADLINE_NS",
    "PREP_BURST_MAX_NS",
    "PREP_COST_NS",
    "PREP_EARLY_NS",
    "PRESTART_NS",
    "SINK_GUARD_NS",
    "SINK_MAX_DELAY_S",
    "SINK_PERIOD_S",
    "SPIN_NS",
    "ClientStats",
    "RunOutcome",
    "RunPlan",
    "Runner",
    "realized_send_rps",
    "warm_record_path",
]


class Runner(OpenLoopDispatch, ClosedLoopUsers):
    """Runs one plan against one endpoint; ``sink(record)`` is called once per request."""

    async def _dispatch(self) -> None:
        async with asyncio.TaskGroup() as tg:
            self._tg = tg
            if self.plan.mode == "open":
                await self._dispatch_open(tg)
                self._next_deadline_ns = NO_DEADLINE_NS  # nothing left to send: background work is clear
            else:
                await self._run_closed(tg)
            await self._drain()

    def _stop_background(self) -> None:
        for u in self._users:
            u.cancel()

    def _finish_client(self, client: ClientStats) -> None:
        if self.plan.mode == "open":
            client.schedule_realized_rps = realized_send_rps(as_schedule(self.plan.schedule), self.unsent)

    async def _drain(self) -> None:
        """Wait for in-flight requests; after a stop, at most ``drain_grace_s``, then cancel."""
        while self._inflight:
            pending = set(self._inflight)
            if self._stop.is_set() and self.interrupted:
                grace_s = self.plan.drain_grace_s + timer_slack_ns() / 1e9  # never short (uvloop)
                done, still = await asyncio.wait(pending, timeout=grace_s)
                for t in still:
                    t.cancel()
                if still:
                    await asyncio.wait(still, timeout=5.0)
                return
            assert self._stop_fut is not None
            await asyncio.wait(pending | {self._stop_fut}, return_when=asyncio.FIRST_COMPLETED)
            if self._stop_fut.done() and not self.interrupted and self._inflight:
                # a non-interrupting stop (early stop, generator abort): wait for completion
                await asyncio.wait(set(self._inflight))
