"""The reach of the client's own timing error: could it flip an SLO verdict? (issue 30)

The pure part of the flip test, shared by a sweep probe (:mod:`loadgen.sweep.client_error`, where
the rule is written out: which checks, which way each value moves, why) and a plain run with SLO
targets (:func:`loadgen.engine.validity.verdict_stands`, through
:meth:`loadgen.engine.results.Aggregator.slo_flip`). In short: each judged request's value is moved
*down* by its error (its send lag, for latency counted from the scheduled time, plus ``e``, the run's
bound on one stamp's lateness) and, being never under-measured, not up; TPOT and the stall
(differences of two stamps) by ``e`` both ways; a miss (+inf) stays a miss, an unmeasured TPOT/stall (0) conforms either way. A probe
then recounts its exceedances (:func:`shifted_exceedances`); a run takes the exact percentile of the
moved values again (:func:`run_target_flip`, the rule of :func:`loadgen.core.slo.run_target_verdict`).
If met/not met (PASS/FAIL) is the same both ways, the verdict stands.

The checks whose failure is such a timing error are :data:`TIMING_CHECKS`; any other failed generator
check changes the load itself and voids a verdict whatever its margin.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from loadgen.core.slo import PER_TOKEN_SLO_METRICS, SLOTarget, run_target_verdict

__all__ = [
    "FROM_SCHEDULE",
    "TIMING_CHECKS",
    "run_flip",
    "run_target_flip",
    "shifted_exceedances",
    "shifted_values",
    "timing_only",
]

TIMING_CHECKS = frozenset({"schedule_lag_p99", "stamp_error", "stamp_lateness_p99", "event_loop_lag_p99", "client_cpu"})
"""The generator checks (:func:`loadgen.engine.validity.validity`) whose failure is an error of the client's
*timing*: late sends (schedule lag) and late stamps (stamp lateness, the event loop's lag, a saturated client
CPU, their cause). Each request's share of that error is bounded (the largest send lag,
:func:`loadgen.engine.validity.timing_error_bound_ms` a stamp), so a verdict they cannot flip stands. The
others (send rate, workers, descriptors, an aborted generator, closed loop's idle users) change the load
itself, not only its measurement: they void a verdict whatever its margin."""

FROM_SCHEDULE = ("ttft", "time_to_first_answer_token", "e2e")
"""Targets measured from the scheduled time: a late send is part of their value."""


def timing_only(validity: dict[str, Any]) -> bool:
    """Did this run (or a probe's segment) fail only checks of the client's timing (:data:`TIMING_CHECKS`)?

    ``validity``: a ``result.json``'s ``validity`` block. False when no generator check failed.
    """
    v = validity
    failed = [c["name"] for c in v.get("checks", []) if c.get("group") == "generator" and not c.get("ok")]
    return bool(failed) and all(name in TIMING_CHECKS for name in failed)


def shifted_values(
    values_ns: np.ndarray, lags_ns: np.ndarray, t: SLOTarget, e_ns: float
) -> tuple[np.ndarray, np.ndarray]:
    """``(down, up)``: every request's value for ``t`` (ns; +inf a miss) moved down by its error, and up.

    ``lags_ns``: each request's send lag (ns), aligned with ``values_ns``; for the targets of
    :data:`FROM_SCHEDULE` the *largest* is taken out of every value (pass zeros where latency counts from the
    send): a send held back L builds a queue that delays the requests behind it too, by at most L for a
    FIFO, work-conserving server (departures are monotone in arrivals: every arrival moved by at most L moves
    every departure by at most L), so one request's own lag is not enough (``scripts/bench_verdict_truth``
    found FAILs that stood on their own lags and that an on-time schedule passes). Those are never moved up: the
    client stamps a token when it reads it, after it arrived, and a late send only adds to a latency counted
    from the scheduled time, so the client's timing can only have inflated them (the truth is at most the
    measured value: a PASS as measured is conservative; a FAIL must hold with the error taken out).
    TPOT and the stall, differences of two stamps either of which may be late, move by ``e_ns`` both
    ways, except an unmeasured value (0: conforms), which stays 0. A miss stays +inf.
    """
    if t.metric in FROM_SCHEDULE:
        lag = float(np.max(lags_ns)) if lags_ns.size else 0.0  # the largest: it delays the queue behind it too
        return values_ns - lag - e_ns, values_ns  # a stamp is never early: never under-measured
    measured = values_ns > 0
    return np.where(measured, values_ns - e_ns, values_ns), np.where(measured, values_ns + e_ns, values_ns)


def shifted_exceedances(values_ns: np.ndarray, lags_ns: np.ndarray, t: SLOTarget, e_ns: float) -> tuple[int, int]:
    """``(k_low, k_high)``: how many of the values moved down, and up (:func:`shifted_values`), are over ``t``'s
    threshold: a probe's exceedances with the client's error taken out and added."""
    down, up = shifted_values(values_ns, lags_ns, t, e_ns)
    thr = t.threshold_ns
    return int(np.count_nonzero(down > thr)), int(np.count_nonzero(up > thr))


def run_target_flip(
    t: SLOTarget, values_ns: np.ndarray, lags_ns: np.ndarray, e_ns: float, itl_pooled_ms: float | None = None
) -> dict[str, Any]:
    """A run's verdict on ``t`` judged as measured and with every value moved both ways (module docstring).

    ``values_ns``: every measured request's value (:func:`loadgen.core.slo.request_value`, +inf a miss) in
    the order the requests were counted, ``lags_ns`` their send lags in the same order; ``itl_pooled_ms``:
    an ITL target's pooled per-token percentile, which moves by ``e_ns`` as a whole (its misses do not).
    Returns ``{target, met, met_low, met_high, stands, value_ms, margin_ms}``: ``met_low`` with the values
    moved down (the client's error taken out), ``met_high`` moved up; ``margin_ms`` the threshold less the
    value as measured (None without a finite value).
    """
    e_ms = e_ns / 1e6
    if t.metric in PER_TOKEN_SLO_METRICS:
        met = run_target_verdict(t, values_ns, itl_pooled_ms)
        lo = None if itl_pooled_ms is None else itl_pooled_ms - e_ms
        hi = None if itl_pooled_ms is None else itl_pooled_ms + e_ms
        met_low, met_high = run_target_verdict(t, values_ns, lo)["met"], run_target_verdict(t, values_ns, hi)["met"]
    else:
        down, up = shifted_values(values_ns, lags_ns, t, e_ns)
        met = run_target_verdict(t, np.sort(values_ns))
        met_low = run_target_verdict(t, np.sort(down))["met"]
        met_high = run_target_verdict(t, np.sort(up))["met"]
    value = met["value_ms"]
    margin = None if value is None or not math.isfinite(value) else t.threshold_ns / 1e6 - value
    return {
        "target": t.label,
        "met": met["met"],
        "met_low": bool(met_low),
        "met_high": bool(met_high),
        "stands": met["met"] == met_low == met_high,
        "value_ms": value,
        "margin_ms": margin,
    }


def run_flip(
    targets: list[tuple[SLOTarget, np.ndarray, np.ndarray, float | None]], e_ms: float | None
) -> dict[str, Any]:
    """The flip test of a run with SLO targets: ``result.json`` ``validity.verdict_stands``.

    ``targets``: per target, its values and send lags (ns, as :func:`run_target_flip` takes them) and its
    pooled ITL value (ms; None for other metrics); ``e_ms``: the bound on one stamp's lateness (None or
    inf: not bounded, and nothing stands). Returns ``{stands, stamp_error_bound_ms, margin_ms, targets}``,
    ``margin_ms`` the smallest distance of a value from its threshold (ms; None without one), and
    ``reason`` when the bound is missing.
    """
    if e_ms is None or not math.isfinite(e_ms):
        why = "the client's stamp error is not bounded (a stamp over 1 s late, or none measured)"
        return {"stands": False, "stamp_error_bound_ms": None, "margin_ms": None, "targets": [], "reason": why}
    per = [run_target_flip(t, vals, lags, e_ms * 1e6, itl) for t, vals, lags, itl in targets]
    margins = [abs(x["margin_ms"]) for x in per if x["margin_ms"] is not None]
    return {
        "stands": all(x["stands"] for x in per),
        "stamp_error_bound_ms": e_ms,
        "margin_ms": min(margins) if margins else None,
        "targets": per,
    }
