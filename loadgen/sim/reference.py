"""Reference answers for a sweep, computed by the simulated endpoint's own model on a virtual clock.

For a profile (:class:`SimParams`), a workload (input/output lengths fixed, or drawn
with replacement from a list of values such as an ``empirical:`` trace column;
Poisson or constant arrivals) and one SLO target on TTFT or E2E, the highest
rate whose percentile meets the threshold is found by bisection over the rate,
each rate judged on a long virtual run (seconds of CPU instead of minutes of
real time). The same seeds are used at every rate so the percentile is a smooth
function of the rate. Network and client overheads are not modelled (they are
well under a millisecond on loopback).

The reference is the **steady state**, the answer a sweep of long enough probes converges
to: each run drops its first ``warmup_fraction`` (a queue started empty), and its values are
not independent (a queue's late requests come in runs, as long as its busy periods), so the
percentile's precision is set by n / tau effective requests, not n (tau the exceedances'
autocorrelation time, :func:`loadgen.sweep.evidence.exceedance_tau`; ~20 at the knee of 2
FIFO servers). ``replications`` independent runs (seeds ``seed`` .. ``seed + R - 1``, each
with its own warm-up) are pooled: 4 x 50,000 requests at that knee hold ~10,000 effective
requests, the exceedance fraction 0.01 +- 0.001 (one standard error), the rate within ~1 %.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Required, TypedDict, Unpack

import numpy as np

from loadgen.core.slo import SLOTarget
from loadgen.sim.fifo import new_model
from loadgen.sim.model import SimParams, capacity_rps, simulate
from loadgen.workload.arrivals import arrival_offsets_ns

Lengths = int | Sequence[int] | np.ndarray
"""A fixed length, or values to draw lengths from with replacement (seeded)."""


def _draw(lengths: Lengths, n: int, rng: np.random.Generator) -> list[int]:
    if isinstance(lengths, int | np.integer):
        return [int(lengths)] * n
    vals = np.asarray(lengths, dtype=np.int64)
    return [int(v) for v in rng.choice(vals, size=n)]


def _mean(lengths: Lengths) -> int:
    return int(lengths) if isinstance(lengths, int | np.integer) else max(1, round(float(np.mean(lengths))))


def percentile_at(
    params: SimParams,
    rate_rps: float,
    target: SLOTarget,
    *,
    input_tokens: Lengths,
    output_tokens: Lengths,
    requests: int = 20000,
    arrival: str = "poisson",
    seed: int = 0,
    warmup_fraction: float = 0.05,
    replications: int = 1,
) -> float:
    """The target metric's percentile (ns) over ``replications`` virtual runs of ``requests`` at ``rate_rps``.

    Each run (seed ``seed + i``) drops its first ``warmup_fraction`` of requests; the rest are pooled.
    """
    vals: list[float] = []
    for i in range(max(1, replications)):
        vals += _values(
            params, rate_rps, target, input_tokens, output_tokens, requests, arrival, seed + i, warmup_fraction
        )
    return float(np.percentile(np.asarray(vals, dtype=np.float64), target.percentile))


def _values(
    params: SimParams,
    rate_rps: float,
    target: SLOTarget,
    input_tokens: Lengths,
    output_tokens: Lengths,
    requests: int,
    arrival: str,
    seed: int,
    warmup_fraction: float,
) -> list[float]:
    offs = arrival_offsets_ns(arrival, rate_rps, count=requests, seed=seed)
    rng = np.random.default_rng(seed)
    ins, outs = _draw(input_tokens, len(offs), rng), _draw(output_tokens, len(offs), rng)
    res = simulate(list(zip(offs, ins, outs, strict=True)), params, model=new_model(params))
    skip = int(len(res) * warmup_fraction)
    vals: list[float]
    if target.metric == "ttft":
        vals = [r.first_token_ns - r.arrival_ns for r in res[skip:]]
    elif target.metric == "e2e":
        vals = [r.end_ns - r.arrival_ns for r in res[skip:]]
    elif target.metric == "tpot":
        vals = [(r.end_ns - r.first_token_ns) / (r.output_tokens - 1) for r in res[skip:] if r.output_tokens > 1]
    else:
        raise ValueError(f"no reference for metric {target.metric}")
    return vals


class VirtualRuns(TypedDict, total=False):
    """The virtual runs that judge each rate of :func:`reference_max_rate`: :func:`percentile_at`'s
    keyword arguments (its defaults), less ``warmup_fraction``."""

    input_tokens: Required[Lengths]
    output_tokens: Required[Lengths]
    requests: int
    arrival: str
    seed: int
    replications: int


def reference_max_rate(
    params: SimParams, target: SLOTarget, *, rel_precision: float = 0.002, **runs: Unpack[VirtualRuns]
) -> float:
    """Highest rate (req/s) at which the target's steady-state percentile is within its threshold.

    ``requests`` x ``replications`` pooled requests per rate (:func:`percentile_at`; the module
    docstring gives the precision that buys)."""
    hi = capacity_rps(params, _mean(runs["input_tokens"]), _mean(runs["output_tokens"])) * 1.5
    lo = hi / 1000

    def ok(r: float) -> bool:
        return percentile_at(params, r, target, **runs) <= target.threshold_ns

    if not ok(lo):
        return 0.0
    while ok(hi):
        lo, hi = hi, hi * 2
    return bisect_rate(ok, lo, hi, rel_precision)


def bisect_rate(ok: Callable[[float], bool], lo: float, hi: float, rel_precision: float) -> float:
    """The highest rate ``ok`` accepts between ``lo`` (accepted) and ``hi`` (refused), bisected in log space
    until ``hi / lo - 1`` is within ``rel_precision``."""
    while (hi - lo) / lo > rel_precision:
        mid = (lo * hi) ** 0.5
        if ok(mid):
            lo = mid
        else:
            hi = mid
    return lo
