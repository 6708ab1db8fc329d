"""Reference answers for sessions: the simulated endpoint's model and prefix cache on a virtual clock.

:func:`simulate_sessions` runs sessions (:class:`loadgen.workload.session_model.Session`) through the
same :class:`~loadgen.sim.model.BatchModel` (or FIFO model) and :class:`~loadgen.sim.prefix_cache.PrefixCache`
the real-time simulator uses, with the session engine's causality: a session's first turn
arrives at its start, turn ``k + 1`` at turn ``k``'s last token + its delay. Each turn's
prompt is the history (system prompt, earlier new messages and replies at their lengths) + its
new message; its cached tokens come from the cache exactly as the server computes them
(whole blocks, the last prompt token never cached, prompt + reply blocks inserted when a reply
ends), and only the uncached tokens cost prefill. Tokens are modelled as units keyed by their
session and position (``salted``; the shared system prompt by position only), or by position
only (``salted=False``: sessions share every prefix their lengths allow, the most reuse
possible).

:func:`session_capacity` is the highest session arrival rate (Poisson, seeded) whose turns meet
one SLO target (TTFT or E2E percentile over every turn of the measured sessions), by
bisection: the answer the session-capacity search should find against this profile. Network
and client overheads are not modelled.

The answer is a finite sample of one Poisson path: pass enough sessions for the percentile to
settle. For 3-turn sessions at ~8 sessions/s, 300 sessions gave 7.5-12.2 sessions/s over seeds
0-3 (seed 0: 10.07, an optimistic draw that made a correct CLI search read 0.84 x); 3000 gave
8.1-8.5. The bench (``scripts/bench_sessions.py``) uses 3000.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from loadgen.core.slo import SLOTarget
from loadgen.sim.fifo import new_model
from loadgen.sim.model import SimParams
from loadgen.sim.prefix_cache import DEFAULT_BLOCK_TOKENS, PrefixCache
from loadgen.sim.reference import bisect_rate
from loadgen.workload.arrivals import arrival_offsets_ns
from loadgen.workload.session_model import Session

__all__ = ["TurnResult", "session_capacity", "simulate_sessions"]


@dataclass(slots=True)
class TurnResult:
    """One turn on the virtual clock (absolute virtual ns)."""

    session: int
    turn: int
    due_ns: int
    prompt_tokens: int
    cached_tokens: int
    output_tokens: int
    first_token_ns: int = -1
    end_ns: int = -1


def _units(session: int, system: int, n: int, salted: bool) -> list[tuple[int, int]]:
    return [(-1, j) if j < system else ((session if salted else 0), j) for j in range(n)]


def simulate_sessions(
    params: SimParams,
    sessions: Sequence[Session],
    starts_ns: Sequence[int],
    *,
    cache_blocks: int = 0,
    block_tokens: int = DEFAULT_BLOCK_TOKENS,
    salted: bool = True,
) -> list[TurnResult]:
    """Every turn of ``sessions`` (started at ``starts_ns``) on a virtual clock; module doc."""
    model = new_model(params)
    cache = PrefixCache(cache_blocks, block_tokens) if cache_blocks > 0 else None
    results: list[TurnResult] = []
    heap: list[tuple[int, int, int, int]] = [(int(t), i, i, 0) for i, t in enumerate(starts_ns)]  # (t, tie, s, k)
    heapq.heapify(heap)
    tie = len(heap)
    history = [s.system_tokens for s in sessions]
    pending = model._pending

    def finish_emissions() -> None:
        nonlocal tie
        for req_id, t, _idx, done in pending:
            r = results[req_id]  # type: ignore[call-overload]  # the model holds the int ids submitted below
            if r.first_token_ns < 0:
                r.first_token_ns = t
            if done:
                r.end_ns = t
                s = sessions[r.session]
                history[r.session] = r.prompt_tokens + r.output_tokens
                if cache is not None:
                    cache.insert(_units(r.session, s.system_tokens, history[r.session], salted))
                if r.turn + 1 < len(s.turns):
                    nxt = s.turns[r.turn + 1]
                    heapq.heappush(heap, (t + round(nxt.delay_s * 1e9), tie, r.session, r.turn + 1))
                    tie += 1
        pending.clear()

    while heap or model.next_event_ns() is not None:
        ev = model.next_event_ns()
        if ev is not None and (not heap or ev <= heap[0][0]):
            model._run_until(ev, inclusive=True)
            finish_emissions()
            continue
        t, _, si, k = heapq.heappop(heap)
        s = sessions[si]
        turn = s.turns[k]
        new = turn.new_tokens if turn.new_tokens is not None else max(len((turn.text or "").split()), 1)
        base = s.system_tokens if (turn.reset and k) else history[si]
        prompt = base + new
        cached = 0
        if cache is not None:
            units = _units(si, s.system_tokens, prompt, salted)
            cached = cache.lookup(units)
            cache.insert(units)
        results.append(TurnResult(si, k, t, prompt, cached, turn.output_tokens))
        model.arrive(t, len(results) - 1, prompt - cached, turn.output_tokens)
        finish_emissions()
    return results


def session_capacity(
    params: SimParams,
    sessions: Sequence[Session],
    target: SLOTarget,
    *,
    cache_blocks: int = 0,
    block_tokens: int = DEFAULT_BLOCK_TOKENS,
    salted: bool = True,
    seed: int = 0,
    warmup_sessions: int = 0,
    rel_precision: float = 0.01,
    lo_rps: float = 0.01,
    hi_rps: float = 1000.0,
) -> float:
    """Highest session arrival rate (sessions/s, Poisson) whose turns meet ``target`` (module doc)."""
    if target.metric not in ("ttft", "e2e"):
        raise ValueError(f"no session reference for metric {target.metric}")

    def ok(rate: float) -> bool:
        starts = arrival_offsets_ns("poisson", rate, count=len(sessions), seed=seed)
        res = simulate_sessions(params, sessions, starts, cache_blocks=cache_blocks, block_tokens=block_tokens,
                                salted=salted)  # fmt: skip
        vals = [
            (r.first_token_ns if target.metric == "ttft" else r.end_ns) - r.due_ns
            for r in res
            if r.session >= warmup_sessions
        ]
        return float(np.percentile(np.asarray(vals, dtype=np.float64), target.percentile)) <= target.threshold_ns

    lo, hi = lo_rps, hi_rps
    if not ok(lo):
        return 0.0
    if ok(hi):
        return hi
    return bisect_rate(ok, lo, hi, rel_precision)
