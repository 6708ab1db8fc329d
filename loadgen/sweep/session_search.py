"""The session-capacity search: ``loadgen sweep --sessions SOURCE`` on the sweep's own machinery.

A session sweep is the rate sweep (:mod:`loadgen.sweep.search`: unloaded check, calibration,
bracket, bisect; or the concurrency sweep) with each probe a measured session run
(:func:`loadgen.sessions.measured.measure_sessions`) instead of a request run: the base
``LoadConfig`` carries ``sessions`` and :func:`measure_load` sends each of the sweep's runs
to the right engine. What changes, and only here:

* the offered load is a session arrival rate (sessions/s, open loop: ``--rate`` of every probe)
  or a number of concurrent sessions (``--concurrency-levels``: closed loop, each session replaced
  when it ends);
* a probe's verdict counts *turns* (every measured turn is one judged request: latency from its
  due time, the binomial verdict, early stop, the stability rule, exactly as a request probe's),
  while its size is in *sessions*: :func:`session_turns` converts (the mean turns per session
  sizes a probe to the evidence rule's turn count; the most turns per session bounds the largest
  possible probe for early stop, so a FAIL is never declared certain too soon);
* the calibration is a closed-loop session run; its capacity, completed turns/s, is turned into
  sessions/s by the mean turns per session (:func:`calibration_sps`);
* the unloaded check runs whole sessions one at a time (at least its request count in turns);
* ``sweep.json`` gets a ``sessions`` block (:func:`sessions_block`): the unit, the source, whether
  sessions were salted apart and why that matters, and per probe the prefix-cache hit rate and the
  per-turn-depth latency of its turns.

Each probe has a fresh salt (``p<probe>s<segment>-``): no probe's prefixes are cached by an
earlier one; with ``salt=off`` in the source, sessions share prefixes (the shared system prompt,
a reused session's history) across sessions, so the server's prefix cache serves more of each
prompt and the answer rises: the report says so beside the hit rate.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from loadgen.endpoints.base import Endpoint
from loadgen.engine.runplan import LoadConfig
from loadgen.measurement import MeasuredRun
from loadgen.sessions.measured import measure_sessions
from loadgen.workload.session_sources import SessionSource, load_sessions

__all__ = ["calibration_sps", "measure_load", "probe_sessions", "session_turns", "sessions_block"]

SAMPLE_SESSIONS = 256
"""Synthetic sessions drawn to estimate turns per session (a file source is read whole)."""

_TURNS: dict[tuple[str, tuple[tuple[str, str], ...], int], tuple[float, int]] = {}


def session_turns(base: LoadConfig) -> tuple[float, int]:
    """(mean, most) turns per session of ``base.sessions``; (1.0, 1) for a plain request workload.

    A synthetic source is sampled (:data:`SAMPLE_SESSIONS` sessions at the run's seed); a file is
    read whole once per process (cached). Raises ConfigError on a bad source.
    """
    src: SessionSource | None = base.sessions
    if src is None:
        return 1.0, 1
    key = (src.source, tuple(sorted(src.options.items())), base.seed)
    if key not in _TURNS:
        sessions, _ = load_sessions(src, SAMPLE_SESSIONS if src.synthetic else None, seed=base.seed)
        counts = [len(s.turns) for s in sessions] or [1]
        _TURNS[key] = (max(sum(counts) / len(counts), 1.0), max(counts))
    return _TURNS[key]


def probe_sessions(base: LoadConfig, need_turns: int, rate: float, duration_s: float) -> int:
    """Sessions in one open-loop probe segment: enough turns for the evidence rule, and the probe's duration."""
    mean, _ = session_turns(base)
    return max(math.ceil(need_turns / mean), math.ceil(rate * duration_s))


async def measure_load(
    plain: Callable[..., Awaitable[MeasuredRun]], endpoint: Endpoint, load: LoadConfig, out_dir: Path, **kw: Any
) -> MeasuredRun:
    """One of the sweep's runs: ``plain`` (the caller's :func:`~loadgen.measurement.measure`), or a session
    run when ``load.sessions`` is set. The keywords are ``measure``'s; a session run takes the same ones."""
    if load.sessions is None:
        return await plain(endpoint, load, out_dir, **kw)
    return await measure_sessions(endpoint, load, load.sessions, out_dir, **kw)


def calibration_sps(base: LoadConfig, request_rps: float | None) -> float | None:
    """A calibration's capacity in the sweep's unit: sessions/s = completed turns/s / mean turns per session."""
    if request_rps is None or base.sessions is None:
        return request_rps
    return request_rps / session_turns(base)[0]


def sessions_block(result: dict[str, Any], base: LoadConfig) -> dict[str, Any]:
    """``sweep.json`` ``sessions``: the unit, the source, salting and why it matters, per-probe depth tables."""
    src: SessionSource = base.sessions
    closed = any(p.get("concurrency") for p in result.get("probes") or [])
    mean, most = session_turns(base)
    probes = []
    for p in result.get("probes") or []:
        # the probe's own figures, carried in memory (Probe.by_turn), never re-read from its result.json
        probes.append({"dir": p["dir"], "prefix_cache_hit_rate": p.get("prefix_cache_hit_rate"),
                       "by_turn": p.get("by_turn") or []})  # fmt: skip
    if src.salt_sessions:
        salting = (
            "each session salted apart (salt=on): prefixes are reused only inside a session, as the "
            "workload says; a fresh salt per probe, so no probe is served from an earlier one's cache"
        )
    else:
        salting = (
            "salting off (salt=off): sessions share prefixes across sessions (the shared system prompt, "
            "reused sessions' histories), so the server's prefix cache serves more of each prompt than an "
            "independent population of sessions would let it, and the answer is higher by that reuse"
        )
    return {
        "unit": "concurrent sessions" if closed else "sessions/s",
        "source": src.describe(),
        "salted_per_session": src.salt_sessions,
        "salting": salting,
        "turns_per_session_mean": mean,
        "turns_per_session_max": most,
        "probes": probes,
    }
