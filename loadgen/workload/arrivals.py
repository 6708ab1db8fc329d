"""Arrival processes: seeded offsets (ns from t0) of an open-loop schedule.

* ``poisson``: exponential inter-arrival gaps with mean 1/rate.
* ``gamma``: gamma-distributed gaps with shape = ``burstiness`` and mean 1/rate,
  as vLLM ``bench serve --burstiness`` (1.0 = Poisson; inter-arrival CV =
  1/sqrt(burstiness); smaller is burstier).
* ``constant``: gaps of exactly 1/rate.

The first request is sent at offset 0. Offsets are non-decreasing integers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypedDict, Unpack

import numpy as np

from loadgen.core.errors import ConfigError

ARRIVALS = ("poisson", "gamma", "constant")


@dataclass(frozen=True, slots=True)
class Arrivals:
    """The open-loop arrival settings of a run: its rate and arrival process, and what bounds it.

    Built by :attr:`loadgen.engine.runplan.LoadConfig.arrivals`; taken by
    :meth:`loadgen.workload.spec.Workload.schedule` (and ``plan``, ``lazy_schedule``).
    """

    rate_rps: float | None = None
    """Mean arrival rate, requests per second (``--rate``); None with a trace that keeps its own rate."""
    arrival: str = "poisson"
    """The arrival process (``--arrival``): one of :data:`ARRIVALS`."""
    burstiness: float = 1.0
    """The gamma gaps' shape (``--burstiness``; gamma only): 1.0 is Poisson, smaller is burstier."""
    requests: int | None = None
    """Measured sends (``--requests``); exclusive with ``duration_s``."""
    duration_s: float | None = None
    """The measured span, seconds (``--duration``): every arrival before it; exclusive with ``requests``."""
    warmup_requests: int = 0
    """Warm-up sends before the measured ones (``--warmup N``), excluded from statistics."""
    warmup_s: float = 0.0
    """A warm-up span, seconds, before the measured one (``--warmup 10s``), excluded from statistics."""

    def check(self) -> None:
        """The arrival settings' one rule between them (``--requests``/``--duration``, ``--arrival``,
        ``--burstiness``): ConfigError."""
        if self.requests is not None and self.duration_s is not None:
            raise ConfigError("--requests and --duration clash: give one")
        if self.arrival != "gamma" and self.burstiness != 1.0:
            raise ConfigError("--burstiness needs --arrival gamma")
        if not self.burstiness > 0:
            raise ConfigError("--burstiness must be > 0")

    @property
    def count(self) -> int | None:
        """Sends in all (warm-up included) when bounded by ``requests``; else None."""
        return None if self.requests is None else self.warmup_requests + self.requests

    @property
    def span_s(self) -> float | None:
        """The schedule's span, seconds (warm-up included) when bounded by ``duration_s``; else None."""
        return None if self.duration_s is None else self.warmup_s + self.duration_s

    def offsets_array(self, seed: int) -> np.ndarray:
        """The send offsets (ns, int64) of the arrival process: ``count`` of them, or every one before ``span_s``.

        Raises ConfigError without a rate or a bound (see :func:`arrival_offsets_array`)."""
        if self.rate_rps is None:
            raise ConfigError("an open-loop run needs --rate (or a trace)")
        count, span_s = self.count, self.span_s
        if count is None and span_s is None:
            raise ConfigError("give --requests N or --duration D")
        return arrival_offsets_array(
            self.arrival, self.rate_rps, count=count, duration_s=None if count is not None else span_s,
            seed=seed, burstiness=self.burstiness,
        )  # fmt: skip

    def warm(self, offsets_ns: np.ndarray) -> np.ndarray:
        """The warm-up flags of a schedule's sends: its first ``warmup_requests``, or those before ``warmup_s``."""
        if self.warmup_requests:
            return np.arange(offsets_ns.size) < self.warmup_requests
        return offsets_ns < round(self.warmup_s * 1e9)


def _gaps(kind: str, rate_rps: float, n: int, rng: np.random.Generator, burstiness: float) -> np.ndarray:
    mean_s = 1.0 / rate_rps
    if kind == "constant":
        return np.full(n, mean_s)
    if kind == "poisson":
        return rng.exponential(mean_s, n)
    if kind == "gamma":
        if burstiness <= 0:
            raise ConfigError("--burstiness must be > 0")
        return rng.gamma(burstiness, mean_s / burstiness, n)
    raise ConfigError(f"unknown arrival process {kind!r}; choose one of {', '.join(ARRIVALS)}")


class ArrivalDraw(TypedDict, total=False):
    """The keyword arguments of :func:`arrival_offsets_array` (its defaults), which :func:`arrival_offsets_ns` forwards."""

    count: int | None
    duration_s: float | None
    seed: int
    burstiness: float


