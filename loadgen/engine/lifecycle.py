"""The one engine: what every run shares, whatever dispatches its requests.

:class:`RunEngine` is a run from t0 to its drained end: signal handling, the garbage collector
frozen and stepped away from send deadlines, the event-loop probe, the stamp-lateness probe
(:mod:`loadgen.engine.stamp_lateness`), the queue of finished records handed to ``sink`` away from
the next due send with its backlog bound, and the :class:`~loadgen.engine.run_core.RunOutcome` with
the generator's own figures (:class:`~loadgen.engine.run_core.ClientStats`). What differs between
runs is only who decides when a request is due — a dispatcher beside the others:

- :class:`loadgen.engine.runner.Runner`: open loop on absolute deadlines
  (:mod:`loadgen.engine.open_loop`) or closed-loop users (:mod:`loadgen.engine.closed_loop`);
- :class:`loadgen.sessions.turns.SessionRunner`: sessions, each turn due at the previous reply's
  end plus its delay.

A dispatcher implements :meth:`RunEngine._dispatch` (send everything and drain what is in flight:
return when every request has ended), :meth:`RunEngine._next_due_ns` (the next
send's due time: no sink or GC work within ``SINK_GUARD_NS`` of it), :meth:`RunEngine._cancellable`
(the tasks a stop cancels) and :meth:`RunEngine._unsent` (requests never sent); finished records
reach the queue through :meth:`RunEngine._finish_record`.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import resource
import signal
from array import array
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from loadgen.core.clock import now_ns, wall_anchor
from loadgen.core.types import RequestRecord, RequestSpec
from loadgen.endpoints.base import Endpoint
from loadgen.engine.prepare import Preparation
from loadgen.engine.stamp_lateness import StampLateness, probe_loop

__all__ = [
    "GC_FULL_EVERY",
    "GC_PERIOD_S",
    "LEAD_IN_NS",
    "LOOP_LAG_KEPT",
    "LOOP_PROBE_S",
    "NO_DEADLINE_NS",
    "SINK_BACKLOG_EVENTS",
    "SINK_GUARD_NS",
    "SINK_MAX_DELAY_OPEN_S",
    "SINK_MAX_DELAY_S",
    "SINK_PERIOD_S",
    "SINK_SLICE_NS",
    "ClientStats",
    "RunEngine",
    "RunOutcome",
    "warm_record_path",
]

LEAD_IN_NS = 100_000_000  # t0 is set this far ahead so the first deadline is not already late
LEASE_POLL_S = 0.002
"""How often a send held by an expired lease looks for its renewal."""
LEASE_LOST_NS = 10_000_000_000
"""A lease not renewed for this long: the driver has lost the worker, which stops (``loadgen.spread.lease``)."""
NO_DEADLINE_NS = 1 << 62
SINK_PERIOD_S = 0.002
SINK_GUARD_NS = 1_500_000  # no sink work this close to a send deadline
SINK_MAX_DELAY_S = 0.05
SINK_MAX_DELAY_OPEN_S = 0.002
"""Open loop (``late_flush_all``): sends closer together than ``SINK_GUARD_NS`` leave the sink no gap, and 50 ms
of records handed over at once (~55 at 1,000 req/s, 7.5-12 ms at p99) held the next sends. Handed over every 2 ms
(the sink's own period; ~5 records, 1.5-2.5 ms at p99): ``scripts/bench_open_1000`` (issue 31, must-show 2)."""
SINK_SLICE_NS = 1_000_000  # a sink pass stops after this long; the rest follows after one loop pass
SINK_BACKLOG_EVENTS = 65_536  # token events of finished records past which a sink pass is not sliced (memory)
LOOP_PROBE_S = 0.005
LOOP_LAG_KEPT = 50_000  # loop-lag samples kept at most (thinned evenly beyond)
GC_PERIOD_S = 1.0  # young generations collected this often (away from send deadlines)...
GC_FULL_EVERY = 60  # ...and every generation (the frozen start-up heap excepted) every this many periods
DRAIN_REASON = "in flight at the drain deadline"
SPIN_IDLE_NS = 8_000  # a loop pass this short between a spinner's resumptions did no other work (an idle spin)


@dataclass
class ClientStats:
    """Facts about the generator itself, filled by the engine."""

    cpu_s: float = 0.0
    wall_s: float = 0.0
    loop_lag_ms: Sequence[float] = field(default_factory=list)  # the engine keeps an array("d")
    schedule_realized_rps: float | None = None  # the schedule's own rate over the measured sends
    open_loop: bool = True
    aborted_reason: str | None = None  # the generator gave up (fell too far behind)
    worker_cpu_fractions: list[float] = field(default_factory=list)  # one per worker process
    worker_failures: list[str] = field(default_factory=list)
    stamp_lateness_p99_ms: float | None = None  # token-weighted (loadgen.engine.stamp_lateness); None: not measured
    stamp_tokens: int = 0  # token events it is over
    stamp_lateness_max_ms: float | None = None  # the latest stamp (inf: over 1 s); None: not measured
    stamps: StampLateness | None = None  # the histograms themselves: validity judges the errors they estimate
    cpu_wait_s: float | None = None  # the event loop's time runnable but waiting for a CPU (loop_cpu_wait_ns)
    preparation: dict[str, Any] | None = None  # what was built before t0 (loadgen.engine.prepare.Preparation)
    spin_idle_s: float = 0.0  # CPU of idle loop passes while a sender spun to its deadline (RunEngine._spin)


@dataclass
class RunOutcome:
    t0_ns: int
    t0_wall_ns: int
    interrupted: bool
    unsent: int
    unsent_warmup: int
    client: ClientStats
    end_ns: int
    lost_with_client: int = 0
    """Requests a lost worker may have sent whose records died with it (:mod:`loadgen.spread.lease`)."""


def loop_cpu_wait_ns() -> int | None:
    """The calling thread's total time runnable but waiting for a CPU (ns): the run-queue delay, the
    second field of Linux's ``/proc/thread-self/schedstat``; None where it cannot be read.

    Over a run it tells a client that fell behind because other processes held the cores (a vLLM on
    CPU beside it: 1.5 s of wait within 2 s, the whole machine's sleepers stalled) from one too slow
    itself (its own CPU time: ``cpu_s``)."""
    try:
        with open("/proc/thread-self/schedstat", encoding="ascii") as f:
            return int(f.read().split()[1])
    except (OSError, ValueError, IndexError):
        return None


def warm_record_path() -> None:
    """Run the record path's numpy code once (HDR batches, stamp lateness): a first call loads and
    sets up what it uses (~1 ms here), which in a run would fall between sends."""
    from loadgen.core.histograms import LatencyHistogram

    h = LatencyHistogram("warm-up")
    h.record_many_ns([0.0, 1e6, 1e16])
    h.flush()
    s = StampLateness()
    s.probe(10_000_000, 1_000_000)
    s.add([5_000_000, 9_500_000, 20_000_000])
    s.probe(30_000_000, 0)
    s.percentile_ms(99)


class RunEngine:
    """One run's life and record path, shared by every dispatcher (module docstring)."""

    open_loop = True  # every request has a due time (its lag is checked); closed-loop users: False
    late_flush_all = True  # a queue that waited SINK_MAX_DELAY_S is handed over whole (False: one slice)

    def __init__(
        self,
        endpoint: Endpoint,
        sink: Callable[[RequestRecord], None],
        *,
        t0_ns: int | None = None,
        install_signal_handlers: bool = True,
    ) -> None:
        self.endpoint = endpoint
        self.sink = sink
        self._t0_override = t0_ns
        self._signals = install_signal_handlers
        self._stop = asyncio.Event()
        self._stop_fut: asyncio.Future[None] | None = None
        self.interrupted = False
        self.aborted_reason: str | None = None
        self.t0_ns = 0
        # requests sent (or being prepared) and not yet ended, by index (a sweep probe's early-stop watch)
        self.inflight_records: dict[int, RequestRecord] = {}
        self.cancel_reason = DRAIN_REASON  # the error_detail of a request cancelled in flight
        self.stamps = StampLateness()  # token-weighted stamp lateness (loadgen.engine.stamp_lateness)
        self._loop_lag_ms: array[float] = array("d")  # at most LOOP_LAG_KEPT samples (_loop_monitor)
        self._done: deque[RequestRecord] = deque()
        self._done_events = 0  # token events held by the records in _done (each ~170 B: the backlog's memory)
        self._defer_sink = True  # records reach the sink from _sink_loop, off the read and send paths
        self._errors: list[BaseException] = []  # a dispatcher's own failure (a bug): raised after the run
        self.preparation: Preparation | None = None  # what was built before t0 (a dispatcher's _prepare)
        self._prepare_done = False
        self.on_preparing: Callable[[str], None] | None = None  # told once when preparation runs long (the CLI)
        self.spin_idle_ns = 0  # idle passes of the loop while a sender spun to its deadline (_spin)
        self._last_spin_ns = 0
        # a worker's lease (loadgen.spread.lease): no send starts at or after lease_ns() (this process's clock)
        self.lease_ns: Callable[[], int] | None = None

    # -- what a dispatcher provides ------------------------------------------------------------

    async def _dispatch(self) -> None:
        """Send the plan's requests and drain them (after a stop, at most the plan's grace)."""
        raise NotImplementedError

    async def _prepare(self) -> None:
        """Build what can be built before t0 (:mod:`loadgen.engine.prepare`); set ``self.preparation``."""

    async def _spin(self, deadline_ns: int) -> None:
        """Yield to the loop until ``deadline_ns`` (never early): the last stretch before a send, which a
        timer would overshoot by up to 1 ms. A pass of the loop between two resumptions of a spinner (any
        spinner: passes never overlap) shorter than ``SPIN_IDLE_NS`` did no other work and is counted as
        idle spin (``spin_idle_ns``): CPU spent waiting, not working, which the client CPU check leaves out
        (at 1,000 sends a second a dispatcher spins most of its time)."""
        t = now_ns()
        while t < deadline_ns:
            await asyncio.sleep(0)
            t = now_ns()
            gap = t - self._last_spin_ns
            if gap < SPIN_IDLE_NS:
                self.spin_idle_ns += gap
            self._last_spin_ns = t

    async def _await_lease(self, at_ns: int = 0) -> None:
        """Wait until the lease allows a send now, or at ``at_ns`` when later (:attr:`lease_ns`); a lease not
        renewed for :data:`LEASE_LOST_NS` stops the run (the driver lost this worker: it sends nothing more)."""
        lease = self.lease_ns
        if lease is None:
            return
        since = now_ns()
        while not self._stop.is_set() and max(now_ns(), at_ns) >= lease():
            if now_ns() - since > LEASE_LOST_NS:
                self.aborted_reason = (
                    f"the driver renewed no lease for {LEASE_LOST_NS / 1e9:g} s (it lost this worker): "
                    "it stopped sending"
                )
                self.request_stop(False)
                return
            await asyncio.sleep(LEASE_POLL_S)

    # -- before the run -----------------------------------------------------------------------

    async def prepare(self) -> None:
        """Build what can be built before the clock starts (once; :meth:`run` does it when not done
        before). Call it before fixing t0 (:meth:`start_at`), so a long preparation cannot make the
        first sends late."""
        if not self._prepare_done:
            self._prepare_done = True
            await self._prepare()

    def start_at(self, t0_ns: int) -> None:
        """Fix t0 (monotonic ns) after :meth:`prepare`: the run's first deadlines count from it."""
        self._t0_override = t0_ns

    def _next_due_ns(self) -> int:
        """The next send's due time (NO_DEADLINE_NS: none)."""
        return NO_DEADLINE_NS

    def _cancellable(self) -> Iterable[asyncio.Task[object]]:
        """The tasks a stop with ``cancel_inflight`` (or a second signal) cancels."""
        return ()

    def _unsent(self) -> tuple[int, int]:
        """(requests never sent, of them warm-up)."""
        return 0, 0

    def _finish_client(self, client: ClientStats) -> None:
        """Add a dispatcher's own figures to the generator's."""

    # -- stop ---------------------------------------------------------------------------------

    def request_stop(self, interrupted: bool = True, cancel_inflight: bool = False) -> None:
        """Stop sending; in-flight requests drain (signal handlers), or are cancelled at once
        with ``cancel_inflight`` (a sweep probe whose verdict is already certain)."""
        if interrupted:
            self.interrupted = True
        self._stop.set()
        if cancel_inflight:
            if self.cancel_reason == DRAIN_REASON:  # a reason given by the caller (a failed write) is kept
                self.cancel_reason = "stopped early: the probe's verdict was already certain"
            for t in list(self._cancellable()):
                t.cancel()
        if self._stop_fut is not None and not self._stop_fut.done():
            self._stop_fut.set_result(None)

    def _on_signal(self) -> None:
        if self._stop.is_set():  # a second signal: cancel what is in flight now
            for t in list(self._cancellable()):
                t.cancel()
        self.request_stop(True)

    # -- the run ------------------------------------------------------------------------------

    async def run(self) -> RunOutcome:
        loop = asyncio.get_running_loop()
        self._stop_fut = loop.create_future()
        if self._stop.is_set():
            self._stop_fut.set_result(None)
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
        await self.prepare()  # before the clocks: preparation is never in the window or the client's CPU
        gc_threshold = gc.get_threshold()
        warm_record_path()  # first calls of the record path's numpy code, before t0 (not in a send's way)
        gc.collect()
        gc.freeze()
        gc.set_threshold(max(gc_threshold[0], 50_000), 50, 1000)
        ru0 = resource.getrusage(resource.RUSAGE_SELF)
        spin0 = self.spin_idle_ns
        anchor_m, anchor_w = wall_anchor()
        self.t0_ns = self._t0_override if self._t0_override is not None else now_ns() + LEAD_IN_NS
        t0_wall = anchor_w + (self.t0_ns - anchor_m)
        w0 = now_ns()
        wait0 = loop_cpu_wait_ns()
        background = [
            asyncio.create_task(self._loop_monitor()),
            asyncio.create_task(probe_loop(self.stamps)),  # the stamps' lateness (loadgen.engine.stamp_lateness)
            asyncio.create_task(self._gc_loop()),
        ]
        if self._defer_sink:
            background.append(asyncio.create_task(self._sink_loop()))
        try:
            await self._dispatch()
        finally:
            gc.set_threshold(*gc_threshold)
            gc.unfreeze()
            self._stop_background()
            for t in background:
                t.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await t
            self._flush_done()
            self.stamps.probe(now_ns(), 0)  # charge the last records (their stamps after the last probe: 0)
            for signum in installed:
                loop.remove_signal_handler(signum)
        if self._errors:
            raise self._errors[0]
        ru1 = resource.getrusage(resource.RUSAGE_SELF)
        end = now_ns()
        wait1 = loop_cpu_wait_ns()
        client = ClientStats(
            cpu_s=(ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime),
            wall_s=(end - w0) / 1e9,
            loop_lag_ms=self._loop_lag_ms,
            open_loop=self.open_loop,
            aborted_reason=self.aborted_reason,
            stamp_lateness_p99_ms=self.stamps.percentile_ms(99),
            stamp_lateness_max_ms=self.stamps.max_ms(),
            stamp_tokens=self.stamps.tokens,
            stamps=self.stamps,
            cpu_wait_s=(wait1 - wait0) / 1e9 if wait0 is not None and wait1 is not None else None,
            preparation=self.preparation.describe() if self.preparation is not None else None,
            spin_idle_s=(self.spin_idle_ns - spin0) / 1e9,
        )
        self._finish_client(client)
        unsent, unsent_warmup = self._unsent()
        return RunOutcome(
            t0_ns=self.t0_ns,
            t0_wall_ns=t0_wall,
            interrupted=self.interrupted,
            unsent=unsent,
            unsent_warmup=unsent_warmup,
            client=client,
            end_ns=end,
        )

    def _stop_background(self) -> None:
        """A dispatcher's own tasks that end with the run (closed-loop users)."""

    # -- background work ----------------------------------------------------------------------

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
            end = now_ns()
            lag = (end - t) / 1e6 - LOOP_PROBE_S * 1e3
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
            for _ in range(100):  # wait for a gap between sends (at most ~0.2 s)
                if not self._defer_sink or self._next_due_ns() - now_ns() > SINK_GUARD_NS:
                    break
                await asyncio.sleep(SINK_PERIOD_S)
            k += 1
            gc.collect(2 if k % GC_FULL_EVERY == 0 else 1)

    # -- the record path: one request's record, its end, the sink ------------------------------

    def _new_record(self, spec: RequestSpec, phase: str, scheduled_ns: int, *, cap_wait_ns: int = 0) -> RequestRecord:
        """The record of a request about to be sent, registered as in flight (the early-stop watch reads it)."""
        rec = RequestRecord(
            index=spec.index,
            phase=phase,  # type: ignore[arg-type]  # phase is "warmup" or "measure"
            scheduled_ns=scheduled_ns,
            requested_input_tokens=spec.requested_input_tokens,
            requested_output_tokens=spec.requested_output_tokens,
            prefix_group=spec.prefix_group,
            session_id=spec.session_id,
            throttle_ns=cap_wait_ns,  # held by --max-concurrency: the client's own cap, not its lag
            model=spec.model,
        )
        self.inflight_records[spec.index] = rec
        return rec

    def _ended_by(self, rec: RequestRecord, exc: BaseException) -> None:
        """``rec`` ended by ``exc`` instead of by its endpoint: ``cancelled`` (a stop or the drain deadline,
        with :attr:`cancel_reason`), or an internal error (an endpoint bug must not lose the record)."""
        rec.status = "error"
        if isinstance(exc, asyncio.CancelledError):
            rec.error_kind = "cancelled"
            rec.error_detail = self.cancel_reason
            rec.end_ns = now_ns()
        else:
            rec.error_kind = rec.error_kind or "protocol"
            rec.error_detail = f"internal error: {type(exc).__name__}: {exc}"
            rec.end_ns = rec.end_ns or now_ns()

    def _finish_record(self, rec: RequestRecord) -> None:
        """A request ended: its record joins the sink's queue (handed over at once when not deferred)."""
        self._done.append(rec)
        self._done_events += len(rec.events)
        if not self._defer_sink:
            self._flush_done()

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
        stops when that guard is reached; records wait at most ``SINK_MAX_DELAY_S`` (open loop:
        ``SINK_MAX_DELAY_OPEN_S``) (then
        all are handed over at once — one slice where ``late_flush_all`` is False, as for
        closed-loop users — so a crash loses at most that much). A pass lasts at most
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
            nxt = self._next_due_ns()
            if nxt - now > SINK_GUARD_NS:
                until = now + SINK_SLICE_NS
                self._flush_done(until_ns=min(nxt - SINK_GUARD_NS, until))
                sliced = bool(self._done) and now_ns() > until
                last = now
            elif now - last > (SINK_MAX_DELAY_OPEN_S if self.late_flush_all else SINK_MAX_DELAY_S) * 1e9:
                self._flush_done(until_ns=None if self.late_flush_all else now + SINK_SLICE_NS)
                sliced = not self.late_flush_all and bool(self._done)
                last = now
