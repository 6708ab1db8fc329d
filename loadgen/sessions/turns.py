"""The session engine: sessions that arrive open loop, turns that are causal inside a session.

Open loop at the session level (``mode="open"``): session ``i`` starts at ``t0 +
start_offsets_ns[i]`` (an arrival process, or the trace's own start times), whatever the
server does. Inside a session, turn ``k + 1`` is *due* at (the end of turn ``k``'s reply, as the
client saw it) + turn ``k + 1``'s delay, capped by ``idle_cap_s`` when set (as the AgentX runs
cap idle gaps; :func:`loadgen.sessions.planning.plan_sessions` sets the source's cap, one hour by default,
and has checked every delay finite and bounded, :mod:`loadgen.workload.session_checks`); the first
turn is due at the session's start. Closed loop
(``mode="closed"``): ``concurrency`` sessions run at once, each replaced by the next when it
ends; a replacement starts when its slot frees.

Latency origin: a turn's due time, in both modes: its record's ``scheduled_ns`` (a session's own
turns form a schedule, unlike independent closed-loop users, which count from the send). A turn
the client starts late is schedule lag (:mod:`loadgen.core.metrics`, checked by
:mod:`loadgen.engine.validity` as any open-loop run's). Each turn's request is built (history + new
message, :class:`loadgen.workload.session_model.SessionHistory`) after the previous reply ends, then
the engine sleeps until the due time (:func:`loadgen.core.clock.sleep_until`, never early). With an
endpoint that accepts a send gate, the request is prepared ``PRESTART_NS`` before its due time
(connection taken, body encoded) and its bytes go out when the gate is set at the due time,
after a ``SPIN_NS`` yield loop, as the open-loop runner's prepared sends.

A failed turn ends its session: the remaining turns are not sent and are counted in
``unsent_turns`` (its history would miss a reply). Warm-up: the first ``warmup_sessions``
sessions' turns are recorded with phase ``warmup``. A stop (Ctrl-C, :meth:`SessionRunner.request_stop`)
ends new sessions and turns; in-flight turns get ``drain_grace_s``, then are cancelled (a
second Ctrl-C cancels them at once).

Every turn ends as one :class:`~loadgen.core.types.RequestRecord` handed to ``sink(record, turn)``
(``turn``: the 0-based turn index; the record carries the session id and the cached prompt
tokens the server reported) soon after it ends, by the one engine's record queue
(:mod:`loadgen.engine.lifecycle`): emptied away from every session's next due time, so writing one
turn's record never delays another's send; signals, the event-loop and stamp-lateness probes and
garbage collection are the engine's, as for every run.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from loadgen.core.clock import SendGate, now_ns, sleep_until
from loadgen.core.types import RequestRecord, RequestSpec
from loadgen.endpoints.base import Endpoint
from loadgen.engine import prepare
from loadgen.engine.abandon import Abandon, arm, settle
from loadgen.engine.lifecycle import NO_DEADLINE_NS, ClientStats, RunEngine
from loadgen.workload.session_model import Session, SessionHistory, SessionPrompter

__all__ = ["SessionPlan", "SessionRunner", "SessionStats"]

PRESTART_NS = 10_000_000  # a gated send is prepared this long before its due time (as the open-loop runner)
SPIN_NS = 1_200_000  # the last 1.2 ms before a due time are spent yielding, not sleeping
SPAWN_AHEAD_NS = 50_000_000  # open loop: a session's task starts this long before its first turn is due


@dataclass
class SessionPlan:
    """What to run (configuration only): ``sessions`` in order, their start offsets (open loop) or
    the number running at once (closed loop)."""

    sessions: Sequence[Session]
    prompter: SessionPrompter
    mode: Literal["open", "closed"] = "open"
    start_offsets_ns: Sequence[int] = ()
    concurrency: int = 1
    warmup_sessions: int = 0
    idle_cap_s: float | None = None
    drain_grace_s: float = 30.0
    end_offset_ns: int | None = None  # closed loop: no session starts after t0 + this
    # each session's first request index (turn k: + k); empty: the turns' positions in this plan, in order.
    # A worker's shard keeps the whole plan's (loadgen.sessions.spread), so indices are unique across workers
    first_index: Sequence[int] = ()
    # --max-concurrency: at most this many turns in flight (None: no cap). A turn due while the cap is full
    # waits for a slot; the wait counts in its latency from its due time and is recorded as its throttle
    # (result.json client_rate_cap, "waited for the client's own cap"), never as the client's schedule lag
    max_inflight: int | None = None
    abandon: Abandon | None = None  # --abandon: a walked-away turn ends its session (loadgen.engine.abandon)


@dataclass
class SessionStats:
    """Per-session facts gathered as sessions run (``result.json`` ``sessions``)."""

    started: int = 0
    completed: int = 0  # every turn ended ok
    failed: int = 0  # ended early by a failed turn
    abandoned: int = 0  # ended by a turn whose user walked away (--abandon): not failed
    unsent_turns: int = 0
    resets: int = 0
    durations_s: list[float] = field(default_factory=list)  # first due time to last reply end
    system_wait_s: list[float] = field(default_factory=list)  # per session: sum of turn latencies (due to end)
    tool_wait_s: list[float] = field(default_factory=list)  # per session: sum of delays between turns
    tool_replies: int = 0  # replies whose tool calls went back into the history (SessionHistory)
    tool_calls_missing: int = 0  # replies that should have called a tool and did not (recorded calls stood in)
    tool_calls_unexpected: int = 0  # replies that called a tool where the session went on with a user turn

    def add_tools(self, hist: SessionHistory) -> None:
        """A finished session's tool-call counts."""
        self.tool_replies += hist.tool_replies
        self.tool_calls_missing += hist.tool_calls_missing
        self.tool_calls_unexpected += hist.tool_calls_unexpected


