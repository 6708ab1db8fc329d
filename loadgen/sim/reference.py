"""Reference answers for a sweep, computed by the simulated endpoint's own model on a virtual clock.

For a profile (:class:`SimParams`), a workload (fixed input/output lengths,
Poisson or constant arrivals) and one SLO target on TTFT or E2E, the highest
rate whose percentile meets the threshold is found by bisection over the rate,
each rate judged on a long virtual run (seconds of CPU instead of minutes of
real time). The same seeds are used at every rate so the percentile is a smooth
function of the rate. Network and client overheads are not modelled (they are
well under a millisecond on loopback).
"""

from __future__ import annotations

import numpy as np

from loadgen.sim.fifo import new_model
from loadgen.sim.model import SimParams, capacity_rps, simulate
from loadgen.slo import SLOTarget
from loadgen.workload.arrivals import arrival_offsets_ns


def percentile_at(
    params: SimParams,
    rate_rps: float,
    target: SLOTarget,
    *,
    input_tokens: int,
    output_tokens: int,
    requests: int = 20000,
    arrival: str = "poisson",
    seed: int = 0,
    warmup_fraction: float = 0.05,
) -> float:
    """The target metric's percentile (ns) over a virtual run of ``requests`` at ``rate_rps``."""
    offs = arrival_offsets_ns(arrival, rate_rps, count=requests, seed=seed)
    res = simulate([(o, input_tokens, output_tokens) for o in offs], params, model=new_model(params))
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
    return float(np.percentile(np.asarray(vals, dtype=np.float64), target.percentile))


def reference_max_rate(
    params: SimParams,
    target: SLOTarget,
    *,
    input_tokens: int,
    output_tokens: int,
    requests: int = 20000,
    arrival: str = "poisson",
    seed: int = 0,
    rel_precision: float = 0.002,
) -> float:
    """Highest rate (req/s) at which the target's percentile is within its threshold."""
    hi = capacity_rps(params, input_tokens, output_tokens) * 1.5
    lo = hi / 1000

    def ok(r: float) -> bool:
        return (
            percentile_at(
                params,
                r,
                target,
                input_tokens=input_tokens,
                output_tokens=output_tokens,
                requests=requests,
                arrival=arrival,
                seed=seed,
            )
            <= target.threshold_ns
        )

    if not ok(lo):
        return 0.0
    while ok(hi):
        lo, hi = hi, hi * 2
    while (hi - lo) / lo > rel_precision:
        mid = (lo * hi) ** 0.5
        if ok(mid):
            lo = mid
        else:
            hi = mid
    return lo
