"""Scaling efficiency across accelerator counts, from one sweep per size.

For sweeps of the same model and workload on N = 1, 2, 4, 8 accelerators (tensor or data
parallel), capacity(N) = the sweep's max SLO load (``answer.max_rate_rps``; req/s):

* capacity per accelerator = capacity(N) / N;
* efficiency(N) = capacity(N) / ((N / N0) x capacity(N0)), N0 the smallest size given (the
  textbook capacity(N) / (N x capacity(1)) when a 1-accelerator sweep is given); 1.0 is
  linear scaling;
* step efficiency from the next smaller size M: (capacity(N) / capacity(M)) / (N / M).

Each capacity carries its confidence interval [L, U) (:mod:`loadgen.capacity.confidence`);
the efficiency's bounds are L_N / ((N / N0) x U_N0) and U_N / ((N / N0) x L_N0) (None where an
end is unbounded), so an efficiency below 1 that its interval still covers is not a finding.
"""

from __future__ import annotations

from typing import Any

from loadgen.capacity.confidence import capacity_interval
from loadgen.capacity.source import SweepCapacity
from loadgen.errors import ConfigError

__all__ = ["scaling_table"]


def scaling_table(sized: list[tuple[int, SweepCapacity]], confidence: float | None = None) -> list[dict[str, Any]]:
    """One row per size, smallest first (formulas in the module docstring). Raises ConfigError
    for a repeated size, a size < 1, a sweep without an answer or sweeps under different SLOs."""
    if not sized:
        raise ConfigError("give at least one sweep with its accelerator count")
    sizes = [n for n, _ in sized]
    if len(set(sizes)) != len(sizes) or min(sizes) < 1:
        raise ConfigError(f"accelerator counts must be distinct and >= 1: {sizes}")
    slos = {tuple(c.slo_labels) for _, c in sized}
    if len(slos) > 1:
        raise ConfigError("the sweeps were judged on different SLOs: " + "; ".join(", ".join(s) for s in slos))
    rows: list[dict[str, Any]] = []
    ordered = sorted(sized, key=lambda x: x[0])
    n0, c0 = ordered[0]
    if c0.max_rate_rps is None:
        raise ConfigError(f"{c0.path}: no rate met the SLO: no base capacity")
    ci0 = capacity_interval(c0, confidence)
    prev: tuple[int, float] | None = None
    for n, c in ordered:
        if c.max_rate_rps is None:
            raise ConfigError(f"{c.path}: no rate met the SLO")
        ci = capacity_interval(c, confidence)
        k = n / n0
        eff = c.max_rate_rps / (k * c0.max_rate_rps)
        lo = (ci.lower_rps / (k * ci0.upper_rps)) if (ci.lower_rps is not None and ci0.upper_rps) else None
        hi = (ci.upper_rps / (k * ci0.lower_rps)) if (ci.upper_rps is not None and ci0.lower_rps) else None
        step = (c.max_rate_rps / prev[1]) / (n / prev[0]) if prev else None
        rows.append({"accelerators": n, "label": c.label, "capacity_rps": c.max_rate_rps,
                     "capacity_per_accelerator_rps": c.max_rate_rps / n, "efficiency": eff,
                     "efficiency_ci": [lo, hi], "step_efficiency": step, "ci_rps": [ci.lower_rps, ci.upper_rps],
                     "output_tps_per_accelerator": (c.output_tps / n) if c.output_tps else None})  # fmt: skip
        prev = (n, c.max_rate_rps)
    return rows
