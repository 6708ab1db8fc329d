"""The words of a sweep's verdicts: one text per probe and per target, and the evidence rule.

Each text is computed once, when the probe ends, and stored in ``sweep.json``
(``probes[i]["verdict_text"]``, ``probes[i]["targets"][j]["verdict_text"]``); the live
progress line, the console table and report.html all show that stored text, so a probe
reads the same in every place (issue 23). The texts:

* ``PASS``: the one-sided Clopper-Pearson upper bound of the exceedance fraction is within
  1 - percentile at the chosen confidence (:func:`loadgen.core.slo.judge_counts`);
* ``PASS (point estimate)`` / ``FAIL (point estimate)``: still undecided after the probe's
  extensions (or with fewer requests than the evidence rule asks), decided on k/n alone;
* ``FAIL``: the lower bound is past 1 - percentile (or the backlog grows, or the server's
  errors alone prove it);
* ``FAIL (stopped early)``: the known exceedances made FAIL certain before the probe's end;
* ``PASS, point estimate (client timing)``: certified as measured, but not once the client's own
  timing error is moved into its values (:mod:`loadgen.sweep.client_error`);
* ``INVALID: reason``: the client's own timing could flip the verdict, or the client did not send the
  load asked (the verdict table in docs/measurement.md); a probe whose timing checks failed but
  whose verdict cannot flip keeps its verdict ("VALID for this verdict" in its reasons);
* ``RATE LIMITED: ...``: most requests answered HTTP 429 (the provider's quota);
* ``INTERRUPTED: undecided``: the user stopped the sweep (Ctrl-C, SIGTERM) while the probe ran,
  or before an extension it needed. The rule: an interrupted probe is never extended and earns
  no verdict from what it holds (it did not run its duration, its stability test or its
  extensions), whatever its counts say: not PASS, not a point estimate, not INVALID. The one
  exception is ``FAIL (stopped early)``: a FAIL that was already certain over the largest
  possible probe (known exceedances alone) stands, interrupt or not. A probe that ended before
  the interrupt keeps its own verdict.

After an interrupt the sweep's answer (:func:`interrupted_answer`) says so and is at most what
the decided probes show: a bracket (a PASS below a FAIL), a lower bound (a PASS, nothing above
it decided), or no answer.

The rules themselves stay in :mod:`loadgen.core.slo`; this module only names their outcome.
"""

from __future__ import annotations

from typing import Any

from loadgen.core.slo import SLOTarget, TargetJudge, judged_per_request, probe_target_verdict
from loadgen.core.stability import TAIL_FRACTION
from loadgen.sweep.evidence import DEPENDENCE_RULE

PASS, FAIL = "PASS", "FAIL"
POINT = " (point estimate)"
POINT_CLIENT = ", point estimate (client timing)"  # certified as measured, not once the client's error is moved in
EARLY = " (stopped early)"
INTERRUPTED = "INTERRUPTED: undecided"


def target_verdict(
    k: int,
    n: int,
    t: SLOTarget,
    confidence: float,
    *,
    stopped_early: bool,
    fail_k: int | None,
    eff: TargetJudge | None = None,
) -> tuple[str, bool, str]:
    """One per-request target's (verdict, point_estimate, text) from its counts.

    ``k`` exceedances of ``n`` judged requests; ``eff`` the effective counts that account for the
    dependence between requests (:class:`loadgen.sweep.evidence.DependenceLog`; None: the raw
    counts are the evidence). :func:`loadgen.core.slo.probe_target_verdict` decides on ``eff``
    (undecided, on the raw point estimate k/n: ``point_estimate`` True). In a probe stopped
    early, the target whose count reached ``fail_k`` (the exceedances that make FAIL certain
    over the largest possible probe) or whose bounds already FAIL is ``FAIL (stopped early)``;
    any other target keeps its own verdict on its own counts (0 of 865 over is not a FAIL).
    """
    e = eff if eff is not None else TargetJudge(t, n=n, k=k)
    v, point, *_ = probe_target_verdict(e, confidence, stopped_early=False)
    if point:
        v = "pass" if (n > 0 and k / n <= 1 - t.percentile / 100) else "fail"
    if stopped_early and ((v == "fail" and not point) or (fail_k is not None and k >= fail_k)):
        return "fail", False, FAIL + EARLY
    return v, point, v.upper() + (POINT if point else "")


def probe_verdict_text(
    verdict: str,
    *,
    low_confidence: bool,
    stopped_early: bool,
    validity_detail: list[str] | None = None,
    client_timing: bool = False,
) -> str:
    """The probe's one verdict text (module docstring) from its stored facts; ``client_timing``: its point
    estimate is the client's timing error's alone (:mod:`loadgen.sweep.client_error`)."""
    if verdict == "invalid":
        # the first failed generator check, up to its first parenthesis: "p99 schedule lag 949.000 ms"
        why = ((validity_detail or [])[:1] or ["the client's own timing"])[0].split(" (")[0]
        return f"INVALID: {why}"
    if verdict == "rate_limited":
        return "RATE LIMITED: HTTP 429 on most requests"
    if verdict == "interrupted":
        return INTERRUPTED
    base = PASS if verdict == "pass" else FAIL
    if verdict != "pass" and stopped_early:
        return base + EARLY
    if low_confidence:
        return base + (POINT_CLIENT if client_timing else POINT)
    return base


