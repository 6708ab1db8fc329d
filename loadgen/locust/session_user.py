"""``loadgen locust --sessions``: a Locust user is a session (issue 17).

Each Locust user runs one session at a time and starts the next when it ends: closed loop at
the session level, ``-u N`` = N concurrent sessions, each replaced when it ends. Inside a
session the turns are causal, by the rule of :mod:`loadgen.sessions.turns`: turn ``k + 1`` is *due*
at the end of turn ``k``'s reply (as the client saw it) + turn ``k + 1``'s delay (capped by
the source's ``idle_cap``); a first turn is due when its user starts the session. Latency
counts from the due time (the record's ``scheduled_ns``), as ``loadgen run --sessions``
counts it in closed loop too; a late send is schedule lag. A failed turn ends its session
(its remaining turns are counted unsent); a stop ends the turns not yet sent (unsent), a turn
in flight gets Locust's ``--stop-timeout`` and is then recorded ``cancelled``.

What is reused, and why the engine itself is not: :class:`loadgen.sessions.turns.SessionRunner`
is an asyncio engine that spawns and schedules its sessions itself, as asyncio tasks sending
through an asyncio :class:`~loadgen.endpoints.base.Endpoint` (aiohttp). Here Locust owns the
users: it spawns them at its spawn rate, may add or remove them mid-test and stops them at
``-t``, each user a greenlet on gevent's hub; requests go through the gevent
:class:`~loadgen.locust.client.GeventClient`. An asyncio loop run inside a greenlet would hold
the hub (every other user frozen) until it returns, and Locust's user count would no longer
be the number of sessions. So this module runs a session's turns in its user's greenlet and
reuses the pure parts: the session plan and sources (:func:`loadgen.sessions.planning.plan_sessions`:
sessions, salting, ``idle_cap``), the history and prompt rendering
(:class:`loadgen.workload.session_model.SessionHistory`), the per-session counts
(:class:`loadgen.sessions.turns.SessionStats`, merged across workers by
:func:`loadgen.sessions.spread.merge_stats`), and the records and the ``sessions`` block of
``result.json`` (:class:`loadgen.sessions.measured.TurnFacts`, :func:`loadgen.sessions.measured.sessions_block`).

Which session a user runs: process ``shard`` of ``shards`` takes the plan's sessions
``shard, shard + shards, ...`` in turn (the plan's own order; a file's sessions reused after
its last with the id ``<id>~<round>``, as :mod:`loadgen.sessions.planning` names reused sessions,
so salting keeps their prefixes apart). A turn's request index is its position in the plan
(plus the plan's turn count per round of reuse): unique across processes.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import TYPE_CHECKING, Any, Protocol

from greenlet import GreenletExit

from loadgen.core.clock import now_ns
from loadgen.core.errors import ConfigError
from loadgen.core.types import RequestRecord
from loadgen.engine.runplan import LoadConfig
from loadgen.locust.client import GeventClient, Prepared
from loadgen.sessions.planning import plan_sessions
from loadgen.sessions.turns import SessionPlan, SessionStats
from loadgen.workload.session_model import Session, SessionHistory
from loadgen.workload.session_sources import SessionSource, parse_session_source
from loadgen.workload.spec import WorkloadOptions

if TYPE_CHECKING:
    from loadgen.workload.tokenizer import Tokenizer

__all__ = ["SYNTHETIC_SESSIONS", "SessionFeed", "TurnSender", "run_session", "sessions_plan"]

SYNTHETIC_SESSIONS = 1000
"""Synthetic sessions planned per round (then reused under new ids, as a file's sessions are)."""


def sessions_plan(
    cfg: dict[str, Any], salt: str, tokenizer: Tokenizer | None = None
) -> tuple[SessionSource, SessionPlan, dict]:
    """The ``--sessions`` source of a Locust configuration, its plan (closed loop) and facts about the source.

    Raises ConfigError / InputFileError for a bad source (file, line and field named)."""
    src = parse_session_source(cfg["sessions"])
    load = LoadConfig(
        concurrency=1, requests=SYNTHETIC_SESSIONS if src.synthetic else None, seed=cfg["workload"]["seed"],
        salt=salt, workload=WorkloadOptions(api=cfg["api"]),
    )  # fmt: skip
    plan, facts = plan_sessions(load, src, tokenizer)
    return src, plan, facts


class SessionFeed:
    """This process's sessions, one per call of :meth:`take`: the plan's ``shard + shards * m``-th."""

    def __init__(self, cfg: dict[str, Any], salt: str, tokenizer: Tokenizer | None, shard: int, shards: int) -> None:
        self.src, self.plan, self.facts = sessions_plan(cfg, salt, tokenizer)
        if not self.plan.sessions:
            raise ConfigError("--sessions: the source holds no session")
        self.first: list[int] = []
        n = 0
        for s in self.plan.sessions:
            self.first.append(n)
            n += len(s.turns)
        self.turns_per_round = n
        self.shard, self.shards = shard, shards
        self.counter = itertools.count()

    def take(self) -> tuple[Session, int]:
        """The next session of this process and its first turn's request index."""
        j = self.shard + self.shards * next(self.counter)
        r, b = divmod(j, len(self.plan.sessions))
        s = self.plan.sessions[b]
        if r:
            s = dataclasses.replace(s, session_id=f"{s.session_id}~{r}")
        return s, r * self.turns_per_round + self.first[b]


class TurnSender(Protocol):
    """What a session needs of its process (:class:`loadgen.locust.dispatch.LoadProcess`)."""

    cfg: dict[str, Any]
    client: GeventClient

    def wait_until(self, deadline_ns: int) -> bool: ...

    def request(
        self, prepared: Prepared, scheduled_ns: int, queued: bool = False, held_ns: int = 0, turn: int | None = None
    ) -> RequestRecord: ...


def run_session(proc: TurnSender, feed: SessionFeed, stats: SessionStats) -> bool:
    """One whole session in the calling Locust user's greenlet (module doc: due times, stop, failures).

    Every turn ends as one record through ``proc.request`` (the Locust row ``turn K``, the
    ``requests.jsonl`` line with ``session_id`` and ``turn``); ``stats`` gathers the session's counts
    and, for a session that ended (every turn done, or a failed turn), its duration and waits. A
    session the test's stop cut short counts as started with its turns left unsent, neither completed
    nor failed, and enters no per-session figure (it is not a whole session). Returns False for that
    case (ended by the stop), True otherwise; a kill (``GreenletExit``) propagates.
    """
    session, first = feed.take()
    plan = feed.plan
    hist = SessionHistory(session, plan.prompter)
    header = proc.cfg.get("session_header")
    n = len(session.turns)
    stats.started += 1
    start = last_end = 0
    system_ns, tool_s, failed, stopped, inflight = 0, 0.0, False, False, False
    k = 0
    try:
        for k in range(n):
            turn = session.turns[k]
            spec = hist.spec(k, first + k)
            prepared = proc.client.prepare(spec)
            if header:  # session affinity for routers (--session-header), as the asyncio endpoints send it
                prepared = Prepared((prepared[0], prepared[1], {**prepared[2], header: session.session_id}))
            if k:
                delay = turn.delay_s if plan.idle_cap_s is None else min(turn.delay_s, plan.idle_cap_s)
                due = last_end + round(delay * 1e9)
                tool_s += delay
            else:  # the session starts when its user has its first request ready (as a closed-loop user sends)
                start = last_end = due = now_ns()
            if proc.wait_until(due):  # a stop came first: this turn and the rest are not sent
                stats.unsent_turns += n - k
                stopped = True
                break
            inflight = True
            rec = proc.request(prepared, due, turn=k)
            inflight = False
            last_end = rec.end_ns or now_ns()
            system_ns += last_end - due
            if not rec.ok:
                stats.unsent_turns += n - k - 1
                failed = True
                break
            hist.reply(k, rec.answer_text, rec.tool_calls)
    except GreenletExit:  # killed after the stop timeout (a turn in flight is recorded cancelled): the rest unsent
        stats.unsent_turns += n - k - (1 if inflight else 0)
        stats.resets += hist.resets
        stats.add_tools(hist)
        raise
    stats.resets += hist.resets
    stats.add_tools(hist)
    if stopped:
        return False
    if failed:
        stats.failed += 1
    else:
        stats.completed += 1
    stats.durations_s.append((last_end - start) / 1e9)
    stats.system_wait_s.append(system_ns / 1e9)
    stats.tool_wait_s.append(tool_s)
    return True
