"""``--sessions`` with ``--workers N``: whole sessions partitioned over worker processes, one t0.

Every worker plans the same sessions from the same :class:`~loadgen.engine.runplan.LoadConfig` (seeded,
salt resolved by the parent: :func:`loadgen.sessions.planning.plan_sessions` gives every process the
identical plan) and keeps sessions ``w, w + N, ...`` (:func:`shard_sessions`): a session is never
split, so its turns stay causal (turn k + 1 due at turn k's reply end + its delay, on the process
that saw that end). Open loop, each kept session starts at its own offset from the shared t0;
closed loop, the N concurrent sessions are split as the request workers split users. The warm-up
sessions (the plan's first ``warmup_sessions``) stay warm-up in whichever worker runs them.

The messages are :func:`loadgen.spread.workers.worker_body`'s (ready with the shard's turn count, go with
t0, record batches, done), run by :func:`loadgen.spread.workers.run_workers`; each record line carries its
``turn`` as in one process. The ``done`` statistics add the worker's
:class:`~loadgen.sessions.turns.SessionStats`, merged exactly by :func:`merge_stats` (counts summed,
per-session lists joined); :class:`SessionCollector` hands each line to the parent's per-turn table.
A worker that dies has its unreceived turns counted unsent and its sessions missing from
``sessions`` (its failure is in ``client.worker_failures``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import replace
from types import SimpleNamespace
from typing import IO, Any

import orjson

from loadgen.core.redact import Redactor
from loadgen.endpoints import from_config
from loadgen.engine.results import Aggregator
from loadgen.engine.run_core import RunOutcome
from loadgen.sessions.planning import plan_sessions
from loadgen.sessions.turns import SessionPlan, SessionRunner, SessionStats
from loadgen.spread.workers import Collector, RecordShipper, run_workers

__all__ = ["SessionCollector", "merge_stats", "run_session_workers", "session_worker_body", "shard_sessions"]


def shard_sessions(plan: SessionPlan, w: int, n: int) -> SessionPlan:
    """Worker ``w`` of ``n``'s sessions: ``w, w + n, ...`` with their start offsets (whole sessions)."""
    idx = range(w, len(plan.sessions), n)
    warm = sum(1 for i in idx if i < plan.warmup_sessions)  # the plan's first sessions: this shard's first
    conc = plan.concurrency // n + (1 if w < plan.concurrency % n else 0)
    starts = [plan.start_offsets_ns[i] for i in idx] if plan.start_offsets_ns else []
    first, k = list(plan.first_index), 0  # the whole plan's request indices: unique across workers
    if not first:  # as SessionRunner numbers them in one process: the turns' positions in the plan
        for s in plan.sessions:
            first.append(k)
            k += len(s.turns)
    return replace(
        plan, sessions=[plan.sessions[i] for i in idx], start_offsets_ns=starts, warmup_sessions=warm,
        concurrency=max(conc, 1), first_index=[first[i] for i in idx],
    )  # fmt: skip


def merge_stats(parts: list[dict[str, Any]]) -> SessionStats:
    """The workers' :class:`SessionStats` (as dicts) merged: counts summed, per-session lists joined."""
    out = SessionStats()
    for d in parts:
        for f in dataclasses.fields(SessionStats):
            v = d.get(f.name)
            if isinstance(v, list):
                getattr(out, f.name).extend(v)
            elif v is not None:
                setattr(out, f.name, getattr(out, f.name) + v)
    return out


async def session_worker_body(
    w: int,
    n: int,
    ep_cfg: Any,
    redactor: Redactor,
    load: Any,
    send: Callable[[tuple], None],
    recv: Callable[[], tuple],
    *,
    install_signal_handlers: bool = True,
) -> None:
    """One session worker's life (the messages of :func:`loadgen.spread.workers.worker_body`, module doc)."""
    import asyncio

    ep = from_config(ep_cfg, redactor)
    await ep.open()
    try:
        tokenizer = None
        if load.workload is not None and load.workload.tokenizer:
            from loadgen.workload.tokenizer import load_tokenizer

            tokenizer = load_tokenizer(load.workload.tokenizer)
        full, _ = plan_sessions(load, load.sessions, tokenizer)
        plan = shard_sessions(full, w, n)
        send(("ready", sum(len(s.turns) for s in plan.sessions)))
        msg = recv()
        if msg[0] != "go":
            return
        t0 = msg[1]
        ship = RecordShipper(send, load, tokenizer, load.origin, t0, redactor)

        runner = SessionRunner(ep, plan, ship.sink, t0_ns=t0, install_signal_handlers=install_signal_handlers)
        f = asyncio.create_task(ship.flusher())
        try:
            out = await runner.run()
        finally:
            f.cancel()
        ship.flush()
        c = out.client
        lags = c.loop_lag_ms if len(c.loop_lag_ms) <= 20000 else c.loop_lag_ms[:: math.ceil(len(c.loop_lag_ms) / 20000)]
        stats = {
            "interrupted": out.interrupted, "unsent": out.unsent, "unsent_warmup": 0, "cpu_s": c.cpu_s,
            "wall_s": c.wall_s, "loop_lag_ms": list(lags), "aborted_reason": c.aborted_reason, "end_ns": out.end_ns,
            "sessions": dataclasses.asdict(runner.stats),
        }  # fmt: skip
        send(("done", stats, ship.histogram_states()))
    finally:
        await ep.close()


class SessionCollector(Collector):
    """The parent's :class:`~loadgen.spread.workers.Collector` that also hands each line (a dict) to ``on_line``."""

    def __init__(self, n: int, agg: Aggregator, fh: IO[bytes], on_line: Callable[[dict[str, Any]], None],
                 **kw: Any) -> None:  # fmt: skip
        super().__init__(n, agg, fh, **kw)
        self.on_line = on_line

    def handle(self, w: int, msg: tuple) -> bool:
        if msg[0] == "recs":
            for line, _ in msg[1]:
                self.on_line(orjson.loads(line))
        return super().handle(w, msg)


def run_session_workers(
    n: int,
    ep_cfg: Any,
    load: Any,
    agg: Aggregator,
    fh: IO[bytes],
    redactor: Redactor,
    on_line: Callable[[dict[str, Any]], None],
    *,
    on_record: Callable[[Any, Any], None] | None = None,
    on_summary: Callable[[Any], None] | None = None,
) -> tuple[RunOutcome, SessionStats]:
    """Run ``load``'s sessions over ``n`` processes (module doc); blocking, in the main thread (signals)."""
    col = SessionCollector(n, agg, fh, on_line, on_record=on_record, on_summary=on_summary)
    # the parent's outcome of session workers: no request schedule of its own (every turn's due time
    # depends on the server), so no realized send rate; each turn's lag is checked as an open-loop send's
    shape: Any = SimpleNamespace(mode="sessions", schedule=[])
    outcome = run_workers(n, ep_cfg, load, shape, agg, fh, redactor, on_record=on_record, on_summary=on_summary,
                          body=session_worker_body, collector=col)  # fmt: skip
    outcome.client.open_loop = True
    stats = merge_stats([st["sessions"] for st, _ in col.done.values() if "sessions" in st])
    return outcome, stats
