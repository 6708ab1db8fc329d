"""The engine: one run of a plan against an endpoint, from t0 to the drained end.

Open loop (:mod:`loadgen.engine.open_loop`): dispatch on absolute deadlines with prepared
sends; closed loop (:mod:`loadgen.engine.closed_loop`): N users; the record path and the
run's state (:mod:`loadgen.engine.run_core`). :class:`Runner` sets t0, runs the dispatcher
or the users, the background work (event-loop probe, GC, the sink) and drains.

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
import resource
import signal

from loadgen.core.clock import now_ns, timer_slack_ns, wall_anchor
from loadgen.core.schedule import as_schedule
from loadgen.engine.closed_loop import ClosedLoopUsers
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
from loadgen.engine.stamp_lateness import probe_loop

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
]

LOOP_PROBE_S = 0.005
LOOP_LAG_KEPT = 50_000  # loop-lag samples kept at most (thinned evenly beyond)
GC_PERIOD_S = 1.0  # young generations collected this often (away from send deadlines)...
GC_FULL_EVERY = 60  # ...and every generation (the frozen start-up heap excepted) every this many periods


def warm_record_path() -> None:
    """Run the record path's numpy code once (HDR batches, stamp lateness): a first call loads and
    sets up what it uses (~1 ms here), which in a run would fall between sends."""
    from loadgen.core.histograms import LatencyHistogram
    from loadgen.engine.stamp_lateness import StampLateness

    h = LatencyHistogram("warm-up")
    h.record_many_ns([0.0, 1e6, 1e16])
    h.flush()
    s = StampLateness()
    s.probe(10_000_000, 1_000_000)
    s.add([5_000_000, 9_500_000, 20_000_000])
    s.probe(30_000_000, 0)
    s.percentile_ms(99)


class Runner(OpenLoopDispatch, ClosedLoopUsers):
    """Runs one plan against one endpoint; ``sink(record)`` is called once per request."""

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
        warm_record_path()  # first calls of the record path's numpy code, before t0 (not in a send's way)
        gc.collect()
        gc.freeze()
        gc.set_threshold(max(gc_threshold[0], 50_000), 50, 1000)
        ru0 = resource.getrusage(resource.RUSAGE_SELF)
        anchor_m, anchor_w = wall_anchor()
        self.t0_ns = self._t0_override if self._t0_override is not None else now_ns() + LEAD_IN_NS
        t0_wall = anchor_w + (self.t0_ns - anchor_m)
        w0 = now_ns()
        monitor = asyncio.create_task(self._loop_monitor())
        stamp_probe = asyncio.create_task(
            probe_loop(self.stamps)
        )  # the stamps' lateness (loadgen.engine.stamp_lateness)
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
            stamp_probe.cancel()
            collector.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await monitor
            with contextlib.suppress(asyncio.CancelledError):
                await stamp_probe
            with contextlib.suppress(asyncio.CancelledError):
                await collector
            if sink_task is not None:
                sink_task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await sink_task
            self._flush_done()
            self.stamps.probe(now_ns(), 0)  # charge the last records (their stamps after the last probe: 0)
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
            stamp_lateness_p99_ms=self.stamps.percentile_ms(99),
            stamp_tokens=self.stamps.tokens,
            stamps=self.stamps,
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
            for _ in range(100):  # open loop: wait for a gap between sends (at most ~0.2 s)
                now = now_ns()
                if not self._defer_sink or self._next_deadline_ns - now > SINK_GUARD_NS:
                    break
                await asyncio.sleep(SINK_PERIOD_S)
            k += 1
            gc.collect(2 if k % GC_FULL_EVERY == 0 else 1)

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
