"""A verdict's flip test: could the client's own timing error change a probe's PASS or FAIL? (issue 30)

A probe is a measurement of one decision: does this rate meet the SLO? The generator checks of
:mod:`loadgen.engine.validity` say how far the client fell short of perfect (schedule lag, stamp
lateness, loop lag, CPU); they are kept and printed as they are. What voids a *verdict* is narrower:
a timing error that could flip it. So a probe that failed only timing checks
(:data:`~loadgen.core.timing_error.TIMING_CHECKS`) is judged again with every judged request's value
moved by its own error bound, both ways:

* **down** (the truth can be lower): the probe's largest send lag (``schedule_lag_ns``) for latency
  counted from the scheduled time (TTFT, time to first answer token, E2E: a late send adds its lag to
  itself, and up to as much to the requests queued behind it: :func:`loadgen.core.timing_error.shifted_values`), and
  ``e``, the run's bound on one stamp's lateness (:func:`loadgen.engine.validity.timing_error_bound_ms`:
  the latest stamp charged plus the stamp probe's period, the part of a hold it cannot see);
* **up**: not at all, for those: the client stamps a token when it reads it, after it arrived, and a
  late send only adds to a latency counted from the scheduled time, so the client's timing can only
  have inflated them (truth <= measured: a PASS as measured is conservative, the issue's own words;
  ``scripts/bench_verdict_truth`` checks it against the server's truth log).

TPOT and the stall are differences of two stamps, each late by at most ``e``, either of which can be
the late one: moved by ``e`` both ways (a request without the value, e.g. one output token, conforms either way). A failed request is
a miss whatever its timing. The exceedances are counted again (``k_low``, ``k_high``) and judged by
the probe's own evidence rule (the dependence-corrected counts scaled alike). If PASS/FAIL is the
same both ways, the verdict stands: "VALID for this verdict" with the error and the margin; a flip
is PASS<->FAIL only, so if only the certification differs (a certified PASS that might be a point
estimate) the verdict is kept as a point estimate "(client timing)". A pooled ITL target stands
when its value is further than ``e`` from its threshold. Any other failed check (the send rate,
workers, descriptors, an aborted generator) changes the load itself: the probe stays INVALID.

The moves themselves (:func:`shifted_exceedances`, :data:`FROM_SCHEDULE`, :func:`timing_only`) live in
:mod:`loadgen.core.timing_error`, shared with a plain run's flip test (``loadgen run --slo``), which judges
the exact percentile of the moved values instead of a probe's counts.
"""

from __future__ import annotations

import math
from array import array
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from loadgen.core.slo import SLOTarget, TargetJudge, judged_per_request
from loadgen.core.timing_error import FROM_SCHEDULE, shifted_exceedances, timing_only
from loadgen.sweep.verdict import target_verdict

__all__ = ["FlipTest", "TargetLog", "flip_test", "shifted_exceedances", "steady_error", "timing_only"]


@dataclass
class TargetLog:
    """One per-request target's judged values (ns; inf: a miss) and their requests' send lags (ns)."""

    values: array[float] = field(default_factory=lambda: array("d"))
    lags: array[float] = field(default_factory=lambda: array("d"))

    def add(self, value: float, lag_ns: int | None) -> None:
        self.values.append(value)
        self.lags.append(float(lag_ns or 0))


@dataclass
class FlipTest:
    """The flip test's outcome for one probe: ``stands`` (no target can flip), ``point`` (one might lose only its
    certification), ``lines`` (one per target, for the probe's reasons), ``facts`` (``sweep.json``)."""

    stands: bool
    point: bool
    lines: list[str]
    facts: dict[str, Any]


def _percentile_ms(values: np.ndarray, p: float) -> float | None:
    if not values.size:
        return None
    v = float(np.percentile(values, p, method="higher"))
    return v / 1e6 if math.isfinite(v) else math.inf