def text_of(p: dict[str, Any]) -> str:
    """A ``sweep.json`` probe's verdict text: the stored one, or (older files) derived the same way."""
    if p.get("verdict_text"):
        return str(p["verdict_text"])
    return probe_verdict_text(
        p["verdict"],
        low_confidence=bool(p.get("low_confidence")),
        stopped_early=bool(p.get("stopped_early")),
        validity_detail=p.get("validity_detail"),
        client_timing=bool((p.get("client_timing") or {}).get("point_estimate")),
    )


def evidence_rule(
    slos: list[SLOTarget],
    confidence: float,
    need: int,
    probe_duration_s: float,
    max_extensions: int,
    *,
    closed_loop: bool,
    max_probe_s: float | None = None,
) -> str:
    """The rule the probes were held to, in one sentence (``sweep.json`` ``evidence_rule``, the report's header).

    ``need`` is :meth:`loadgen.sweep.SweepConfig.needed_requests`: the fewest requests that can
    PASS the strictest per-request percentile with no exceedance at ``confidence``.
    """
    judged = [t for t in slos if judged_per_request(t)]
    pct = max((t.percentile for t in judged), default=50.0)
    why = f"p{pct:g} at {confidence * 100:g} % confidence cannot pass on fewer with no exceedance"
    if closed_loop:
        head = (
            f"each probe: at least {probe_duration_s:g} s, extended in time until it holds at least "
            f"{need} judged requests ({why})"
        )
        which = "an undecided probe"
    else:
        head = f"each probe: at least {probe_duration_s:g} s and at least {need} requests ({why})"
        which = f"an undecided probe (or one whose p99 E2E exceeds {TAIL_FRACTION:.0%} of its window)"
    if max_probe_s is not None and not closed_loop:  # issue 30: sized for its evidence, within a time cap
        head += " times tau, the dependence between requests seen at or below its rate"
        which += (
            f" is extended by segments sized to decide it, within {max_probe_s:g} s in all (--max-probe-duration) and"
        )
    else:
        which += " is extended"
    return (
        f"{head}; {which} up to {max_extensions} times, then decided on its "
        "point estimate k/n and marked (point estimate); a probe interrupted by the user is not extended "
        "and gets no verdict (INTERRUPTED: undecided) unless its FAIL was already certain; the bounds count "
        f"{DEPENDENCE_RULE}"
    )


def interrupted_answer(res: dict[str, Any]) -> str:
    """The answer line of an interrupted sweep (``sweep.json`` with ``interrupted``): what the probes
    decided before the stop, at most a bracket or a lower bound, never more.

    The decided probes keep their verdicts; the interrupted one has none (module docstring). So:
    a PASS at X and a FAIL at Y above it -> "within X..Y"; a PASS at X and nothing decided above
    -> "at least X" (a lower bound); no PASS -> no answer.
    """
    a = res.get("answer") or {}
    probes = res.get("probes") or []
    slos = " and ".join(str(t["target"]) for t in res.get("slo") or []) or "the SLO"
    decided = sum(1 for p in probes if p.get("verdict") in ("pass", "fail"))
    head = f"interrupted: the search stopped after {decided} decided probe{'s' if decided != 1 else ''}"
    point = " (a point estimate)" if a.get("point_estimate") else ""
    if any(p.get("concurrency") for p in probes):
        if not a.get("concurrency"):
            return f"{head}; no user count tested met {slos}: no answer"
        users = f"{a['concurrency']} user{'s' if a['concurrency'] != 1 else ''}"
        return (
            f"{head}; {users} met {slos}{point}: a lower bound (higher user counts were not all tested)"
            f"; there {_n(a.get('output_tps'), 1)} output tok/s, {_n(a.get('request_rps'))} req/s"
        )
    lo, hi = (list(a.get("bracket_rps") or []) + [None, None])[:2]
    if lo is None:
        if hi is not None:
            return f"{head}; no rate tested met {slos} ({_n(hi)} req/s failed; no lower rate was decided): no answer"
        return f"{head}; no answer (no probe was decided)"
    untested = a.get("untested_above_rps")
    if hi is not None:
        s = f"{head}; {_n(lo)} req/s met {slos}{point} and {_n(hi)} req/s failed: the answer lies in "
        s += f"{_n(lo)}..{_n(hi)} req/s (the bracket was not narrowed to the precision asked)"
    else:
        s = f"{head}; {_n(lo)} req/s met {slos}{point}: a lower bound (no higher rate was decided)"
    if untested is not None and (hi is None or untested < hi):
        s += f"; rates above {_n(untested)} req/s could not be tested by this client"
    s += f"; there {_n(a.get('output_tps'), 1)} output tok/s, goodput {_n(a.get('goodput_rps'))} req/s"
    return s


def _n(v: object, d: int = 2) -> str:
    return "-" if v is None else f"{v:,.{d}f}"
