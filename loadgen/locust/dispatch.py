"""One process's load in a Locust test: the client, the workload, open-loop dispatch, records.

Closed loop (the default): each Locust user calls :meth:`LoadProcess.closed_loop_request`,
one request at a time. Sessions (``--sessions``): each Locust user calls
:meth:`LoadProcess.session`, one whole session at a time (:mod:`loadgen.locust.session_user`). Open loop (``--rate``): users idle; one dispatcher greenlet
per process sleeps until ``t0 + offset`` of each entry of this process's shard
(absolute deadlines) and spawns one greenlet per request, at most
``max_concurrency`` in flight. Finished records go to the local collector (single
process) or are shipped to the master (a worker) every 0.2 s (an empty batch too: the sign of life
the master renews the worker's lease on, :mod:`loadgen.spread.lease`).
"""

from __future__ import annotations

import dataclasses
import itertools
import resource
from array import array
from collections import deque
from collections.abc import Callable, Iterator
from functools import partial
from typing import TYPE_CHECKING, Any

import gevent
import gevent.event
import gevent.lock
from greenlet import GreenletExit

from loadgen.core.clock import now_ns
from loadgen.core.metrics import RequestMetrics, compute
from loadgen.core.types import RequestRecord, RequestSpec
from loadgen.endpoints.http import fail
from loadgen.engine.lifecycle import LEASE_LOST_NS, LEASE_POLL_S
from loadgen.engine.results import Aggregator
from loadgen.locust.client import GeventClient, Prepared
from loadgen.locust.collect import clock_anchor, pack_record
from loadgen.locust.openplan import open_offsets, workload_options
from loadgen.locust.session_user import SessionFeed, run_session
from loadgen.sessions.turns import SessionStats
from loadgen.spread.lease import LEASE_AHEAD_NS, LEASE_RENEW_S
from loadgen.workload.spec import Workload

if TYPE_CHECKING:
    from locust.env import Environment

SPIN_NS = 1_000_000  # the last 1 ms before a deadline is spent yielding, not sleeping
ABORT_LAG_NS = 1_000_000_000
SHIP_INTERVAL_S = LEASE_RENEW_S  # records, and the sign of life the master renews the lease on
LOOP_PROBE_S = 0.005


