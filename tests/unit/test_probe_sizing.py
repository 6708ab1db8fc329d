"""Probes sized for their evidence and the answer in plain words (issue 30, item 2).

Each function here is one rule of docs/measurement.md's Sweep section: how many more requests would
certify a probe at its exceedance fraction and dependence, how the first segment and the extensions
are sized within ``--max-probe-duration``, the answer's interval from certified probes only, and
the headline that says it.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

from loadgen.core.slo import TargetJudge, judge_counts, parse_slo
from loadgen.report.sweep_report import headline
from loadgen.sweep.answer import certified_interval
from loadgen.sweep.config import SweepConfig
from loadgen.sweep.evidence import (
    first_segment_requests,
    more_to_certify,
    next_segment_requests,
    tail_segment_requests,
)
from loadgen.sweep.probe import Probe

P99 = parse_slo("ttft:p99<=300ms")


def tj(k: int, n: int) -> TargetJudge:
    return TargetJudge(P99, n=n, k=k)


def test_more_to_certify_is_zero_when_decided_and_scales_with_tau() -> None:
    assert more_to_certify(tj(0, 400), tj(0, 400), 0.95) == 0  # 0 of 400 independent: certified
    one = more_to_certify(tj(0, 100), tj(0, 100), 0.95)
    five = more_to_certify(tj(0, 100), tj(0, 20), 0.95)  # the same requests, tau 5
    assert one is not None and five is not None
    # what it asks for does decide it: 0 over of (100 + more) / tau effective requests
    assert judge_counts(0, (100 + one) // 1, P99, 0.95)[0] == "pass"
    assert judge_counts(0, (100 + five) // 5, P99, 0.95)[0] == "pass"
    assert five > 4 * one  # tau 5 needs about five times the requests


def test_more_to_certify_says_none_at_the_allowed_fraction() -> None:
    # 1 % over against a p99 target: no length decides it (the bounds straddle 1 % forever)
    assert more_to_certify(tj(10, 1000), tj(10, 1000), 0.95) is None
    assert more_to_certify(tj(0, 0), tj(0, 0), 0.95) is None


def test_the_first_segment_holds_need_times_tau_within_the_cap() -> None:
    assert first_segment_requests(299, 299, 1.0, 50.0, 40.0) == 299
    assert first_segment_requests(299, 299, 3.0, 50.0, 40.0) == 897  # 299 x 3 = 17.9 s at 50 req/s
    assert first_segment_requests(299, 299, 10.0, 50.0, 40.0) == 2000  # the 40 s cap: 2000 requests
    assert first_segment_requests(500, 299, 1.0, 50.0, 40.0) == 500  # never fewer than the duration's count
    # a vLLM-CPU sweep at 0.58 req/s: 368 requests are 634 s, over a 240 s cap; a cap the user gave (hard)
    # holds the cap's 140 requests, the default one admits the evidence rule's 368
    assert first_segment_requests(368, 368, 20.0, 0.58, 240.0, hard_cap=True) == 140
    assert first_segment_requests(368, 368, 20.0, 0.58, 240.0) == 368


def test_extensions_are_sized_to_decide_and_stop_at_the_cap() -> None:
    judged = [(tj(0, 299), tj(0, 60))]  # tau ~5: undecided on 60 effective requests
    nxt = next_segment_requests(judged, 0.95, 299, 50.0, left_s=100.0)
    want = more_to_certify(*judged[0], 0.95)
    assert want is not None and nxt == min(5000, round(1.1 * want + 0.5))
    assert next_segment_requests(judged, 0.95, 299, 50.0, left_s=10.0) == 500  # the room left: 10 s at 50 req/s
    assert next_segment_requests(judged, 0.95, 299, 50.0, left_s=1.0) is None  # under a quarter segment: capped
    # at the allowed fraction nothing decides it but more: all the room
    assert next_segment_requests([(tj(3, 300), tj(3, 300))], 0.95, 300, 50.0, left_s=20.0) == 1000


def probe(rate: float, verdict: str, low: bool = False, concurrency: int | None = None) -> Probe:
    return cast(
        Probe,
        SimpleNamespace(
            offered_rps=rate, verdict=verdict, low_confidence=low, concurrency=concurrency, interrupted=False
        ),
    )


def test_the_interval_counts_certified_probes_only() -> None:
    ps = [probe(10, "pass"), probe(20, "fail"), probe(14, "pass", low=True), probe(12, "pass"), probe(17, "fail", True)]
    assert certified_interval(ps) == [12, 20]  # the point estimates at 14 and 17 bound nothing
    assert certified_interval([probe(10, "pass", True), probe(20, "fail")]) == [None, 20]
    assert certified_interval([probe(10, "pass"), probe(8, "fail")]) == [10, None]  # a FAIL below is no upper end
    assert certified_interval([probe(10, "pass"), probe(20, "invalid")]) == [10, None]


def sweep(answer: dict[str, Any], probes: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    slo = [{"target": P99.label, "metric": "ttft", "percentile": 99.0, "threshold_ms": 300.0}]
    base = {"max_rate_rps": 9.5, "limited_by": None, "concurrency": None}
    return {"slo": slo, "settings": {"confidence": 0.975}, "answer": {**base, **answer}, "probes": probes or []}


def test_the_headline_says_the_answer_and_its_interval_in_plain_words() -> None:
    assert headline(sweep({"interval_rps": [9.5, 10.4]})) == (
        "9.50 req/s meets p99 TTFT ≤ 300 ms (95 % interval 9.50–10.40 req/s)"
    )  # each end tested at 97.5 %: the pair covers 95 %
    s90 = sweep({"interval_rps": [9.5, 10.4]})
    s90["settings"]["confidence"] = 0.95
    assert "(90 % interval 9.50–10.40 req/s)" in str(headline(s90))
    only_lo = headline(sweep({"interval_rps": [9.5, None], "limited_by": "max_rate"}))
    assert (
        only_lo
        == "9.50 req/s meets p99 TTFT ≤ 300 ms (certified at 9.50 req/s; no rate above it was certified to fail: --max-rate reached)"
    )
    p = {"verdict": "pass", "offered_rps": 9.5, "concurrency": None, "certify_more_s": 42.0}
    point = headline(sweep({"interval_rps": [None, 12.0]}, [p]))
    assert point == (
        "9.50 req/s meets p99 TTFT ≤ 300 ms (a point estimate: no probe certified a PASS; about 42 s more at "
        "9.50 req/s would have certified it; 12.00 req/s certainly fails)"
    )
    # the demo with a CPU hog read "37.03 req/s meets ... (95 % interval 24.01-48.03 req/s)" for a point estimate
    pe = headline(sweep({"interval_rps": [8.0, 12.0], "point_estimate": True}))
    assert (
        pe == "9.50 req/s meets p99 TTFT ≤ 300 ms (95 % interval 8.00–12.00 req/s), on a point estimate at 9.50 req/s"
    )
    above = headline(sweep({"interval_rps": [9.5, 12.0], "point_estimate_pass_above_rps": 10.5}))
    assert above is not None and above.endswith("; 10.50 req/s passed too, on a point estimate only")
    assert headline(sweep({})) is None  # a sweep.json from before issue 30: no interval, no headline
    assert headline(sweep({"interval_rps": [1, 2], "concurrency": 8})) is None


def test_the_probe_cap_defaults_to_four_probe_durations() -> None:
    assert SweepConfig(slos=[P99], probe_duration_s=10.0).max_probe_s() == 40.0
    assert SweepConfig(slos=[P99], probe_duration_s=10.0, max_probe_duration_s=25.0).max_probe_s() == 25.0
    assert SweepConfig(slos=[P99], probe_duration_s=10.0, max_probe_duration_s=5.0).max_probe_s() == 10.0


def test_a_longer_segment_for_the_tail_stays_within_the_probe_time_cap() -> None:
    # the demo on a busy machine ran a 123 s probe under a 40 s cap: the tail doubled each segment unbounded
    assert tail_segment_requests(400, 40.0, None) == 800  # no cap (a session probe): twice the last
    assert tail_segment_requests(400, 40.0, 30.0) == 800  # 30 s holds 1200 at 40 req/s
    assert tail_segment_requests(400, 40.0, 12.5) == 500  # the room left: 12.5 s at 40 req/s
    assert tail_segment_requests(400, 40.0, 2.0) is None  # 80 < a quarter of 400: the cap is reached
    assert tail_segment_requests(400, 40.0, -5.0) is None  # already past it
