"""What a probe's requests are worth as evidence: their dependence, and a closed-loop probe's length.

**Dependence between requests** (:class:`DependenceLog`, :func:`extension_verdict`): a queue's
late requests come in runs (its busy periods), so n requests are not n independent trials; each
segment counts n / tau effective requests and k / tau effective exceedances, tau the exceedances'
integrated autocorrelation time (:func:`exceedance_tau`), and the Clopper-Pearson bounds of
:mod:`loadgen.core.slo` are taken on those. Measured on the simulated endpoint's model
(``scripts/bench_capacity_ci --virtual``, 2 FIFO servers, p99 TTFT <= 200 ms, 20 sweeps of
60 s probes): the 95 % interval on the answer held the steady-state reference in 14 of 20
on raw counts, 20 of 20 on effective counts, for 20 % more probe time.

**Closed loop**: a closed-loop probe is held to the evidence rule of the open-loop ones, extended
in time, and its sent rate is counted over its duration.

An open-loop probe is sized in requests (at least :meth:`~loadgen.sweep.SweepConfig.needed_requests`);
a closed-loop probe (``--concurrency-levels``) sends what its users send in ``probe_duration_s``,
which at a low user count or a slow server is far fewer (19 or 60 requests where p99 at 95 %
needs 299). :func:`closed_loop_extension_s` extends it in time until it holds that many, so its
verdict is decided on the same evidence, or marked a point estimate.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import numpy as np

from loadgen.core.run_result import RunResult
from loadgen.core.slo import TargetJudge, allowed_fraction, judge_counts, judged_per_request, probe_target_verdict
from loadgen.core.stability import TAIL_FRACTION
from loadgen.sweep.config import SweepConfig


def closed_loop_extension_s(
    targets: list[TargetJudge], scfg: SweepConfig, need: int, elapsed_s: float, segments: int
) -> float | None:
    """The next closed-loop segment's length (s), or None when the probe is done.

    The evidence rule of the open-loop probes, in time: while a per-request target has
    fewer than ``need`` judged requests the probe is extended by a segment sized from the
    judged requests per second so far, (need - n) * elapsed_s / n, plus 25 % (at least
    1 s; ``probe_duration_s`` when none was judged yet); while it is undecided with enough
    requests, by another ``probe_duration_s``. At most ``max_extensions`` segments; past
    them the verdict rests on the point estimate (``low_confidence``).
    """
    judged = [tj for tj in targets if judged_per_request(tj.target)]
    if segments > scfg.max_extensions or not judged:
        return None
    n = min(tj.n for tj in judged)
    if n < need:
        if n == 0 or elapsed_s <= 0:
            return scfg.probe_duration_s
        return max(1.0, 1.25 * (need - n) * elapsed_s / n)
    verdicts = [judge_counts(tj.k, tj.n, tj.target, scfg.confidence)[0] for tj in judged]
    if "fail" in verdicts or all(v == "pass" for v in verdicts):
        return None
    return scfg.probe_duration_s


def closed_loop_sent_rps(results: list[RunResult]) -> float | None:
    """A closed-loop probe's sent rate: measured requests sent / the probe's duration, over all segments.

    sum(counts.requests - counts.unsent) / sum(duration_s), ``duration_s`` from the first
    measured send to the last end (the ``*_incl_drain`` rates' denominator,
    :mod:`loadgen.engine.results`). Not (sent - 1) / send span, the open loop's convention
    (``achieved_send_rps``): a closed loop's users all send at the ramp, so with few
    requests that span is the ramp's few ms (16 users' first sends in 18 ms read 844 req/s).
    """
    sent = sum(r.counts.get("requests", 0) - r.counts.get("unsent", 0) for r in results)
    dur = sum(r.duration_s or 0.0 for r in results)
    return sent / dur if dur > 0 and sent > 0 else None


# ---------------------------------------------------------------- dependence between requests

DEPENDENCE_LEVELS = (0.75, 0.90)
"""Quantiles of a segment's own values whose exceedance indicators proxy the threshold's (see :class:`DependenceLog`)."""
MIN_EXCEEDANCES = 10
"""An indicator series with fewer events than this says nothing about its autocorrelation and is not used."""
STAND_IN_REACH = 0.5
"""The stand-in levels count only when the segment's largest value reached this fraction of the threshold."""

DEPENDENCE_RULE = (
    "requests counted as effective requests: per segment n / tau and k / tau, tau the integrated "
    "autocorrelation time (Geyer's initial positive sequence) of the exceedance indicators in send order, "
    "the largest of those at the threshold and at the segment's own p75 and p90 (those two only when the "
    "segment's largest value reached half the threshold)"
)


