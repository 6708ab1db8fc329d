"""Does the system keep up? A one-sided trend test on a probe's backlog.

A probe at a rate the server cannot sustain builds a queue that grows for as long as
the probe lasts; a percentile taken over a short probe can still pass, because the
queue has not had time to push it past the threshold. So a probe PASSes only if its
backlog does not grow: :func:`backlog_trend` looks at two per-interval series over the
window of scheduled sends, split into :data:`BINS` equal intervals,

* ``first_token_delay``: the median, per interval, of (first token - scheduled send)
  of the requests scheduled in it (TTFT from the scheduled time; a queue in front of
  prefill shows here first);
* ``in_flight``: the mean number of requests in flight (scheduled, not yet ended,
  warm-up included) over the interval, sampled at :data:`SAMPLES_PER_BIN` instants
  (a backlog anywhere in the server, decode included, shows here),

and calls the backlog *growing* when either series rises with

1. a one-sided Mann-Kendall trend test (Mann 1945, Kendall 1975; see e.g. Hollander,
   Wolfe & Chicken, *Nonparametric Statistical Methods*, 3rd ed., 2014, sec. 8.1)
   significant at :data:`ALPHA` per series: the exact null distribution of Kendall's S
   for n untied values (S = n(n-1)/2 - 2 * inversions; inversions counted by the
   Mahonian numbers), so the false-alarm rate for independent interval values is at
   most ALPHA per series, 2 * ALPHA = 2 % for the pair (Bonferroni);
2. and a material rise: the Theil-Sen slope (Sen 1968: the median of the pairwise
   slopes) times the window at least :data:`MIN_RISE` times the series' median (and,
   for in-flight counts, at least :data:`MIN_RISE_REQUESTS` requests). A significant
   but tiny drift (a cache warming up, 2 ms on 20 ms) is not a growing backlog.

Interval values of a stable queue are not independent (the queue's relaxation time can
be a large part of an interval near saturation), so the stated rate is the test's
nominal one; the magnitude rule keeps the real one below it on the simulated endpoint's
model: ``tests/unit/test_stability.py`` measures it on virtual-clock runs (M/D/1 at
60 % and the 4-slot batch at its sweep answer: 1 and 0 alarms in 200 seeds; 110 % of capacity over 20 s:
an alarm in ~80 % of seeds).
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
    "MIN_RISE_REQUESTS",
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
MIN_RISE_REQUESTS = 2.0
"""An in-flight series must also rise by at least this many requests."""
SAMPLES_PER_BIN = 20
MIN_PER_BIN = 3  # an interval with fewer finished requests has no first-token median
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
    """One series' test: Kendall's S, its one-sided p-value, the rise over the window (Theil-Sen)."""

    series: str
    s: int
    p: float
    rise: float
    median: float
    growing: bool

    def describe(self) -> str:
        unit = " ms" if self.series == "first_token_delay" else ""
        scale = 1e-6 if self.series == "first_token_delay" else 1.0
        return (
            f"{self.series} rises {self.rise * scale:+.1f}{unit} over the window (median {self.median * scale:.1f}{unit}; "
            f"Mann-Kendall S={self.s}, one-sided p={self.p:.4f}, alpha {ALPHA:g})"
        )


def _judge(series: str, x: np.ndarray, y: np.ndarray, window_ns: float, floor: float) -> TrendResult:
    s, p = mann_kendall_p(y)
    rise = theil_sen_slope(x, y) * window_ns
    med = float(np.median(y))
    growing = p <= ALPHA and rise > 0 and rise >= max(MIN_RISE * med, floor)
    return TrendResult(series, s, p, rise, med, growing)


def backlog_trend(
    scheduled_ns: np.ndarray,
    end_ns: np.ndarray,
    first_token_ns: np.ndarray,
    measured: np.ndarray,
) -> list[TrendResult]:
    """Trend tests of a probe's backlog over its window of scheduled sends (see the module doc).

    Arrays per request, any order: ``scheduled_ns`` and ``end_ns`` (absolute monotonic ns;
    an unfinished request's end as the probe's end), ``first_token_ns`` (NaN when none
    arrived), ``measured`` (False for warm-up). Returns one :class:`TrendResult` per series
    that could be tested (none for fewer than 6 usable intervals).
    """
    sched = np.asarray(scheduled_ns, dtype=np.float64)
    end = np.asarray(end_ns, dtype=np.float64)
    first = np.asarray(first_token_ns, dtype=np.float64)
    meas = np.asarray(measured, dtype=np.bool_)
    if meas.sum() < 2 * BINS:
        return []
    lo, hi = float(sched[meas].min()), float(sched[meas].max())
    window = hi - lo
    if window <= 0:
        return []
    edges = np.linspace(lo, hi, BINS + 1)
    mids = 0.5 * (edges[:-1] + edges[1:])
    out: list[TrendResult] = []
    # first-token delay: median per interval of the measured requests that got a first token
    has = meas & np.isfinite(first)
    idx = np.clip(np.searchsorted(edges, sched[has], side="right") - 1, 0, BINS - 1)
    delay = first[has] - sched[has]
    xs, ys = [], []
    for b in range(BINS):
        d = delay[idx == b]
        if d.size >= MIN_PER_BIN:
            xs.append(mids[b])
            ys.append(float(np.median(d)))
    if len(xs) >= 6:
        out.append(_judge("first_token_delay", np.asarray(xs), np.asarray(ys), window, 0.0))
    # in flight: mean over each interval of #(scheduled <= t < end), every request
    t = np.linspace(lo, hi, BINS * SAMPLES_PER_BIN, endpoint=False) + window / (2 * BINS * SAMPLES_PER_BIN)
    s_sorted, e_sorted = np.sort(sched), np.sort(end)
    inflight = np.searchsorted(s_sorted, t, side="right") - np.searchsorted(e_sorted, t, side="right")
    per_bin = inflight.reshape(BINS, SAMPLES_PER_BIN).mean(axis=1).astype(np.float64)
    out.append(_judge("in_flight", mids, per_bin, window, MIN_RISE_REQUESTS))
    return out
