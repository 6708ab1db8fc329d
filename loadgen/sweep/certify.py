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
* still a point estimate, INVALID or interrupted: the answer stays, marked as before.

``sweep.json``: the certifying probe's ``continues`` names the probe it continues (1-based), and its
counts are the pooled ones ("0 of 4,421 measured requests over").
"""

from __future__ import annotations

from typing import Any

from loadgen.sweep.probe import Probe

__all__ = ["MAX_CERTIFYING", "certify_answer", "certifying_candidate"]

MAX_CERTIFYING = 3
"""Certifying probes a sweep runs at most (:func:`certifying_candidate`)."""


def certifying_candidate(probes: list[Probe], rate: float | None, max_probe_s: float) -> Probe | None:
    """The probe a certifying probe continues (issue 30), or None: the latest open-loop probe at ``rate``
    (the answer) when it PASSed on a point estimate of the evidence rule (not of the client's timing) and
    the time that would have certified it (``certify_more_s``) fits in the certifying probes left, each
    within ``max_probe_s`` (``--max-probe-duration``). Its requests and the certifying probe's are judged
    together, as a probe's extensions are: a busy machine's near-knee PASS (0 of 1,481 over, tau ~12 at
    10 s probes capped at 40 s) gets more requests at the answer's rate instead of ending there (with two
    CPU hogs even three were too few to certify it: docs/measurement.md)."""
    done = sum(p.continues is not None for p in probes)
    if rate is None or done >= MAX_CERTIFYING:
        return None
    at = next((p for p in reversed(probes) if p.offered_rps == rate and p.concurrency is None), None)
    if at is None or at.verdict != "pass" or not at.low_confidence or at.judge is None or at.interrupted:
        return None
    if (at.client_timing or {}).get("point_estimate") or at.certify_more_s is None:
        return None
    return at if at.certify_more_s <= (MAX_CERTIFYING - done) * max_probe_s else None


async def certify_answer(
    sw: Any, last_pass: float | None, first_fail: float | None
) -> tuple[float | None, float | None]:
    """Run the certifying probes of sweep ``sw`` (a :class:`~loadgen.sweep.search.Sweep`) for the answer
    ``last_pass``; the answer and the lowest FAIL after them."""
    s = sw.scfg
    # fixed-length probes (--max-probe-duration = --probe-duration) are the user's choice of speed over evidence
    while s.max_probe_s() > s.probe_duration_s and not sw.interrupted and len(sw.probes) < s.max_probes:
        c = certifying_candidate(sw.probes, last_pass, s.max_probe_s())
        if c is None:
            break
        sw.progress(
            f"certifying: {c.offered_rps:,.2f} req/s passed on a point estimate; about {c.certify_more_s or 0:.0f} s "
            f"more at this rate would certify it: the next probe adds its requests to probe "
            f"{sw.probes.index(c) + 1}'s (within --max-probe-duration)"
        )
        p = await sw._probe(c.offered_rps, resume=c)
        if p.verdict == "fail":  # judged together, it fails: the answer moves down
            first_fail = c.offered_rps if first_fail is None else min(first_fail, c.offered_rps)
            passed = [q.offered_rps for q in sw.probes if q.verdict == "pass" and q.offered_rps < first_fail]
            last_pass = max(passed, default=None)
    return last_pass, first_fail
