"""The sweep's decision logic without a server: verdicts on exact counts, cost per million
tokens, non-monotonic flags, and the probe judge (censoring, early stop) on synthetic
request records with a fake runner."""

from __future__ import annotations

import asyncio
import statistics
import time
from pathlib import Path
from typing import Any, Literal

import pytest

from loadgen.core.clock import now_ns
from loadgen.core.metrics import compute
from loadgen.core.slo import SLOTarget, judge_counts
from loadgen.core.stats import lower_bound, upper_bound
from loadgen.core.types import Phase, RequestRecord, TokenEvent
from loadgen.engine.results import Aggregator
from loadgen.sweep import Probe, ProbeJudge, SweepConfig, cost_per_million, non_monotonic
from loadgen.sweep.probe import _finish_probe
from tests.fixtures.run_results import run_result

MS = 1_000_000
S = 1_000_000_000
P99 = SLOTarget("ttft", 99.0, 300 * MS)
P90 = SLOTarget("ttft", 90.0, 50 * MS)


# --------------------------------------------------------------------------- judge_counts


@pytest.mark.parametrize(
    "k,n,t,verdict",
    [
        (0, 299, P99, "pass"),  # upper bound 0.99691 % <= 1 %
        (0, 298, P99, "undecided"),  # upper bound 1.0002 % > 1 %
        (3, 299, P99, "undecided"),  # bounds 0.2 %..2.57 %
        (6, 299, P99, "undecided"),
        (7, 299, P99, "fail"),  # the first count whose lower bound passes 1 %
        (10, 299, P99, "fail"),  # lower bound 1.8255 %
        (4, 1000, P99, "pass"),
        (5, 1000, P99, "undecided"),
        (15, 1000, P99, "undecided"),
        (16, 1000, P99, "fail"),
        (0, 29, P90, "pass"),
        (0, 28, P90, "undecided"),
        (4, 100, P90, "pass"),
        (5, 100, P90, "undecided"),
        (15, 100, P90, "undecided"),
        (16, 100, P90, "fail"),
        (100, 100, P90, "fail"),
        (0, 0, P90, "undecided"),
    ],
)
def test_judge_counts_exact(k: int, n: int, t: SLOTarget, verdict: str) -> None:
    v, lo, hi = judge_counts(k, n, t, 0.95)
    assert v == verdict
    assert lo == lower_bound(k, n, 0.95) and hi == upper_bound(k, n, 0.95)


def test_judge_counts_with_no_requests_has_the_trivial_bounds() -> None:
    assert judge_counts(0, 0, P99, 0.95) == ("undecided", 0.0, 1.0)


def test_judge_counts_confidence_matters() -> None:
    # 0 of 230 proves p99 at 90 % (0.1 ** (1/230) ...) but not at 95 %
    assert judge_counts(0, 230, P99, 0.90)[0] == "pass"
    assert judge_counts(0, 230, P99, 0.95)[0] == "undecided"


# --------------------------------------------------------------------------- cost_per_million


def test_cost_per_million_exact() -> None:
    # $3.60 per hour at 1000 tok/s: 3.6e6 tokens per hour -> $1.00 per million
    assert cost_per_million(3.6, 1000.0) == 1.0
    assert cost_per_million(36.0, 10_000.0) == 1.0
    assert cost_per_million(2.0, 500.0) == pytest.approx(10 / 9, rel=1e-15)
    assert cost_per_million(7.25, 1234.5) == 7.25 / (1234.5 * 3600.0) * 1e6


@pytest.mark.parametrize("cost,tps", [(None, 1000.0), (0.0, 1000.0), (3.6, None), (3.6, 0.0)])
def test_cost_per_million_missing_inputs(cost: float | None, tps: float | None) -> None:
    assert cost_per_million(cost, tps) is None


# --------------------------------------------------------------------------- non_monotonic


def probe(rate: float, verdict: str, concurrency: int | None = None) -> Probe:
    return Probe(
        offered_rps=rate,
        verdict=verdict,
        low_confidence=False,
        exceedance_fraction={},
        confidence_bounds={},
        censored=0,
        duration_s=1.0,
        stopped_early=False,
        latency_ms={},
        achieved_send_rps=rate,
        request_rps=rate,
        output_tps=None,
        total_tps=None,
        goodput_rps=None,
        dir="x",
        concurrency=concurrency,
    )


