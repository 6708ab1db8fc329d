"""Turn a trace window into send offsets: spread, re-base, time scale or rate, loop; and stats.

All arithmetic is on int64 nanoseconds. The pipeline, in order:

1. ``spread``: ``literal`` keeps rows that share a timestamp at one instant (sent
   together); ``uniform`` spreads the ``k`` rows of an instant evenly over the
   step to the next instant (row ``j`` at ``t + j * step / k``). The last
   instant's step is the gap to the first instant after the window when it was
   read, else the mean step between instants.
2. Re-base: the window's first row is sent at offset 0.
3. ``time_scale`` X divides offsets by X (X = 10 replays 10x faster); ``rate_rps``
   instead scales them so the mean rate, (n - 1) / (last - first), equals it
   (the shape is kept). Not both.
4. ``loop``: the window repeats with a period of its selected duration (when
   ``duration_s`` chose it), else the time from its first row to the first later
   instant after it (when the reader saw one), else its span plus one mean gap,
   until a request count or a duration is filled.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from loadgen.core.errors import ConfigError
from loadgen.workload.traces import Trace

__all__ = ["ReplayPlan", "loop_offsets", "replay_offsets", "spread_instants", "trace_stats"]

SPREADS = ("literal", "uniform")


def spread_instants(offset_ns: np.ndarray, next_offset_ns: int | None = None) -> np.ndarray:
    """Spread rows sharing a timestamp over the step to the next instant (see module doc)."""
    off = np.asarray(offset_ns, dtype=np.int64)
    if off.size == 0:
        return off.copy()
    starts = np.flatnonzero(np.r_[True, off[1:] != off[:-1]])
    instants = off[starts]
    counts = np.diff(np.r_[starts, off.size])
    steps = np.empty(instants.size, dtype=np.int64)
    steps[:-1] = np.diff(instants)
    if next_offset_ns is not None and next_offset_ns > instants[-1]:
        steps[-1] = next_offset_ns - instants[-1]
    elif instants.size > 1:
        steps[-1] = int(round(float(np.mean(steps[:-1]))))
    else:
        steps[-1] = 0
    rank = np.arange(off.size, dtype=np.int64) - np.repeat(starts, counts)
    per_row_step = np.repeat(steps, counts)
    per_row_count = np.repeat(counts, counts)
    return off + (rank * per_row_step) // per_row_count


@dataclass(frozen=True)
class ReplayPlan:
    """The window's offsets as they will be sent (before looping), and how they were made.

    ``offset_ns`` starts at 0. ``factor`` multiplies trace time into send time
    (1/time_scale, or source rate / target rate). ``period_ns`` is the loop period
    in send time.
    """

    offset_ns: np.ndarray
    factor: float
    period_ns: int
    source_rate_rps: float | None
    spread: str


def replay_offsets(
    tr: Trace, *, spread: str = "literal", time_scale: float | None = None, rate_rps: float | None = None
) -> ReplayPlan:
    """Send offsets of a trace window (steps 1 to 3 of the module doc). Raises ConfigError."""
    if spread not in SPREADS:
        raise ConfigError(f"unknown spread {spread!r}; choose one of {', '.join(SPREADS)}")
    if time_scale is not None and rate_rps is not None:
        raise ConfigError("give a time scale or a target rate for a trace, not both")
    if time_scale is not None and not time_scale > 0:
        raise ConfigError("trace time scale must be > 0")
    if rate_rps is not None and not rate_rps > 0:
        raise ConfigError("trace rate must be > 0")
    off = tr.offset_ns
    if spread == "uniform":
        off = spread_instants(off, tr.next_offset_ns)
    off = off - off[0]
    n = off.size
    span = int(off[-1])
    source_rate = (n - 1) / (span / 1e9) if n > 1 and span > 0 else None
    factor = 1.0
    if time_scale is not None:
        factor = 1.0 / time_scale
    elif rate_rps is not None:
        if source_rate is None:
            raise ConfigError("cannot rescale a trace window to a rate: all its rows share one instant")
        factor = source_rate / rate_rps
    if tr.duration_s is not None:
        period = round(tr.duration_s * 1e9)
    elif tr.next_offset_ns is not None:
        period = int(tr.next_offset_ns - tr.offset_ns[0])
    elif n > 1 and span > 0:
        period = span + round(span / (n - 1))
    else:
        period = 0
    if factor != 1.0:
        off = np.rint(off.astype(np.float64) * factor).astype(np.int64)
        period = round(period * factor)
    return ReplayPlan(off, factor, int(period), source_rate, spread)


def loop_offsets(
    plan: ReplayPlan, *, count: int | None = None, until_ns: int | None = None, loop: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """(offsets, row index into the window) of the sends: the window once, or looped.

    Without ``loop`` the window is cut at ``count`` rows or at ``until_ns``.
    With ``loop`` it repeats (period :attr:`ReplayPlan.period_ns`) until the count
    or the time is filled; one of them is then required.
    """
    off = plan.offset_ns
    n = off.size
    if not loop:
        rows = np.arange(n, dtype=np.int64)
        keep = n if count is None else min(n, count)
        if until_ns is not None:
            keep = min(keep, int(np.searchsorted(off, until_ns, side="left")))
        return off[:keep].copy(), rows[:keep]
    if count is None and until_ns is None:
        raise ConfigError("looping a trace needs a request count or a duration to fill")
    if plan.period_ns <= 0:
        raise ConfigError("cannot loop this trace window: it has no duration (give a window duration)")
    if count is not None:
        reps = -(-count // n)
    else:
        reps = int(until_ns // plan.period_ns) + 1  # type: ignore[operator]  # period_ns is set when the replay loops by time
    if reps * n > 50_000_000:
        raise ConfigError(f"looping would schedule {reps * n} requests; choose a shorter run")
    k = np.repeat(np.arange(reps, dtype=np.int64), n)
    rows = np.tile(np.arange(n, dtype=np.int64), reps)
    out = np.tile(off, reps) + k * plan.period_ns
    if count is not None:
        out, rows = out[:count], rows[:count]
    if until_ns is not None:
        keep = int(np.searchsorted(out, until_ns, side="left"))
        out, rows = out[:keep], rows[:keep]
    return out, rows


def _dist(a: np.ndarray) -> dict[str, float | int | None]:
    a = a[a >= 0]
    if a.size == 0:
        return {"mean": None, "p50": None, "p90": None, "p99": None, "max": None}
    p50, p90, p99 = np.percentile(a, [50, 90, 99])
    return {"mean": float(a.mean()), "p50": float(p50), "p90": float(p90), "p99": float(p99), "max": int(a.max())}


def _resolution_ns(off: np.ndarray) -> int | None:
    """The timestamps' effective resolution: the gcd of all offsets (0 when all equal)."""
    if off.size < 2:
        return None
    g = int(np.gcd.reduce(off - off[0]))
    return g or None


