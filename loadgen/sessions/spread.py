"""``--sessions`` with ``--workers N``: whole sessions partitioned over worker processes, one t0.

Every worker plans the same sessions from the same :class:`~loadgen.engine.runplan.LoadConfig` (seeded,
salt resolved by the parent: :func:`loadgen.sessions.planning.plan_sessions` gives every process the
identical plan) and keeps sessions ``w, w + N, ...`` (:func:`loadgen.sessions.planning.shard_sessions`),
in the one worker body of every run (:func:`loadgen.spread.workers.worker_body`): a session is never
split, so its turns stay causal (turn k + 1 due at turn k's reply end + its delay, on the process
that saw that end). Open loop, each kept session starts at its own offset from the shared t0;
closed loop, the N concurrent sessions are split as the request workers split users. The warm-up
sessions (the plan's first ``warmup_sessions``) stay warm-up in whichever worker runs them.

The messages are :func:`loadgen.spread.workers.worker_body`'s (ready with the shard's turn count, go with
t0, record batches, done with the stamps' lateness), run by :func:`loadgen.spread.workers.run_workers`; each
record line carries its ``turn`` as in one process. The ``done`` statistics add the worker's
:class:`~loadgen.sessions.turns.SessionStats`, merged exactly by :func:`merge_stats` (counts summed,
per-session lists joined); :class:`SessionCollector` hands each line to the parent's per-turn table.
A worker that dies has its unreceived turns counted unsent and its sessions missing from
``sessions`` (its failure is in ``client.worker_failures``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from types import SimpleNamespace
from typing import IO, Any

import orjson

from loadgen.core.redact import Redactor
from loadgen.engine.results import Aggregator
from loadgen.engine.run_core import RunOutcome
from loadgen.engine.runplan import LoadConfig
from loadgen.sessions.turns import SessionStats
from loadgen.spread.job import SpreadJob
from loadgen.spread.workers import Collector, run_workers

__all__ = ["SessionCollector", "merge_stats", "run_session_workers"]


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
    ep_cfg: object,
    load: LoadConfig,
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
    outcome = run_workers(SpreadJob(n, ep_cfg, load, shape, agg, fh, redactor, on_record, on_summary), collector=col)
    outcome.client.open_loop = True
    stats = merge_stats([st["sessions"] for st, _ in col.done.values() if "sessions" in st])
    return outcome, stats