def test_monotonic_search_has_no_flags() -> None:
    assert non_monotonic([probe(10, "pass"), probe(20, "fail"), probe(14.1, "pass"), probe(16.8, "fail")]) == []
    assert non_monotonic([]) == []


def test_a_fail_below_a_pass_is_flagged() -> None:
    flags = non_monotonic([probe(10, "pass"), probe(20, "pass"), probe(15, "fail"), probe(30, "fail")])
    assert flags == ["15.000 req/s failed although a rate at or above it passed"]


def test_mixed_verdicts_at_one_rate_are_flagged() -> None:
    flags = non_monotonic([probe(12.5, "pass"), probe(12.5, "fail")])
    assert flags == ["12.500 req/s failed although a rate at or above it passed"]


def test_invalid_and_closed_loop_probes_are_not_judged() -> None:
    assert non_monotonic([probe(20, "invalid"), probe(10, "fail")]) == []
    assert non_monotonic([probe(0.0, "pass", concurrency=8), probe(0.0, "fail", concurrency=4)]) == []
    assert non_monotonic([probe(20, "pass", concurrency=8), probe(10, "fail")]) == []


# --------------------------------------------------------------------------- ProbeJudge


def rec(
    index: int = 0,
    *,
    phase: Phase = "measure",
    scheduled: int = 0,
    first: int | None = None,
    end: int | None = None,
    status: Literal["ok", "error"] = "ok",
    error_kind: str | None = None,
    tokens: int = 4,
    answer: bool = True,
) -> RequestRecord:
    """A request scheduled at ``scheduled``; tokens 1 ms apart from ``first`` (absolute ns)."""
    r = RequestRecord(
        index=index,
        phase=phase,
        scheduled_ns=scheduled,
        sent_ns=scheduled,
        end_ns=end,
        status=status,
        error_kind=error_kind,
    )
    if first is not None:
        r.events = [TokenEvent(first + i * MS, "tok ", answer) for i in range(tokens)]
        r.completion_tokens = tokens
        if status == "ok" and end is None:
            r.end_ns = first + tokens * MS
    elif status == "ok":
        r.completion_tokens = 0
        r.end_ns = end if end is not None else scheduled + MS
    return r


def feed(judge: ProbeJudge, *records: RequestRecord) -> None:
    for r in records:
        judge.on_record(r, compute(r))


class FakeRunner:
    def __init__(self, inflight: list[RequestRecord] | None = None) -> None:
        self.inflight_records = {r.index: r for r in inflight or []}
        self.stops: list[tuple[bool, bool]] = []

    def request_stop(self, interrupted: bool = True, cancel_inflight: bool = False) -> None:
        self.stops.append((interrupted, cancel_inflight))


def first_fail_count(n_cap: int, t: SLOTarget, c: float = 0.95) -> int:
    q = 1 - t.percentile / 100
    return next(k for k in range(n_cap + 1) if lower_bound(k, n_cap, c) > q)


def test_on_record_counts_exceedances() -> None:
    j = ProbeJudge([P90], n_cap=100, confidence=0.95)
    feed(
        j,
        rec(0, first=50 * MS),  # TTFT exactly at the threshold: conforms (inclusive)
        rec(1, first=50 * MS + 1),  # 1 ns over
        rec(2, first=10 * MS),
        rec(3, status="error", error_kind="http_error", end=2 * MS),  # failures count as over
        rec(4, status="ok"),  # zero output counts as over
        rec(5, phase="warmup", first=500 * MS),  # warm-up is not judged
    )
    tj = j.targets[0]
    assert (tj.n, tj.k, tj.censored, j.censored) == (5, 3, 0, 0)


def test_itl_targets_are_not_counted_per_request() -> None:
    itl = SLOTarget("itl", 99.0, 10 * MS)
    j = ProbeJudge([P90, itl], n_cap=100, confidence=0.95)
    feed(j, rec(0, first=10 * MS), rec(1, first=80 * MS))
    assert (j.targets[0].n, j.targets[0].k) == (2, 1)
    assert (j.targets[1].n, j.targets[1].k) == (0, 0)


