"""Sweep settings: :class:`SweepConfig` (configuration only) and the ``sweep.json`` schema version."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from loadgen.slo import SLOTarget, judged_per_request
from loadgen.stats import min_requests

SWEEP_SCHEMA_VERSION = 1


@dataclass
class SweepConfig:
    """Search settings (configuration only). ``precision`` is a ratio (0.05 = 5 %)."""

    slos: list[SLOTarget]
    probe_duration_s: float = 60.0
    probe_warmup_s: float | None = None  # default: 10 % of the probe, at most 5 s
    confidence: float = 0.95
    precision: float = 0.05
    repeats: int = 1
    max_rate_rps: float | None = None
    min_rate_rps: float | None = None
    start_rate_rps: float | None = None
    calibration_s: float = 10.0
    calibration_concurrency: int = 32
    max_extensions: int = 2
    max_probes: int = 30
    cost_per_hour_usd: float | None = None
    prices: Any = None  # loadgen.pricing.TokenPrices (per-token prices of a managed platform)
    accelerators: int | None = None
    concurrency_levels: list[int] | None = None
    workers: int = 1

    def needed_requests(self) -> int:
        pcts = [t.percentile for t in self.slos if judged_per_request(t)] or [50.0]
        return max(min_requests(p, self.confidence) for p in pcts)

    def warmup_s(self) -> float:
        if self.probe_warmup_s is not None:
            return self.probe_warmup_s
        return min(5.0, 0.1 * self.probe_duration_s)
