"""The backlog trend test, re-exported: its one definition is :mod:`loadgen.core.stability`.

It moved to the ground floor so that a plain run (:mod:`loadgen.engine.keepup`) judges whether its
server kept up by the same test a sweep probe is judged by; the sweep's modules still import it here.
"""

from __future__ import annotations

from loadgen.core.stability import (
    ALPHA,
    BINS,
    MIN_RISE,
    MIN_RISE_PACE,
    TAIL_FRACTION,
    TrendResult,
    backlog_trend,
    mann_kendall_p,
    theil_sen_slope,
)

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
