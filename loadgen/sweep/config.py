"""Sweep settings: :class:`SweepConfig` (configuration only) and the ``sweep.json`` schema version."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from loadgen.core.contract import SWEEP_SCHEMA_VERSION
from loadgen.core.slo import SLOTarget, judged_per_request
from loadgen.core.stats import min_requests

if TYPE_CHECKING:
    from loadgen.core.redact import Redactor
    from loadgen.endpoints.base import Endpoint
    from loadgen.engine.runplan import LoadConfig

__all__ = ["LAG_FLOOR_MS", "LAG_FRACTION", "MAX_PROBE_FACTOR", "MAX_RERUNS", "SWEEP_SCHEMA_VERSION", "SweepConfig",
           "SweepContext"]  # fmt: skip

MAX_RERUNS = 2
"""A probe INVALID on the generator's checks (a transient client stall) is run again at most this often."""
LAG_FLOOR_MS = 5.0
MAX_PROBE_FACTOR = 4.0
"""``--max-probe-duration`` by default: this many ``--probe-duration`` s (the time cap of one probe, extensions
included; past it an undecided probe is a point estimate, with the time that would have certified it)."""
LAG_FRACTION = 0.02


@dataclass
class SweepConfig:
    """Search settings (configuration only). ``precision`` is a ratio (0.05 = 5 %)."""

    slos: list[SLOTarget]
    probe_duration_s: float = 60.0
    probe_warmup_s: float | None = None  # default: 10 % of the probe, at most 5 s
    confidence: float = 0.975  # each probe verdict; the answer's two-ended interval covers 1 - 2(1 - c)
    precision: float = 0.05
    repeats: int = 1
    max_rate_rps: float | None = None
    min_rate_rps: float | None = None
    start_rate_rps: float | None = None
    calibration_s: float = 10.0
    calibration_concurrency: int = 32
    max_extensions: int = 3
    max_probes: int = 30
    cost_per_hour_usd: float | None = None
    prices: Any = None  # loadgen.core.pricing.TokenPrices (per-token prices of a managed platform)
    accelerators: int | None = None
    concurrency_levels: list[int] | None = None
    workers: int = 1
    max_schedule_lag_ms: float | None = None  # None: the sweep default (schedule_lag_bound_ms)
    max_reruns: int = MAX_RERUNS
    unloaded_requests: int = 5  # the unloaded check before the search (loadgen.sweep.unloaded); 0: none
    max_probe_duration_s: float | None = None  # one probe's time cap (None: MAX_PROBE_FACTOR x probe_duration_s)
    min_model_share: float = 1.0  # --model mix: the smallest model's share of the requests (needed_requests)

    @property
    def probe_cap_given(self) -> bool:
        """True when ``--max-probe-duration`` was given: then it bounds even a probe's first segment
        (:func:`loadgen.sweep.evidence.first_segment_requests`); the default cap admits the evidence
        rule's count."""
        return self.max_probe_duration_s is not None

    def max_probe_s(self) -> float:
        """One probe's time cap, its extensions included (``--max-probe-duration``; issue 30): an undecided probe
        is extended, each segment sized to decide it (:func:`loadgen.sweep.evidence.next_segment_requests`),
        until this; only then is it a point estimate."""
        if self.max_probe_duration_s is not None:
            return max(self.max_probe_duration_s, self.probe_duration_s)
        return MAX_PROBE_FACTOR * self.probe_duration_s

    def needed_requests(self) -> int:
        """The fewest requests a probe can PASS on (the strictest percentile at the confidence); with a model mix,
        sized for its smallest model (each model is judged on its own requests: ``min_model_share``)."""
        pcts = [t.percentile for t in self.slos if judged_per_request(t)] or [50.0]
        return math.ceil(max(min_requests(p, self.confidence) for p in pcts) / self.min_model_share)

    def warmup_s(self) -> float:
        if self.probe_warmup_s is not None:
            return self.probe_warmup_s
        return min(5.0, 0.1 * self.probe_duration_s)

    def schedule_lag_bound_ms(self, run_bound_ms: float | None = None) -> tuple[float, str]:
        """The probes' p99 schedule-lag bound (ms) and why: max(5 ms, 2 % of the tightest TTFT or E2E threshold).

        Latency already counts from the scheduled time (coordinated-omission free), so a send
        late by L ms adds at most L ms to that request's TTFT/E2E: a lag of 2 % of the tightest
        threshold cannot turn a PASS into a FAIL by more than 2 % of it, while a busy client's
        few-ms hiccups no longer end a sweep with a generous SLO. TPOT/ITL targets do not tighten
        it (lag does not enter them). An explicit ``--max-schedule-lag`` (``max_schedule_lag_ms``) wins,
        and so does a library caller's own bound: ``run_bound_ms``, the probes' base
        ``ValidityBounds.max_schedule_lag_p99_ms``, when it is not the plain runs' default.
        """
        if self.max_schedule_lag_ms is not None:
            return self.max_schedule_lag_ms, "set by --max-schedule-lag"
        if run_bound_ms is not None and run_bound_ms != LAG_FLOOR_MS:
            return run_bound_ms, "set in the probes' ValidityBounds"
        ths = [t.threshold_ns / 1e6 for t in self.slos if t.metric in ("ttft", "time_to_first_answer_token", "e2e")]
        if not ths:
            return LAG_FLOOR_MS, "sweep default: 5 ms (no TTFT or E2E target)"
        tight = min(ths)
        bound = max(LAG_FLOOR_MS, LAG_FRACTION * tight)
        return bound, f"sweep default: max(5 ms, 2 % of the tightest TTFT/E2E threshold {tight:g} ms)"


@dataclass(frozen=True)
class SweepContext:
    """What every run of one sweep is given alike (its probes, its unloaded check): the endpoint, the base
    load (each run's a changed copy), the sweep's settings, the ``config_record`` each ``result.json``
    starts from and the redactor."""

    endpoint: Endpoint
    base: LoadConfig
    scfg: SweepConfig
    config_record: dict[str, Any]
    redactor: Redactor | None = None
