"""A closed-loop probe held to the evidence rule of the open-loop ones: extended in time, its sent rate.

An open-loop probe is sized in requests (at least :meth:`~loadgen.sweep.SweepConfig.needed_requests`);
a closed-loop probe (``--concurrency-levels``) sends what its users send in ``probe_duration_s``,
which at a low user count or a slow server is far fewer (19 or 60 requests where p99 at 95 %
needs 299). :func:`closed_loop_extension_s` extends it in time until it holds that many, so its
verdict is decided on the same evidence, or marked a point estimate.
"""

from __future__ import annotations

from typing import Any

from loadgen.slo import TargetJudge, judge_counts, judged_per_request
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


def closed_loop_sent_rps(results: list[dict[str, Any]]) -> float | None:
    """A closed-loop probe's sent rate: measured requests sent / the probe's duration, over all segments.

    sum(counts.requests - counts.unsent) / sum(duration_s), ``duration_s`` from the first
    measured send to the last end (the ``*_incl_drain`` rates' denominator,
    :mod:`loadgen.results`). Not (sent - 1) / send span, the open loop's convention
    (``achieved_send_rps``): a closed loop's users all send at the ramp, so with few
    requests that span is the ramp's few ms (16 users' first sends in 18 ms read 844 req/s).
    """
    sent = sum((r.get("counts") or {}).get("requests", 0) - (r.get("counts") or {}).get("unsent", 0) for r in results)
    dur = sum(r.get("duration_s") or 0.0 for r in results)
    return sent / dur if dur > 0 and sent > 0 else None
