"""The one home of SLO rules: parse -> per-request value -> run verdict -> probe verdict.

An SLO target reads ``METRIC:pNN<=VALUE`` (``ttft:p99<=300ms``): the NN-th
percentile of METRIC over the measured requests must be at most VALUE. The same
threshold is the per-request goodput predicate (a request conforms when its value
is at most every threshold; thresholds are inclusive). Failed and zero-output
requests count as over every threshold (their value is :data:`MISS`, +inf). Goodput
as in DistServe (Zhong et al., OSDI 2024): requests per second that met every
per-request SLO.

Per-request metrics (ttft, time_to_first_answer_token, tpot, e2e, stall) are judged per
request. ITL is per token: a request conforms on ITL when its own NN-th
percentile ITL is within the threshold, and the run's ITL verdict uses the pooled
per-token percentile at the target's own NN (its tokens are correlated within a
request, so no confidence bound is claimed).

Token deadlines (``tbt_deadline:p99<=50ms``, alias ``token_deadline``) are per token the same way:
token i of a stream (0-based, token 0 being TTFT's) is due by its first token + i x 50 ms, what an
interactive product promises a reader; a token is late when it arrives after that. Its value is the
token's pace since the first token, ``(arrival_i - first) / i`` (:func:`loadgen.core.metrics.token_pace_ns`),
on time when at most the target, so "p99 <= 50 ms" reads "at most 1 % of the tokens late". A request
conforms when its own NN-th percentile pace is within the target; the run's verdict reads the pooled
percentile (histogram ``tbt_pace``) and reports the share of late tokens (``late_token_share``).
Unlike ITL and the stall target, a token deadline forgives a slow token that earlier fast ones paid
for, and counts every token a stall made late, not the one gap.

The rules, in the order a value travels:

1. :func:`parse_slo` -> :class:`SLOTarget`.
2. :func:`request_value` (the value a request is judged on) and :func:`exceeds`
   (per-request conformance).
3. :func:`run_target_verdict`: a run's verdict on one target (``result.json`` ``slo``).
4. :func:`judge_counts` / :func:`probe_target_verdict` (the sweep's binomial verdict
   on a probe's exceedance counts, with :func:`allowed_fraction` q = 1 - p/100;
   :func:`fail_count` and :func:`proves_fail` for its early stop) and
   :func:`itl_probe_verdict` (a probe's ITL verdict is the run verdict of its last
   segment).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from loadgen.core.errors import ConfigError
from loadgen.core.metrics import RequestMetrics, token_pace_ns
from loadgen.core.stats import fail_threshold, lower_bound, upper_bound
from loadgen.core.types import RequestRecord
from loadgen.core.units import parse_duration_ns

METRICS = ("ttft", "time_to_first_answer_token", "tpot", "itl", "e2e", "stall", "tbt_deadline")
_ALIASES = {
    "ttfat": "time_to_first_answer_token",
    "e2e_latency": "e2e",
    "latency": "e2e",
    "itl_max": "stall",
    "token_deadline": "tbt_deadline",
}
PER_TOKEN_SLO_METRICS = ("itl", "tbt_deadline")
"""Targets judged over tokens, pooled (the run's verdict reads a per-token HDR histogram): ITL, token deadlines."""
POOLED_HISTOGRAM = {"itl": "itl", "tbt_deadline": "tbt_pace"}
"""The per-token histogram a per-token target's pooled percentile is read from."""


@dataclass(frozen=True)
class SLOTarget:
    """``percentile`` (0-100) of ``metric`` must be <= ``threshold_ns`` (inclusive); ``model``: judged over the
    requests to that model of a ``--model`` mix only (``ttft:p99<=300ms@lora-a``; None: every request)."""

    metric: str
    percentile: float
    threshold_ns: int
    model: str | None = None

    @property
    def label(self) -> str:
        p = f"{self.percentile:g}".replace(".", "")
        return f"{self.metric}:p{p}<={self.threshold_ns / 1e6:g}ms" + (f"@{self.model}" if self.model else "")

    def applies(self, model: str | None) -> bool:
        """Whether a request to ``model`` is judged on this target."""
        return self.model is None or self.model == model


def per_model(slos: list[SLOTarget], models: tuple[str, ...]) -> list[SLOTarget]:
    """A model mix's targets: each target without a model once per model of the mix (every model judged on
    its own requests: one that misses is not hidden by the others'), the scoped ones as given. Raises
    ConfigError for a target scoped to a model outside the mix."""
    out: list[SLOTarget] = []
    for t in slos:
        if t.model is not None:
            if t.model not in models:
                raise ConfigError(f"SLO {t.label}: {t.model!r} is not a model of --model ({', '.join(models)})")
            out.append(t)
        else:
            out.extend(SLOTarget(t.metric, t.percentile, t.threshold_ns, m) for m in models)
    return out


def parse_slo(text: str) -> SLOTarget:
    """Parse ``METRIC:pNN<=VALUE`` (``ttft:p99<=300ms``, ``e2e:p99.9<=10s``). Raises ConfigError."""
    m = re.fullmatch(r"\s*([a-z_0-9]+)\s*:\s*p([0-9]+(?:\.[0-9]+)?)\s*<=\s*([^@\s]+)\s*(?:@\s*(\S+)\s*)?", text or "")
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
    return SLOTarget(metric, pct, thr, m.group(4))


def exact_percentile(sorted_values: Sequence[float] | np.ndarray, p: float) -> float:
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


# ---------------------------------------------------------------------- per request

MISS = math.inf
"""The value of a failed or zero-output request on every target: over any threshold."""


def request_value(t: SLOTarget, m: RequestMetrics) -> float:
    """The value a request is judged on for target ``t`` (ns; +inf = miss; TPOT None = conforms).

    TTFT, time to first answer token and E2E: the request's own value (None -> miss).
    TPOT: the request's TPOT (None, one output token, conforms). ITL: the request's
    own ``t.percentile``-th per-token gap (linear interpolation; no gaps conforms). Stall
    (``stall``, alias ``itl_max``): the request's longest wall-clock gap between two arrivals of
    tokens (``max(inter_chunk_ns)``: a pause before a chunk of k tokens is not divided by k, as
    per-token ITL is; the wait for the first token is TTFT's); fewer than two arrivals conform.
    """
    if t.metric == "ttft":
        return math.inf if m.ttft_ns is None else m.ttft_ns
    if t.metric == "time_to_first_answer_token":
        return math.inf if m.time_to_first_answer_token_ns is None else m.time_to_first_answer_token_ns
    if t.metric == "e2e":
        return math.inf if m.e2e_ns is None else m.e2e_ns
    if t.metric == "tpot":
        return 0.0 if m.tpot_ns is None else m.tpot_ns
    if t.metric == "itl":
        if not m.itl_ns:
            return 0.0
        return float(np.percentile(np.asarray(m.itl_ns), t.percentile))
    if t.metric == "stall":  # the longest pause once the stream began (issue 18: stall SLOs)
        return float(max(m.inter_chunk_ns)) if m.inter_chunk_ns else 0.0
    if t.metric == "tbt_deadline":  # the request's own NN-th percentile pace (a share of late tokens)
        pace = token_pace_ns(m)
        return float(np.percentile(np.asarray(pace), t.percentile)) if pace else 0.0
    raise ValueError(t.metric)


def late_tokens(t: SLOTarget, m: RequestMetrics) -> tuple[int, int]:
    """``(late, judged)``: a request's tokens after the first that missed ``t``'s token deadline, and all of them."""
    pace = token_pace_ns(m)
    return sum(1 for v in pace if v > t.threshold_ns), len(pace)


def exceeds(t: SLOTarget, value: float) -> bool:
    """Per-request conformance: a request misses ``t`` when ``value > threshold`` (thresholds inclusive).

    ``value`` from :func:`request_value`, or :data:`MISS` for a failed or zero-output request.
    """
    return value > t.threshold_ns


def inflight_over(t: SLOTarget, rec: RequestRecord, now_ns: int) -> bool:
    """Is a request not finished at ``now_ns`` (in flight, or cancelled then) already certain to exceed ``t``?

    TTFT and time to first answer token: its first (answer) token's value, or, before one came, its age
    from the scheduled time; E2E: its age. Per-token targets cannot be known before the end (False).
    """
    age = now_ns - rec.scheduled_ns
    if t.metric == "ttft":
        return exceeds(t, rec.events[0].t_ns - rec.scheduled_ns if rec.events else age)
    if t.metric == "time_to_first_answer_token":
        first = next((e for e in rec.events if e.answer), None)
        return exceeds(t, first.t_ns - rec.scheduled_ns if first is not None else age)
    if t.metric == "e2e":
        return exceeds(t, age)
    return False


CANCELLED_OVER, CANCELLED_UNDER, CANCELLED_UNKNOWN = "over", "under", "unknown"


def cancelled_state(t: SLOTarget, rec: RequestRecord, now_ns: int) -> str:
    """What a request cancelled at ``now_ns`` (a probe's early stop) shows of target ``t``.

    :data:`CANCELLED_OVER`: already certain to exceed (:func:`inflight_over`): a miss, counted;
    :data:`CANCELLED_UNDER`: its value was measured before the stop (a first token for TTFT, a first
    answer token for time to first answer token) and conforms: counted as conforming;
    :data:`CANCELLED_UNKNOWN`: censored, not counted. One rule for a probe in one process and over
    worker processes (the state travels in :class:`loadgen.engine.summary.RequestSummary`).
    """
    if inflight_over(t, rec, now_ns):
        return CANCELLED_OVER
    known = bool(rec.events) if t.metric == "ttft" else any(e.answer for e in rec.events)
    if t.metric in ("ttft", "time_to_first_answer_token") and known:
        return CANCELLED_UNDER
    return CANCELLED_UNKNOWN


def allowed_fraction(t: SLOTarget) -> float:
    """q = 1 - percentile/100: the fraction of requests that may exceed ``t`` (p99 -> 0.01)."""
    return 1 - t.percentile / 100


def judged_per_request(t: SLOTarget) -> bool:
    """Whether a probe counts ``t`` request by request (all but ITL and token deadlines, which are per token)."""
    return t.metric not in PER_TOKEN_SLO_METRICS


# ---------------------------------------------------------------------- run verdict

RUN_METHOD_EXACT = "exact percentile over requests; failures and zero-output count as over"
RUN_METHOD_ITL = "pooled per-token percentile (HDR); no confidence bound"
RUN_METHOD_TBT = "pooled per-token percentile of the pace since the first token (HDR); no confidence bound"


def run_target_verdict(t: SLOTarget, values: np.ndarray, itl_pooled_ms: float | None = None) -> dict[str, Any]:
    """A run's verdict on one target: the ``result.json`` ``slo.targets`` entry.

    ``values``: every measured request's :func:`request_value` for ``t`` in ns,
    :data:`MISS` (+inf) for failed and zero-output requests; sorted ascending.
    Per-request metrics: the exact ``t.percentile``-th percentile of ``values``
    (:func:`exact_percentile`, misses as +inf) must be <= the threshold; no values
    fails. ITL and token deadlines: ``itl_pooled_ms``, the pooled per-token percentile (of the gaps, of
    the paces: :data:`POOLED_HISTOGRAM`) at
    ``t.percentile`` (HDR histogram, ±0.1 %), must be <= the threshold and the
    fraction of misses at most 1 - percentile/100 (no requests fails).
    ``exceedances``: requests over the threshold (misses included).
    """
    exceed = int(np.count_nonzero(values > t.threshold_ns))
    if t.metric in PER_TOKEN_SLO_METRICS:
        total = len(values)
        misses = int(np.count_nonzero(np.isinf(values))) / total if total else 1.0
        met = itl_pooled_ms is not None and itl_pooled_ms * 1e6 <= t.threshold_ns and misses <= allowed_fraction(t)
        value = itl_pooled_ms
        method = RUN_METHOD_ITL if t.metric == "itl" else RUN_METHOD_TBT
    else:
        pv = float(exact_percentile(values, t.percentile))
        value = None if math.isnan(pv) else (None if math.isinf(pv) else pv / 1e6)
        met = values.size > 0 and not math.isnan(pv) and pv <= t.threshold_ns
        method = RUN_METHOD_EXACT
    return {
        "target": t.label,
        "metric": t.metric,
        "percentile": t.percentile,
        "threshold_ms": t.threshold_ns / 1e6,
        "value_ms": value,
        "met": bool(met),
        "exceedances": exceed,
        "denominator": len(values),
        "method": method,
    }


# ---------------------------------------------------------------------- probe verdict


@dataclass
class TargetJudge:
    """Exceedance counting for one SLO target within one probe."""

    target: SLOTarget
    n: int = 0
    k: int = 0
    censored: int = 0
    server_errors: int = 0  # of k: failures the generator cannot have caused


def fail_count(n: int, t: SLOTarget, confidence: float) -> int:
    """The fewest exceedances out of ``n`` that FAIL ``t`` (:func:`loadgen.core.stats.fail_threshold`).

    Lets the probe's early stop compare a running count with a number computed once.
    """
    return fail_threshold(n, allowed_fraction(t), confidence)


def proves_fail(k: int, n: int, t: SLOTarget, confidence: float) -> bool:
    """True when k exceedances out of n FAIL ``t`` whatever else is counted: lower bound > q."""
    return lower_bound(k, n, confidence) > allowed_fraction(t)


def judge_counts(k: int, n: int, t: SLOTarget, confidence: float) -> tuple[str, float, float]:
    """('pass'|'fail'|'undecided', lower, upper) for k exceedances out of n.

    With q = 1 - percentile/100: PASS when the one-sided Clopper-Pearson upper bound
    of k/n at ``confidence`` is <= q (and n > 0), FAIL when the lower bound is > q,
    else undecided (:mod:`loadgen.core.stats`; the binomial test of MLPerf LoadGen's
    early stopping).
    """
    q = allowed_fraction(t)
    lo, hi = lower_bound(k, n, confidence), upper_bound(k, n, confidence)
    if n > 0 and hi <= q:
        return "pass", lo, hi
    if lo > q:
        return "fail", lo, hi
    return "undecided", lo, hi


def probe_target_verdict(
    tj: TargetJudge, confidence: float, stopped_early: bool
) -> tuple[str, bool, float | None, float, float]:
    """A finished probe's verdict on a per-request target: (verdict, low_confidence, k/n, lower, upper).

    :func:`judge_counts`; still undecided after the probe's extensions, the point
    estimate k/n <= q decides and the verdict is marked low-confidence. A probe
    stopped early (FAIL was certain) fails.
    """
    t = tj.target
    v, lo, hi = judge_counts(tj.k, tj.n, t, confidence)
    frac = tj.k / tj.n if tj.n else None
    low_conf = False
    if v == "undecided":
        low_conf = True
        v = "pass" if (frac is not None and frac <= allowed_fraction(t)) else "fail"
    if stopped_early:
        v = "fail"
    return v, low_conf, frac, lo, hi


def itl_probe_verdict(t: SLOTarget, run_slo: dict[str, Any] | None) -> tuple[bool, float | None]:
    """A probe's ITL verdict: (met, value_ms) of ``t`` in the run verdict of its last segment.

    ``run_slo``: that segment's ``result.json`` ``slo`` (from :func:`run_target_verdict`),
    so the sweep and ``result.json`` judge ITL alike, at the target's own percentile.
    A target the run did not judge fails.
    """
    for entry in (run_slo or {}).get("targets") or []:
        if entry.get("target") == t.label:
            return bool(entry["met"]), entry["value_ms"]
    return False, None
