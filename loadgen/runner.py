"""The engine: open-loop dispatch on absolute deadlines, closed-loop users, draining.

Open loop (MLPerf LoadGen Server, wrk2): the send times are fixed first (a
:class:`~loadgen.schedule.Schedule`: arrays); the dispatcher sleeps until
``t0 + offset`` for each entry (never a relative ``sleep(interval)``, so no
drift), and each request's latency origin is its scheduled time. Each request's
spec (prompt) is built just in time: in the dispatcher's slack before a deadline,
up to ``LOOKAHEAD_NS`` (and ``MAX_AHEAD`` specs) ahead of the next send, never
within ``BUILD_GUARD_NS`` of it, so building never delays a send unless the
generator is already overloaded; a spec is dropped when its request ends. If
the dispatcher falls more than ``abort_lag_s`` behind, it stops sending, counts
the rest as unsent and the run is INVALID (the client, not the server, limited it).

Closed loop: N users, each sending its next request when the last completes
(scheduled time = the moment the user sends).

One ``asyncio.TaskGroup`` owns every in-flight request. Every request ends as one
record passed to ``sink`` (ok, or an error of a named kind). A stop (SIGINT or
SIGTERM, or :meth:`Runner.request_stop`) ends sending; in-flight requests get
``drain_grace_s`` to finish, then are cancelled and recorded as ``cancelled``;
never-sent requests are counted as ``unsent``.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import itertools
import resource
import signal
from array import array
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from loadgen.clock import now_ns, timer_slack_ns, wall_anchor
from loadgen.endpoints.base import Endpoint
from loadgen.schedule import Schedule, as_schedule
from loadgen.types import RequestRecord, RequestSpec, ScheduledRequest

LEAD_IN_NS = 100_000_000  # t0 is set this far ahead so the first deadline is not already late
LOOP_PROBE_S = 0.005
LOOP_LAG_KEPT = 50_000  # loop-lag samples kept at most (thinned evenly beyond)
SPIN_NS = 1_200_000  # the last 1.2 ms before a deadline are spent yielding, not sleeping
PRESTART_NS = 10_000_000  # open loop: a request is prepared this long before its deadline (gated send)...
PREP_COST_NS = 1_000_000  # ...plus this much per request of the burst it opens (preparing one takes ~0.3-1 ms)...
PREP_BURST_MAX_NS = 40_000_000  # ...at most this much more...
PREP_EARLY_NS = 3_000_000  # ...or up to this much earlier, so that the dispatcher never sleeps across a send
NO_DEADLINE_NS = 1 << 62
SINK_PERIOD_S = 0.002
SINK_GUARD_NS = 1_500_000  # no sink work this close to a send deadline
SINK_MAX_DELAY_S = 0.05
LOOKAHEAD_NS = 500_000_000  # open loop: specs are built up to this far ahead of the next send...
MAX_AHEAD = 1024  # ...and at most this many (bounds the memory of long prompts at high rates)
BUILD_GUARD_NS = 2_000_000  # no spec is built this close to a send deadline (one costs ~10-100 µs)
GC_PERIOD_S = 1.0  # young generations collected this often (away from send deadlines)...
GC_FULL_EVERY = 60  # ...and every generation (the frozen start-up heap excepted) every this many periods


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


@dataclass
class RunPlan:
    """What to run (configuration only; no runtime state).

    Open loop: ``schedule`` (offsets from t0; phases set): a lazy
    :class:`~loadgen.schedule.Schedule` or a list of built entries. Closed loop:
    ``concurrency`` users drawing specs from ``make_spec(index)`` until
    ``max_requests`` (warm-up included) or ``t0 + warmup_s + duration_s``.
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


@dataclass
class RunOutcome:
    t0_ns: int
    t0_wall_ns: int
    interrupted: bool
    unsent: int
    unsent_warmup: int
    client: ClientStats
    end_ns: int


