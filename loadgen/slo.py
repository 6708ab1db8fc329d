"""SLO parsing, the per-request goodput predicate, and percentile verdicts.

An SLO target reads ``METRIC:pNN<=VALUE`` (``ttft:p99<=300ms``): the NN-th
percentile of METRIC over the measured requests must be at most VALUE. The same
threshold is the per-request goodput predicate (a request conforms when its value
is at most every threshold; thresholds are inclusive). Failed and zero-output
requests count as over every threshold. Goodput as in DistServe (Zhong et al.,
OSDI 2024): requests per second that met every per-request SLO.

Per-request metrics (ttft, time_to_first_answer_token, tpot, e2e) are judged per
request. ITL is per token: a request conforms on ITL when its own NN-th
percentile ITL is within the threshold, and the run's ITL verdict uses the pooled
per-token percentile (its tokens are correlated within a request, so no
confidence bound is claimed).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from loadgen.errors import ConfigError
from loadgen.units import parse_duration_ns

METRICS = ("ttft", "time_to_first_answer_token", "tpot", "itl", "e2e")
_ALIASES = {"ttfat": "time_to_first_answer_token", "e2e_latency": "e2e", "latency": "e2e"}


@dataclass(frozen=True)
class SLOTarget:
    """``percentile`` (0-100) of ``metric`` must be <= ``threshold_ns`` (inclusive)."""

    metric: str
    percentile: float
    threshold_ns: int

    @property
    def label(self) -> str:
        p = f"{self.percentile:g}".replace(".", "")
        return f"{self.metric}:p{p}<={self.threshold_ns / 1e6:g}ms"


def parse_slo(text: str) -> SLOTarget:
    """Parse ``METRIC:pNN<=VALUE`` (``ttft:p99<=300ms``, ``e2e:p99.9<=10s``). Raises ConfigError."""
    m = re.fullmatch(r"\s*([a-z_0-9]+)\s*:\s*p([0-9]+(?:\.[0-9]+)?)\s*<=\s*(\S+)\s*", text or "")
    if not m:
        raise ConfigError(f"invalid SLO {text!r}: expected METRIC:pNN<=VALUE, e.g. ttft:p99<=300ms")
    metric = _ALIASES.get(m.group(1), m.group(1))
    if metric not in METRICS:
        raise ConfigError(f"invalid SLO {text!r}: metric must be one of {', '.join(METRICS)}")
    digits = m.group(2)
    if "." in digits:
        pct = float(digits)
    elif len(digits) <= 2:
        pct = float(digits)
    elif digits.startswith("99"):  # p999 -> 99.9, p9999 -> 99.99
        pct = float(digits[:2] + "." + digits[2:])
    else:  # p100 is not p10.0
        raise ConfigError(f"invalid SLO {text!r}: percentile must be between 0 and 100 (p999 is 99.9)")
    if not 0 < pct < 100:
        raise ConfigError(f"invalid SLO {text!r}: percentile must be between 0 and 100")
    thr = parse_duration_ns(m.group(3), what="SLO threshold")
    return SLOTarget(metric, pct, thr)


def exact_percentile(sorted_values: list[float], p: float) -> float:
    """Percentile with linear interpolation (numpy's default), ``inf`` allowed as a value.

    ``sorted_values`` ascending; ``p`` in 0-100. Used where failures count as +inf.
    """
    n = len(sorted_values)
    if n == 0:
        return math.nan
    h = (n - 1) * p / 100
    lo = math.floor(h)
    hi = min(lo + 1, n - 1)
    a, b = sorted_values[lo], sorted_values[hi]
    if math.isinf(b):
        return a if h == lo else math.inf
    return a + (b - a) * (h - lo)
