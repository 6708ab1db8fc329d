"""The session plan: which sessions run, when they start, how their prompts are built (configuration only).

:func:`plan_sessions` turns a :class:`~loadgen.engine.runplan.LoadConfig` and a ``--sessions`` source into
the :class:`~loadgen.sessions.turns.SessionPlan` the session engine runs (the rules are in
:mod:`loadgen.sessions.measured`'s docstring). Deterministic for one configuration (seeded; the salt is
the configuration's), so every worker process of ``--workers N`` plans the same sessions
(:mod:`loadgen.sessions.spread`). No wait of the plan is longer than the source's idle cap
(default one hour, :mod:`loadgen.workload.session_checks`): longer delays between turns and, with
the trace's own starts, longer gaps between session starts are shortened to it, and the facts carry
a warning line for each kind (:func:`check_sessions` gives them before the run, for the CLI to show).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from loadgen.core.errors import ConfigError
from loadgen.engine.runplan import LoadConfig
from loadgen.sessions.turns import SessionPlan
from loadgen.workload.arrivals import arrival_offsets_ns, condition_on_rate
from loadgen.workload.session_checks import cap_waits, idle_cap_s
from loadgen.workload.session_model import Session, SessionPrompter
from loadgen.workload.session_sources import SessionSource, load_sessions

if TYPE_CHECKING:
    from loadgen.workload.tokenizer import Tokenizer

__all__ = ["CLOSED_LOOP_SESSIONS", "MAX_SESSIONS", "check_sessions", "plan_sessions", "shard_sessions"]

MAX_SESSIONS = 1_000_000
CLOSED_LOOP_SESSIONS = 10_000
"""Sessions made ready for a closed-loop run bounded by ``--duration`` only."""


def plan_sessions(
    cfg: LoadConfig, src: SessionSource, tokenizer: Tokenizer | None = None
) -> tuple[SessionPlan, dict[str, Any]]:
    """The session plan of ``cfg`` (module doc: which sessions, when) and facts about the source."""
    warm = cfg.warmup_requests
    n: int | None = None
    if cfg.requests is not None:
        n = cfg.requests + warm
    elif cfg.exact_rate and cfg.rate_rps is not None and cfg.concurrency is None and cfg.duration_s is not None:
        n = max(1, round(cfg.rate_rps * cfg.duration_s)) + warm  # `loadgen run`: round(R x D) sessions at exactly R
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
    mode: Literal["open", "closed"] = "closed" if cfg.concurrency is not None else "open"
    own_starts = mode == "open" and cfg.rate_rps is None
    cap = idle_cap_s(src.options)
    base, capped = cap_waits(base, cap, _where(src), own_starts=own_starts, counted=not src.synthetic)
    facts["warnings"] = facts.get("warnings", []) + capped
    facts["idle_cap_s"] = cap
    sessions = base if n is None else _cycle(base, n)
    starts: list[int] = []
    if mode == "open" and cfg.rate_rps is not None:
        starts = arrival_offsets_ns(cfg.arrival, cfg.rate_rps, count=len(sessions), seed=cfg.seed,
                                    burstiness=cfg.burstiness)  # fmt: skip
        if cfg.exact_rate and n is not None:  # a sweep probe, `loadgen run`: its measured starts at exactly the rate
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
        idle_cap_s=cap,
        drain_grace_s=cfg.drain_grace_s,
        end_offset_ns=round((cfg.duration_s + cfg.warmup_s) * 1e9) if cfg.duration_s is not None else None,
        max_inflight=cfg.max_concurrency,
        abandon=cfg.abandon,
    )
    return plan, facts


def check_sessions(src: SessionSource, *, seed: int = 0, own_starts: bool = False) -> list[str]:
    """Read and check the whole source now, before any load (every problem a ConfigError / InputFileError
    naming file, line and field); the warning lines of the waits its runs will cap (:func:`plan_sessions`).

    ``own_starts``: the run uses the source's own session starts (open loop without ``--rate``), so their
    gaps are capped too. A synthetic source's options are checked (one session made)."""
    base, facts = load_sessions(src, 1 if src.synthetic else None, seed=seed)
    _, capped = cap_waits(base, idle_cap_s(src.options), _where(src), own_starts=own_starts,
                          counted=not src.synthetic)  # fmt: skip
    return [*facts.get("warnings", []), *capped]


def _where(src: SessionSource) -> str:
    return "--sessions synthetic" if src.synthetic else src.source


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


def shard_sessions(plan: SessionPlan, w: int, n: int) -> SessionPlan:
    """Worker ``w`` of ``n``'s sessions: ``w, w + n, ...`` with their start offsets (whole sessions)."""
    idx = range(w, len(plan.sessions), n)
    warm = sum(1 for i in idx if i < plan.warmup_sessions)  # the plan's first sessions: this shard's first
    conc = plan.concurrency // n + (1 if w < plan.concurrency % n else 0)
    cap = plan.max_inflight  # split as the sessions are (measure_sessions refused a cap under n)
    cap = None if cap is None else cap // n + (1 if w < cap % n else 0)
    starts = [plan.start_offsets_ns[i] for i in idx] if plan.start_offsets_ns else []
    first, k = list(plan.first_index), 0  # the whole plan's request indices: unique across workers
    if not first:  # as SessionRunner numbers them in one process: the turns' positions in the plan
        for s in plan.sessions:
            first.append(k)
            k += len(s.turns)
    return replace(
        plan, sessions=[plan.sessions[i] for i in idx], start_offsets_ns=starts, warmup_sessions=warm,
        concurrency=max(conc, 1), first_index=[first[i] for i in idx], max_inflight=cap,
    )  # fmt: skip