class Runner:
    """Runs one plan against one endpoint; ``sink(record)`` is called once per request."""

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
        self._inflight: set[asyncio.Task[None]] = set()
        self.inflight_records: dict[int, RequestRecord] = {}
        self._done: deque[RequestRecord] = deque()
        self._next_deadline_ns = 0
        self._defer_sink = plan.mode == "open"
        self.cancel_reason = "in flight at the drain deadline"
        self._loop_lag_ms: array[float] = array("d")  # at most LOOP_LAG_KEPT samples (see _loop_monitor)
        self.t0_ns = 0

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

    async def run(self) -> RunOutcome:
        loop = asyncio.get_running_loop()
        self._stop_fut = loop.create_future()
        installed: list[int] = []
        if self._signals:
            for sig in (signal.SIGINT, signal.SIGTERM):
                with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                    loop.add_signal_handler(sig, self._on_signal)
                    installed.append(sig)
        # Cyclic GC passes over many live objects stall the loop for milliseconds: freeze what
        # exists now and collect young generations less often while the run is on. Collected
        # before t0 is set: on a large heap (a notebook, a long-lived process) the collection
        # itself takes longer than the lead-in and made the first sends late.
        gc_threshold = gc.get_threshold()
        gc.collect()
        gc.freeze()
        gc.set_threshold(max(gc_threshold[0], 50_000), 50, 1000)
        ru0 = resource.getrusage(resource.RUSAGE_SELF)
        anchor_m, anchor_w = wall_anchor()
        self.t0_ns = self._t0_override if self._t0_override is not None else now_ns() + LEAD_IN_NS
        t0_wall = anchor_w + (self.t0_ns - anchor_m)
        w0 = now_ns()
        monitor = asyncio.create_task(self._loop_monitor())
        collector = asyncio.create_task(self._gc_loop())
        sink_task = asyncio.create_task(self._sink_loop()) if self._defer_sink else None
        try:
            async with asyncio.TaskGroup() as tg:
                self._tg = tg
                if self.plan.mode == "open":
                    await self._dispatch_open(tg)
                    self._next_deadline_ns = NO_DEADLINE_NS  # nothing left to send: background work is clear
                else:
                    await self._run_closed(tg)
                await self._drain()
        finally:
            gc.set_threshold(*gc_threshold)
            gc.unfreeze()
            for u in getattr(self, "_users", ()):
                u.cancel()
            monitor.cancel()
            collector.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await monitor
            with contextlib.suppress(asyncio.CancelledError):
                await collector
            if sink_task is not None:
                sink_task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await sink_task
            self._flush_done()
            for signum in installed:
                loop.remove_signal_handler(signum)
        ru1 = resource.getrusage(resource.RUSAGE_SELF)
        end = now_ns()
        client = ClientStats(
            cpu_s=(ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime),
            wall_s=(end - w0) / 1e9,
            loop_lag_ms=self._loop_lag_ms,
            open_loop=self.plan.mode == "open",
            aborted_reason=self.aborted_reason,
        )
        if self.plan.mode == "open":
            client.schedule_realized_rps = realized_send_rps(as_schedule(self.plan.schedule), self.unsent)
        return RunOutcome(
            t0_ns=self.t0_ns,
            t0_wall_ns=t0_wall,
            interrupted=self.interrupted,
            unsent=self.unsent,
            unsent_warmup=self.unsent_warmup,
            client=client,
            end_ns=end,
        )

    def _on_signal(self) -> None:
        if self._stop.is_set():
            # second signal: cancel what is in flight now
            for t in list(self._inflight):
                t.cancel()
        self.request_stop(True)

    async def _loop_monitor(self) -> None:
        """Probe the event loop's lag every LOOP_PROBE_S (200 probes/s).

        Memory stays fixed on any run length: once LOOP_LAG_KEPT samples are kept,
        every other one is dropped and from then on only every other probe is kept
        (the stride doubles each time), so the samples stay an even thinning of the
        whole run (400 KB at most; runs under ~4 minutes keep every probe).
        """
        lags = self._loop_lag_ms
        stride = 1
        k = 0
        while True:
            t = now_ns()
            await asyncio.sleep(LOOP_PROBE_S)
            lag = (now_ns() - t) / 1e6 - LOOP_PROBE_S * 1e3
            k += 1
            if k % stride:
                continue
            lags.append(max(lag, 0.0))
            if len(lags) >= LOOP_LAG_KEPT:
                lags[:] = lags[1::2]
                stride *= 2

    async def _gc_loop(self) -> None:
        """Collect cyclic garbage in small steps, away from send deadlines.

        The run raises the young-generation threshold to 50 000 (cyclic collections over
        many objects stall the loop), but then the few cycles each failed request leaves
        (exception, traceback, frames) and each closed connection leaves pile up for tens of
        minutes, and whatever survives into an older generation stays to the end: memory
        grows with the run. A young collection every GC_PERIOD_S (a few thousand objects:
        well under a millisecond) and a full one every GC_FULL_EVERY periods (the heap
        frozen at start is not scanned) keep it flat.
        """
        k = 0
        while True:
            await asyncio.sleep(GC_PERIOD_S)
            for _ in range(100):  # open loop: wait for a gap between sends (at most ~0.2 s)
                now = now_ns()
                if not self._defer_sink or self._next_deadline_ns - now > SINK_GUARD_NS:
                    break
                await asyncio.sleep(SINK_PERIOD_S)
            k += 1
            gc.collect(2 if k % GC_FULL_EVERY == 0 else 1)

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

    async def _dispatch_open(self, tg: asyncio.TaskGroup) -> None:
        plan = self.plan
        sem = asyncio.Semaphore(plan.max_concurrency) if plan.max_concurrency else None
        abort_ns = int(plan.abort_lag_s * 1e9)
        schedule = as_schedule(plan.schedule)
        n = len(schedule)
        offsets = schedule.offsets_ns
        t0 = self.t0_ns
        ahead: deque[RequestSpec] = deque()  # built specs of positions pos, pos + 1, ... (in order)
        built = 0  # the next position to build

        def build_ahead(deadline: int) -> None:
            """Build specs in the slack before ``deadline`` (never within BUILD_GUARD_NS of it)."""
            nonlocal built
            horizon = deadline - t0 + LOOKAHEAD_NS
            while built < n and len(ahead) < MAX_AHEAD and offsets[built] <= horizon:
                if now_ns() > deadline - BUILD_GUARD_NS:
                    return
                ahead.append(schedule.spec(built))
                built += 1

        # Prepared sends (endpoints that accept a gate; not under --max-concurrency): each
        # request is started PRESTART_NS before its deadline (spec, body, pool connection,
        # headers) and parked; at the deadline the dispatcher only opens its gate and the
        # bytes go out. A burst costs one gate per request at its deadline, not one whole
        # send path each.
        gated = sem is None and self.endpoint.accepts_send_gate()
        capped: deque[tuple[int, int]] = deque()  # (start, end) of each time the dispatcher waited on the cap
        prepared: dict[int, tuple[asyncio.Event, asyncio.Task[None]]] = {}
        nxt = 0  # the next position to prepare

        def take(p: int) -> RequestSpec:
            """The spec of position ``p``, the next one not yet taken."""
            nonlocal built
            if ahead:
                return ahead.popleft()
            built = p + 1  # no slack to build it earlier: the generator is behind anyway
            return schedule.spec(p)

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
            gate = asyncio.Event()
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
    ) -> asyncio.Task[None]:
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
    ) -> None:
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
                return  # prepared but never sent (the run stopped first): counted unsent, no record
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
        if not self._defer_sink:
            self._flush_done()

    def _flush_done(self, until_ns: int | None = None) -> None:
        """Hand finished records to the sink: all of them, or those that fit before ``until_ns``."""
        done = self._done
        while done:
            self.sink(done.popleft())
            if until_ns is not None and now_ns() > until_ns:
                break

    async def _sink_loop(self) -> None:
        """Hand finished records to the sink away from send deadlines.

        The sink (metrics, aggregation, one flushed line per request) costs 0.1-0.2 ms a
        record; bursts of completions must not delay a send. It runs only while the next
        send is more than ``SINK_GUARD_NS`` away (never while the dispatcher is behind) and
        stops when that guard is reached; records wait at most ``SINK_MAX_DELAY_S`` (then
        all are handed over at once, so a crash loses at most that much).
        """
        last = now_ns()
        while True:
            await asyncio.sleep(SINK_PERIOD_S)
            if not self._done:
                continue
            now = now_ns()
            if self._next_deadline_ns - now > SINK_GUARD_NS:
                self._flush_done(until_ns=self._next_deadline_ns - SINK_GUARD_NS)
                last = now
            elif now - last > SINK_MAX_DELAY_S * 1e9:
                self._flush_done()
                last = now

    async def _run_closed(self, tg: asyncio.TaskGroup) -> None:
        plan = self.plan
        assert plan.make_spec is not None
        counter = itertools.count()
        t0 = self.t0_ns
        end_ns = None
        if plan.duration_s is not None:
            end_ns = t0 + int((plan.warmup_s + plan.duration_s) * 1e9)
        warm_end = t0 + int(plan.warmup_s * 1e9)

        def index_of(k: int) -> int:
            return plan.index_start + plan.index_stride * k

        # build each user's first request before t0, so all users start together
        first = plan.concurrency if plan.max_requests is None else min(plan.concurrency, plan.max_requests)
        prebuilt = {k: plan.make_spec(index_of(k)) for k in range(first)}

        async def user() -> None:
            while not self._stop.is_set():
                k = next(counter)
                if plan.max_requests is not None and k >= plan.max_requests:
                    return
                spec = prebuilt.pop(k, None) or plan.make_spec(index_of(k))  # type: ignore[misc]  # make_spec is set for closed-loop plans
                now = now_ns()
                if end_ns is not None and now >= end_ns:
                    return
                phase = "warmup" if (k < plan.warmup_requests or now < warm_end) else "measure"
                task = self._start(tg, spec, phase, now)
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.shield(task)
                if task.cancelled():
                    return

        await self._wait_until(t0)
        users = [asyncio.create_task(user()) for _ in range(plan.concurrency)]
        self._users = users
        assert self._stop_fut is not None
        pending: set[asyncio.Future[None]] = set(users)
        while pending and not self._stop.is_set():
            _, pending = await asyncio.wait(pending | {self._stop_fut}, return_when=asyncio.FIRST_COMPLETED)
            pending.discard(self._stop_fut)

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
