"""How sure a sweep's answer is: a confidence interval on the max SLO load, and a regression gate.

**The interval** (:func:`capacity_interval`) is read from the probes the sweep already ran;
nothing is re-measured. Definitions:

* r* = the max SLO load: the highest offered rate at which, for every per-request target j,
  the fraction of requests over its threshold is at most q_j = 1 - percentile_j / 100.
* Assumption (the one the bisection itself makes): each target's exceedance fraction is
  non-decreasing in the offered rate.
* A probe at rate r with k_j of n_j requests over target j (``sweep.json``
  ``probes[i].targets``) *passes at level a* when for every target the one-sided
  Clopper-Pearson upper bound of k_j / n_j at confidence 1 - a / (2 m) is <= q_j, and *fails
  at level a* when for some target the lower bound at 1 - a / (2 m) is > q_j, with
  m the number of per-request targets (Bonferroni over targets) and a = 1 - ``confidence``.
  The bounds are :func:`loadgen.core.stats.upper_bound` / :func:`~loadgen.core.stats.lower_bound`, the
  same Clopper-Pearson bounds the sweep's verdicts use (:func:`loadgen.core.slo.judge_counts`),
  only at the two-sided level.
* The default level is the one the sweep's own probes were sized for: a sweep at
  ``--confidence`` 95 % (one-sided) gives a 90 % interval (:func:`default_confidence`).
* L = the highest rate among probes that pass at level a (none: 0), U = the lowest rate above
  L among probes that fail at level a (none: unbounded, "above every rate tried").

A wrong L needs a probe above r* to pass (probability <= a / 2 for that probe) and a wrong
U a probe below r* to fail (<= a / 2), so for the two probes that end the bracket
P(L <= r* < U) >= 1 - a. The bisection picks its probes adaptively and several probes may
lie on one side of r*; that choice is not corrected for, which is why the coverage is
checked empirically on the simulated endpoint's virtual-clock reference
(``scripts/bench_capacity_ci``). **Dependence between requests**: the binomial bound takes
a probe's requests as independent, and in a queue they are not: exceedances come in clusters
(busy periods), and a ~10 s probe that starts from an empty queue often holds none even above
r* (2 FIFO servers, 40 ms a request, p99 TTFT <= 200 ms: steady-state r* 37.6 req/s, yet 60 %
of 400-request runs at 41.4 req/s have p99 <= 200 ms on the model's virtual clock). Counted as
independent, that profile's 95 % interval held the steady-state reference in 14 of 20 virtual
sweeps (60 s probes; 3 of 20 real 2 s-probe sweeps). So each end is judged on the probe's
**effective counts** (``sweep.json`` ``targets[j].effective_requests`` /
``effective_exceedances``: n / tau and k / tau, tau the exceedances' autocorrelation time,
:class:`loadgen.sweep.evidence.DependenceLog`), the evidence the sweep's own verdicts now use;
then 20 of 20 (median U / L 1.68). Sweeps written before that rule carry raw counts only and
are judged on them (said in ``method``). :func:`replicated_interval` over sweeps with
different seeds carries the run-to-run variation on top. ITL targets are pooled per token, not counted per request:
they carry no binomial evidence and are left out (stated in ``method``). The interval
cannot be narrower than the sweep's bracket: its width is set by ``--precision`` and by
the evidence per probe.

**The gate** (:func:`regression_gate`): with each system's interval (at ``confidence``, or the
replicated interval when a side is given as two or more replicate sweeps), the
candidate has regressed by more than ``tolerance`` when U_candidate <= (1 - tolerance) *
L_baseline. Both intervals hold together with probability >= 1 - a_b - a_c (Bonferroni), and then
r*_candidate < U_candidate <= (1 - tolerance) * L_baseline <= (1 - tolerance) * r*_baseline:
a significant regression. A lower point estimate whose intervals do not separate is reported
as not significant.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from loadgen.capacity.source import ProbeEvidence, SweepCapacity
from loadgen.core.errors import ConfigError
from loadgen.core.slo import SLOTarget, allowed_fraction, judged_per_request
from loadgen.core.stats import lower_bound, upper_bound

__all__ = [
    "CapacityInterval",
    "capacity_interval",
    "default_confidence",
    "probe_state_at",
    "regression_gate",
    "replicated_interval",
]


@dataclass(frozen=True)
class CapacityInterval:
    """``lower_rps`` <= r* < ``upper_rps`` at ``confidence`` (``upper_rps`` None: above every rate tried)."""

    label: str
    point_rps: float | None
    lower_rps: float | None
    upper_rps: float | None
    confidence: float
    method: str

    def to_json(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "max_rate_rps": self.point_rps,
            "ci_lower_rps": self.lower_rps,
            "ci_upper_rps": self.upper_rps,
            "confidence": self.confidence,
            "method": self.method,
        }

    def text(self) -> str:
        """``max SLO load 55.16 req/s, 95 % CI [52.00, 65.59) req/s`` in one line."""
        pct = f"{self.confidence * 100:g} %"
        if self.method.startswith("closed loop"):
            return "a concurrency sweep: no interval on a rate (its probes were not sent at set rates)"
        if self.method.startswith("replicated"):
            return (f"max SLO load {self.point_rps:.2f} req/s (median of replicates), {pct} interval "
                    f"[{_r(self.lower_rps)}, {_r(self.upper_rps)}] req/s")  # fmt: skip
        if self.point_rps is None:
            return f"no rate met the SLO ({pct} CI [0, {_r(self.upper_rps)}) req/s)"
        lo = _r(self.lower_rps) if self.lower_rps is not None else "0"
        up = _r(self.upper_rps) if self.upper_rps is not None else "above every rate tried"
        minus = self.point_rps - (self.lower_rps or 0.0)
        plus = f"+{self.upper_rps - self.point_rps:.2f}" if self.upper_rps is not None else "+?"
        return f"max SLO load {self.point_rps:.2f} req/s, {pct} CI [{lo}, {up}) req/s (-{minus:.2f}/{plus})"


def _r(v: float | None) -> str:
    return "?" if v is None else f"{v:.2f}"


def effective_counts(raw_probe: dict[str, Any] | None) -> dict[str, tuple[int, int]]:
    """A ``sweep.json`` probe's effective counts per target: ``targets[j]`` (``effective_exceedances``,
    ``effective_requests``), written by sweeps that account for the dependence between requests
    (:class:`loadgen.sweep.evidence.DependenceLog`); empty for older sweeps (raw counts are used)."""
    out = {}
    for t in (raw_probe or {}).get("targets") or []:
        if t.get("effective_requests") and t.get("effective_exceedances") is not None:
            out[str(t["target"])] = (int(t["effective_exceedances"]), int(t["effective_requests"]))
    return out


def _other_fail(raw_probe: dict[str, Any] | None) -> bool:
    """Did the sweep fail this probe on a test of its own other than the count (a growing backlog,
    the server's errors alone)?"""
    why = " ".join(str(r) for r in (raw_probe or {}).get("reasons") or [])
    return "unstable: backlog growing" in why or "server's errors alone" in why


def _binomial_state(
    probe: ProbeEvidence, targets: list[SLOTarget], level: float, eff: dict[str, tuple[int, int]] | None = None
) -> str:
    all_pass = True
    for t in targets:
        kn = (eff or {}).get(t.label) or probe.counts.get(t.label)
        if kn is None:
            all_pass = False
            continue
        k, n = kn
        if lower_bound(k, n, level) > allowed_fraction(t):
            return "fail"
        if not (n > 0 and upper_bound(k, n, level) <= allowed_fraction(t)):
            all_pass = False
    return "pass" if all_pass else "undecided"


def probe_state_at(
    probe: ProbeEvidence, cap: SweepCapacity, confidence: float, raw_probe: dict[str, Any] | None = None
) -> str:
    """'pass', 'fail' or 'undecided' for one probe at the two-sided level of the module docstring.

    ``raw_probe``: the probe's ``sweep.json`` entry; its effective counts (:func:`effective_counts`,
    the dependence between requests accounted for) are the evidence when present, else the raw
    counts. A probe the sweep failed on a test of its own other than the exceedance count
    (``unstable: backlog growing``, :mod:`loadgen.core.stability`, at its own alpha; the
    server's errors alone) is a fail here too, and never a pass; a fail or pass the sweep
    decided on its point estimate, or stopped early on the raw count, only counts when the
    bounds at this level decide it. Without ``raw_probe`` (older callers) a FAIL the bounds do
    not show is taken as such another test's, when not a point estimate.
    """
    targets = [t for t in cap.slos if judged_per_request(t)]
    if not targets or probe.rate_rps is None or probe.verdict not in ("pass", "fail"):
        return "undecided"
    eff = effective_counts(raw_probe)
    state = _binomial_state(probe, targets, 1.0 - (1.0 - confidence) / (2 * len(targets)), eff)
    if raw_probe is not None:
        other = _other_fail(raw_probe)
    else:
        own = _binomial_state(probe, targets, 1.0 - (1.0 - cap.confidence) / len(targets))
        other = state != "fail" and own != "fail" and not probe.low_confidence
    if probe.verdict == "fail" and state != "fail" and other:
        return "fail"  # failed by another of the sweep's tests (stability), not by the count
    if probe.verdict == "fail" and state == "pass":
        return "undecided"
    return state


def default_confidence(cap: SweepCapacity) -> float:
    """The two-sided level the sweep's own evidence supports: 1 - 2 (1 - its ``--confidence``).

    A sweep at 95 % sizes its probes (299 requests for p99) to pass one-sided at 95 %; each end of
    the interval is such a one-sided statement, so the interval is a 90 % one. A 95 % interval
    needs the sweep run at ``--confidence 0.975``.
    """
    return max(0.0, 1.0 - 2.0 * (1.0 - cap.confidence))


def capacity_interval(cap: SweepCapacity, confidence: float | None = None) -> CapacityInterval:
    """The interval [L, U) on the max SLO load r* of one sweep (derivation in the module docstring).

    ``confidence`` None: :func:`default_confidence`.
    """
    if confidence is None:
        confidence = default_confidence(cap)
    if not 0 < confidence < 1:
        raise ValueError("confidence must be in (0, 1)")
    raws = list(cap.doc.get("probes") or []) if isinstance(cap.doc, dict) else []
    raws += [None] * (len(cap.probes) - len(raws))
    states = [(p.rate_rps, probe_state_at(p, cap, confidence, raw if isinstance(raw, dict) else None))
              for p, raw in zip(cap.probes, raws, strict=False) if p.concurrency is None]  # fmt: skip
    passes = [r for r, s in states if s == "pass" and r is not None]
    lower = max(passes) if passes else None
    fails = [r for r, s in states if s == "fail" and r is not None and (lower is None or r > lower)]
    upper = min(fails) if fails else None
    m = sum(1 for t in cap.slos if judged_per_request(t))
    dep = any(effective_counts(r) for r in raws if isinstance(r, dict))
    method = (
        f"one-sided Clopper-Pearson bounds at {1 - (1 - confidence) / (2 * max(m, 1)):.4f} per target "
        + (
            "on effective counts (the dependence between requests: n / tau, loadgen.sweep.evidence) "
            if dep
            else "on raw counts (a sweep before the dependence rule: requests taken as independent) "
        )
        + f"({m} per-request target(s), Bonferroni), L = highest probe passing, U = lowest probe above L "
        "failing; exceedance fractions assumed non-decreasing in rate; ITL targets carry no per-request "
        "evidence and are not used"
    )
    if any(p.concurrency is not None for p in cap.probes):
        method = "closed loop: a concurrency sweep's probes hold a user count, not a rate; no interval"
        return CapacityInterval(cap.label, None, None, None, confidence, method)
    point = cap.max_rate_rps
    return CapacityInterval(cap.label, point, lower, upper, confidence, method)


def regression_gate(
    baseline: SweepCapacity | list[SweepCapacity],
    candidate: SweepCapacity | list[SweepCapacity],
    tolerance: float,
    confidence: float | None = None,
) -> dict[str, Any]:
    """Whether ``candidate``'s max SLO load is significantly below ``baseline``'s by more than ``tolerance``.

    Each side one sweep (:func:`capacity_interval` at ``confidence``) or a list of replicate
    sweeps (two or more: :func:`replicated_interval`). ``tolerance`` a fraction (0.05 for 5 %).
    Raises ConfigError for sweeps under different SLOs. Returns a dict with both intervals, the
    point change (candidate / baseline - 1), ``regressed`` (the test of the module docstring)
    and ``text``.
    """
    bs = baseline if isinstance(baseline, list) else [baseline]
    cs = candidate if isinstance(candidate, list) else [candidate]
    if len({tuple(x.slo_labels) for x in bs + cs}) > 1:
        raise ConfigError(f"baseline and candidate were swept under different SLOs ({', '.join(bs[0].slo_labels)} "
                          f"against {', '.join(cs[0].slo_labels)}): their max SLO loads are not comparable")  # fmt: skip
    b = replicated_interval(bs) if len(bs) > 1 else capacity_interval(bs[0], confidence)
    c = replicated_interval(cs) if len(cs) > 1 else capacity_interval(cs[0], confidence)
    change = (c.point_rps / b.point_rps - 1.0) if (b.point_rps and c.point_rps is not None) else None
    limit = (1.0 - tolerance) * b.lower_rps if b.lower_rps is not None else None
    regressed = bool(limit is not None and limit > 0 and c.upper_rps is not None and c.upper_rps <= limit)
    if b.lower_rps is None:
        text = "baseline has no rate that passes at this confidence: nothing to regress from"
    elif regressed:
        text = (f"REGRESSED: candidate's upper bound {c.upper_rps:.2f} req/s <= (1 - {tolerance:.0%}) x "
                f"baseline's lower bound {b.lower_rps:.2f} = {limit:.2f} req/s")  # fmt: skip
    else:
        ch = "n/a" if change is None else f"{change:+.1%}"
        up = "unbounded" if c.upper_rps is None else f"{c.upper_rps:.2f}"
        text = (f"no significant regression (point change {ch}): candidate's upper bound {up} req/s > "
                f"{limit:.2f} req/s = (1 - {tolerance:.0%}) x baseline's lower bound {b.lower_rps:.2f}")  # fmt: skip
    return {
        "baseline": b.to_json(),
        "candidate": c.to_json(),
        "point_change": change,
        "tolerance": tolerance,
        "joint_confidence": 1.0 - (1.0 - b.confidence) - (1.0 - c.confidence),
        "regressed": regressed,
        "test": "regressed when U_candidate <= (1 - tolerance) * L_baseline (joint confidence of the two "
        "intervals >= 1 - the sum of their error levels, Bonferroni)",
        "text": text,
    }


def replicated_interval(caps: list[SweepCapacity]) -> CapacityInterval:
    """A distribution-free interval from K >= 2 replicate sweeps of one system (different ``--seed``).

    Each replicate's answer is the geometric midpoint sqrt(L x U) of its bracket (the bisection
    is geometric; the answer itself when the bracket is open above). With m_1 <= ... <= m_K
    those midpoints, [m_1, m_K] covers the median of the sweep procedure's answer with
    probability 1 - 2 x 0.5^K (K independent draws all fall on one side of the median with
    probability 2 x 0.5^K): 87.5 % for K = 4, 93.75 % for 5, 96.9 % for 6. The point is the
    median of the m_k.

    Why replicates: requests within one probe are not independent (a queue's exceedances
    come in clusters, in its busy periods), so the binomial count of one probe over-states
    its evidence unless it is counted in effective requests, as :func:`capacity_interval` now does
    (``scripts/bench_capacity_ci``). Replicates carry that variation; what they do not
    carry is the procedure's own bias (a short probe starting from an empty queue).
    Raises ConfigError for fewer than 2 sweeps, a sweep with no answer, or different SLOs.
    """
    if len(caps) < 2:
        raise ConfigError("a replicated interval needs at least 2 sweeps of the same system")
    if len({tuple(c.slo_labels) for c in caps}) > 1:
        raise ConfigError("the replicates were swept under different SLOs")
    mids = []
    for c in caps:
        lo, hi = c.bracket_rps
        if c.max_rate_rps is None or lo is None:
            raise ConfigError(f"{c.path}: no rate met the SLO: not a replicate with an answer")
        mids.append((lo * hi) ** 0.5 if hi else lo)
    mids.sort()
    k = len(mids)
    median = mids[k // 2] if k % 2 else (mids[k // 2 - 1] + mids[k // 2]) / 2
    conf = 1.0 - 2.0 * 0.5**k
    method = (
        f"replicated: min and max of {k} bracket midpoints sqrt(L x U), covering the median answer "
        f"with probability 1 - 2 x 0.5^{k} (distribution-free)"
    )
    return CapacityInterval(caps[0].label, median, mids[0], mids[-1], conf, method)