def trace_stats(tr: Trace) -> dict[str, object]:
    """What ``trace inspect`` shows: size, rate, burstiness and length distributions.

    ``interarrival_cv`` = std / mean of the gaps between consecutive rows (gaps of
    0 included); ``gamma_burstiness`` = 1 / CV**2, the gamma shape of the same CV
    (vLLM ``--burstiness``; 1.0 = Poisson). ``mean_rate_rps`` = (n - 1) / duration.
    ``same_instant_fraction``: rows whose timestamp equals the previous row's.
    """
    n = len(tr)
    off = tr.offset_ns - tr.offset_ns[0] if n else tr.offset_ns
    dur = float(off[-1]) / 1e9 if n else 0.0
    out: dict[str, object] = {
        "path": tr.path,
        "format": tr.format,
        "rows": n,
        "skipped_zero_output_rows": tr.skipped_zero_output,
        "kept_zero_output_rows": tr.kept_zero_output,
        "has_timestamps": tr.has_timestamps,
    }
    if tr.has_timestamps and n > 1:
        gaps = np.diff(off).astype(np.float64) / 1e9
        mean_gap = float(gaps.mean())
        cv = float(gaps.std() / mean_gap) if mean_gap > 0 else None
        out.update(
            duration_s=dur,
            mean_rate_rps=(n - 1) / dur if dur > 0 else None,
            timestamp_resolution_ns=_resolution_ns(off),
            same_instant_fraction=float(np.mean(gaps == 0)),
            interarrival_cv=cv,
            gamma_burstiness=(1.0 / cv**2) if cv else None,
        )
    out["input_tokens"] = _dist(tr.input_tokens)
    out["output_tokens"] = _dist(tr.output_tokens)
    if tr.hash_ids is not None and tr.hash_ids.size:
        uniq = int(np.unique(tr.hash_ids).size)
        out["prefix_blocks"] = {
            "block_tokens": tr.block_tokens,
            "blocks": int(tr.hash_ids.size),
            "unique_blocks": uniq,
            "reused_block_fraction": 1.0 - uniq / int(tr.hash_ids.size),
        }
    return out
