"""The session plan: which sessions run, when they start, how their prompts are built (configuration only).

:func:`plan_sessions` turns a :class:`~loadgen.runplan.LoadConfig` and a ``--sessions`` source into
the :class:`~loadgen.sessions.SessionPlan` the session engine runs (the rules are in
:mod:`loadgen.session_run`'s docstring). Deterministic for one configuration (seeded; the salt is
the configuration's), so every worker process of ``--workers N`` plans the same sessions
(:mod:`loadgen.session_workers`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Literal

import numpy as np

from loadgen.errors import ConfigError
from loadgen.runplan import LoadConfig
from loadgen.sessions import SessionPlan
from loadgen.units import parse_duration_s
from loadgen.workload.arrivals import arrival_offsets_ns, condition_on_rate
from loadgen.workload.session_sources import SessionSource, load_sessions
from loadgen.workload.sessions import Session, SessionPrompter

__all__ = ["CLOSED_LOOP_SESSIONS", "MAX_SESSIONS", "plan_sessions"]

MAX_SESSIONS = 1_000_000
CLOSED_LOOP_SESSIONS = 10_000
"""Sessions made ready for a closed-loop run bounded by ``--duration`` only."""


def plan_sessions(cfg: LoadConfig, src: SessionSource, tokenizer: Any = None) -> tuple[SessionPlan, dict[str, Any]]:
    """The session plan of ``cfg`` (module doc: which sessions, when) and facts about the source."""
    warm = cfg.warmup_requests
    n: int | None = None
    if cfg.requests is not None:
        n = cfg.requests + warm
    elif cfg.rate_rps is not None and cfg.duration_s is not None:
        n = len(arrival_offsets_ns(cfg.arrival, cfg.rate_rps, duration_s=cfg.duration_s, seed=cfg.seed,
                                   burstiness=cfg.burstiness)) + warm  # fmt: skip
    elif cfg.concurrency is not None and cfg.duration_s is not None:
        n = CLOSED_LOOP_SESSIONS  # the duration ends the run first (end_offset_ns)
    elif src.synthetic:
        raise ConfigError("--sessions synthetic: give --requests N (sessions) or --duration")
    if n is not None and n > MAX_SESSIONS:
        raise ConfigError(f"{n:,} sessions is over the limit of {MAX_SESSIONS:,}")
    base, facts = load_sessions(src, n if src.synthetic else None, seed=cfg.seed)
    sessions = base if n is None else _cycle(base, n)
    mode: Literal["open", "closed"] = "closed" if cfg.concurrency is not None else "open"
    starts: list[int] = []
    if mode == "open" and cfg.rate_rps is not None:
        starts = arrival_offsets_ns(cfg.arrival, cfg.rate_rps, count=len(sessions), seed=cfg.seed,
                                    burstiness=cfg.burstiness)  # fmt: skip
        if cfg.exact_rate and cfg.requests is not None:  # a sweep probe: its measured starts at exactly the rate
            measured = np.arange(len(starts)) >= warm
            starts = [int(x) for x in condition_on_rate(np.asarray(starts, dtype=np.int64), measured, cfg.rate_rps)]
    elif mode == "open":
        if any(s.start_s is None for s in sessions):
            raise ConfigError("--sessions: this source has no start times of its own: give --rate or --concurrency")
        order = sorted(range(len(sessions)), key=lambda i: sessions[i].start_s or 0.0)
        sessions = [sessions[i] for i in order]
        starts = [round((s.start_s or 0.0) * 1e9) for s in sessions]
        facts["arrivals"] = "the trace's own session starts"
    api = cfg.workload.api if cfg.workload is not None else "completions"
    prompter = SessionPrompter(
        api=api, tokenizer=tokenizer, salt=cfg.salt or "", salt_sessions=src.salt_sessions, seed=cfg.seed,
        use_recorded_replies=src.recorded_replies,
    )  # fmt: skip
    plan = SessionPlan(
        sessions=sessions,
        prompter=prompter,
        mode=mode,
        start_offsets_ns=starts,
        concurrency=cfg.concurrency or 1,
        warmup_sessions=warm,
        idle_cap_s=parse_duration_s(src.options["idle_cap"], "--sessions idle_cap")
        if "idle_cap" in src.options
        else None,
        drain_grace_s=cfg.drain_grace_s,
        end_offset_ns=round((cfg.duration_s + cfg.warmup_s) * 1e9) if cfg.duration_s is not None else None,
    )
    return plan, facts


def _cycle(base: list[Session], n: int) -> list[Session]:
    if n <= len(base):
        return list(base[:n])
    out = list(base)
    r = 1
    while len(out) < n:
        for s in base[: n - len(out)]:
            out.append(replace(s, session_id=f"{s.session_id}~{r}"))
        r += 1
    return out
