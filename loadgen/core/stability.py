"""Does the system keep up? A one-sided trend test on a probe's (or a run's) backlog.

The one definition for both users: a sweep probe (:mod:`loadgen.sweep.probe`, which FAILs an
unstable probe) and a plain run (:mod:`loadgen.engine.keepup`, which says on its verdict line
that the server did not keep up). It lives on the ground floor so that both can import it.

A probe at a rate the server cannot sustain builds a queue that grows for as long as
the probe lasts; a percentile taken over a short probe can still pass, because the
queue has not had time to push it past the threshold. So a probe PASSes only if its
backlog does not grow: :func:`backlog_trend` looks at two per-interval series over the
window of scheduled sends, split into :data:`BINS` equal intervals,

* ``first_token_delay``: the median, per interval, of (first token - scheduled send)
  of the requests scheduled in it (TTFT from the scheduled time; a queue in front of
  prefill shows here first);
* ``decode_pace``: the median, per interval, of the TPOT (:mod:`loadgen.core.metrics`:
  (last token - first token) / (output tokens - 1)) of the requests scheduled in it that
  streamed at least two tokens (a server that admits everything and slows every sequence
  down as its batch grows shows here before its queue does);

and calls the backlog *growing* when either series rises with

1. a one-sided Mann-Kendall trend test (Mann 1945, Kendall 1975; see e.g. Hollander,
   Wolfe & Chicken, *Nonparametric Statistical Methods*, 3rd ed., 2014, sec. 8.1)
   significant at :data:`ALPHA` per series: the exact null distribution of Kendall's S
   for n untied values (S = n(n-1)/2 - 2 * inversions; inversions counted by the
   Mahonian numbers), so the false-alarm rate for independent interval values is at
   most ALPHA per series, 2 * ALPHA = 2 % for the pair (Bonferroni);
2. and a material rise: the Theil-Sen slope (Sen 1968: the median of the pairwise
   slopes) times the window at least :data:`MIN_RISE` times the series' median
   (:data:`MIN_RISE_PACE` for the decode pace). A significant but tiny drift (a cache
   warming up, 2 ms on 20 ms) is not a growing backlog.

Both series are medians of a per-request quantity normalised for length (a delay before
the first token; a time per token), so a heavy-tailed mix of output lengths does not
move them. The number of requests in flight, the first choice, does: one 1,900-token
request stays in flight for 14 s, so over a 10 s probe the count keeps filling up and
wanders with the few long requests, and it raised a false alarm in 5-11 % of stable
probes at 60-90 % of the demo profile's reference. The decode pace, too, wanders with the
batch those long requests keep full (2-5 % of stable probes rose by half their median at
80-100 % of that reference, 150 seeds), so it must double (:data:`MIN_RISE_PACE`): then
0 alarms in 150 seeds at 80 % and 90 %, 2 at 100 %. A backlog in front of the server shows
in the first series, a server slowed by its own batch in the second (on a model that admits
every request and slows each decode step by 0.5 ms per running sequence, at 120 % of the
capacity of its first 60 sequences: the delay caught 39 of 40 seeds, the pace 11; it caught
none the delay missed in any profile measured, and stays as the one series that can); a
server that slows nothing and queues nothing keeps up.

Interval values of a stable queue are not independent (the queue's relaxation time can
be a large part of an interval near saturation), so the stated rate is the test's
nominal one; the magnitude rule keeps the real one below it on the simulated endpoint's
model: ``tests/unit/test_stability.py`` measures it on virtual-clock runs (M/D/1 at
60 % and the 4-slot batch at its sweep answer: at most 1 alarm in 200 seeds; the demo's
64-slot profile with the Azure 2023 code trace's lengths, 10 s probes: at most 1 in 100 at
60 % and 80 % of its reference; 110 % of capacity over 20 s: an alarm in ~80 % of seeds).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

__all__ = [
    "ALPHA",
    "BINS",
    "MIN_RISE",
    "MIN_RISE_PACE",
    "TAIL_FRACTION",
    "TrendResult",
    "backlog_trend",
    "mann_kendall_p",
    "theil_sen_slope",
]

ALPHA = 0.01
"""One-sided significance level of each Mann-Kendall test (2 series: at most 2 % together)."""
BINS = 10
"""Intervals the window of scheduled sends is split into."""
MIN_RISE = 0.5
"""A growing series rises over the window by at least this fraction of its median."""
MIN_RISE_PACE = 1.0
"""The decode pace must rise by at least this fraction of its median (a doubling; see the module doc)."""
MIN_PER_BIN = 3  # an interval with fewer finished requests has no median
TAIL_FRACTION = 0.25
"""A probe is long enough for its tail when the p99 E2E of its finished requests is at most this
fraction of its window of scheduled sends; a longer tail extends the probe."""


@lru_cache(maxsize=64)
def _mahonian(n: int) -> tuple[int, ...]:
    """Counts of permutations of n items by number of inversions (0 .. n(n-1)/2)."""
    row = [1]
    for m in range(2, n + 1):
        new = [0] * (len(row) + m - 1)
        for k, c in enumerate(row):
            for j in range(m):
                new[k + j] += c
        row = new
    return tuple(row)


def mann_kendall_p(values: list[float] | np.ndarray) -> tuple[int, float]:
    """Kendall's S of ``values`` against their order, and the one-sided p-value of S >= observed.

    S = sum over i < j of sign(v_j - v_i). Without ties the p-value is exact (all n!
    orders equally likely under "no trend"); with ties, the normal approximation with
    the tie-corrected variance and a continuity correction. Values must be finite.
    """
    v = np.asarray(values, dtype=np.float64)
    n = v.size
    if n < 3:
        return 0, 1.0
    diff = np.sign(v[None, :] - v[:, None])
    s = int(np.triu(diff, 1).sum())
    _, counts = np.unique(v, return_counts=True)
    if (counts > 1).any():
        var = (n * (n - 1) * (2 * n + 5) - float(np.sum(counts * (counts - 1) * (2 * counts + 5)))) / 18.0
        if var <= 0:
            return s, 1.0
        z = (s - 1) / math.sqrt(var) if s > 0 else 0.0
        return s, 0.5 * math.erfc(z / math.sqrt(2.0))
    pairs = n * (n - 1) // 2
    inversions = (pairs - s) // 2  # S = pairs - 2 * inversions
    m = _mahonian(n)
    return s, sum(m[: inversions + 1]) / math.factorial(n)


def theil_sen_slope(x: np.ndarray, y: np.ndarray) -> float:
    """The median of the pairwise slopes (y_j - y_i) / (x_j - x_i), i < j (Sen 1968)."""
    i, j = np.triu_indices(x.size, 1)
    dx = x[j] - x[i]
    keep = dx != 0
    if not keep.any():
        return 0.0
    return float(np.median((y[j] - y[i])[keep] / dx[keep]))


@dataclass
class TrendResult:
    """One series' test: Kendall's S, its one-sided p-value, the rise over the window (Theil-Sen).

    ``first`` and ``last`` are the series' values (ns) in the first and the last interval tested.
    """

    series: str
    s: int
    p: float
    rise: float
    median: float
    growing: bool
    first: float = math.nan
    last: float = math.nan

    def describe(self) -> str:
        unit, scale = " ms", 1e-6
        return (
            f"{self.series} rises {self.rise * scale:+.1f}{unit} over the window (median {self.median * scale:.1f}{unit}; "
            f"Mann-Kendall S={self.s}, one-sided p={self.p:.4f}, alpha {ALPHA:g})"
        )


def _judge(series: str, x: np.ndarray, y: np.ndarray, window_ns: float) -> TrendResult:
    s, p = mann_kendall_p(y)
    rise = theil_sen_slope(x, y) * window_ns
    med = float(np.median(y))
    growing = p <= ALPHA and rise > 0 and rise >= (MIN_RISE_PACE if series == "decode_pace" else MIN_RISE) * med
    return TrendResult(series, s, p, rise, med, growing, float(y[0]), float(y[-1]))


def _binned_medians(
    series: str, sched: np.ndarray, values: np.ndarray, edges: np.ndarray, window_ns: float
) -> TrendResult | None:
    """Judge the per-interval medians of ``values`` (one per request, by scheduled send); None under 6 intervals."""
    mids = 0.5 * (edges[:-1] + edges[1:])
    idx = np.clip(np.searchsorted(edges, sched, side="right") - 1, 0, BINS - 1)
    xs, ys = [], []
    for b in range(BINS):
        d = values[idx == b]
        if d.size >= MIN_PER_BIN:
            xs.append(mids[b])
            ys.append(float(np.median(d)))
    if len(xs) < 6:
        return None
    return _judge(series, np.asarray(xs), np.asarray(ys), window_ns)


def backlog_trend(
    scheduled_ns: np.ndarray,
    first_token_ns: np.ndarray,
    tpot_ns: np.ndarray,
    measured: np.ndarray,
) -> list[TrendResult]:
    """Trend tests of a probe's backlog over its window of scheduled sends (see the module doc).

    Arrays per request, any order: ``scheduled_ns`` and ``first_token_ns`` (absolute monotonic
    ns; NaN when no token arrived), ``tpot_ns`` (NaN under two tokens), ``measured`` (False for
    warm-up). Returns one :class:`TrendResult` per series that could be tested (none for fewer
    than 6 intervals with :data:`MIN_PER_BIN` values).
    """
    sched = np.asarray(scheduled_ns, dtype=np.float64)
    first = np.asarray(first_token_ns, dtype=np.float64)
    tpot = np.asarray(tpot_ns, dtype=np.float64)
    meas = np.asarray(measured, dtype=np.bool_)
    if meas.sum() < 2 * BINS:
        return []
    lo, hi = float(sched[meas].min()), float(sched[meas].max())
    window = hi - lo
    if window <= 0:
        return []
    edges = np.linspace(lo, hi, BINS + 1)
    out: list[TrendResult] = []
    has = meas & np.isfinite(first)
    ftd = _binned_medians("first_token_delay", sched[has], first[has] - sched[has], edges, window)
    if ftd is not None:
        out.append(ftd)
    has = meas & np.isfinite(tpot)
    pace = _binned_medians("decode_pace", sched[has], tpot[has], edges, window)
    if pace is not None:
        out.append(pace)
    return out