def test_tpot_target_counted_on_its_own_value() -> None:
    tpot = SLOTarget("tpot", 90.0, int(1.5 * MS))
    j = ProbeJudge([tpot], n_cap=100, confidence=0.95)
    slow = rec(1, first=10 * MS)
    slow.events = [TokenEvent(10 * MS + i * 2 * MS, "tok ") for i in range(4)]  # 2 ms per token
    feed(j, rec(0, first=10 * MS), slow)
    assert (j.targets[0].n, j.targets[0].k) == (2, 1)


def test_cancelled_requests_over_the_threshold_count_as_exceedances() -> None:
    j = ProbeJudge([P90], n_cap=100, confidence=0.95)
    cancelled: dict[str, Any] = dict(status="error", error_kind="cancelled")
    feed(
        j,
        rec(0, end=60 * MS, **cancelled),  # no token after 60 ms: already over
        rec(1, first=70 * MS, end=90 * MS, **cancelled),  # first token late: over
    )
    tj = j.targets[0]
    assert (tj.n, tj.k, tj.censored, j.censored) == (2, 2, 0, 0)


def test_cancelled_requests_still_under_the_threshold_are_censored() -> None:
    j = ProbeJudge([P90], n_cap=100, confidence=0.95)
    feed(
        j,
        rec(0, end=30 * MS, status="error", error_kind="cancelled"),
        rec(1, end=49 * MS, status="error", error_kind="cancelled"),
    )
    tj = j.targets[0]
    assert (tj.n, tj.k, tj.censored, j.censored) == (0, 0, 2, 2)


def test_cancelled_request_with_a_conforming_first_token_is_counted_not_censored() -> None:
    # Its TTFT (20 ms) is known and conforms: it belongs in the denominator, it is not
    # "still under the threshold" with an unknown outcome (see the report: proposed patch).
    j = ProbeJudge([P90], n_cap=100, confidence=0.95)
    feed(j, rec(0, first=20 * MS, end=200 * MS, status="error", error_kind="cancelled"))
    tj = j.targets[0]
    assert (tj.n, tj.k, tj.censored, j.censored) == (1, 0, 0, 0)


def test_cancelled_e2e_target_uses_the_age() -> None:
    e2e = SLOTarget("e2e", 90.0, 100 * MS)
    j = ProbeJudge([e2e], n_cap=100, confidence=0.95)
    c: dict[str, Any] = dict(status="error", error_kind="cancelled")
    feed(j, rec(0, first=5 * MS, end=150 * MS, **c), rec(1, first=5 * MS, end=80 * MS, **c))
    tj = j.targets[0]
    assert (tj.n, tj.k, tj.censored, j.censored) == (1, 1, 1, 1)


def test_certain_fail_counts_finished_and_in_flight_exceedances() -> None:
    n_cap = 100
    kf = first_fail_count(n_cap, P90)
    assert kf == 16
    j = ProbeJudge([P90], n_cap=n_cap, confidence=0.95)
    feed(j, *[rec(i, first=80 * MS) for i in range(kf - 1)])
    assert not j.certain_fail()  # no runner: finished requests only
    now = now_ns()
    old = rec(1000, scheduled=now - S)  # in flight for 1 s without a token
    young = rec(1001, scheduled=now)
    old_warm = rec(1002, phase="warmup", scheduled=now - S)
    j.runner = FakeRunner([young, old_warm])  # type: ignore[assignment]  # a stand-in runner
    assert not j.certain_fail()
    j.runner = FakeRunner([young, old_warm, old])  # type: ignore[assignment]  # a stand-in runner
    assert j.certain_fail()


def test_certain_fail_in_flight_with_an_early_first_token_is_not_over() -> None:
    j = ProbeJudge([P90], n_cap=100, confidence=0.95)
    feed(j, *[rec(i, first=80 * MS) for i in range(15)])
    now = now_ns()
    streaming = rec(1000, scheduled=now - S, first=now - S + 10 * MS)  # TTFT 10 ms, still streaming
    streaming.end_ns = None
    streaming.status = "error"
    j.runner = FakeRunner([streaming])  # type: ignore[assignment]  # a stand-in runner
    assert not j.certain_fail()


