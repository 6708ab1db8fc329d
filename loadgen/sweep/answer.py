"""What the probes say about the answer: its certified interval and its inconsistencies.

Read by :mod:`loadgen.sweep.search` when it writes the answer (``sweep.json`` ``answer.interval_rps``,
``non_monotonic``); plain functions of the finished probes.
"""

from __future__ import annotations

from typing import Any

from loadgen.sweep.probe import Probe

__all__ = [
    "INTERVAL_WIDTH_MAX",
    "INTERVAL_WIDTH_PER_PRECISION",
    "certified_interval",
    "interactivity_rows",
    "interval_settled",
    "interval_width",
    "non_monotonic",
]

# The search also stops once the certified interval is at most min(2 x --precision, 10 %) wide
# (relative to its midpoint): issue 30's 10 % at the default 5 %, never looser than that (with
# --precision 10 % the bracket rule alone is as tight). Closer to the knee than that, a probe's
# percentile sits at its threshold and --max-probe-duration cannot decide it.
INTERVAL_WIDTH_PER_PRECISION = 2.0
INTERVAL_WIDTH_MAX = 0.10


def interval_width(precision: float) -> float:
    """The certified interval's width (over its midpoint) at which the search stops."""
    return min(INTERVAL_WIDTH_PER_PRECISION * precision, INTERVAL_WIDTH_MAX)


def non_monotonic(probes: list[Probe]) -> list[str]:
    """Rates that FAILed below a rate that PASSed (or mixed verdicts at one rate); a probe a certifying probe
    continued counts only through it (their requests are judged together)."""
    flags = []
    gone = {p.continues for p in probes if p.continues is not None}
    open_loop = [p for i, p in enumerate(probes, 1) if p.concurrency is None and p.verdict in ("pass", "fail")
                 and i not in gone]  # fmt: skip
    passes = [p.offered_rps for p in open_loop if p.verdict == "pass"]
    for p in open_loop:
        if p.verdict == "fail" and any(r >= p.offered_rps for r in passes):
            flags.append(f"{p.offered_rps:.3f} req/s failed although a rate at or above it passed")
    return flags


def certified_interval(probes: list[Probe]) -> list[float | None]:
    """The answer's interval (issue 30): [highest certified-PASS rate, lowest certified-FAIL rate above it] of the
    open-loop probes (certified: decided on the evidence rule's bounds, not a point estimate; a FAIL stopped
    early or on a growing backlog is certain). None where no probe certified that side."""
    loop = [p for p in probes if p.concurrency is None and not p.interrupted]
    lo = max((p.offered_rps for p in loop if p.verdict == "pass" and not p.low_confidence), default=None)
    hi = min(
        (
            p.offered_rps
            for p in loop
            if p.verdict == "fail" and not p.low_confidence and (lo is None or p.offered_rps > lo)
        ),
        default=None,
    )
    return [lo, hi]


def interval_settled(probes: list[Probe], precision: float) -> bool:
    """True when :func:`certified_interval` has both ends and its width is at most
    :func:`interval_width` of its midpoint: (hi - lo) / ((hi + lo) / 2)."""
    lo, hi = certified_interval(probes)
    if lo is None or hi is None:
        return False
    return (hi - lo) / ((hi + lo) / 2) <= interval_width(precision)


def interactivity_rows(probes: list[Probe], accelerators: int | None) -> list[dict[str, Any]]:
    """A concurrency sweep's interactivity curve: per probe, per-user output tok/s (1000 / its TPOT p50) against
    total output tok/s (and per accelerator); no point where no steady load was measured, never (0, 0)."""
    rows = []
    for p in probes:
        tpot = p.tpot_p50_ms  # in memory (Probe), never re-read from the probe's result.json
        per_user = (1000.0 / tpot) if tpot else None
        total = p.output_tps
        if p.stopped_early or p.verdict in ("invalid", "rate_limited", "interrupted"):
            per_user = total = None
        rows.append(
            {
                "concurrency": p.concurrency,
                "stopped_early": p.stopped_early,
                "verdict_text": p.verdict_text,
                "sent_rps": p.sent_rps,
                "per_user_output_tps": per_user,
                "output_tps": total,
                "output_tps_per_accelerator": (total / accelerators) if (total is not None and accelerators) else None,
                "meets_slo": p.verdict == "pass",
            }
        )
    return rows
