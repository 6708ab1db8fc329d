"""Worker processes: one schedule, sharded deterministically over N processes with one t0.

Each worker is a separate Python process (``spawn``) with its own event loop. It
rebuilds the same schedule from the same :class:`~loadgen.engine.runplan.LoadConfig`
(seeded, so every process sees the identical schedule), keeps every N-th entry
(open loop: entries ``w, w+N, ...``; closed loop: its share of the users and
request indices ``w, w+N, ...``), and sends on the shared absolute t0 (CLOCK_MONOTONIC
is one clock for every process on a host).

Workers stream each finished request to the parent as its ``requests.jsonl`` line
plus a :class:`~loadgen.engine.summary.RequestSummary`; the parent writes the lines and
aggregates the summaries, so per-request percentiles are exact, as in one process.
Per-token values (ITL, inter-chunk) travel raw with each batch and are recorded by the parent,
as one process records them, so a worker that dies later loses none of what it delivered. A
worker sends only within its lease (:mod:`loadgen.spread.lease`), renewed by the parent while it
hears from it; one that dies is reported, what it never delivered is split into lost with the client
(due within its lease: maybe sent) and unsent (due after it: never sent), and the run never hangs:
the parent waits on the pipes with a bound and reaps every process.

Clocks. A summary's instants (:data:`SUMMARY_INSTANTS`) are on the sending process's
CLOCK_MONOTONIC: one clock on one host, so local workers need no mapping. Actors on other
hosts (:mod:`loadgen.spread.cluster`) each have their own; the :class:`Collector` maps every
instant an actor reports onto the driver's clock (:func:`summary_on_clock`, with the shift
the driver measured for that actor) before anything is aggregated. ``requests.jsonl`` lines
hold times relative to the worker's own t0, the same instant on every host: no mapping.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import multiprocessing
import os
import signal
import time
from array import array
from collections.abc import Callable, Coroutine
from dataclasses import replace
from multiprocessing.connection import Connection, wait
from multiprocessing.sharedctypes import Synchronized
from typing import IO, Any, Literal, cast

import orjson

from loadgen.core.child import die_with_parent
from loadgen.core.clock import now_ns, wall_anchor
from loadgen.core.errors import OutputError
from loadgen.core.histograms import GapBuffer, record_token_gaps, token_histograms
from loadgen.core.metrics import TokenCounter, compute
from loadgen.core.redact import Redactor
from loadgen.core.schedule import as_schedule
from loadgen.core.types import RequestRecord
from loadgen.endpoints import from_config
from loadgen.engine.prepare import Preparation
from loadgen.engine.recordlog import RecordWriter, record_line
from loadgen.engine.results import Aggregator
from loadgen.engine.runner import LEAD_IN_NS, ClientStats, Runner, RunOutcome, RunPlan, realized_send_rps
from loadgen.engine.runplan import LoadConfig, build_plan, build_workload
from loadgen.engine.stamp_lateness import StampLateness
from loadgen.engine.summary import RequestSummary, summarize
from loadgen.sessions.planning import plan_sessions, shard_sessions
from loadgen.sessions.turns import SessionRunner
from loadgen.spread.job import SpreadJob
from loadgen.spread.lease import LEASE_AHEAD_NS, LEASE_RENEW_S, split_missing

BATCH = 64
FLUSH_S = 0.05
READY_TIMEOUT_S = 60.0

SUMMARY_INSTANTS = ("scheduled_ns", "sent_ns", "end_ns", "first_event_ns")
""":class:`~loadgen.engine.summary.RequestSummary` fields that are instants of the sender's monotonic clock."""
SUMMARY_INSTANT_POINTS = ("ratelimit_points",)
"""Fields holding ``(instant_ns, value)`` pairs."""
SUMMARY_INSTANT_BINS = ("token_bins",)
"""Fields holding ``(instant_ns // loadgen.core.window.BIN_NS, value)`` pairs."""
SUMMARY_DURATIONS = (
    "connect_ns", "connect_late_ns", "throttle_ns", "ttft_ns", "ttfat_ns", "tpot_ns", "e2e_ns",
    "error_e2e_ns", "schedule_lag_ns", "network_ns",
)  # fmt: skip
"""Time fields that are differences on one clock (never mapped). Every time field of a summary is in
one of these four lists (``tests/unit/test_cluster_clock.py`` holds new fields to it)."""


