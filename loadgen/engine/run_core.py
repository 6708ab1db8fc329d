"""The core every run shares: the plan, the outcome, and the path of one request to its record.

:class:`RunnerCore` holds a run's state (stop, in-flight tasks, finished records) and the
record path: :meth:`RunnerCore._start` starts one request as a task of the run's
``TaskGroup``; :meth:`RunnerCore._one` sends it and always ends it as one
:class:`~loadgen.core.types.RequestRecord` (ok, or an error of a named kind, ``cancelled`` at a
drain deadline); finished records go to ``sink`` at once (closed loop) or, in open loop, from
:meth:`RunnerCore._sink_loop` away from send deadlines. The open-loop dispatcher
(:mod:`loadgen.engine.open_loop`), the closed-loop users (:mod:`loadgen.engine.closed_loop`) and the run
itself (:mod:`loadgen.engine.runner`) build on it.
"""

from __future__ import annotations

import asyncio
from array import array
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from loadgen.core.clock import now_ns
from loadgen.core.schedule import Schedule
from loadgen.core.types import RequestRecord, RequestSpec, ScheduledRequest
from loadgen.endpoints.base import Endpoint
from loadgen.engine.stamp_lateness import StampLateness

LEAD_IN_NS = 100_000_000  # t0 is set this far ahead so the first deadline is not already late
SPIN_NS = 1_200_000  # the last 1.2 ms before a deadline are spent yielding, not sleeping
NO_DEADLINE_NS = 1 << 62
SINK_PERIOD_S = 0.002
SINK_GUARD_NS = 1_500_000  # no sink work this close to a send deadline
SINK_MAX_DELAY_S = 0.05
SINK_SLICE_NS = 1_000_000  # a sink pass stops after this long; the rest follows after one loop pass
SINK_BACKLOG_EVENTS = 65_536  # token events of finished records past which a sink pass is not sliced (memory)


@dataclass
class ClientStats:
    """Facts about the generator itself, filled by the runner."""

    cpu_s: float = 0.0
    wall_s: float = 0.0
    loop_lag_ms: Sequence[float] = field(default_factory=list)  # the runner keeps an array("d")
    schedule_realized_rps: float | None = None  # the schedule's own rate over the measured sends
    open_loop: bool = True
    aborted_reason: str | None = None  # the generator gave up (fell too far behind)
    worker_cpu_fractions: list[float] = field(default_factory=list)  # one per worker process
    worker_failures: list[str] = field(default_factory=list)
    stamp_lateness_p99_ms: float | None = None  # token-weighted (loadgen.engine.stamp_lateness); None: not measured
    stamp_tokens: int = 0  # token events it is over
    stamps: StampLateness | None = None  # the histograms themselves: validity judges the errors they estimate


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


@dataclass
class RunOutcome:
    t0_ns: int
    t0_wall_ns: int
    interrupted: bool
    unsent: int
    unsent_warmup: int
    client: ClientStats
    end_ns: int