def flip_test(
    judged: list[tuple[TargetJudge, TargetJudge, TargetLog | None]],
    pooled: list[tuple[SLOTarget, float | None]],
    e_ms: float | None,
    confidence: float,
    *,
    stopped_early: bool,
    fail_k: dict[str, int],
) -> FlipTest:
    """The flip test (module docstring) over a probe's targets.

    ``judged``: per per-request target, its raw counts, its effective counts (the dependence rule,
    :meth:`loadgen.sweep.evidence.DependenceLog.effective`) and its values; ``pooled``: each pooled
    (ITL) target and its value in ms; ``e_ms``: the stamp error bound (None: unbounded, nothing stands).
    """
    if e_ms is None or not math.isfinite(e_ms):
        why = "the client's stamp error is not bounded (a stamp over 1 s late, or none measured)"
        return FlipTest(False, False, [why], {"stands": False, "reason": why})
    e_ns = e_ms * 1e6
    stands, point, lines, per = True, False, [], []
    for tj, eff, log in judged:
        t = tj.target
        if log is None or not judged_per_request(t):
            continue
        vals = np.frombuffer(log.values, dtype=np.float64) if len(log.values) else np.zeros(0)
        lags = np.frombuffer(log.lags, dtype=np.float64) if len(log.lags) else np.zeros(0)
        k_vals = int(np.count_nonzero(vals > t.threshold_ns))
        extra = max(0, tj.k - k_vals)  # counted without a value (cancelled when already over): a miss either way
        k_lo, k_hi = (k + extra for k in shifted_exceedances(vals, lags, t, e_ns))
        outs = []
        for k in (tj.k, k_lo, k_hi):
            k_e = 0 if k == 0 else min(eff.n, max(1, round(k * eff.n / tj.n))) if tj.n else 0
            outs.append(
                target_verdict(
                    k,
                    tj.n,
                    t,
                    confidence,
                    stopped_early=stopped_early,
                    fail_k=fail_k.get(t.label),
                    eff=replace(eff, k=k_e),
                )  # fmt: skip
            )
        (v0, p0, _), (v_lo, p_lo, _), (v_hi, p_hi, _) = outs
        ok = v_lo == v_hi == v0
        lost = ok and (p_lo or p_hi) and not p0
        stands &= ok
        point |= bool(lost)
        value_ms = _percentile_ms(vals, t.percentile)
        thr_ms = t.threshold_ns / 1e6
        margin = None if value_ms is None or not math.isfinite(value_ms) else thr_ms - value_ms
        lag_max = float(np.max(lags)) / 1e6 if lags.size and t.metric in FROM_SCHEDULE else 0.0
        per.append(
            {
                "target": t.label, "k": tj.k, "k_low": k_lo, "k_high": k_hi, "verdict_low": v_lo,
                "verdict_high": v_hi, "stands": ok, "margin_ms": margin, "send_lag_max_ms": lag_max,
            }
        )  # fmt: skip
        m = f"margin {margin:+.1f} ms" if margin is not None else "no finite percentile"
        lines.append(
            f"{t.label}: {tj.k} of {tj.n} over as measured, {k_lo} with the client's error taken out, {k_hi} with it "
            f"added ({v_lo.upper()} / {v_hi.upper()}: " + ("stands" if ok else "could flip") + f"; {m})"
        )
    for t, v_ms in pooled:
        thr_ms = t.threshold_ns / 1e6
        ok = v_ms is not None and abs(v_ms - thr_ms) > e_ms
        stands &= ok
        per.append({"target": t.label, "value_ms": v_ms, "stands": ok})
        lines.append(
            f"{t.label}: pooled value {v_ms} ms, {'further' if ok else 'not further'} than {e_ms:.1f} ms from "
            f"{thr_ms:g} ms ({'stands' if ok else 'could flip'})"
        )
    facts = {"stands": stands, "point_estimate": point and stands, "stamp_error_bound_ms": e_ms, "targets": per}
    return FlipTest(stands, point and stands, lines, facts)


def _error_ms(ct: dict[str, Any]) -> tuple[float, float]:
    """A flip test's (stamp error bound e, largest send lag) in ms."""
    lag = max((t.get("send_lag_max_ms") or 0.0 for t in ct.get("targets") or []), default=0.0)
    return float(ct.get("stamp_error_bound_ms") or 0.0), float(lag)


def steady_error(ct: dict[str, Any] | None, earlier: list[dict[str, Any] | None]) -> str | None:
    """Why a probe made INVALID by its flip test (``ct``: its ``client_timing``, ``stands`` False) is not
    worth a re-run, or None. A re-run is for a transient stall; when the probe's error (e and largest send
    lag) is no larger than what an earlier probe of the sweep carried, the client's condition is steady (a
    process sharing its core) and only the verdict's margin, small near the knee, made it flip: a re-run
    would read the same. (md4 with a hog on the client's core ran 61.6 req/s three times, 240 s each,
    INVALID each time with e 17 ms against 18-31 ms on the valid probes before it.)"""
    if not ct or ct.get("stands") is not False:
        return None
    e, lag = _error_ms(ct)
    seen = [_error_ms(c) for c in earlier if c]
    if not seen or e > max(x for x, _ in seen) or lag > max(y for _, y in seen):
        return None
    return (
        f"its client timing error (e {e:.1f} ms, largest send lag {lag:.1f} ms) is no larger than earlier probes "
        "carried: a steady condition, not a transient stall, so it is not re-run"
    )