def integrated_autocorrelation_time(x: np.ndarray) -> float:
    """tau = 1 + 2 sum_k rho_k of a series, by Geyer's initial positive sequence estimator.

    rho_k the sample autocorrelation at lag k (FFT, biased estimator); the sum runs over pairs
    Gamma_m = rho_2m + rho_2m+1 while Gamma_m > 0, tau = 2 sum Gamma_m - 1 (Geyer, "Practical
    Markov chain Monte Carlo", Statistical Science 7, 1992, sec. 3.3; the effective sample size
    n / tau of MCMC output analysis). Returns >= 1; 1 for a constant series or fewer than 4 values.
    Var(mean of n values) = tau x Var(one value) / n, so n / tau independent values carry the
    same evidence.
    """
    n = len(x)
    if n < 4:
        return 1.0
    d = np.asarray(x, dtype=np.float64) - float(np.mean(x))
    var = float(np.dot(d, d)) / n
    if var <= 0:
        return 1.0
    f = np.fft.rfft(d, 2 * n)
    rho = np.fft.irfft(f * np.conj(f))[:n] / n / var
    pairs = rho[: n - n % 2].reshape(-1, 2).sum(axis=1)
    stop = np.flatnonzero(pairs <= 0)
    s = float(pairs[: stop[0] if stop.size else len(pairs)].sum())
    return max(1.0, 2.0 * s - 1.0)


def exceedance_tau(values: np.ndarray, threshold: float) -> float:
    """The autocorrelation time of a segment's exceedances of ``threshold`` (ns values in send order).

    The threshold's own indicator (value > threshold; misses are +inf) is used when it holds at
    least :data:`MIN_EXCEEDANCES` events; with fewer (a p99 target passing has ~1 % of them,
    often none) its autocorrelation cannot be estimated, so the indicators above the segment's
    own p75 and p90 stand in: in a queue, the requests over a level come in runs as long as the
    excursions (busy periods) above it, and those hardly depend on the level (for a heavily
    loaded queue's reflected-Brownian limit not at all). tau = the largest of the usable ones
    (:func:`integrated_autocorrelation_time`), at least 1. Measured on the simulated endpoint's
    model (2 FIFO servers, 40 ms a request, 200k requests): at 36.8 req/s the exceedances of
    200 ms have a variance inflation of 18-22 over blocks of 400-10,000 requests; the p90
    indicator's tau is 16, the p99's 18.

    The stand-ins speak for the threshold only where the queue's excursions come near it: they are
    used when the segment's largest value (a miss counts as reaching) is at least
    :data:`STAND_IN_REACH` of the threshold. Further out no run of neighbours comes near the
    threshold, and their dependence at the p75 (a server's batching: 20 neighbours alike at an idle
    vLLM on CPU, TTFT p99 72 ms against a 2 s threshold) would ask for 20 x the requests of a PASS
    that no excursion could reach (issue 30: a 0-of-368 probe called a point estimate, 19,779 s short).
    """
    v = np.asarray(values, dtype=np.float64)
    if len(v) < 4:
        return 1.0
    reach = float(np.max(v)) >= STAND_IN_REACH * threshold
    levels = [threshold] + ([float(np.quantile(v, q, method="lower")) for q in DEPENDENCE_LEVELS] if reach else [])
    taus = [1.0]
    for lv in levels:
        ind = v > lv
        c = int(ind.sum())
        if MIN_EXCEEDANCES <= c <= len(v) - MIN_EXCEEDANCES:
            taus.append(integrated_autocorrelation_time(ind.astype(np.float64)))
    return min(float(len(v)), max(taus))


