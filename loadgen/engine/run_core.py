"""A plain run's plan and the path of one request to its record, on the one engine.

:class:`RunPlan` is what to run. :class:`RunnerCore` is a plain run's state on the engine
(:class:`~loadgen.engine.lifecycle.RunEngine`: stop, signals, probes, the sink's queue) and the
record path: :meth:`RunnerCore._start` starts one request as a task of the run's ``TaskGroup``;
:meth:`RunnerCore._one` sends it and always ends it as one :class:`~loadgen.core.types.RequestRecord`
(ok, or an error of a named kind, ``cancelled`` at a drain deadline), handed to the engine's queue
(:meth:`~loadgen.engine.lifecycle.RunEngine._finish_record`), which reaches ``sink`` away from send
deadlines. The open-loop dispatcher (:mod:`loadgen.engine.open_loop`), the closed-loop users
(:mod:`loadgen.engine.closed_loop`) and the run itself (:mod:`loadgen.engine.runner`) build on it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from loadgen.core.clock import now_ns
from loadgen.core.schedule import Schedule, as_schedule
from loadgen.core.types import RequestRecord, RequestSpec, ScheduledRequest
from loadgen.endpoints.base import Endpoint
from loadgen.engine.abandon import Abandon, arm, settle
from loadgen.engine.lifecycle import (
    LEAD_IN_NS,
    NO_DEADLINE_NS,
    SINK_BACKLOG_EVENTS,
    SINK_GUARD_NS,
    SINK_MAX_DELAY_S,
    SINK_PERIOD_S,
    SINK_SLICE_NS,
    ClientStats,
    RunEngine,
    RunOutcome,
)
from loadgen.engine.prepare import PREPARE_TURNS, prepare_specs, time_budget_ns

__all__ = [
    "LEAD_IN_NS",
    "NO_DEADLINE_NS",
    "SINK_BACKLOG_EVENTS",
    "SINK_GUARD_NS",
    "SINK_MAX_DELAY_S",
    "SINK_PERIOD_S",
    "SINK_SLICE_NS",
    "SPIN_NS",
    "ClientStats",
    "RunOutcome",
    "RunPlan",
    "RunnerCore",
]

SPIN_NS = 1_200_000  # the last 1.2 ms before a deadline are spent yielding, not sleeping


@dataclass
class RunPlan:
    """What to run (configuration only; no runtime state).

    Open loop: ``schedule`` (offsets from t0; phases set): a lazy
    :class:`~loadgen.core.schedule.Schedule` or a list of built entries. Closed loop:
    ``concurrency`` users drawing specs from ``make_spec(index)`` until
    ``max_requests`` (warm-up included) or ``t0 + ramp + warmup_s + duration_s`` (the start-up
    ramp of :func:`loadgen.engine.closed_loop.ramp_ns`: users start evenly over it).
    """

    mode: Literal["open", "closed"]
    schedule: Schedule | list[ScheduledRequest] = field(default_factory=list)
    concurrency: int = 1
    make_spec: Callable[[int], RequestSpec] | None = None
    max_requests: int | None = None
    duration_s: float | None = None
    warmup_requests: int = 0
    warmup_s: float = 0.0
    max_concurrency: int | None = None
    drain_grace_s: float = 30.0
    abort_lag_s: float = 1.0
    index_start: int = 0  # closed loop: this process's requests are start, start+stride, ...
    index_stride: int = 1
    ramp_s: float | None = None  # closed loop: users start evenly over this (None: closed_loop.ramp_ns's rule)
    stages: tuple[tuple[int, int], ...] = ()  # closed loop, --stages: (start ns after the warm-up, users) a stage
    abandon: Abandon | None = None  # --abandon: the share of users who walk away mid-reply (loadgen.engine.abandon)


class RunnerCore(RunEngine):
    """A plain run's state and the record path of one request (module docstring); the engine's life
    (:class:`~loadgen.engine.lifecycle.RunEngine`) and :class:`loadgen.engine.runner.Runner` run it."""

    def __init__(
        self,
        endpoint: Endpoint,
        plan: RunPlan,
        sink: Callable[[RequestRecord], None],
        *,
        t0_ns: int | None = None,
        install_signal_handlers: bool = True,
    ) -> None:
        super().__init__(endpoint, sink, t0_ns=t0_ns, install_signal_handlers=install_signal_handlers)
        self.plan = plan
        self.open_loop = plan.mode == "open"
        self.late_flush_all = plan.mode == "open"  # closed loop (users due): one slice
        self.unsent = 0
        self.unsent_warmup = 0
        self._inflight: set[asyncio.Task[int | None]] = set()
        self._next_deadline_ns = 0 if plan.mode == "open" else NO_DEADLINE_NS  # closed loop: no deadlines
        self._tg: asyncio.TaskGroup | None = None
        self._users: list[asyncio.Task[None]] = []
        self._prepared: list[RequestSpec | None] = []  # specs built before t0, by position (taken: None)

    def _next_due_ns(self) -> int:
        return self._next_deadline_ns

    async def _prepare(self) -> None:
        """Build the plan's first requests before t0 (:mod:`loadgen.engine.prepare`): open loop, the
        schedule's positions 0, 1, ...; closed loop, the requests k = 0, 1, ... in the order users
        take them (``--requests`` of them, or ``PREPARE_TURNS`` a user when timed)."""
        plan = self.plan
        if plan.mode == "open":
            schedule = as_schedule(plan.schedule)
            n = len(schedule)
            planned_s: float | None = float(schedule.offsets_ns[-1]) / 1e9 if n else 0.0
            build = schedule.spec
            count: int | None = n
        else:
            assert plan.make_spec is not None
            make, start, stride = plan.make_spec, plan.index_start, plan.index_stride
            planned_s = None if plan.duration_s is None else plan.duration_s + plan.warmup_s

            def build(k: int) -> RequestSpec:
                return make(start + stride * k)

            count = plan.max_requests if plan.max_requests is not None else plan.concurrency * PREPARE_TURNS
        specs, self.preparation = await prepare_specs(
            build, count, deadline_ns=time_budget_ns(planned_s, self._t0_override), stop=self._stop.is_set,
            notice=self.on_preparing,
        )  # fmt: skip
        if plan.mode == "closed" and plan.max_requests is None:
            self.preparation.of = None  # a timed closed loop: how many it sends is not known before
            if self.preparation.stopped_by is None:
                self.preparation.stopped_by = "turns"
        prepared: list[RequestSpec | None] = list(specs)
        self._prepared = prepared

    def _cancellable(self) -> set[asyncio.Task[int | None]]:
        return self._inflight

    def _unsent(self) -> tuple[int, int]:
        return self.unsent, self.unsent_warmup

    async def _wait_until(self, deadline_ns: int, *, precise: bool = True) -> None:
        """Sleep until an absolute deadline; long waits also wake on a stop request.

        ``precise`` (a send): wakes ~1 ms early and yields until the deadline. The event
        loop's timers have millisecond granularity (epoll rounds up), so a plain sleep lands
        up to 1 ms late; the last stretch is spent yielding to the loop (I/O keeps flowing)
        instead. Not ``precise`` (preparing ahead, never sending): a plain sleep, no spin.
        """
        spin_ns = SPIN_NS if precise else 0
        delay = deadline_ns - now_ns()
        if delay > 20_000_000:
            assert self._stop_fut is not None
            await asyncio.wait({self._stop_fut}, timeout=(delay - spin_ns) / 1e9)
            if self._stop.is_set():
                return
            delay = deadline_ns - now_ns()
        if delay > spin_ns:
            await asyncio.sleep((delay - spin_ns) / 1e9)
        if precise:
            await self._spin(deadline_ns)

    def _start(
        self,
        tg: asyncio.TaskGroup,
        spec: RequestSpec,
        phase: str,
        scheduled_ns: int,
        sem: asyncio.Semaphore | None = None,
        gate: asyncio.Event | None = None,
        *,
        cap_wait_ns: int = 0,
    ) -> asyncio.Task[int | None]:
        task = tg.create_task(self._one(spec, phase, scheduled_ns, sem, gate, cap_wait_ns))
        self._inflight.add(task)
        task.add_done_callback(self._inflight.discard)
        return task

    async def _one(
        self,
        spec: RequestSpec,
        phase: str,
        scheduled_ns: int,
        sem: asyncio.Semaphore | None,
        gate: asyncio.Event | None = None,
        cap_wait_ns: int = 0,
    ) -> int | None:
        """Send one request and end it as one record; returns when it was done (None: prepared, never sent)."""
        rec = self._new_record(spec, phase, scheduled_ns, cap_wait_ns=cap_wait_ns)
        walk = arm(self.plan.abandon, rec, spec.index, scheduled_ns)
        try:
            if gate is None:
                await self.endpoint.send(spec, rec)
            else:
                await self.endpoint.send(spec, rec, gate)
                if not gate.is_set():  # it failed while being prepared (e.g. refused connect):
                    await gate.wait()  # reported at its scheduled time, never earlier
                    rec.end_ns = max(rec.end_ns or 0, now_ns())
        except asyncio.CancelledError:
            if rec.abandoned_ns is not None and not self._stop.is_set():  # its user walked away: not a stop
                asyncio.current_task().uncancel()  # type: ignore[union-attr]  # (inside a task: current_task is set)
            elif gate is not None and not gate.is_set():  # (only the dispatcher sets a gate)
                self.inflight_records.pop(spec.index, None)
                return None  # prepared but never sent (the run stopped first): counted unsent, no record
            self._ended_by(rec, asyncio.CancelledError())
        except Exception as exc:
            self._ended_by(rec, exc)
        finally:
            self.inflight_records.pop(spec.index, None)
            if sem is not None:
                sem.release()
            if walk is not None:
                walk.cancel()
        settle(self.plan.abandon, rec)
        self._finish_record(rec)
        return now_ns()