class LoadProcess:
    """This process's part of one test: the client, the workload, open-loop dispatch, records.

    ``sink(rec, m, turn)`` receives every finished record (single process; ``turn``: a session
    turn's 0-based index, else None); on a worker records are packed into ``outbox`` for the master instead.
    """

    def __init__(
        self,
        env: Environment,
        plan: dict[str, Any],
        sink: Callable[[RequestRecord, RequestMetrics, int | None], None] | None,
    ) -> None:
        cfg = self.cfg = plan["config"]
        self.env = env
        self.plan = plan
        self.shard, self.shards = plan["shard"], plan["shards"]
        self.sink = sink
        self.workload = Workload(workload_options(cfg, plan["salt"]))
        self.tokenizer = self.workload.tokenizer
        self.client = GeventClient(cfg, plan["run_id"])
        self.hist = Aggregator()  # this process's own histograms (shipped encoded)
        self.outbox: list[list[Any]] = []
        self.counter = itertools.count()
        self.stop_event = gevent.event.Event()
        self.inflight: dict[int, gevent.Greenlet] = {}
        self.aborted_reason: str | None = None
        self.dispatched = self.unsent = self.not_reached = self.cap_waits = 0
        self.active = 0  # requests in flight in this process (the tab's "draining" line)
        self.stop_ns: int | None = None
        self.loop_lag_ms = array("f")
        self.t0_ns = local_t0_ns(plan)
        # a worker's lease, offset from t0 (loadgen.spread.lease): the master renews it; no send starts past it
        self.lease_ns: int | None = LEASE_AHEAD_NS if sink is None else None
        self.ru0 = resource.getrusage(resource.RUSAGE_SELF)
        self.w0 = now_ns()
        self.feed: SessionFeed | None = None
        self.session_stats = SessionStats()
        self.sessions_cut = 0  # sessions the test's stop cut short (neither completed nor failed)
        if cfg["mode"] == "sessions":  # the plan's sessions, this process's share (loadgen.locust.session_user);
            # a bad source raises here, before any greenlet of this process starts
            self.feed = SessionFeed(cfg, plan["salt"], self.tokenizer, self.shard, self.shards)
        self.greenlets = [gevent.spawn(self._loop_monitor)]
        self._rest: Iterator[tuple[int, int, Callable[[], RequestSpec]]] | None = None
        if cfg["mode"] == "open":
            self.cap = gevent.lock.BoundedSemaphore(cfg["max_concurrency"])
            self.greenlets.append(gevent.spawn(self._dispatch))
        if sink is None:
            self.greenlets.append(gevent.spawn(self._ship_loop))

    # -- one request ------------------------------------------------------------------

    def request(
        self, prepared: Prepared, scheduled_ns: int, queued: bool = False, held_ns: int = 0, turn: int | None = None
    ) -> RequestRecord:
        """Send one prepared request and finish its record (returned); a kill records it as ``cancelled``.

        ``held_ns``: how long the in-flight cap held it past its scheduled time (``throttle_ns``: the
        client's own cap over requests in flight at the server, not the generator's lag); ``turn``: a
        session turn's 0-based index (its Locust row is ``turn K``)."""
        spec = prepared[0]
        rec = RequestRecord(
            index=spec.index, phase="measure", scheduled_ns=scheduled_ns,
            requested_input_tokens=spec.requested_input_tokens, requested_output_tokens=spec.requested_output_tokens,
            prefix_group=spec.prefix_group, session_id=spec.session_id, pool_queued=queued, throttle_ns=held_ns,
        )  # fmt: skip
        self.active += 1
        try:
            self.client.send(prepared, rec)
        except GreenletExit:
            self.active -= 1
            rec.status, rec.error_kind = "error", "cancelled"
            rec.error_detail = "in flight when the test stopped, after the stop timeout"
            rec.end_ns = now_ns()
            self.finish(rec, turn)
            raise
        except Exception as exc:  # a bug must not lose the record
            fail(rec, rec.error_kind or "protocol", f"internal error: {type(exc).__name__}: {exc}")
        self.active -= 1
        self.finish(rec, turn)
        return rec

    def finish(self, rec: RequestRecord, turn: int | None = None) -> None:
        m = compute(rec, self.tokenizer, self.cfg["origin"])
        self.hist.add(rec, m)
        fire_request_events(self.env, rec, m, self.client.path if turn is None else f"turn {turn}")
        if self.sink is not None:
            self.sink(rec, m, turn)
        else:
            self.outbox.append(pack_record(rec, turn))

    def leased(self) -> bool:
        """Wait until this worker's lease allows a send now; False when it was not renewed for
        ``LEASE_LOST_NS`` (the master lost this worker: it sends nothing more) or the test stops."""
        since = now_ns()
        while self.lease_ns is not None and now_ns() - self.t0_ns >= self.lease_ns:
            if self.stop_event.is_set():
                return False
            if now_ns() - since > LEASE_LOST_NS:
                self.aborted_reason = f"the master renewed no lease for {LEASE_LOST_NS / 1e9:g} s: it stopped sending"
                self.stop_event.set()
                return False
            gevent.sleep(LEASE_POLL_S)
        return True

    def closed_loop_request(self) -> None:
        if not self.leased():
            gevent.sleep(0.1)
            return
        i = self.shard + self.shards * next(self.counter)
        prepared = self.client.prepare(self.workload.spec(i))
        self.request(prepared, now_ns())  # the user sends once its request is ready

    def session(self) -> None:
        """One whole session in the calling Locust user (:func:`loadgen.locust.session_user.run_session`)."""
        if self.feed is None or self.stop_event.is_set():  # stopping: start no session
            gevent.sleep(0.1)
            return
        try:
            whole = run_session(self, self.feed, self.session_stats)
        except GreenletExit:  # killed after the stop timeout
            self.sessions_cut += 1
            raise
        if not whole:
            self.sessions_cut += 1

    def wait_until(self, deadline_ns: int) -> bool:
        """Sleep this greenlet until ``deadline_ns`` (never early); True when the test is stopping."""
        gevent_sleep_until(deadline_ns, self.stop_event)
        return self.stop_event.is_set()

    # -- open loop ----------------------------------------------------------------------

    def _entries(self) -> Iterator[tuple[int, int, Callable[[], RequestSpec]]]:
        """(offset_ns, index, spec builder) of this shard, in schedule order; specs built lazily.

        The offsets are those of :meth:`Workload.schedule` (arrival process, or a trace's
        replay plan); specs are built one ahead of their send, not all before t0.
        """
        wl = self.workload
        offs, rows = open_offsets(self.cfg, wl)
        if rows is not None:
            n = max(len(wl.trace or ()), 1)
            for i in range(self.shard, len(offs), self.shards):
                yield int(offs[i]), i, partial(wl.spec, i, int(rows[i]), i // n)
            return
        for i in range(self.shard, len(offs), self.shards):
            yield int(offs[i]), i, partial(wl.spec, i)

    def _dispatch(self) -> None:
        entries = self._entries()
        t0 = self.t0_ns
        prepare = self.client.prepare
        item = next(entries, None)
        ready = prepare(item[2]()) if item else None  # built ahead of its deadline
        capped: deque[tuple[int, int]] = deque()  # (start, end) of each wait for the in-flight cap
        while item is not None and ready is not None:
            off, idx, _ = item
            deadline = t0 + off
            gevent_sleep_until(deadline, self.stop_event)
            if self.stop_event.is_set() or not self.leased():
                break
            while capped and capped[0][1] <= deadline:
                capped.popleft()
            # time the in-flight cap held the dispatcher is the server's backlog, not the generator's lag
            held = sum(b1 - max(b0, deadline) for b0, b1 in capped)
            late = now_ns() - deadline - held
            if late > ABORT_LAG_NS:
                self.aborted_reason = (
                    f"the dispatcher fell {late / 1e9:.2f} s behind its schedule at request {idx}; it stopped sending"
                )
                break
            queued = not self.cap.acquire(blocking=False)
            if queued:  # every slot holds a request in flight at the server: wait (the client's own cap)
                self.cap_waits += 1
                got = False
                b0 = now_ns()
                while not got and not self.stop_event.is_set():
                    got = self.cap.acquire(timeout=0.05)
                capped.append((b0, now_ns()))
                if not got:
                    break
            held = sum(b1 - max(b0, deadline) for b0, b1 in capped if b1 > deadline)
            self.dispatched += 1
            self.inflight[idx] = gevent.spawn(self._one, ready, deadline, queued, held)
            gevent.sleep(0)  # let it send before the next request is built
            item = next(entries, None)
            ready = prepare(item[2]()) if item else None
        self._rest = entries if item is None else itertools.chain([item], entries)

    def _one(self, prepared: Prepared, deadline: int, queued: bool, held_ns: int = 0) -> None:
        try:
            self.request(prepared, deadline, queued, held_ns)
        finally:
            self.cap.release()
            self.inflight.pop(prepared[0].index, None)

    # -- stop and report ----------------------------------------------------------------

    def stop(self, stop_timeout_s: float) -> None:
        """Stop sending; in-flight open-loop requests get ``stop_timeout_s``, then are cancelled."""
        self.stop_ns = now_ns()
        self.stop_event.set()
        if self.cfg["mode"] == "open":
            self.greenlets[1].join(timeout=5)
            if self._rest is not None:
                for off, _, _ in self._rest:
                    if self.t0_ns + off <= self.stop_ns:
                        self.unsent += 1
                    else:
                        self.not_reached += 1
            pending = list(self.inflight.values())
            if pending:
                gevent.joinall(pending, timeout=stop_timeout_s)
                gevent.killall([g for g in pending if not g.dead], block=True, timeout=10)

    def report(self) -> dict[str, Any]:
        """What the master needs besides the records: counts, client facts, encoded histograms."""
        for g in self.greenlets[:1]:
            g.kill(block=False)
        ru = resource.getrusage(resource.RUSAGE_SELF)
        return {
            "requests": self.hist.requests,
            "hist": {name: h.to_state() for name, h in self.hist.hist.items()},
            "cpu_s": (ru.ru_utime - self.ru0.ru_utime) + (ru.ru_stime - self.ru0.ru_stime),
            "wall_s": (now_ns() - self.w0) / 1e9,
            "loop_lag_ms": self.loop_lag_ms.tobytes(),
            "aborted_reason": self.aborted_reason,
            "dispatched": self.dispatched,
            "unsent": self.unsent,
            "not_reached": self.not_reached,
            "cap_waits": self.cap_waits,
            "anchor": clock_anchor(),
            "sessions": {**dataclasses.asdict(self.session_stats), "ended_by_stop": self.sessions_cut}
            if self.feed is not None
            else None,
        }

    def ship(self, final: bool = False) -> None:
        """Send the finished records to the master; also none (the master renews this worker's lease when it
        hears from it: loadgen.spread.lease)."""
        runner = self.env.runner
        assert runner is not None
        batch, self.outbox = self.outbox, []
        if batch or not final:
            runner.send_message("loadgen_records", {"records": batch, "anchor": clock_anchor()})
        if final:
            runner.send_message("loadgen_final", self.report())

    def _ship_loop(self) -> None:
        while not self.stop_event.is_set():
            self.stop_event.wait(SHIP_INTERVAL_S)
            if not self.stop_event.is_set():
                self.ship()

    def _loop_monitor(self) -> None:
        lags = self.loop_lag_ms
        while len(lags) < 2_000_000:
            t = now_ns()
            gevent.sleep(LOOP_PROBE_S)
            lags.append(max((now_ns() - t) / 1e6 - LOOP_PROBE_S * 1e3, 0.0))


def gevent_sleep_until(deadline_ns: int, stop: gevent.event.Event) -> None:
    """Sleep this greenlet until an absolute deadline (never a relative interval); wakes early on a stop.

    The gevent twin of :func:`loadgen.core.clock.sleep_until`, which cannot serve here:
    it is a coroutine for an asyncio loop, and a greenlet on gevent's hub cannot
    await. Waits on ``stop`` while the deadline is far, then sleeps to ``SPIN_NS``
    before it and yields for the rest, so a send is never early nor a timer late.
    """
    delay = deadline_ns - now_ns()
    if delay > 20_000_000:
        if stop.wait((delay - SPIN_NS) / 1e9):
            return
        delay = deadline_ns - now_ns()
    if delay > SPIN_NS:
        gevent.sleep((delay - SPIN_NS) / 1e9)
    while now_ns() < deadline_ns:
        gevent.sleep(0)


def local_t0_ns(plan: dict[str, Any]) -> int:
    """The plan's t0 on this process's monotonic clock: the master's t0 less this worker's measured offset
    (``clock_offset_ns``, master - worker: :mod:`loadgen.locust.clocksync`); the local mode's own clock as is."""
    offset = plan.get("clock_offset_ns")
    return int(plan["t0_mono_ns"]) - (int(offset) if offset is not None else 0)


def fire_request_events(env: Environment, rec: RequestRecord, m: RequestMetrics, name: str) -> None:
    """Locust's row: one ``request`` event per request, type ``E2E``, its response time the E2E latency.

    A failure carries its error kind (Locust's failures tab counts by kind). TTFT, TPOT
    and ITL are not requests: firing them as ``request`` events made Locust count every
    request three times (its RPS and Aggregated row mixed the three); they are loadgen
    metrics, shown in the loadgen tab (:mod:`loadgen.locust.live`) and ``result.json``.
    """
    fire = env.events.request.fire
    if not rec.ok:
        kind = rec.error_kind or "unknown"
        if rec.http_status is not None and kind == "http_error":
            kind = f"http_error: HTTP {rec.http_status}"
        fire(request_type="E2E", name=name, response_time=(m.error_e2e_ns or 0) / 1e6, response_length=0,
             exception=kind, context={})  # fmt: skip
        return
    if m.e2e_ns is None:
        fire(request_type="E2E", name=name, response_time=0.0, response_length=0, exception="zero_output", context={})
        return
    fire(request_type="E2E", name=name, response_time=m.e2e_ns / 1e6, response_length=m.output_tokens,
         exception=None, context={})  # fmt: skip
