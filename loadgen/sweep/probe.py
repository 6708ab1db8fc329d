"""A probe: one sustained run at one offered load, judged on binomial verdicts with early stop.

A probe is one sustained open-loop run at one rate (warm-up, then at least
``probe_duration_s`` and at least the requests needed to decide the percentile).
Verdict per per-request target (TTFT, time to first answer token, TPOT, E2E):
count the requests over the threshold (failures and zero-output count as over);
PASS when the one-sided Clopper-Pearson upper bound of the exceedance fraction is
within 1 - percentile at the chosen confidence, FAIL when the lower bound is past
it, else extend the probe (up to ``max_extensions`` more segments) and then
decide on the point estimate, marked ``low_confidence``. This is the binomial
test MLPerf LoadGen's early stopping uses for its latency bound, on effective counts (n / tau
and k / tau, the dependence between requests: :mod:`loadgen.sweep.evidence`). ITL is per token
(tokens within a request are correlated): judged as the run verdict of the last
segment (the pooled per-token percentile at the target's own percentile), with no
confidence bound. The rules themselves live in :mod:`loadgen.core.slo`.

Early stop: once FAIL is certain (known exceedances, including requests in flight
longer than the threshold without their first token — or their end, for E2E —
exceed what the largest possible probe could absorb), the probe stops and cancels
what is in flight; in-flight requests still under the threshold are *censored*
(excluded from the denominator). Both counts are reported.

Stability: an open-loop probe PASSes only if the system keeps up. After each segment
:func:`loadgen.core.stability.backlog_trend` tests the first-token delay and the decode
pace (TPOT) for a growing backlog (one-sided Mann-Kendall at 1 % per series, and a material
Theil-Sen rise); a growing backlog is FAIL with the reason ``unstable: backlog growing``,
whatever the percentile says (a short probe at 110 % of capacity can pass p99 only because
the queue has not yet had time to push it past the threshold). A probe is also long enough
for its tail: while the p99 E2E of its finished requests exceeds
:data:`~loadgen.core.stability.TAIL_FRACTION` of its window of scheduled sends, it is
extended by a segment twice as long (within ``max_extensions``; past that, low confidence).
The measured sends are conditioned on the nominal rate (``LoadConfig.exact_rate``), so a
probe offers exactly the rate the search compares.

A closed-loop probe (``--concurrency-levels``) is held to the same evidence rule, in time:
it is extended while it holds fewer judged requests than ``needed_requests``
(:func:`loadgen.sweep.evidence.closed_loop_extension_s`), and its sent rate is counted over
the probe's duration (:func:`~loadgen.sweep.evidence.closed_loop_sent_rps`). Each probe and
each of its targets gets one verdict text (:mod:`loadgen.sweep.verdict`), stored in
``sweep.json`` and shown alike everywhere.

Interrupted (the sweep's ``stop_requested``, or a segment whose run was interrupted by a
signal): the probe is not extended and gets the verdict ``interrupted`` (text ``INTERRUPTED:
undecided``, :mod:`loadgen.sweep.verdict`), whatever its counts so far: it did not run its
duration, its stability test or its extensions. Only a FAIL already certain over the largest
possible probe (``FAIL (stopped early)``) stands.

The verdict table (docs/measurement.md): only the client's timing (the generator checks of
:mod:`loadgen.engine.validity`) makes a probe ``invalid``; everything the server causes (SLO
misses, a growing backlog, errors) is ``fail`` with its reason. A probe whose requests
mostly end rate-limited (HTTP 429, more than half of those not cancelled) is ``rate_limited``.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from loadgen.core.metrics import RequestMetrics
from loadgen.core.run_result import RunResult
from loadgen.core.slo import (
    itl_probe_verdict,
    judge_counts,
    judged_per_request,
)
from loadgen.core.stability import TAIL_FRACTION, backlog_trend
from loadgen.core.types import RequestRecord
from loadgen.engine.runner import Runner
from loadgen.engine.validity import DEFAULT_LOOP_LAG_BOUND_MS, RATE_LIMIT_DOMINATED
from loadgen.measurement import measure
from loadgen.sweep import evidence as ev
from loadgen.sweep.client_error import flip_test, timing_only
from loadgen.sweep.config import SweepConfig, SweepContext
from loadgen.sweep.evidence import (
    closed_loop_extension_s,
    closed_loop_sent_rps,
    first_segment_requests,
    more_to_certify,
    next_segment_requests,
    tail_segment_requests,
    tail_too_long,
)
from loadgen.sweep.judge import ProbeJudge
from loadgen.sweep.session_search import measure_load, probe_sessions, session_turns
from loadgen.sweep.verdict import INTERRUPTED, probe_verdict_text, target_verdict

if TYPE_CHECKING:
    from loadgen.serve.observe import ObserverPair, ServerObserver
    from loadgen.spread.cluster import Cluster


@dataclass
class Probe:
    offered_rps: float
    verdict: str
    low_confidence: bool
    exceedance_fraction: dict[str, float | None]
    confidence_bounds: dict[str, list[float]]
    censored: int
    duration_s: float
    stopped_early: bool
    latency_ms: dict[str, Any]
    achieved_send_rps: float | None
    request_rps: float | None
    output_tps: float | None
    total_tps: float | None
    goodput_rps: float | None
    dir: str
    segments: int = 1
    reasons: list[str] = field(default_factory=list)
    concurrency: int | None = None
    validity_detail: list[str] = field(default_factory=list)
    rate_limited_fraction: float | None = None
    prefix_cache_reset: dict[str, Any] | None = None
    stability: list[str] = field(default_factory=list)  # the backlog trend tests, one line per series
    schedule_realized_rps: float | None = None  # the measured sends' own rate: (N - 1) / span
    reruns: int = 0  # earlier INVALID probes at this rate, run again (a transient client stall)
    demanded_output_tps: float | None = None  # the measured requests' output tokens / window
    interrupted: bool = False  # stopped by the user before its verdict: not extended, verdict "interrupted"
    # the one verdict text (loadgen.sweep.verdict), shown alike in the live line, table, sweep.json, report
    verdict_text: str = ""
    targets: list[dict[str, Any]] = field(default_factory=list)  # per target: counts, verdict, verdict_text
    sent_rps: float | None = None  # the rate really sent (open loop: achieved_send_rps; closed loop: sent_rps())
    judged_requests: int | None = None  # the fewest judged requests of any per-request target, all segments
    e2e_p99_ms: float | None = None  # of the first segment's successful requests (the plan's time estimate)
    tpot_p50_ms: float | None = None  # the first segment's median TPOT (the interactivity curve's per-user rate)
    # a session probe's per-turn-depth table and prefix-cache hit rate (sweep.json's sessions block)
    by_turn: list[dict[str, Any]] | None = None
    prefix_cache_hit_rate: float | None = None
    # the flip test of a probe that failed only client-timing checks (loadgen.sweep.client_error); None: not needed
    client_timing: dict[str, Any] | None = None
    certify_more_s: float | None = None  # a point estimate: about how much longer would have certified it
    capped: bool = False  # undecided when it reached --max-probe-duration (the search stops there, issue 30)
    continues: int | None = None  # a certifying probe: the index of the probe at this rate whose requests it adds to
    judge: Any = field(default=None, repr=False, compare=False)  # its ProbeJudge (a certifying probe goes on with it)

    def to_json(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d.pop("judge", None)
        return d


async def run_probe(
    ctx: SweepContext,
    rate: float,
    out_dir: Path,
    *,
    index: int,
    on_record: Callable[[RequestRecord, RequestMetrics], None] | None = None,
    concurrency: int | None = None,
    runner_hook: Callable[[Runner], None] | None = None,
    workers: int = 1,
    server_observer: ServerObserver | ObserverPair | None = None,
    cluster: Cluster | None = None,
    stop_requested: Callable[[], bool] | None = None,
    tau_hint: float = 1.0,
    resume: Probe | None = None,
) -> Probe:
    """One probe at ``rate`` req/s (or closed loop at ``concurrency``), extended while undecided.

    ``tau_hint``: the largest dependence between requests seen at or below this rate (the sweep's
    earlier probes): the first segment holds ``tau_hint`` x the requests the evidence rule needs, so a
    probe is sized for its evidence before it starts (issue 30); an undecided one is extended by
    segments sized to decide it until ``--max-probe-duration``.

    ``stop_requested``: the caller's interrupt flag (the sweep was stopped by the user). When it
    is set, or a segment's run ends interrupted, no further segment is run and the probe's verdict
    is ``interrupted`` (unless its FAIL was already certain: ``FAIL (stopped early)``).

    ``resume``: an earlier open-loop probe at this rate whose verdict is a point estimate (its ``judge``
    kept): this probe goes on counting with that judge, its segments added to the earlier probe's as
    extensions are (separate runs, each from a drained server: :class:`~loadgen.sweep.evidence.DependenceLog`),
    its first segment sized by the earlier one's ``certify_more_s``, all within its own ``--max-probe-duration``.
    """
    base, scfg = ctx.base, ctx.scfg
    need = scfg.needed_requests()
    per_segment = probe_sessions(base, need, rate, scfg.probe_duration_s) if concurrency is None else None
    most = session_turns(base)[1]  # sessions (issue 17): a probe counts sessions and judges their turns
    max_s = scfg.max_probe_s()
    if per_segment and most == 1:
        per_segment = first_segment_requests(per_segment, need, tau_hint, rate, max_s, scfg.probe_cap_given)
    n_cap = (per_segment * most if per_segment else need) * (1 + scfg.max_extensions)
    if per_segment and most == 1:
        n_cap = max(n_cap, math.ceil(rate * max_s))  # the largest possible probe, under its time cap
    judge = ProbeJudge(scfg.slos, n_cap, scfg.confidence)
    if resume is not None and resume.judge is not None and per_segment and most == 1:
        judge = resume.judge  # the earlier probe's counts and segments, judged with this probe's (a certifying probe)
        per_segment = max(1, min(math.ceil(1.1 * (resume.certify_more_s or 0.0) * rate), math.floor(rate * max_s)))
        judge.set_cap(judge.n_cap + max(n_cap, math.ceil(rate * max_s)))
    lag_ms, lag_note = scfg.schedule_lag_bound_ms(base.bounds.max_schedule_lag_p99_ms)
    loop_ms = base.bounds.max_loop_lag_p99_ms  # scaled with the SLO as the lag bound is, unless set (--max-loop-lag)
    loop_ms = max(loop_ms, lag_ms) if loop_ms == DEFAULT_LOOP_LAG_BOUND_MS else loop_ms
    bounds = replace(
        base.bounds, max_schedule_lag_p99_ms=lag_ms, schedule_lag_note=lag_note, max_loop_lag_p99_ms=loop_ms
    )
    segments = 0
    results: list[RunResult] = []
    total_duration = 0.0
    stability: list[str] = []
    unstable = False
    tail_short = False
    capped = False
    interrupted = False
    seg_requests = per_segment
    seg_duration_s = scfg.probe_duration_s  # closed loop: a segment's length (extended in time)
    while True:
        seg_dir = out_dir if segments == 0 else out_dir / f"extension-{segments}"
        e2e_p99_s = ((results[0].latency_ms.get("e2e") or {}).get("p99") or 0.0) / 1e3 if results else 0.0
        warm_s = max(scfg.warmup_s(), min(3 * e2e_p99_s, scfg.probe_duration_s))
        judge.new_segment()
        if concurrency is None:
            load = replace(
                base,
                rate_rps=rate,
                concurrency=None,
                requests=seg_requests,
                exact_rate=True,
                bounds=bounds,
                duration_s=None,
                # the warm-up rides on the same arrival process before the measured requests, in every
                # segment: each starts from a drained server, and a queue filling up from empty reads as a
                # rising backlog to the stability test (a false "unstable" at 88 % load); an extension's
                # warm-up is at least 3 x the first segment's p99 E2E (the time a batch takes to fill)
                warmup_requests=math.ceil(warm_s * rate),
                warmup_s=0.0,
                seed=base.seed + 1000 * index + segments,
                salt=f"p{index}s{segments}-",
                slos=scfg.slos,
                # a trace window is rescaled to the probe's rate and looped if it runs out
                workload=replace(base.workload, trace_loop=True)
                if base.workload is not None and base.has_trace
                else base.workload,
            )
        else:
            load = replace(
                base,
                rate_rps=None,
                concurrency=concurrency,
                requests=None,
                duration_s=seg_duration_s,
                warmup_requests=0,
                warmup_s=scfg.warmup_s() if segments == 0 else 0.0,
                seed=base.seed + 1000 * index + segments,
                salt=f"c{index}s{segments}-",
                slos=scfg.slos,
                max_concurrency=None,
                bounds=bounds,
            )

        def hook(r: Runner) -> None:
            judge.runner = r
            if runner_hook is not None:
                runner_hook(r)

        def rec_cb(rec: RequestRecord, m: RequestMetrics) -> None:
            judge.on_record(rec, m)
            if on_record is not None:
                on_record(rec, m)

        watcher = asyncio.create_task(judge.watch())
        try:
            run = await measure_load(
                measure,
                ctx.endpoint,
                load,
                seg_dir,
                config_record={**ctx.config_record, "probe": index, "offered_rps": rate, "segment": segments},
                redactor=ctx.redactor,
                on_record=rec_cb,
                install_signal_handlers=False,
                runner_hook=hook,
                workers=workers,
                on_summary=judge.on_summary,
                server_observer=server_observer,
                cluster=cluster,
            )
        finally:
            watcher.cancel()
        results.append(run.result)
        total_duration += run.result.duration_s or 0.0
        segments += 1
        judge.dep.end_segment()  # the segment's dependence between requests (loadgen.sweep.evidence)
        if run.result.interrupted and not judge.stopped_early:
            interrupted = True  # the user stopped it: no verdict from what it holds, and no extension
            break
        if (not run.result.valid and not timing_only(run.result.validity)) or judge.stopped_early:
            break  # a load the client could not send as asked (not only timed late): no verdict to extend
        if concurrency is not None:
            ext = closed_loop_extension_s(judge.targets, scfg, need, total_duration, segments)
            if ext is None:
                break
            seg_duration_s = ext
        else:
            sched, end, first, meas, ok, tpot = judge.timing()
            trends = backlog_trend(sched, first, tpot, meas)
            stability += [f"segment {segments}: {t.describe()}" + (" GROWING" if t.growing else "") for t in trends]
            if any(t.growing for t in trends):
                unstable = True
                break
            tail_short = tail_too_long(sched, end, meas, ok)
            judged = [
                (tj, judge.dep.effective(i, tj)) for i, tj in enumerate(judge.targets) if judged_per_request(tj.target)
            ]
            # decided on the effective counts (the dependence rule), as the verdict is: a PASS there is certified
            verdicts = [judge_counts(e.k, e.n, tj.target, scfg.confidence)[0] for tj, e in judged]
            if segments > scfg.max_extensions:
                break
            if tail_short and seg_requests is not None:
                # a longer segment: its tail a smaller part of it (within the probe's time cap)
                longer = tail_segment_requests(seg_requests, rate, max_s - total_duration if most == 1 else None)
                if longer is None:
                    capped = True  # a longer segment for the tail would pass --max-probe-duration: a point estimate
                    break
                seg_requests = longer
                left = scfg.max_extensions - segments + 1  # segments still possible, this one included
                done = sum(r.counts.get("requests") or 0 for r in results)
                judge.set_cap(max(judge.n_cap, done + seg_requests * most * (2**left - 1)))
            elif "fail" in verdicts or all(v == "pass" for v in verdicts):
                break
            elif seg_requests is not None and most == 1:
                nxt = next_segment_requests(judged, scfg.confidence, seg_requests, rate, max_s - total_duration)
                if nxt is None:
                    capped = True  # --max-probe-duration reached: a point estimate, said with the time it lacked
                    break
                seg_requests = nxt
        if stop_requested is not None and stop_requested():
            interrupted = True  # an extension was needed, but the sweep was stopped: undecided
            break
    probe = _finish_probe(judge, scfg, results, rate, out_dir, total_duration, segments, concurrency, interrupted)
    probe.interrupted = interrupted
    probe.judge = judge
    if resume is not None and judge is resume.judge:
        probe.reasons.insert(
            0, f"certifying: judged with the earlier probe at this rate ({probe.judged_requests} requests)"
        )
    probe.stability = stability
    probe.schedule_realized_rps = results[0].client.get("schedule_realized_rps")
    if unstable and probe.verdict not in ("invalid", "rate_limited"):
        probe.verdict = "fail"
        probe.low_confidence = False  # a growing backlog is a FAIL at the trend test's own 1 %: not a point estimate
        probe.reasons.insert(
            0, "unstable: backlog growing (" + "; ".join(ln for ln in stability if "GROWING" in ln) + ")"
        )
    elif tail_short and probe.verdict == "pass":
        probe.low_confidence = True
        probe.reasons.append(
            f"the p99 E2E of finished requests exceeds {TAIL_FRACTION:.0%} of the window even after "
            f"{scfg.max_extensions} extensions: a point estimate"
        )
    client_point = bool(probe.client_timing and probe.client_timing.get("point_estimate"))
    if (
        probe.low_confidence
        and not client_point
        and probe.verdict in ("pass", "fail")
        and concurrency is None
        and rate > 0
    ):
        more = [more_to_certify(tj, judge.dep.effective(i, tj), scfg.confidence)
                for i, tj in enumerate(judge.targets) if judged_per_request(tj.target)]  # fmt: skip
        known = [m for m in more if m is not None]
        probe.certify_more_s = None if len(known) < len(more) else max(known, default=0) / (rate * most)
        probe.capped = capped
        why = f"--max-probe-duration {max_s:g} s reached" if capped else "the probe's extensions ran out"
        probe.reasons.append(
            f"a point estimate: {why}; "
            + (f"about {probe.certify_more_s:.0f} s more at this rate would have certified it"
               if probe.certify_more_s is not None else "its exceedances sit at the allowed fraction: no length certifies it")
        )  # fmt: skip
    probe.verdict_text = probe_verdict_text(
        probe.verdict,
        low_confidence=probe.low_confidence,
        stopped_early=probe.stopped_early,
        validity_detail=probe.validity_detail,
        client_timing=client_point,
    )
    return probe


def _finish_probe(
    judge: ProbeJudge,
    scfg: SweepConfig,
    results: list[RunResult],
    rate: float,
    out_dir: Path,
    duration: float,
    segments: int,
    concurrency: int | None,
    interrupted: bool = False,
) -> Probe:
    first = results[0]
    last = results[-1]
    invalid = [r for r in results if not r.valid]
    ef: dict[str, float | None] = {}
    cb: dict[str, list[float]] = {}
    reasons: list[str] = []
    verdict = "pass"
    low_conf = False
    targets: list[dict[str, Any]] = []
    for i, tj in enumerate(judge.targets):
        t = tj.target
        if not judged_per_request(t):
            ok, v_ms = itl_probe_verdict(t, last.block("slo"))
            ef[t.label] = None
            cb[t.label] = []
            reasons.append(f"{t.label}: pooled per-token value {v_ms} ms (no confidence bound)")
            targets.append({"target": t.label, "verdict": "pass" if ok else "fail", "value_ms": v_ms})
            targets[-1]["verdict_text"] = "PASS" if ok else "FAIL"
            if not ok:
                verdict = "fail"
            continue
        eff = judge.dep.effective(i, tj)  # counts for the dependence between requests (loadgen.sweep.evidence)
        v, low, frac, lo, hi = ev.dependent_verdict(tj, eff, scfg.confidence, judge.stopped_early)
        tv, point, text = target_verdict(
            tj.k, tj.n, t, scfg.confidence, stopped_early=judge.stopped_early, fail_k=judge.fail_k.get(t.label), eff=eff
        )
        low_conf |= low
        ef[t.label] = frac
        cb[t.label] = [lo, hi]
        targets.append(
            {"target": t.label, "verdict": tv, "verdict_text": text, "point_estimate": point, "exceedances": tj.k}
        )
        targets[-1].update(requests=tj.n, censored=tj.censored, bounds=[lo, hi], **judge.dep.facts(i, tj))
        if v == "fail":
            verdict = "fail"
    if judge.stopped_early:
        low_conf = False  # FAIL was certain over the largest possible probe: not a point estimate
    if judge.stopped_early and not any(x["verdict_text"].endswith("(stopped early)") for x in targets):
        for x in targets:  # none reached its count alone (a race at the stop): the undecided ones stopped it
            if "point_estimate" in x and (x["verdict"] == "fail" or x["point_estimate"]):
                x.update(verdict="fail", point_estimate=False, verdict_text="FAIL (stopped early)")
    if interrupted:  # the rule of loadgen.sweep.verdict: no verdict from an interrupted probe's counts
        low_conf = False
        for x in targets:
            x.update(verdict="interrupted", verdict_text=INTERRUPTED)
            x.pop("point_estimate", None)
    for x in targets:
        if "bounds" in x:
            lo, hi = x["bounds"]
            reasons.append(
                f"{x['target']}: {x['exceedances']} of {x['requests']} measured requests over ({x['verdict_text']}; bounds {lo:.4f}..{hi:.4f})"
            )
    validity_detail: list[str] = []
    flip = None
    if invalid and not interrupted and all(timing_only(r.validity) for r in invalid):  # loadgen.sweep.client_error
        bounds: list[float | None] = [r.client.get("timing_error_bound_ms") for r in results]
        flip = flip_test(
            [(tj, judge.dep.effective(i, tj), judge.logs.get(i)) for i, tj in enumerate(judge.targets)],
            [(x.target, itl_probe_verdict(x.target, last.block("slo"))[1]) for x in judge.targets
             if not judged_per_request(x.target)],
            None if any(b is None for b in bounds) else max(b for b in bounds if b is not None),
            scfg.confidence, stopped_early=judge.stopped_early, fail_k=judge.fail_k,
        )  # fmt: skip
        reasons += [("VALID for this verdict: " if flip.stands else "INVALID, the verdict could flip: ") + ln
                    for ln in flip.lines]  # fmt: skip
        if flip.stands:
            kept, invalid = invalid, []  # the figures stay in validity_detail; the verdict stands
            low_conf |= flip.point
            validity_detail += [c["detail"] for r in kept for c in r.validity["checks"] if not c["ok"]
                                and c["group"] == "generator"]  # fmt: skip
    if invalid and not interrupted:
        if judge.fails_on_server_errors():
            verdict = "fail"
            reasons.append("FAIL on the server's errors alone, whatever the generator's lag (see validity)")
        else:
            verdict = "invalid"
    if invalid:
        for r in invalid:
            validity_detail += [c["detail"] for c in r.validity["checks"] if not c["ok"] and c["group"] == "generator"]
    counts = [r.counts for r in results]
    limited = sum((c.get("errors_by_kind") or {}).get("rate_limited", 0) for c in counts)
    decided = sum((c.get("requests") or 0) - (c.get("errors_by_kind") or {}).get("cancelled", 0) for c in counts)
    rl_frac = limited / decided if decided else None
    if not interrupted and verdict != "invalid" and rl_frac is not None and rl_frac > RATE_LIMIT_DOMINATED:
        verdict = "rate_limited"
        reasons.append(f"{limited} of {decided} requests answered 429: the provider's quota, not the server's latency")
    if interrupted:
        verdict = "interrupted"
        reasons.insert(0, "stopped by the user before its verdict: not extended, no verdict from the counts so far")
    thr = first.throughput
    lat = {t.metric: first.latency_ms.get(t.metric) for t in scfg.slos}
    judged = [x["requests"] for x in targets if "requests" in x]
    return Probe(
        targets=targets,
        client_timing=flip.facts if flip is not None else None,
        judged_requests=min(judged) if judged else None,
        e2e_p99_ms=(first.latency_ms.get("e2e") or {}).get("p99"),
        tpot_p50_ms=(first.latency_ms.get("tpot") or {}).get("p50"),
        by_turn=(first.block("sessions") or {}).get("by_turn"),
        prefix_cache_hit_rate=(first.block("sessions") or {}).get("prefix_cache_hit_rate"),
        sent_rps=closed_loop_sent_rps(results) if concurrency is not None else thr["achieved_send_rps"],
        offered_rps=rate,
        verdict=verdict,
        low_confidence=low_conf,
        exceedance_fraction=ef,
        confidence_bounds=cb,
        censored=judge.censored,
        duration_s=duration,
        stopped_early=judge.stopped_early,
        latency_ms=lat,
        achieved_send_rps=thr["achieved_send_rps"],
        request_rps=thr["request_rps"],
        output_tps=thr["output_tps"],
        total_tps=thr["total_tps"],
        goodput_rps=thr["goodput_rps"],
        demanded_output_tps=thr.get("demanded_output_tps"),
        dir=out_dir.name,  # relative to the sweep's directory, so results can be moved
        segments=segments,
        reasons=reasons,
        concurrency=concurrency,
        validity_detail=validity_detail,
        rate_limited_fraction=rl_frac,
    )