class RunnerCore:
    """A run's state and the record path (see the module docstring); :class:`loadgen.engine.runner.Runner` runs it."""

    def __init__(
        self,
        endpoint: Endpoint,
        plan: RunPlan,
        sink: Callable[[RequestRecord], None],
        *,
        t0_ns: int | None = None,
        install_signal_handlers: bool = True,
    ) -> None:
        self.endpoint = endpoint
        self.plan = plan
        self.sink = sink
        self._t0_override = t0_ns
        self._signals = install_signal_handlers
        self._stop = asyncio.Event()
        self._stop_fut: asyncio.Future[None] | None = None
        self.interrupted = False
        self.unsent = 0
        self.unsent_warmup = 0
        self.aborted_reason: str | None = None
        self._inflight: set[asyncio.Task[int | None]] = set()
        self.inflight_records: dict[int, RequestRecord] = {}
        self._done: deque[RequestRecord] = deque()
        self._done_events = 0  # token events held by the records in _done (each ~170 B: the backlog's memory)
        self._next_deadline_ns = 0 if plan.mode == "open" else NO_DEADLINE_NS  # closed loop: no deadlines
        self._defer_sink = True  # records reach the sink from _sink_loop, off the read and send paths
        self.cancel_reason = "in flight at the drain deadline"
        self.stamps = StampLateness()  # token-weighted stamp lateness (probed by Runner._loop_monitor)
        self._loop_lag_ms: array[float] = array("d")  # at most LOOP_LAG_KEPT samples (see Runner._loop_monitor)
        self.t0_ns = 0
        self._tg: asyncio.TaskGroup | None = None
        self._users: list[asyncio.Task[None]] = []

    def request_stop(self, interrupted: bool = True, cancel_inflight: bool = False) -> None:
        """Stop sending; in-flight requests drain (signal handlers), or are cancelled at once
        with ``cancel_inflight`` (a sweep probe whose verdict is already certain)."""
        if interrupted:
            self.interrupted = True
        self._stop.set()
        if cancel_inflight:
            self.cancel_reason = "stopped early: the probe's verdict was already certain"
            for t in list(self._inflight):
                t.cancel()
        if self._stop_fut is not None and not self._stop_fut.done():
            self._stop_fut.set_result(None)

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
        while precise and now_ns() < deadline_ns:
            await asyncio.sleep(0)

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
        rec = RequestRecord(
            index=spec.index,
            phase=phase,  # type: ignore[arg-type]  # phase is "warmup" or "measured"
            scheduled_ns=scheduled_ns,
            requested_input_tokens=spec.requested_input_tokens,
            requested_output_tokens=spec.requested_output_tokens,
            prefix_group=spec.prefix_group,
            session_id=spec.session_id,
            throttle_ns=cap_wait_ns,  # held by --max-concurrency: the client's own cap, not its lag
        )
        self.inflight_records[spec.index] = rec
        try:
            if gate is None:
                await self.endpoint.send(spec, rec)
            else:
                await self.endpoint.send(spec, rec, gate)
                if not gate.is_set():  # it failed while being prepared (e.g. refused connect):
                    await gate.wait()  # reported at its scheduled time, never earlier
                    rec.end_ns = max(rec.end_ns or 0, now_ns())
        except asyncio.CancelledError:
            if gate is not None and not gate.is_set():  # (only the dispatcher sets a gate)
                self.inflight_records.pop(spec.index, None)
                return None  # prepared but never sent (the run stopped first): counted unsent, no record
            rec.status = "error"
            rec.error_kind = "cancelled"
            rec.error_detail = self.cancel_reason
            rec.end_ns = now_ns()
        except Exception as exc:  # an endpoint bug must not lose the record
            rec.status = "error"
            rec.error_kind = rec.error_kind or "protocol"
            rec.error_detail = f"internal error: {type(exc).__name__}: {exc}"
            rec.end_ns = rec.end_ns or now_ns()
        finally:
            self.inflight_records.pop(spec.index, None)
            if sem is not None:
                sem.release()
        self._done.append(rec)
        self._done_events += len(rec.events)
        if not self._defer_sink:
            self._flush_done()
        return now_ns()

    def _flush_done(self, until_ns: int | None = None) -> None:
        """Hand finished records to the sink: all of them, or those that fit before ``until_ns``; past
        ``until_ns`` it goes on while the records left hold over :data:`SINK_BACKLOG_EVENTS` token
        events: a client that cannot keep up holds a bounded backlog (its stamps are late and
        judged so), not every record of the run in memory."""
        done = self._done
        while done:
            rec = done.popleft()
            self._done_events -= len(rec.events)
            if rec.events and rec.phase == "measure":
                self.stamps.add([e.t_ns for e in rec.events], rec.sent_ns)
            self.sink(rec)
            if until_ns is not None and now_ns() > until_ns and self._done_events <= SINK_BACKLOG_EVENTS:
                break

    async def _sink_loop(self) -> None:
        """Hand finished records to the sink away from send deadlines.

        The sink (metrics, aggregation, one flushed line per request) costs 0.1-0.2 ms a
        record; bursts of completions must not delay a send. It runs only while the next
        send is more than ``SINK_GUARD_NS`` away (never while the dispatcher is behind) and
        stops when that guard is reached; records wait at most ``SINK_MAX_DELAY_S`` (then
        all are handed over at once, so a crash loses at most that much). A pass lasts at most
        ``SINK_SLICE_NS``: a wave of completions (a closed loop's users, 256 tokens a record)
        cost tens of ms handed over at once, and every token read meanwhile was stamped late.
        """
        last = now_ns()
        sliced = False
        while True:
            # records left over by a slice: the next slice after one pass of the loop (reads stamped)
            await asyncio.sleep(0 if sliced else SINK_PERIOD_S)
            sliced = False
            if not self._done:
                continue
            now = now_ns()
            if self._next_deadline_ns - now > SINK_GUARD_NS:
                until = now + SINK_SLICE_NS
                self._flush_done(until_ns=min(self._next_deadline_ns - SINK_GUARD_NS, until))
                sliced = bool(self._done) and now_ns() > until
                last = now
            elif now - last > SINK_MAX_DELAY_S * 1e9:
                # open loop: all at once (the dispatcher is behind); closed loop (users due): one slice
                self._flush_done(until_ns=None if self.plan.mode == "open" else now + SINK_SLICE_NS)
                sliced = self.plan.mode != "open" and bool(self._done)
                last = now