class DependenceLog:
    """Per target, each segment's judged values in send order, and the probe's effective counts.

    The probe's binomial verdict (:func:`loadgen.core.slo.judge_counts`) takes its n requests as n
    independent trials; in a queue they are not (a late request's neighbours are late too), and
    a probe that starts from an empty queue may hold no exceedance at all above capacity. The
    rule (:data:`DEPENDENCE_RULE`): each segment s of n_s judged requests with k_s over the
    threshold counts as n_s / tau_s effective requests with k_s / tau_s effective exceedances,
    tau_s = :func:`exceedance_tau` of that segment (segments are separate runs, each starting
    after the previous one drained: independent blocks). Over the probe: n_e = floor(sum n_s /
    tau_s) (at least 1 when n > 0), k_e = round(sum k_s / tau_s) (at least 1 when k > 0, at most
    n_e). The Clopper-Pearson bounds of :mod:`loadgen.core.slo` are then taken on (k_e, n_e): for a
    variance inflated by tau this is the binomial with the same mean and variance (the "effective
    sample size" of a dependent Bernoulli sequence; Kish's design effect in survey sampling).
    The point estimate of an undecided probe stays k / n on the raw counts.
    """

    def __init__(self, thresholds: dict[int, float]) -> None:
        self.thresholds = thresholds  # target index -> threshold (ns)
        self.rows: dict[int, list[tuple[int, float]]] = {i: [] for i in thresholds}
        self.sums: dict[int, list[float]] = {i: [0.0, 0.0] for i in thresholds}  # sum n_s / tau_s, k_s / tau_s
        self.taus: dict[int, list[float]] = {i: [] for i in thresholds}
        self.logged: dict[int, list[int]] = {i: [0, 0] for i in thresholds}  # values folded: n, k

    def add(self, i: int, scheduled_ns: int, value: float) -> None:
        """One judged request's value (ns; +inf a miss) for target index ``i``."""
        if i in self.rows:
            self.rows[i].append((scheduled_ns, value))

    def end_segment(self) -> None:
        """Fold this segment's values into the effective counts (values sorted by scheduled send)."""
        for i, rows in self.rows.items():
            if rows:
                rows.sort(key=lambda r: r[0])
                v = np.asarray([r[1] for r in rows], dtype=np.float64)
                tau = exceedance_tau(v, self.thresholds[i])
                self.taus[i].append(round(tau, 2))
                self.sums[i][0] += len(v) / tau
                k = int((v > self.thresholds[i]).sum())
                self.sums[i][1] += k / tau
                self.logged[i][0] += len(v)
                self.logged[i][1] += k
            self.rows[i] = []

    def effective(self, i: int, tj: TargetJudge) -> TargetJudge:
        """``tj`` with its (k, n) replaced by the effective counts of the class docstring.

        Values logged but not yet folded (a probe stopped inside a segment) are folded first;
        requests ``tj`` counted without a value here count one each (tau 1).
        """
        if i not in self.sums or tj.n <= 0:
            return tj
        if self.rows.get(i):
            self.end_segment()
        (ns, ks), (n_log, k_log) = self.sums[i], self.logged[i]
        ns, ks = ns + max(0, tj.n - n_log), ks + max(0, tj.k - k_log)
        n_e = max(1, min(tj.n, math.floor(ns + 1e-9)))
        k_e = min(n_e, tj.k, max(1 if tj.k > 0 else 0, round(ks)))
        return replace(tj, n=n_e, k=k_e)

    def facts(self, i: int, tj: TargetJudge) -> dict[str, Any]:
        """``sweep.json`` ``targets[j]`` entries: ``tau`` per segment, ``effective_requests``, ``effective_exceedances``."""
        e = self.effective(i, tj)
        return {"tau": list(self.taus.get(i, [])), "effective_requests": e.n, "effective_exceedances": e.k}


def dependent_verdict(
    tj: TargetJudge, eff: TargetJudge, confidence: float, stopped_early: bool
) -> tuple[str, bool, float | None, float, float]:
    """A finished probe's (verdict, low_confidence, k/n, lower, upper) on one per-request target.

    :func:`loadgen.core.slo.probe_target_verdict` on the effective counts ``eff``
    (:meth:`DependenceLog.effective`): the bounds are the effective counts' bounds, widened to hold k/n; an
    undecided probe is decided on the raw point estimate k/n of ``tj`` (as before the
    dependence rule), marked low-confidence.
    """
    v, low, _, lo, hi = probe_target_verdict(eff, confidence, stopped_early)
    frac = tj.k / tj.n if tj.n else None
    if frac is not None:  # the rounding of (k_e, n_e) may move k_e/n_e off k/n: the bounds always hold the estimate
        lo, hi = min(lo, frac), max(hi, frac)
    if low and not stopped_early:
        v = "pass" if (frac is not None and frac <= allowed_fraction(tj.target)) else "fail"
    return v, low, frac, lo, hi


def extension_verdict(
    log: DependenceLog, i: int, tj: TargetJudge, confidence: float, segments: int, max_extensions: int
) -> str:
    """'pass', 'fail' or 'undecided' for the probe's extension rule after ``segments`` segments.

    The verdict on the effective counts (:meth:`DependenceLog.effective`). When those leave it
    undecided but the raw counts decide it, the probe is extended only if the effective
    evidence can still decide it: projected to the last segment allowed (n_e and k_e scaled by
    (1 + ``max_extensions``) / ``segments``, segments of one size), a PASS or a FAIL must be
    reachable at that rate of exceedances; otherwise (futile: tau too large for the probe's
    length) the raw verdict stops it, and the probe ends a point estimate. So a probe runs no
    longer than the rule before dependence was counted, except where the extensions can turn
    a point estimate into a decision.
    """
    eff = log.effective(i, tj)
    v = judge_counts(eff.k, eff.n, tj.target, confidence)[0]
    if v != "undecided":
        return v
    raw = judge_counts(tj.k, tj.n, tj.target, confidence)[0]
    if raw == "undecided" or segments > max_extensions:
        return raw
    f = (1 + max_extensions) / max(1, segments)
    n_p = max(1, math.floor(eff.n * f))
    k_p = min(n_p, round(eff.k * f))
    if judge_counts(k_p, n_p, tj.target, confidence)[0] == "undecided":
        return raw  # futile: the effective evidence cannot decide it within the extensions left
    return "undecided"