def shard_plan(plan: RunPlan, w: int, n: int) -> RunPlan:
    """Worker ``w`` of ``n``'s part of a plan (deterministic)."""
    if plan.mode == "open":
        return replace(plan, schedule=plan.schedule[w::n])
    users = plan.concurrency // n + (1 if w < plan.concurrency % n else 0)
    max_req = None
    if plan.max_requests is not None:
        max_req = plan.max_requests // n + (1 if w < plan.max_requests % n else 0)
    warm = plan.warmup_requests // n + (1 if w < plan.warmup_requests % n else 0)
    return replace(plan, concurrency=users, max_requests=max_req, warmup_requests=warm, index_start=w, index_stride=n)


def shard_size(plan: RunPlan, w: int, n: int) -> int:
    """Requests worker ``w`` of ``n`` has to send, warm-up included: its open-loop entries, or its
    closed-loop budget (0 for a duration; session shards are counted by the workers that said ready)."""
    if plan.mode == "open":
        return len(plan.schedule[w::n]) if plan.schedule is not None else 0
    if plan.mode != "closed":  # sessions: counted by the workers that said ready
        return 0
    return shard_plan(plan, w, n).max_requests or 0


def auto_workers() -> int:
    """``--workers auto``: one per available core, leaving one for the parent (at least 1)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cores = os.cpu_count() or 1
    return max(1, cores - 1)


def _worker_main(
    w: int, n: int, ep_cfg: object, redactor: Redactor, load: LoadConfig, conn: Connection,
    body: Callable[..., Coroutine[object, object, None]] | None = None, lease: Synchronized[int] | None = None,
) -> None:  # fmt: skip
    # terminal signals go to the parent only (it forwards them): a process group of its own, in the parent's
    # session (a new session would be a scheduling group of its own: loadgen/serve/process.py)
    os.setpgid(0, 0)
    die_with_parent()
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    import asyncio

    try:
        offset = (lambda: int(lease.value)) if lease is not None else None  # the lease the parent renews
        asyncio.run((body or worker_body)(w, n, ep_cfg, redactor, load, conn.send, conn.recv, lease_offset=offset))
    except Exception as exc:  # report, then die: the parent counts this worker's requests as unsent
        try:
            conn.send(("error", f"{type(exc).__name__}: {redactor(str(exc))}"))
        except Exception:
            pass
        raise SystemExit(1) from None


class RecordShipper:
    """A worker's record path: each finished request becomes its ``requests.jsonl`` line and its
    :class:`~loadgen.engine.summary.RequestSummary`, shipped to the parent in batches of :data:`BATCH`
    (or every :data:`FLUSH_S` by :meth:`flusher`) as ``("recs", [(line, summary), ...], values)``; the
    measured ok requests' per-token values travel raw with their batch (``values``: metric name to
    float64 bytes, :class:`~loadgen.core.histograms.GapBuffer`), recorded by the parent. Error details pass the redactor. The same
    for request runs (:func:`worker_body`) and session runs (``loadgen.sessions.spread``)."""

    def __init__(
        self, send: Callable[[tuple], None], load: LoadConfig, tokenizer: TokenCounter | None,
        origin: Literal["scheduled", "sent"], t0: int, redactor: Redactor,
    ) -> None:  # fmt: skip
        self.send, self.load, self.tokenizer, self.origin, self.t0, self.redactor = (
            send, load, tokenizer, origin, t0, redactor
        )  # fmt: skip
        pace = any(t.metric == "tbt_deadline" for t in load.slos)
        self.gaps = {name: GapBuffer() for name in token_histograms(pace=pace)}
        self.buf: list[tuple[bytes, Any]] = []

    def flush(self) -> None:
        """Ship the buffered records with their per-token values (raw, recorded by the parent)."""
        if self.buf:
            self.send(("recs", list(self.buf), {k: g.take() for k, g in self.gaps.items() if g.values}))
            self.buf.clear()

    def sink(self, rec: RequestRecord, turn: int | None = None) -> None:
        """One finished request (``turn``: its session turn, written as ``turn`` when given)."""
        load = self.load
        m = compute(rec, self.tokenizer, self.origin)
        s = summarize(rec, m, load.slos)
        if s.phase == "measure" and s.ok and not s.zero_output:
            record_token_gaps(self.gaps, m)
        d = record_line(rec, m, self.t0, save_text=load.save_text, token_lists=load.token_lists)
        if turn is not None:
            d["turn"] = turn
        if d["error_detail"]:
            d["error_detail"] = self.redactor(d["error_detail"])
        self.buf.append((orjson.dumps(d), s))
        if len(self.buf) >= BATCH:
            self.flush()

    async def flusher(self) -> None:
        """Ship what is buffered every :data:`FLUSH_S` (a task the worker cancels at its end)."""
        import asyncio

        while True:
            await asyncio.sleep(FLUSH_S)
            self.flush()


async def worker_body(
    w: int,
    n: int,
    ep_cfg: object,
    redactor: Redactor,
    load: LoadConfig,
    send: Callable[[tuple], None],
    recv: Callable[[], tuple],
    *,
    install_signal_handlers: bool = True,
    on_runner: Callable[[Any], None] | None = None,
    lease_offset: Callable[[], int] | None = None,
) -> None:
    """One worker's whole life, whatever carries its messages (a pipe here, a Ray actor's queues), for
    every kind of run: a plain plan's shard on a :class:`~loadgen.engine.runner.Runner`, or (``load.sessions``)
    whole sessions on a :class:`~loadgen.sessions.turns.SessionRunner`.

    ``ep_cfg`` is the parent endpoint's :meth:`~loadgen.endpoints.base.Endpoint.worker_config`;
    the worker opens its own endpoint from it (:func:`~loadgen.endpoints.from_config`).

    Messages sent, in order: ``("ready", shard_size)``; then, after ``recv()`` returned
    ``("go", t0_ns)`` (t0 on *this* process's CLOCK_MONOTONIC), ``("recs", [(line, summary), ...])``
    batches as requests finish and one ``("done", stats, {})``. Any other
    message from ``recv()`` ends the worker before it sends anything. ``lease_offset()``: the worker's
    lease (:mod:`loadgen.spread.lease`) as an offset from t0; no send starts past it.
    """
    import asyncio

    ep = from_config(ep_cfg, redactor)
    await ep.open()
    try:
        sessions = getattr(load, "sessions", None) is not None
        if sessions:  # whole sessions w, w + n, ... (loadgen.sessions.spread); latency from each turn's due time
            tokenizer = None
            if load.workload is not None and load.workload.tokenizer:
                from loadgen.workload.tokenizer import load_tokenizer

                tokenizer = load_tokenizer(load.workload.tokenizer)
            splan = shard_sessions(plan_sessions(load, load.sessions, tokenizer)[0], w, n)
            size, origin = sum(len(s.turns) for s in splan.sessions), load.origin
        else:
            wl = build_workload(load)
            plan = shard_plan(build_plan(load, wl), w, n)
            tokenizer = wl.tokenizer
            size, origin = len(plan.schedule), load.latency_origin
        ship: RecordShipper | None = None

        def sink(rec: RequestRecord, *args: int | None) -> None:
            ship.sink(rec, *args)  # type: ignore[union-attr]  # set at "go", before the run starts

        runner: Runner | SessionRunner
        if sessions:
            runner = SessionRunner(ep, splan, sink, install_signal_handlers=install_signal_handlers)
        else:
            runner = Runner(ep, plan, sink, install_signal_handlers=install_signal_handlers)
        await runner.prepare()  # this shard's first requests built before "ready" (loadgen.engine.prepare)
        send(("ready", size))
        msg = recv()
        if msg[0] != "go":
            return
        t0 = msg[1]
        ship = RecordShipper(send, load, tokenizer, origin, t0, redactor)
        runner.start_at(t0)
        if lease_offset is not None:
            runner.lease_ns = lambda: t0 + lease_offset()
        if on_runner is not None:
            on_runner(runner)
        f = asyncio.create_task(ship.flusher())
        try:
            out = await runner.run()
        finally:
            f.cancel()
        ship.flush()
        c = out.client
        lags = c.loop_lag_ms if len(c.loop_lag_ms) <= 20000 else c.loop_lag_ms[:: math.ceil(len(c.loop_lag_ms) / 20000)]
        stats: dict[str, Any] = {
            "interrupted": out.interrupted,
            "unsent": out.unsent,
            "unsent_warmup": out.unsent_warmup,
            "cpu_s": c.cpu_s,
            "wall_s": c.wall_s,
            "loop_lag_ms": list(lags),
            "aborted_reason": c.aborted_reason,
            "end_ns": out.end_ns,
            "stamp_lateness": runner.stamps.to_state(),  # merged exactly by the parent (Collector.outcome)
            "preparation": c.preparation,
            "spin_idle_s": c.spin_idle_s,
        }
        if isinstance(runner, SessionRunner):
            stats["sessions"] = dataclasses.asdict(runner.stats)  # merged by loadgen.sessions.spread.merge_stats
        send(("done", stats, {}))  # (no histograms: each batch carried its requests' per-token values)
    finally:
        await ep.close()


def summary_on_clock(s: RequestSummary, shift_ns: int) -> RequestSummary:
    """``s`` with every instant moved onto another monotonic clock: ``t + shift_ns``.

    ``shift_ns`` = (the receiver's clock) - (the sender's clock) at one instant; for a
    cluster actor, the driver's t0 minus the actor's t0 (:meth:`loadgen.spread.cluster.Cluster.run`:
    the actor's t0 is the driver's wall-clock t0 through the measured clock offset, so the
    mapping is as exact as that offset, ± its RTT / 2). Durations are unchanged. Token bins
    move by the nearest whole number of bins (placed within half a bin, ``BIN_NS / 2``).
    """
    if not shift_ns:
        return s
    ch: dict[str, Any] = {}
    for f in SUMMARY_INSTANTS:
        v = getattr(s, f)
        if v is not None:
            ch[f] = v + shift_ns
    for f in SUMMARY_INSTANT_POINTS:
        pts = getattr(s, f, ())
        if pts:
            ch[f] = tuple((t + shift_ns, v) for t, v in pts)
    for f in SUMMARY_INSTANT_BINS:
        bins = getattr(s, f, ())
        if bins:
            from loadgen.core.window import BIN_NS

            db = round(shift_ns / BIN_NS)
            ch[f] = tuple((b + db, v) for b, v in bins)
    return replace(s, **ch)


class Collector:
    """The parent's side of N workers: lines written and summaries aggregated as they arrive.

    Shared by the local processes (:func:`run_workers`) and the Ray actors
    (:mod:`loadgen.spread.cluster`). ``clock_shift_ns[w]`` maps worker ``w``'s instants onto
    this process's clock (:func:`summary_on_clock`; 0, the default, on one host).
    ``handle(w, msg)`` takes one message of worker ``w``;
    :meth:`outcome` merges the workers' statistics and histograms into one
    :class:`~loadgen.engine.runner.RunOutcome`, counting whatever a failed worker never
    delivered as unsent.
    """

    def __init__(
        self,
        n: int,
        agg: Aggregator,
        fh: IO[bytes],
        *,
        on_record: Callable[[Any, Any], None] | None = None,
        on_summary: Callable[[Any], None] | None = None,
    ) -> None:
        self.n = n
        self.agg = agg
        self.fh = fh
        self.on_record = on_record
        self.on_summary = on_summary
        self.expected = {w: 0 for w in range(n)}
        self.received = {w: 0 for w in range(n)}
        self.done: dict[int, tuple[dict, dict]] = {}
        self.failures: list[str] = []
        self.interrupted = False
        self.clock_shift_ns: dict[int, int] = {}
        self.leased_ns: dict[int, int] = {}  # each worker's last lease granted, offset from t0 (spread.lease)
        self.writer = RecordWriter(fh, 0, save_text=False, token_lists=False, redactor=Redactor())  # lines only
        self.write_failed = False
        self.on_write_error: Callable[[], None] | None = None

    def write_line(self, line: bytes) -> None:
        """Write one line (:meth:`RecordWriter.write_line`); at the first failure the workers are
        stopped (``on_write_error``) and the run ends with :class:`~loadgen.core.errors.OutputError`."""
        self.writer.write_line(line)
        if self.writer.error is not None and not self.write_failed:
            self.write_failed = True
            if self.on_write_error is not None:
                self.on_write_error()

    def fail(self, w: int, text: str) -> None:
        self.failures.append(f"worker {w} {text}")

    def unsent_all(self, plan: RunPlan, n: int) -> None:
        """Stopped before "go": every worker's whole shard is unsent, also a worker not yet ready."""
        for w in range(n):
            self.expected[w] = self.expected[w] or shard_size(plan, w, n)

    def handle(self, w: int, msg: tuple) -> bool:
        """Take one message from worker ``w``; True when that worker has finished (done or failed)."""
        shift = self.clock_shift_ns.get(w, 0)
        if msg[0] == "recs":
            for name, raw in (msg[2] if len(msg) > 2 else {}).items():  # its per-token values, as one process
                self.agg.hist[name].record_many_ns(array("d", raw))
            for line, s in msg[1]:
                s = summary_on_clock(s, shift)
                self.write_line(line + b"\n")
                self.agg.add_summary(s)
                self.received[w] += 1
                if self.on_summary is not None:
                    self.on_summary(s)
                if self.on_record is not None:
                    self.on_record(None, None)
            return False
        if msg[0] == "done":
            st = msg[1]
            if shift and st.get("end_ns") is not None:
                st = {**st, "end_ns": st["end_ns"] + shift}
            self.done[w] = (st, msg[2])
            return True
        if msg[0] == "ready":
            self.expected[w] = msg[1]
            return False
        self.fail(w, f"failed: {msg[1]}")
        return True

    def outcome(self, plan: RunPlan, t0_ns: int, t0_wall_ns: int) -> RunOutcome:
        unsent = lost = 0
        unsent_warm = 0
        cpu_fracs: list[float] = []
        prep: Preparation | None = None
        lags: list[float] = []
        stamps = StampLateness()  # the workers' stamp lateness, merged exactly (loadgen.engine.stamp_lateness)
        aborted = None
        end = now_ns()
        interrupted = self.interrupted
        for w in range(self.n):
            if w in self.done:
                st, hists = self.done[w]
                unsent += st["unsent"]
                unsent_warm += st["unsent_warmup"]
                interrupted = interrupted or st["interrupted"]
                busy_s = st["cpu_s"] - st.get("spin_idle_s", 0.0)  # less the idle spin (RunEngine._spin)
                cpu_fracs.append(busy_s / st["wall_s"] if st["wall_s"] else 0.0)
                lags.extend(st["loop_lag_ms"])
                if st.get("stamp_lateness"):
                    stamps.merge_state(st["stamp_lateness"])
                aborted = aborted or st["aborted_reason"]
                if st.get("preparation"):
                    (prep := prep or Preparation(of=0)).merge(st["preparation"])
                self.agg.merge_token_histograms(hists)
            else:
                # what it never delivered (its shard, also one that never said ready): lost with the client if
                # due within its last lease (maybe sent), else unsent (loadgen.spread.lease)
                missing = (self.expected[w] or shard_size(plan, w, self.n)) - self.received[w]
                lost_w, unsent_w = split_missing(plan, w, self.n, missing, self.leased_ns.get(w))
                lost += lost_w
                unsent += unsent_w
        realized = realized_send_rps(as_schedule(plan.schedule), unsent) if plan.mode == "open" else None
        client = ClientStats(
            cpu_s=sum(f for f in cpu_fracs),
            wall_s=1.0,
            loop_lag_ms=lags,
            schedule_realized_rps=realized,
            open_loop=plan.mode == "open",
            aborted_reason=aborted,
            worker_cpu_fractions=cpu_fracs,
            worker_failures=self.failures,
            stamp_lateness_p99_ms=stamps.percentile_ms(99),
            stamp_lateness_max_ms=stamps.max_ms(),
            stamp_tokens=stamps.tokens,
            stamps=stamps if stamps.tokens else None,
            preparation=prep.describe() if prep is not None else None,
        )
        return RunOutcome(
            t0_ns=t0_ns,
            t0_wall_ns=t0_wall_ns,
            interrupted=interrupted,
            unsent=unsent,
            unsent_warmup=unsent_warm,
            lost_with_client=lost,
            client=client,
            end_ns=end,
        )


def _ready(conns: list[Connection], which: set[int], timeout_s: float) -> list[Connection]:
    """The pipes among ``conns[w] for w in which`` with a message waiting (or closed)."""
    return cast("list[Connection]", wait([conns[w] for w in which], timeout=timeout_s))


def run_workers(
    job: SpreadJob,
    *,
    body: Callable[..., Coroutine[object, object, None]] | None = None,
    collector: Collector | None = None,
) -> RunOutcome:
    """Run ``job`` over worker processes; aggregate into its ``agg``, write lines to its ``fh``.

    ``body`` replaces :func:`worker_body` (same signature and messages; a module-level function),
    ``collector`` the parent's :class:`Collector` (a subclass that reads more from each line: the
    session run's, :mod:`loadgen.sessions.spread`).

    Blocking (call it outside an event loop or in a thread). SIGINT/SIGTERM to the
    parent are forwarded to the workers, which stop and drain as one process would.
    """
    ctx = multiprocessing.get_context("spawn")
    procs: list[Any] = []
    conns: list[Connection] = []
    leases: list[Any] = []
    n, plan = job.n, job.plan
    col = collector or Collector(n, job.agg, job.fh, on_record=job.on_record, on_summary=job.on_summary)
    went = False  # "go" sent: a signal before it stops the start (no worker sends anything), after it is forwarded

    def forward(signum: int, frame: object) -> None:
        col.interrupted = True
        if not went:  # the workers are still starting: each is told to stop instead of go (below)
            return
        for p in procs:
            if p.is_alive():
                try:
                    os.kill(p.pid, signum)
                except ProcessLookupError:
                    pass

    def stop_on_write_error() -> None:
        for p in procs:
            if p.is_alive():
                try:
                    os.kill(p.pid, signal.SIGTERM)  # a worker drains like on Ctrl-C; nothing more is written
                except ProcessLookupError:
                    pass

    col.on_write_error = stop_on_write_error
    # before the first worker starts: a Ctrl-C or SIGTERM while they start stops the run before any send (issue
    # 34: 1.5-5 s into a --workers 2 run, one let the whole schedule go out)
    old = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        for w in range(n):
            if col.interrupted:
                break
            a, b = ctx.Pipe(duplex=True)
            leases.append(ctx.Value("q", LEASE_AHEAD_NS, lock=False))  # offset from t0 (loadgen.spread.lease)
            p = ctx.Process(target=_worker_main, args=(w, n, job.ep_cfg, job.redactor, job.load, b, body, leases[w]),
                            daemon=True, name=f"loadgen-worker-{w}")  # fmt: skip
            p.start()
            b.close()
            procs.append(p)
            conns.append(a)
        # wait until every worker has imported, opened its endpoint and built its shard
        deadline = time.monotonic() + READY_TIMEOUT_S
        pending = set(range(len(procs)))
        failed_start: set[int] = set()
        while pending and time.monotonic() < deadline and not col.interrupted:
            for c in _ready(conns, pending, 0.5):
                w = conns.index(c)
                try:
                    msg = c.recv()
                except EOFError:
                    msg = ("error", f"exit code {procs[w].exitcode}")
                if msg[0] == "ready":
                    col.handle(w, msg)
                else:
                    col.fail(w, f"failed to start: {msg[1]}")
                    failed_start.add(w)
                pending.discard(w)
        anchor_m, anchor_w = wall_anchor()
        t0 = now_ns() + LEAD_IN_NS
        if col.interrupted:  # stopped while starting: nothing is sent, every planned request is unsent
            for w in range(len(procs)):
                with contextlib.suppress(OSError, ValueError):
                    conns[w].send(("stop",))  # any message but "go" ends a worker before it sends anything
            col.unsent_all(plan, n)
            live: list[int] = []
        else:
            for w in pending:
                col.fail(w, f"not ready after {READY_TIMEOUT_S:g} s")
            live = [w for w in range(n) if w not in pending and w not in failed_start]
            for w in live:
                col.leased_ns[w] = LEASE_AHEAD_NS
                conns[w].send(("go", t0))
            went = True
        open_ = set(live)
        while open_:
            ready = _ready(conns, open_, LEASE_RENEW_S)
            lease = max(now_ns() - t0, 0) + LEASE_AHEAD_NS  # renewed for the workers still heard from
            for w in open_:
                if procs[w].is_alive():
                    leases[w].value = col.leased_ns[w] = max(lease, col.leased_ns[w])
            if not ready:
                for w in list(open_):
                    if not procs[w].is_alive():
                        col.fail(w, f"died (exit code {procs[w].exitcode})")
                        open_.discard(w)
                continue
            for c in ready:
                w = conns.index(c)
                try:
                    msg = c.recv()
                except EOFError:
                    procs[w].join(timeout=5)
                    col.fail(w, f"died (exit code {procs[w].exitcode})")
                    open_.discard(w)
                    continue
                if col.handle(w, msg):
                    open_.discard(w)
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
                p.join(timeout=5)
    if col.writer.error is not None:
        raise OutputError(
            f"{col.writer.error}: the workers were stopped at once; the {col.writer.lines} whole lines written "
            f"before are kept, {col.writer.lost} records could not be written (no result.json)"
        )
    return col.outcome(plan, t0, anchor_w + (t0 - anchor_m))