def test_certain_fail_time_to_first_answer_token_ignores_reasoning_events() -> None:
    t = SLOTarget("time_to_first_answer_token", 90.0, 50 * MS)
    j = ProbeJudge([t], n_cap=100, confidence=0.95)
    feed(j, *[rec(i, first=80 * MS) for i in range(15)])
    now = now_ns()
    thinking = rec(1000, scheduled=now - S, first=now - S + 10 * MS, answer=False)
    j.runner = FakeRunner([thinking])  # type: ignore[assignment]  # a stand-in runner
    assert j.certain_fail()


def test_certain_fail_never_from_itl_or_tpot() -> None:
    j = ProbeJudge([SLOTarget("itl", 99.0, MS), SLOTarget("tpot", 90.0, MS)], n_cap=10, confidence=0.95)
    j.targets[0].k = j.targets[1].k = 10
    j.runner = FakeRunner([rec(i, scheduled=now_ns() - S) for i in range(10)])  # type: ignore[assignment]  # a stand-in runner
    assert not j.certain_fail()


@pytest.mark.timing
def test_watch_stops_the_runner_once_fail_is_certain() -> None:
    j = ProbeJudge([P90], n_cap=100, confidence=0.95)
    runner = FakeRunner()
    j.runner = runner  # type: ignore[assignment]  # a stand-in runner
    feed(j, *[rec(i, first=80 * MS) for i in range(15)])

    async def go() -> None:
        with pytest.raises(TimeoutError):  # not certain: keeps watching
            await asyncio.wait_for(j.watch(period_s=0.01), 0.1)
        assert runner.stops == [] and not j.stopped_early
        runner.inflight_records[99] = rec(99, scheduled=now_ns() - S)
        await asyncio.wait_for(j.watch(period_s=0.01), 2.0)

    asyncio.run(go())
    assert j.stopped_early
    assert runner.stops == [(False, True)]  # not an interruption; cancel what is in flight


@pytest.mark.timing
def test_certain_fail_is_cheap_enough_for_the_event_loop() -> None:
    # The watcher calls certain_fail() every 100 ms on the event loop that sends the requests.
    # A 60 s p99 probe at 170 req/s with two extensions: n_cap 30600; with ~300 exceedances
    # counted so far a binomial bound per call costs tens of ms, which the generator then
    # shows as schedule lag (and a server's overload or errors as a "client limit").
    j = ProbeJudge([P99], n_cap=30_600, confidence=0.95)
    j.targets[0].n = j.targets[0].k = 300
    now = now_ns()
    j.runner = FakeRunner([rec(i, scheduled=now) for i in range(200)])  # type: ignore[assignment]  # a stand-in runner
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        j.certain_fail()
        times.append(time.perf_counter() - t0)
    assert statistics.median(times) < 0.005, times


# --------------------------------------------------------------------------- verdict of a finished probe


def result(valid: bool = True) -> dict[str, Any]:
    checks = [
        {
            "name": "schedule_lag_p99",
            "group": "generator",
            "ok": valid,
            "detail": "p99 schedule lag 40.000 ms (excluding connection set-up) <= 5 ms",
        },
        {"name": "min_duration", "group": "measurement", "ok": False, "detail": "2.00 s measured (minimum 10 s)"},
    ]
    return {
        "validity": {"valid": valid, "checks": checks},
        "throughput": {
            "achieved_send_rps": 50.0,
            "request_rps": 50.0,
            "output_tps": 400.0,
            "total_tps": 800.0,
            "goodput_rps": 0.0,
        },
        "latency_ms": {"ttft": {"p90": 12.0}, "itl": {}},
        "duration_s": 2.0,
    }


def finish(j: ProbeJudge, results: list[dict[str, Any]]) -> Probe:
    scfg = SweepConfig(slos=[t.target for t in j.targets], probe_duration_s=2.0, confidence=0.95)
    return _finish_probe(j, scfg, [run_result(r) for r in results], 50.0, Path("probe-x"), 2.0, len(results), None)