def tail_too_long(sched: np.ndarray, end: np.ndarray, meas: np.ndarray, ok: np.ndarray) -> bool:
    """Is the p99 E2E of the finished measured requests over TAIL_FRACTION of the window of scheduled sends?"""
    fin = meas & ok
    if fin.sum() < 2 or meas.sum() < 2:
        return False
    window = float(sched[meas].max() - sched[meas].min())
    e2e_p99 = float(np.percentile((end[fin] - sched[fin]).astype(np.float64), 99))
    return window > 0 and e2e_p99 > TAIL_FRACTION * window


# ---------------------------------------------------------------- probes sized for their evidence (issue 30)


def more_to_certify(tj: TargetJudge, eff: TargetJudge, confidence: float, cap: int = 1 << 20) -> int | None:
    """How many more judged requests would decide ``tj`` on effective counts, at its current exceedance
    fraction k/n and dependence n/n_e (0 when decided; None when no count up to ``cap`` would: k/n sits
    at the allowed fraction). Doubling search over the effective count: the smallest of the powers of two
    that decides it, so an estimate within a factor of two."""
    t = tj.target
    if judge_counts(eff.k, eff.n, t, confidence)[0] != "undecided":
        return 0
    if tj.n <= 0 or eff.n <= 0:
        return None
    f, tau = tj.k / tj.n, tj.n / eff.n
    n_e = eff.n
    while n_e * tau <= cap:
        n_e *= 2
        if judge_counts(min(n_e, round(f * n_e)), n_e, t, confidence)[0] != "undecided":
            return max(0, math.ceil(n_e * tau) - tj.n)
    return None


def first_segment_requests(
    per_segment: int, need: int, tau_hint: float, rate: float, max_probe_s: float, hard_cap: bool = False
) -> int:
    """A probe's first segment (requests): at least ``need`` x ``tau_hint`` (the effective count its
    percentile needs, at the largest dependence seen at or below this rate), within ``max_probe_s``
    at ``rate``; never fewer than ``per_segment`` (the probe duration's and the evidence rule's count),
    unless ``hard_cap`` (``--max-probe-duration`` given) and that count itself does not fit the cap:
    then the cap's requests (at least 1), and a PASS there is a point estimate (a vLLM-CPU sweep's
    0.58 req/s probe held 368 requests: 638 s against a 240 s cap). The default cap admits the
    evidence rule's count: a slow server's low rates can still certify a PASS."""
    want = math.ceil(need * max(1.0, tau_hint))
    n = max(per_segment, min(want, math.floor(rate * max_probe_s)))
    return min(n, max(1, math.ceil(rate * max_probe_s))) if hard_cap else n


def next_segment_requests(
    judged: list[tuple[TargetJudge, TargetJudge]], confidence: float, seg_requests: int, rate: float, left_s: float
) -> int | None:
    """The next segment of an undecided open-loop probe (requests), or None when none fits: sized to decide
    every undecided target (:func:`more_to_certify`, plus 10 %), at least half the last segment, at most
    what ``left_s`` (the time left under ``--max-probe-duration``) holds at ``rate``; None when that is
    under a quarter of the last segment (the cap is reached: the probe ends a point estimate)."""
    room = math.floor(rate * max(0.0, left_s))
    if room < max(1, seg_requests // 4):
        return None
    wants = [more_to_certify(tj, eff, confidence) for tj, eff in judged]
    want = max((w for w in wants if w is not None), default=0)
    if any(w is None for w in wants):
        want = room  # at the allowed fraction: only the most the cap holds can decide it
    return max(1, min(room, max(math.ceil(1.1 * want), seg_requests // 2)))


def tail_segment_requests(seg_requests: int, rate: float, left_s: float | None) -> int | None:
    """The next segment of an open-loop probe whose tail was too long for its window
    (:func:`tail_too_long`): twice the last segment, so that the tail is a smaller part of it, but
    at most what ``left_s`` (the time left under ``--max-probe-duration``; None: no cap, as for a
    session probe) holds at ``rate``; None when that is under a quarter of the last segment (the cap
    is reached: the probe ends a point estimate)."""
    if left_s is None:
        return 2 * seg_requests
    room = math.floor(rate * max(0.0, left_s))
    if room < max(1, seg_requests // 4):
        return None
    return min(2 * seg_requests, room)
