"""The token-deadline SLO (``tbt_deadline:pNN<=T``): token i due by the first token + i x T.

Each token's pace since the first (:func:`loadgen.core.metrics.token_pace_ns`), the request's own value
and late tokens (:mod:`loadgen.core.slo`), and the run's verdict with the share of late tokens
(:class:`loadgen.engine.results.Aggregator`).
"""

from __future__ import annotations

import pytest

from loadgen.core.errors import ConfigError
from loadgen.core.metrics import compute, token_pace_ns
from loadgen.core.slo import judged_per_request, late_tokens, parse_slo, request_value
from loadgen.core.types import RequestRecord, TokenEvent
from loadgen.engine.results import Aggregator

MS = 1_000_000


def _rec(index: int, arrivals_ms: list[float], usage: list[int] | None = None) -> RequestRecord:
    r = RequestRecord(index=index, phase="measure", scheduled_ns=0, sent_ns=0, status="ok")
    r.events = [
        TokenEvent(round(t * MS), "tok ", True, None if usage is None else usage[i]) for i, t in enumerate(arrivals_ms)
    ]
    r.end_ns = round(arrivals_ms[-1] * MS) + MS
    r.completion_tokens = usage[-1] if usage else len(arrivals_ms)
    r.finish_reason = "length"
    return r


def test_parse_and_alias() -> None:
    t = parse_slo("tbt_deadline:p99<=50ms")
    assert (t.metric, t.percentile, t.threshold_ns) == ("tbt_deadline", 99.0, 50 * MS)
    assert parse_slo("token_deadline:p90<=20ms").metric == "tbt_deadline"
    assert not judged_per_request(t)  # pooled over tokens, as ITL
    with pytest.raises(ConfigError):
        parse_slo("tbt:p99<=50ms")


def test_pace_one_token_an_event_and_a_stall() -> None:
    # first token at 10 ms, then every 10 ms, a 45 ms stall before the 4th token
    m = compute(_rec(0, [10, 20, 30, 85, 95, 105]))
    pace = token_pace_ns(m)
    assert pace == pytest.approx([10 * MS, 10 * MS, 25 * MS, 21.25 * MS, 19 * MS])
    t = parse_slo("tbt_deadline:p50<=20ms")  # token i due by 10 ms + i x 20 ms
    assert late_tokens(t, m) == (2, 5)  # tokens 3 (due 70, came 85) and 4 (due 90, came 95)
    assert request_value(t, m) == pytest.approx(19 * MS)  # the median pace: conforms at p50


def test_pace_multi_token_events_arrive_whole() -> None:
    # continuous usage: 2 tokens with the first event, then 1, then a burst of 3 after a stall
    m = compute(_rec(0, [10, 20, 80], usage=[2, 3, 6]))
    assert m.tokens_per_chunk == [2, 1, 3]
    pace = token_pace_ns(m)
    # token 1 with the first event (pace 0), token 2 at +10 ms, tokens 3-5 all at +70 ms (not spread over the stall)
    assert pace == pytest.approx([0.0, 5 * MS, 70 / 3 * MS, 70 / 4 * MS, 14 * MS])
    assert late_tokens(parse_slo("tbt_deadline:p99<=15ms"), m) == (2, 5)


def test_run_verdict_reports_the_share_of_late_tokens() -> None:
    t = parse_slo("tbt_deadline:p90<=15ms")
    agg = Aggregator([t])
    ok = _rec(0, [10 + 10 * i for i in range(11)])  # every token on time
    agg.add(ok, compute(ok))
    # a 100 ms stall: tokens 3-10 late (token 10, due by 160 ms, came at 200 ms)
    late = _rec(1, [10, 20, 30, 130, 140, 150, 160, 170, 180, 190, 200])
    agg.add(late, compute(late))
    slo = agg.slo_result()
    assert slo is not None
    entry = slo["targets"][0]
    assert (entry["late_tokens"], entry["judged_tokens"]) == (8, 20)
    assert entry["late_token_share"] == pytest.approx(0.4)
    assert not entry["met"]  # 40 % late at p90 (10 % allowed)
    assert entry["value_ms"] > 15
    assert slo["conforming_requests"] == 1


def test_no_token_deadline_target_no_pace_histogram() -> None:
    agg = Aggregator([parse_slo("ttft:p99<=100ms")])
    assert "tbt_pace" not in agg.hist and agg.late_tokens == {}