def arrival_offsets_ns(kind: str, rate_rps: float, **draw: Unpack[ArrivalDraw]) -> list[int]:
    """Offsets (ns) of ``count`` arrivals, or of every arrival before ``duration_s``.

    Exactly one of ``count`` / ``duration_s``. Raises ConfigError on a bad rate or kind.
    A list of :func:`arrival_offsets_array` (which a long run should use: 8 bytes an arrival).
    """
    return arrival_offsets_array(kind, rate_rps, **draw).tolist()


CHUNK = 1 << 20  # the running sum is taken a chunk at a time, so temporaries stay small


def arrival_offsets_array(
    kind: str,
    rate_rps: float,
    *,
    count: int | None = None,
    duration_s: float | None = None,
    seed: int = 0,
    burstiness: float = 1.0,
) -> np.ndarray:
    """:func:`arrival_offsets_ns` as an int64 array (the same values, rounded half to even).

    With ``duration_s`` the offsets are the running sum of the gaps (in ns, added in
    order, as a loop would) up to the first at or past the duration.
    """
    if not rate_rps or rate_rps <= 0:
        raise ConfigError("--rate must be > 0")
    if (count is None) == (duration_s is None):
        raise ConfigError("give exactly one of a request count or a duration")
    rng = np.random.default_rng(seed)
    if count is not None:
        if count <= 0:
            return np.zeros(0, dtype=np.int64)
        gaps = _gaps(kind, rate_rps, count, rng, burstiness)
        gaps[0] = 0.0
        return np.rint(np.cumsum(gaps) * 1e9).astype(np.int64)
    parts: list[np.ndarray] = []
    t = 0.0
    first = True
    limit = duration_s * 1e9  # type: ignore[operator]  # duration_s is set when count is None (checked above)
    batch = max(int(rate_rps * duration_s * 1.2) + 16, 16)  # type: ignore[operator]  # duration_s is set when count is None (checked above)
    while True:
        gaps = _gaps(kind, rate_rps, batch, rng, burstiness) * 1e9
        if first:
            gaps[0] = 0.0
            first = False
        for a in range(0, gaps.size, CHUNK):
            run = np.cumsum(np.concatenate(([t], gaps[a : a + CHUNK])))[1:]  # t + g1, (t + g1) + g2, ...
            stop = int(np.searchsorted(run, limit, side="left"))
            parts.append(np.rint(run[:stop]).astype(np.int64))
            if stop < run.size:
                return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
            t = float(run[-1])


def realized_rate_rps(offsets_ns: list[int]) -> float | None:
    """The schedule's own rate: (n - 1) / (last - first). None for fewer than 2 arrivals."""
    if len(offsets_ns) < 2 or offsets_ns[-1] == offsets_ns[0]:
        return None
    return (len(offsets_ns) - 1) / ((offsets_ns[-1] - offsets_ns[0]) / 1e9)


def condition_on_rate(offsets_ns: np.ndarray, measured: np.ndarray, rate_rps: float) -> np.ndarray:
    """The schedule with its measured sends conditioned on realizing ``rate_rps`` exactly.

    The measured entries (``measured``, a contiguous run after any warm-up) keep their
    first send; their N - 1 gaps are scaled by one factor so that their span is
    (N - 1) / rate_rps, i.e. the schedule's realized rate (N - 1) / span equals the
    nominal rate (to 1 ns of rounding). For i.i.d. gamma gaps (Poisson: shape 1) the
    normalised gaps g_i / sum(g) are Dirichlet and independent of the sum, so scaling
    them is exactly the renewal process conditioned on N arrivals over that span (for
    Poisson: N - 2 sorted uniforms between the two ends); constant gaps are unchanged.
    Warm-up entries before the measured run are unchanged. Returns a new int64 array.
    Used for sweep probes: a 299-request Poisson probe's realized rate otherwise scatters
    ~6 % (1 / sqrt(N)) around the nominal rate the search compares.
    """
    offs = np.asarray(offsets_ns, dtype=np.int64).copy()
    idx = np.flatnonzero(np.asarray(measured, dtype=np.bool_))
    if rate_rps <= 0 or not np.isfinite(rate_rps) or idx.size < 2:
        return offs
    i0, i1 = int(idx[0]), int(idx[-1])
    if i1 - i0 + 1 != idx.size:
        raise ValueError("the measured entries must be contiguous")
    gaps = np.diff(offs[i0 : i1 + 1]).astype(np.float64)
    total = float(gaps.sum())
    span = (idx.size - 1) / rate_rps * 1e9
    if total <= 0:
        gaps = np.full(gaps.size, span / gaps.size)
    else:
        gaps *= span / total
    offs[i0 + 1 : i1 + 1] = offs[i0] + np.rint(np.cumsum(gaps)).astype(np.int64)
    if i1 + 1 < offs.size:  # entries after the measured run keep their gaps
        shift = offs[i1] - np.asarray(offsets_ns, dtype=np.int64)[i1]
        offs[i1 + 1 :] += shift
    return offs
