"""Certifying probes: an answer that PASSed on a point estimate is run longer at its rate (issue 30).

The search (:mod:`loadgen.sweep.search`) ends on a bracket; its answer, the highest PASS, may be a point
estimate: its probe reached ``--max-probe-duration`` before the evidence rule's effective count
(:mod:`loadgen.sweep.evidence`: n / tau per segment). On a busy 2-core machine near the knee tau was
~5-12, and a 10 s probe capped at 40 s held 1,104-1,481 requests with none over, short of certifying
p99 ("about 98 s more at this rate would have certified it"). A certifying probe at the same rate goes
on with the earlier probe's judge (:func:`loadgen.sweep.probe.run_probe` ``resume``): its segments count
as further extensions of that probe (separate runs, each from a drained server: independent blocks),
its first segment sized by the time the earlier one lacked, all within its own ``--max-probe-duration``.
At most :data:`MAX_CERTIFYING` run, only when the time lacking fits in them, and only where probes extend
(``--max-probe-duration`` above ``--probe-duration``: fixed-length probes are a choice of speed over
evidence, as for the search's capped stop). Judged together:

* certified PASS: the answer is certified (the interval's lower end moves up to it);
* FAIL: the answer moves down to the highest PASS below it (which may be certified the same way);
* still a point estimate, INVALID or interrupted: the answer stays, marked as before; where the time its
  rate still lacks no longer fits, a lower PASS on a point estimate is certified the same way (at most
  :data:`MAX_CERTIFYING_TOTAL` certifying probes in all) and, certified, becomes the answer: the higher rate
  is reported beside it as passing on a point estimate (``answer.point_estimate_pass_above_rps``).

``sweep.json``: the certifying probe's ``continues`` names the probe it continues (1-based), and its
counts are the pooled ones ("0 of 4,421 measured requests over").
"""

from __future__ import annotations

from typing import Any

from loadgen.sweep.probe import Probe

__all__ = ["MAX_CERTIFYING", "MAX_CERTIFYING_TOTAL", "certify_answer", "certifying_candidate"]

MAX_CERTIFYING = 3
"""Certifying probes a sweep runs at most at one rate (:func:`certifying_candidate`)."""
MAX_CERTIFYING_TOTAL = 5
"""Certifying probes a sweep runs at most in all: the answer's rate first, then a lower PASS (fallback)."""


def _certifiable(p: Probe) -> bool:
    """A PASS on a point estimate of the evidence rule (not of the client's timing) that more requests at its
    rate could certify: its judge is kept and the time lacking is known."""
    return (
        p.verdict == "pass"
        and p.low_confidence
        and p.judge is not None
        and not p.interrupted
        and not (p.client_timing or {}).get("point_estimate")
        and p.certify_more_s is not None
    )


def certifying_candidate(probes: list[Probe], rate: float | None, max_probe_s: float) -> Probe | None:
    """The probe a certifying probe continues (issue 30), or None.

    Candidates are the latest open-loop probe at each rate from the answer (``rate``) down to the highest
    certified PASS, when it PASSed on a point estimate (:func:`_certifiable`); the highest one whose lacking
    time (``certify_more_s``) fits in the certifying probes left to it is chosen: at most
    :data:`MAX_CERTIFYING` at one rate and :data:`MAX_CERTIFYING_TOTAL` in all, each within ``max_probe_s``
    (``--max-probe-duration``). Its requests and the certifying probe's are judged together, as a probe's
    extensions are. So a busy machine's near-knee PASS (0 of 1,481 over, tau ~12 at 10 s probes capped at
    40 s) gets more requests at the answer's rate first; where those bring exceedances and the time lacking
    no longer fits, a lower PASS is certified instead (with two CPU hogs three probes at the answer's rate
    pooled 4,440 requests, 2 over, and stayed a point estimate: docs/measurement.md)."""
    total = sum(p.continues is not None for p in probes)
    if rate is None or total >= MAX_CERTIFYING_TOTAL:
        return None
    loop = [p for p in probes if p.concurrency is None]
    floor = max((p.offered_rps for p in loop if p.verdict == "pass" and not p.low_confidence), default=0.0)
    latest: dict[float, Probe] = {}
    for p in loop:
        latest[p.offered_rps] = p
    for r in sorted((r for r in latest if floor < r <= rate), reverse=True):
        at = latest[r]
        if not _certifiable(at):
            continue
        here = sum(p.continues is not None and p.offered_rps == r for p in loop)
        left = min(MAX_CERTIFYING - here, MAX_CERTIFYING_TOTAL - total)
        if left > 0 and (at.certify_more_s or 0.0) <= left * max_probe_s:
            return at
    return None


async def certify_answer(
    sw: Any, last_pass: float | None, first_fail: float | None
) -> tuple[float | None, float | None]:
    """Run the certifying probes of sweep ``sw`` (a :class:`~loadgen.sweep.search.Sweep`) for the answer
    ``last_pass``; the answer and the lowest FAIL after them.

    Where the answer's own rate stays a point estimate and a lower rate was certified by its certifying
    probes, the answer is that certified rate, and ``sw.point_estimate_above`` keeps the higher rate that
    passed on a point estimate (``sweep.json`` ``answer.point_estimate_pass_above_rps``)."""
    s = sw.scfg
    # fixed-length probes (--max-probe-duration = --probe-duration) are the user's choice of speed over evidence
    while s.max_probe_s() > s.probe_duration_s and not sw.interrupted and len(sw.probes) < s.max_probes:
        c = certifying_candidate(sw.probes, last_pass, s.max_probe_s())
        if c is None:
            break
        lower = (
            ""
            if c.offered_rps == last_pass
            else (
                f" ({_rate(last_pass)} req/s, the answer, cannot be certified in the certifying probes left: "
                "a lower PASS is certified instead)"
            )
        )
        sw.progress(
            f"certifying: {c.offered_rps:,.2f} req/s passed on a point estimate; about {c.certify_more_s or 0:.0f} s "
            f"more at this rate would certify it: the next probe adds its requests to probe "
            f"{sw.probes.index(c) + 1}'s (within --max-probe-duration){lower}"
        )
        p = await sw._probe(c.offered_rps, resume=c)
        if p.verdict == "fail":  # judged together, it fails: the answer moves down
            first_fail = c.offered_rps if first_fail is None else min(first_fail, c.offered_rps)
            passed = [q.offered_rps for q in sw.probes if q.verdict == "pass" and q.offered_rps < first_fail]
            last_pass = max(passed, default=None)
    certified = [
        p.offered_rps
        for p in sw.probes
        if p.continues is not None and p.verdict == "pass" and not p.low_confidence and p.concurrency is None
    ]
    top = max(certified, default=None)
    if last_pass is not None and top is not None and top < last_pass:
        at = next((p for p in reversed(sw.probes) if p.offered_rps == last_pass and p.concurrency is None), None)
        if at is not None and at.low_confidence:
            sw.point_estimate_above = last_pass
            last_pass = top
    return last_pass, first_fail


def _rate(r: float | None) -> str:
    return "-" if r is None else f"{r:,.2f}"