class SessionRunner(RunEngine):
    """Runs one :class:`SessionPlan` against an opened endpoint; ``sink(record, turn)`` per turn.

    A dispatcher of the one engine (:class:`~loadgen.engine.lifecycle.RunEngine`: signals, probes,
    garbage collection, the sink's queue and its backlog bound, the outcome), as the plain
    :class:`~loadgen.engine.runner.Runner` is; what is its own is when a turn is due."""

    def __init__(
        self,
        endpoint: Endpoint,
        plan: SessionPlan,
        sink: Callable[[RequestRecord, int], None],
        *,
        t0_ns: int | None = None,
        install_signal_handlers: bool = True,
    ) -> None:
        super().__init__(endpoint, self._to_sink, t0_ns=t0_ns, install_signal_handlers=install_signal_handlers)
        self.plan = plan
        self.turn_sink = sink
        self.stats = SessionStats()
        self._tasks: set[asyncio.Task[None]] = set()
        self._turns: dict[int, int] = {}  # request index -> its turn, while its record waits for the sink
        self._dues: dict[int, int] = {}  # session -> its next turn's due time, until that turn is sent
        first = list(plan.first_index)
        if not first:  # the turns' positions in the plan: a deterministic index per (session, turn)
            n = 0
            for s in plan.sessions:
                first.append(n)
                n += len(s.turns)
        self._first_index = first
        self._cap = asyncio.Semaphore(plan.max_inflight) if plan.max_inflight else None
        self._late0 = (0, 0.0)  # the prompter's late-built messages (and their CPU) before this run

    def _to_sink(self, rec: RequestRecord) -> None:
        self.turn_sink(rec, self._turns.pop(rec.index))

    def _next_due_ns(self) -> int:
        return min(self._dues.values(), default=NO_DEADLINE_NS)

    def _cancellable(self) -> set[asyncio.Task[None]]:
        return self._tasks

    def _unsent(self) -> tuple[int, int]:
        return self.stats.unsent_turns, 0

    async def _prepare(self) -> None:
        """The sessions' new messages built before t0 (their history depends on the replies: built when a
        turn is due), within :mod:`loadgen.engine.prepare`'s memory and time budgets; the messages built
        later are counted (``built_in_run``)."""
        plan = self.plan
        planned_s = None
        if plan.mode == "open" and len(plan.start_offsets_ns):
            planned_s = float(max(plan.start_offsets_ns)) / 1e9
        elif plan.end_offset_ns is not None:
            planned_s = plan.end_offset_ns / 1e9
        t = time.perf_counter()
        done, total, held = plan.prompter.prepare(
            plan.sessions, budget_bytes=prepare.PREPARE_BYTES,
            deadline_ns=prepare.time_budget_ns(planned_s, self._t0_override),
        )  # fmt: skip
        self._late0 = (plan.prompter.built_late, plan.prompter.built_late_cpu_s)
        self.preparation = prepare.Preparation(
            requests=done, of=total, bytes=held, seconds=time.perf_counter() - t,
            stopped_by=None if done == total else ("memory" if held >= prepare.PREPARE_BYTES else "time"),
        )  # fmt: skip

    def _finish_client(self, client: ClientStats) -> None:
        p = self.preparation
        if p is not None and client.preparation is not None:  # the messages built late, since _prepare
            p.built_in_run = self.plan.prompter.built_late - self._late0[0]
            p.built_in_run_cpu_s = self.plan.prompter.built_late_cpu_s - self._late0[1]
            client.preparation = p.describe()

    async def _spin_to(self, deadline_ns: int) -> None:
        """Sleep to ``SPIN_NS`` before ``deadline_ns``, then yield to the loop until it (never early; the idle
        passes counted: :meth:`~loadgen.engine.lifecycle.RunEngine._spin`)."""
        delay = deadline_ns - now_ns()
        if delay > SPIN_NS:
            await asyncio.sleep((delay - SPIN_NS) / 1e9)
        await self._spin(deadline_ns)

    async def _dispatch(self) -> None:
        if self.plan.mode == "open":
            await self._run_open()
        else:
            await self._run_closed()
        await self._drain()

    # -- scheduling -------------------------------------------------------------

    def _spawn(self, i: int, start_ns: int) -> asyncio.Task[None]:
        task = asyncio.create_task(self._session(i, start_ns))
        self._tasks.add(task)
        task.add_done_callback(self._session_done)
        return task

    def _session_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:  # a bug (the sink, the history): stop
            self._errors.append(task.exception())  # type: ignore[arg-type]  # checked not None above
            self.request_stop(interrupted=False)

    async def _run_open(self) -> None:
        plan = self.plan
        offsets = plan.start_offsets_ns
        for i in range(len(plan.sessions)):
            start = self.t0_ns + int(offsets[i])
            if await self._sleep_or_stop(start - SPAWN_AHEAD_NS):  # its first turn is built and prepared ahead
                self.stats.unsent_turns += sum(len(s.turns) for s in plan.sessions[i:])
                return
            self._spawn(i, start)

    async def _run_closed(self) -> None:
        plan = self.plan
        it = iter(range(len(plan.sessions)))
        await sleep_until(self.t0_ns)

        async def slot() -> None:
            for i in it:
                if self._stop.is_set() or (
                    plan.end_offset_ns is not None and now_ns() >= self.t0_ns + plan.end_offset_ns
                ):
                    return
                # wait, never await: a session cancelled by a stop (an early stop's cancel, a second Ctrl-C)
                # ends its slot, not the run
                await asyncio.wait([self._spawn(i, now_ns())])

        await asyncio.gather(*(slot() for _ in range(plan.concurrency)))

    async def _sleep_or_stop(self, deadline_ns: int, *, precise: bool = False) -> bool:
        """Sleep until ``deadline_ns`` (never early); True when a stop came first.

        ``precise`` (a send): a plain sleep to ``SPIN_NS`` before the deadline, then yields until
        it (the loop's timers have millisecond granularity, and :func:`~loadgen.core.clock.sleep_until`
        adds uvloop's slack, up to 2 ms late); else :func:`~loadgen.core.clock.sleep_until`.
        """
        if self._stop.is_set():
            return True
        if deadline_ns - now_ns() > 20_000_000:  # long waits: wake on a stop
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), (deadline_ns - now_ns() - 10_000_000) / 1e9)
            if self._stop.is_set():
                return True
        if precise:
            await self._spin_to(deadline_ns)
        else:
            await sleep_until(deadline_ns)
        return self._stop.is_set()

    async def _session(self, i: int, start_ns: int) -> None:
        plan = self.plan
        session = plan.sessions[i]
        hist = SessionHistory(session, plan.prompter)
        phase = "warmup" if i < plan.warmup_sessions else "measure"
        stats = self.stats
        stats.started += 1
        due = start_ns
        system_ns = 0
        tool_s = 0.0
        ok = True
        walked = False
        n = len(session.turns)
        last_end = start_ns
        for k in range(n):
            turn = session.turns[k]
            if k:
                delay = turn.delay_s if plan.idle_cap_s is None else min(turn.delay_s, plan.idle_cap_s)
                due = last_end + round(delay * 1e9)
                tool_s += delay
            spec = hist.spec(k, self._first_index[i] + k)
            cap = self._cap
            gated = cap is None and self.endpoint.accepts_send_gate()  # as open loop: no prepared send under a cap
            self._dues[i] = due
            cap_wait = 0
            try:
                stopped = await self._sleep_or_stop(due - PRESTART_NS if gated else due, precise=not gated)
                if not stopped and cap is not None:
                    cap_wait, stopped = await self._slot(cap, i)
                if not stopped and self.lease_ns is not None and max(due, now_ns()) >= self.lease_ns():
                    await self._await_lease(due)  # a worker: no send past its lease (loadgen.spread.lease)
                    stopped = self._stop.is_set()
            except asyncio.CancelledError:  # cancelled before its send: this turn and the rest are unsent
                self._dues.pop(i, None)
                stats.unsent_turns += n - k
                stats.failed += 1
                raise
            if stopped:
                self._dues.pop(i, None)
                stats.unsent_turns += n - k
                ok = False
                break
            rec = self._new_record(spec, phase, due, cap_wait_ns=cap_wait)  # (the spec carries the session id)
            walk = arm(self.plan.abandon, rec, spec.index, due)
            try:
                if gated:
                    await self._gated_send(spec, rec, due, i)
                else:
                    self._dues.pop(i, None)
                    await self.endpoint.send(spec, rec)
            except asyncio.CancelledError as exc:
                self._ended_by(rec, exc)
                if rec.abandoned_ns is None or self._stop.is_set():
                    self._finished(rec, k)
                    stats.unsent_turns += n - k - 1
                    stats.failed += 1
                    raise
                asyncio.current_task().uncancel()  # type: ignore[union-attr]  # its user walked away: ends below
            except Exception as exc:
                self._ended_by(rec, exc)
            finally:
                self._dues.pop(i, None)
                self.inflight_records.pop(spec.index, None)
                if cap is not None:
                    cap.release()
                if walk is not None:
                    walk.cancel()
            walked = settle(self.plan.abandon, rec)  # the session ends with this turn (below): its user left
            last_end = rec.end_ns or now_ns()
            system_ns += last_end - due
            self._finished(rec, k)
            if not rec.ok:
                stats.unsent_turns += n - k - 1
                ok = False
                break
            hist.reply(k, rec.answer_text, rec.tool_calls)
        stats.resets += hist.resets
        stats.add_tools(hist)
        if ok:
            stats.completed += 1
        elif walked:
            stats.abandoned += 1
        else:
            stats.failed += 1
        if phase == "measure":
            stats.durations_s.append((last_end - start_ns) / 1e9)
            stats.system_wait_s.append(system_ns / 1e9)
            stats.tool_wait_s.append(tool_s)

    async def _slot(self, cap: asyncio.Semaphore, i: int) -> tuple[int, bool]:
        """A slot under ``--max-concurrency`` for session ``i``'s due turn: (ns waited for it, stopped meanwhile).
        While it waits, its due time is not a coming send (the sink may work); after a stop it sends nothing."""
        if not cap.locked():
            await cap.acquire()
            return 0, False
        self._dues.pop(i, None)
        t = now_ns()
        await cap.acquire()
        waited = now_ns() - t
        if self._stop.is_set():
            cap.release()
            return waited, True
        return waited, False

    async def _gated_send(self, spec: RequestSpec, rec: RequestRecord, due_ns: int, i: int) -> None:
        """Prepare the request now; its bytes go out at ``due_ns`` (never early); wait for its end."""
        gate = SendGate()
        task = asyncio.create_task(self.endpoint.send(spec, rec, gate))
        try:
            await self._spin_to(due_ns)
            gate.set()
            self._dues.pop(i, None)  # sent: the sink may work again
            await task
        finally:
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        if rec.end_ns is not None and rec.end_ns < due_ns:  # failed while prepared: reported at its due time
            rec.end_ns = now_ns()

    def _finished(self, rec: RequestRecord, turn: int) -> None:
        self._turns[rec.index] = turn
        self._finish_record(rec)

    async def _drain(self) -> None:
        """Wait for running sessions; after a stop, at most ``drain_grace_s``, then cancel."""
        while self._tasks:
            pending = set(self._tasks)
            if self._stop.is_set():
                _, still = await asyncio.wait(pending, timeout=self.plan.drain_grace_s)
                for t in still:
                    t.cancel()
                if still:
                    await asyncio.wait(still, timeout=5.0)
                return
            stop = asyncio.create_task(self._stop.wait())
            await asyncio.wait(pending | {stop}, return_when=asyncio.FIRST_COMPLETED)
            stop.cancel()