def test_finish_decided_and_low_confidence_verdicts() -> None:
    j = ProbeJudge([P90], n_cap=300, confidence=0.95)
    feed(j, *[rec(i, first=10 * MS) for i in range(100)])
    p = finish(j, [result()])
    assert (p.verdict, p.low_confidence, p.exceedance_fraction) == ("pass", False, {P90.label: 0.0})
    assert p.confidence_bounds[P90.label] == [0.0, upper_bound(0, 100, 0.95)]

    j = ProbeJudge([P90], n_cap=300, confidence=0.95)
    feed(j, *[rec(i, first=(80 if i < 8 else 10) * MS) for i in range(100)])  # 8 %: undecided
    p = finish(j, [result()])
    assert (p.verdict, p.low_confidence) == ("pass", True)

    j = ProbeJudge([P90], n_cap=300, confidence=0.95)
    feed(j, *[rec(i, first=(80 if i < 12 else 10) * MS) for i in range(100)])  # 12 %: undecided
    p = finish(j, [result()])
    assert (p.verdict, p.low_confidence) == ("fail", True)


def test_finish_stopped_early_is_fail_with_its_censored_count() -> None:
    j = ProbeJudge([P90], n_cap=300, confidence=0.95)
    feed(j, *[rec(i, first=10 * MS) for i in range(10)], rec(50, end=10 * MS, status="error", error_kind="cancelled"))
    j.stopped_early = True
    p = finish(j, [result()])
    assert (p.verdict, p.stopped_early, p.censored) == ("fail", True, 1)


def test_finish_generator_limit_makes_a_probe_invalid() -> None:
    j = ProbeJudge([P90], n_cap=300, confidence=0.95)
    feed(j, *[rec(i, first=10 * MS) for i in range(100)])
    p = finish(j, [result(valid=False)])
    assert p.verdict == "invalid"
    assert p.validity_detail == ["p99 schedule lag 40.000 ms (excluding connection set-up) <= 5 ms"]


def test_finish_latency_exceedances_with_a_lagging_generator_stay_invalid() -> None:
    # TTFT is measured from the schedule: a lagging generator can cause the exceedances itself
    j = ProbeJudge([P90], n_cap=300, confidence=0.95)
    feed(j, *[rec(i, first=500 * MS) for i in range(100)])
    assert finish(j, [result(valid=False)]).verdict == "invalid"


def test_finish_client_side_errors_with_a_lagging_generator_stay_invalid() -> None:
    j = ProbeJudge([P90], n_cap=300, confidence=0.95)
    feed(j, *[rec(i, status="error", error_kind="client_limit", end=MS) for i in range(100)])
    assert finish(j, [result(valid=False)]).verdict == "invalid"


def test_finish_server_errors_are_fail_even_when_the_generator_lagged() -> None:
    # HTTP 500s are the server's whatever the client's lag: FAIL, not "client limited"
    # (the "a server that returns errors at high load ends with FAIL probes").
    j = ProbeJudge([P90], n_cap=300, confidence=0.95)
    feed(j, *[rec(i, status="error", error_kind="http_error", end=MS) for i in range(100)])
    p = finish(j, [result(valid=False)])
    assert p.verdict == "fail"
    assert p.exceedance_fraction == {P90.label: 1.0}


@pytest.mark.parametrize("threshold_ms", [20, 5, 60])
def test_itl_target_at_its_own_percentile_gets_the_runs_verdict(threshold_ms: int) -> None:
    # each request: 5 gaps, 10 ms x4 then 50 ms: p75 ITL 10 ms, p99 ITL 50 ms (pooled and per request)
    t = SLOTarget("itl", 75.0, threshold_ms * MS)
    agg = Aggregator(slos=[t])
    j = ProbeJudge([t], n_cap=300, confidence=0.95)
    for i in range(100):
        r = rec(i, first=10 * MS, tokens=6)
        r.events = [TokenEvent(10 * MS + g, "tok ", True) for g in (0, 10 * MS, 20 * MS, 30 * MS, 40 * MS, 90 * MS)]
        r.end_ns = 100 * MS
        m = compute(r)
        agg.add(r, m)
        j.on_record(r, m)
    run = {**result(), "latency_ms": agg.latency_ms(), "slo": agg.slo_result()}
    met = run["slo"]["targets"][0]["met"]
    assert met == (threshold_ms >= 10)
    assert finish(j, [run]).verdict == ("pass" if met else "fail")
    agg.close()
