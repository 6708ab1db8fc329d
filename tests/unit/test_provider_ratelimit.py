"""Retry-After in every form, quota headers, the client's rate cap, 429 retries, and the
rate-limit part of a result."""

from __future__ import annotations

import asyncio

import pytest
from multidict import CIMultiDict

from loadgen.core.metrics import compute
from loadgen.core.types import RequestRecord, RequestSpec, TokenEvent
from loadgen.endpoints.http import send_with_attempts
from loadgen.endpoints.quota import (
    ClientRateCap,
    parse_go_duration,
    parse_ratelimit_headers,
    parse_retry_after,
    request_token_cost,
    retry_after_from_headers,
)
from loadgen.engine.recordlog import record_line
from loadgen.engine.results import Aggregator, ratelimit_series
from loadgen.engine.runner import ClientStats
from loadgen.engine.validity import ValidityBounds, validity

MS = 1_000_000
DATE = "Wed, 21 Oct 2015 07:28:00 GMT"


# ------------------------------------------------------------------ Retry-After


@pytest.mark.parametrize(
    "value, expected",
    [
        ("5", 5.0),
        ("0", 0.0),
        (" 1.5 ", 1.5),
        ("-1", None),  # Azure: unknown
        ("-3", None),
        ("soon", None),
        ("", None),
        (None, None),
        ("inf", None),
        ("Wed, 21 Oct 2015 07:28:30 GMT", 30.0),  # IMF-fixdate, against Date
        ("Wednesday, 21-Oct-15 07:29:00 GMT", 60.0),  # RFC 850
        ("Wed Oct 21 07:28:02 2015", 2.0),  # asctime
        ("Wed, 21 Oct 2015 07:27:00 GMT", 0.0),  # in the past
    ],
)
def test_retry_after_forms(value: str | None, expected: float | None) -> None:
    assert parse_retry_after(value, DATE) == expected


def test_retry_after_ms_takes_priority() -> None:
    assert parse_retry_after("5", DATE, retry_after_ms="1500") == 1.5
    assert parse_retry_after("5", DATE, retry_after_ms="0") == 0.0
    assert parse_retry_after("5", DATE, retry_after_ms="-1") == 5.0  # invalid ms: fall back
    assert parse_retry_after("5", DATE, retry_after_ms="x") == 5.0
    assert parse_retry_after(None, None, retry_after_ms="250") == 0.25


def test_http_date_without_date_header_uses_the_wall_clock() -> None:
    import email.utils
    import time

    future = email.utils.formatdate(time.time() + 100, usegmt=True)
    v = parse_retry_after(future)
    assert v is not None and 95 <= v <= 101


def test_retry_after_from_headers_any_capitalisation() -> None:
    assert retry_after_from_headers({"Retry-After": "7"}) == 7.0
    assert retry_after_from_headers({"retry-after": "7", "Retry-After-Ms": "120"}) == 0.12
    assert retry_after_from_headers({"retry-after": "7", "x-ms-retry-after-ms": "900"}) == 0.9
    assert retry_after_from_headers({"Retry-After": "-1"}) is None
    h = CIMultiDict({"Retry-After": "Wed, 21 Oct 2015 07:28:10 GMT", "Date": DATE})
    assert retry_after_from_headers(h) == 10.0
    assert retry_after_from_headers({}) is None


# ------------------------------------------------------------------ durations and quota headers


@pytest.mark.parametrize(
    "text, expected",
    [
        ("6m0s", 360.0),
        ("9ms", 0.009),
        ("1h2m3.5s", 3723.5),
        ("1s", 1.0),
        ("0s", 0.0),
        ("20us", 20e-6),
        ("20µs", 20e-6),
        ("100ns", 100e-9),
        ("2.5", 2.5),
        ("1m30.25s", 90.25),
        ("", None),
        ("5x", None),
        ("-1s", None),
        ("1h-2m", None),
        ("s", None),
        (None, None),
    ],
)
def test_go_durations(text: str | None, expected: float | None) -> None:
    v = parse_go_duration(text)
    if expected is None:
        assert v is None
    else:
        assert v == pytest.approx(expected, rel=1e-12, abs=1e-15)


def test_openai_ratelimit_headers() -> None:
    h = CIMultiDict(
        {
            "x-ratelimit-limit-requests": "60",
            "x-ratelimit-limit-tokens": "150000",
            "x-ratelimit-remaining-requests": "59",
            "x-ratelimit-remaining-tokens": "149984",
            "x-ratelimit-reset-requests": "1s",
            "x-ratelimit-reset-tokens": "6m0s",
            "Content-Type": "text/event-stream",
        }
    )
    assert parse_ratelimit_headers(h) == {
        "limit_requests": 60,
        "limit_tokens": 150000,
        "remaining_requests": 59,
        "remaining_tokens": 149984,
        "reset_requests_s": 1.0,
        "reset_tokens_s": 360.0,
    }


def test_azure_ratelimit_headers_remaining_only() -> None:
    assert parse_ratelimit_headers({"x-ratelimit-remaining-requests": "9", "x-ratelimit-remaining-tokens": "900"}) == {
        "remaining_requests": 9,
        "remaining_tokens": 900,
    }


def test_anthropic_ratelimit_headers_rfc3339_reset_against_date() -> None:
    h = {
        "anthropic-ratelimit-requests-limit": "50",
        "anthropic-ratelimit-requests-remaining": "49",
        "anthropic-ratelimit-requests-reset": "2015-10-21T07:28:01Z",
        "anthropic-ratelimit-output-tokens-remaining": "7999",
        "anthropic-ratelimit-input-tokens-reset": "2015-10-21T07:28:00.5+00:00",
        "date": DATE,
    }
    assert parse_ratelimit_headers(h) == {
        "limit_requests": 50,
        "remaining_requests": 49,
        "remaining_output_tokens": 7999,
        "reset_input_tokens_s": 0.5,
        "reset_requests_s": 1.0,
    }


def test_azure_minus_one_and_its_zero_reset_are_unknown() -> None:
    # Azure OpenAI (Responses API) where it keeps no such quota: limit -1, remaining -1, reset 0.
    # Unknown is left out, never -1 remaining or a 0 s reset; the requests quota beside it stays.
    h = {
        "x-ratelimit-limit-tokens": "-1",
        "x-ratelimit-remaining-tokens": "-1",
        "x-ratelimit-reset-tokens": "0",
        "x-ratelimit-remaining-requests": "99",
    }
    assert parse_ratelimit_headers(h) == {"remaining_requests": 99}
    assert parse_ratelimit_headers({"x-ratelimit-remaining-requests": "-1", "x-ratelimit-reset-requests": "0"}) is None
    # a quota of 0 could not have served this response: unknown too, with its remaining and reset
    assert parse_ratelimit_headers({"x-ratelimit-limit-requests": "0", "x-ratelimit-remaining-requests": "0"}) is None


def test_openai_remaining_zero_is_a_real_zero() -> None:
    # OpenAI: the quota is spent until the reset; 0 remaining and a 0 s reset are facts
    h = {
        "x-ratelimit-limit-requests": "60",
        "x-ratelimit-remaining-requests": "0",
        "x-ratelimit-reset-requests": "0s",
        "x-ratelimit-remaining-tokens": "0",
    }
    assert parse_ratelimit_headers(h) == {
        "limit_requests": 60,
        "remaining_requests": 0,
        "remaining_tokens": 0,
        "reset_requests_s": 0.0,
    }


def test_ratelimit_headers_bad_values_left_out_and_none_without_any() -> None:
    assert (
        parse_ratelimit_headers({"x-ratelimit-remaining-tokens": "lots", "x-ratelimit-reset-tokens": "later"}) is None
    )
    assert parse_ratelimit_headers({"content-type": "application/json"}) is None


# ------------------------------------------------------------------ the client's cap


def test_rate_cap_requests_per_minute_exact() -> None:
    cap = ClientRateCap(max_rpm=60, burst_s=1.0)  # one a second, one second of burst
    s = 1_000_000_000
    assert [cap.reserve(1, 0) for _ in range(4)] == [0, 0, 1 * s, 2 * s]
    assert cap.reserve(1, 10 * s) == 0  # idle time earns the burst back, never more


def test_rate_cap_tokens_per_minute_exact() -> None:
    cap = ClientRateCap(max_tpm=6000, burst_s=0.0)  # 100 tokens a second
    s = 1_000_000_000
    assert cap.reserve(50, 0) == 0
    assert cap.reserve(200, 0) == s // 2  # waits for the first request's 50 tokens
    assert cap.reserve(1, 0) == s // 2 + 2 * s


def test_rate_cap_both_dimensions_and_validation() -> None:
    cap = ClientRateCap(max_rpm=120, max_tpm=600, burst_s=0.0)
    s = 1_000_000_000
    assert cap.reserve(10, 0) == 0
    assert cap.reserve(10, 0) == s  # tokens bind (10 tokens = 1 s), not requests (0.5 s)
    with pytest.raises(ValueError):
        ClientRateCap(max_rpm=0)


def test_request_token_cost() -> None:
    assert request_token_cost(RequestSpec(0, "x", requested_input_tokens=100, requested_output_tokens=20)) == 120
    assert request_token_cost(RequestSpec(0, "abcdefgh", requested_output_tokens=None)) == 2


# ------------------------------------------------------------------ retries after 429


class FakeAttempts:
    """Answers each attempt from a list: ("429", retry_after_s) or ("ok",)."""

    def __init__(self, answers: list[tuple]) -> None:
        self.answers = list(answers)
        self.times: list[int] = []

    async def __call__(self, spec: RequestSpec, rec: RequestRecord) -> None:
        from loadgen.core.clock import now_ns

        t = now_ns()
        self.times.append(t)
        if rec.sent_ns is None:
            rec.sent_ns = t
        a = self.answers.pop(0)
        rec.response_headers_ns = t
        if a[0] == "429":
            rec.status, rec.error_kind, rec.http_status, rec.retry_after_s = "error", "rate_limited", 429, a[1]
            rec.ratelimit = {"remaining_requests": 0}
            rec.end_ns = t
        else:
            rec.events.append(TokenEvent(t + MS, "hi"))
            rec.status, rec.end_ns, rec.completion_tokens = "ok", t + 2 * MS, 1


def _spec() -> RequestSpec:
    return RequestSpec(0, "hello", requested_input_tokens=10, requested_output_tokens=5)


def test_429_not_retried_by_default() -> None:
    rec = RequestRecord(0, "measure", 0)
    att = FakeAttempts([("429", 0.01), ("ok",)])
    asyncio.run(send_with_attempts(att, _spec(), rec))
    assert rec.error_kind == "rate_limited" and rec.attempts is None and len(att.times) == 1


def test_429_retried_after_the_advised_wait_every_attempt_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    import loadgen.endpoints.http as base
    from loadgen.core.clock import now_ns

    monkeypatch.setattr(base, "DEFAULT_RETRY_WAIT_S", 0.1)  # no advice: 0.1 s, doubled per attempt
    rec = RequestRecord(0, "measure", now_ns())
    att = FakeAttempts([("429", 0.05), ("429", None), ("ok",)])
    asyncio.run(send_with_attempts(att, _spec(), rec, retry_429=3))
    assert rec.ok and rec.http_status is None and rec.retry_after_s is None
    assert rec.attempts is not None
    assert len(rec.attempts) == 2 and [a["http_status"] for a in rec.attempts] == [429, 429]
    assert rec.attempts[0]["retry_after_s"] == 0.05 and rec.attempts[1]["retry_after_s"] is None
    assert rec.attempts[0]["waited_ns"] == 50 * MS and rec.attempts[1]["waited_ns"] == 200 * MS  # 0.1 s * 2
    t0, t1, t2 = att.times
    assert t1 - t0 >= 50 * MS and t2 - t1 >= 200 * MS
    assert rec.sent_ns == t0 and rec.attempts[-1]["next_sent_ns"] == t2  # first send kept; last one noted
    m = compute(rec)
    assert m.e2e_ns is not None and m.e2e_ns >= 250 * MS  # the waiting counts in latency
    line = record_line(rec, m, rec.scheduled_ns)
    assert [a["http_status"] for a in line["attempts"]] == [429, 429] and line["attempts"][0]["waited_s"] == 0.05


def test_429_not_retried_when_the_advised_wait_is_too_long() -> None:
    rec = RequestRecord(0, "measure", 0)
    att = FakeAttempts([("429", 120.0), ("ok",)])
    asyncio.run(send_with_attempts(att, _spec(), rec, retry_429=2, retry_max_wait_s=60))
    assert rec.error_kind == "rate_limited" and rec.retry_after_s == 120.0 and len(att.times) == 1


def test_capped_sends_record_their_wait() -> None:
    cap = ClientRateCap(max_rpm=600, burst_s=0.0)  # one per 100 ms
    recs = [RequestRecord(i, "measure", 0) for i in range(3)]

    async def go() -> None:
        att = FakeAttempts([("ok",)] * 3)
        await asyncio.gather(*(send_with_attempts(att, _spec(), r, cap=cap) for r in recs))

    asyncio.run(go())
    waits = sorted(r.throttle_ns for r in recs)
    assert waits[0] == 0 and 90 * MS <= waits[1] and 190 * MS <= waits[2]


# ------------------------------------------------------------------ the result


def _ok(i: int, t: int, rl: dict | None = None, **kw) -> RequestRecord:
    r = RequestRecord(
        i,
        "measure",
        t,
        sent_ns=t,
        end_ns=t + 10 * MS,
        status="ok",
        completion_tokens=2,
        events=[TokenEvent(t + 5 * MS, "a"), TokenEvent(t + 8 * MS, "b")],
        ratelimit=rl,
        response_headers_ns=t + 1 * MS,
        **kw,
    )
    return r


def test_aggregator_rate_limit_series_and_counts() -> None:
    agg = Aggregator()
    for i in range(4):
        r = _ok(i, i * 100 * MS, {"remaining_requests": 10 - i, "reset_requests_s": 6.0})
        agg.add(r, compute(r))
    bad = RequestRecord(
        9,
        "measure",
        50 * MS,
        sent_ns=50 * MS,
        end_ns=60 * MS,
        status="error",
        error_kind="rate_limited",
        http_status=429,
        retry_after_s=2.0,
        ratelimit={"remaining_requests": 0},
        response_headers_ns=59 * MS,
    )
    agg.add(bad, compute(bad))
    pr = agg.provider_result()
    rl = pr["rate_limit"]
    assert rl["rate_limited_requests"] == 1 and rl["rate_limited_attempts"] == 1 and rl["retried_requests"] == 0
    assert rl["rate_limited_fraction"] == 0.2
    assert rl["retry_after_s"] == {"count": 1, "min": 2.0, "median": 2.0, "max": 2.0}
    assert rl["series"]["t_s"] == [0.001, 0.059, 0.101, 0.201, 0.301]
    assert rl["series"]["remaining_requests"] == [10, 0, 9, 8, 7]
    assert rl["series"]["reset_requests_s"] == [6.0, None, 6.0, 6.0, 6.0]
    v = validity(agg, ClientStats(), ValidityBounds(min_requests=1, min_duration_s=0))
    assert "rate_limits" in {c["name"] for c in v["checks"]} and v["limited_by"] is None


def test_rate_limit_dominated_run_is_limited_by_rate_limit() -> None:
    agg = Aggregator()
    for i in range(3):
        r = RequestRecord(
            i, "measure", 0, sent_ns=0, end_ns=MS, status="error", error_kind="rate_limited", http_status=429
        )
        agg.add(r, compute(r))
    r = _ok(5, 0)
    agg.add(r, compute(r))
    v = validity(agg, ClientStats(), ValidityBounds(min_requests=1, min_duration_s=0))
    assert v["valid"] and v["limited_by"] == "rate_limit"


def test_series_thinning_keeps_the_minimum() -> None:
    pts: list[tuple[int, dict[str, float]]] = [(i * MS, {"remaining_tokens": 5000 - (i % 700)}) for i in range(5000)]
    pts[4321] = (4321 * MS, {"remaining_tokens": 3})
    s = ratelimit_series(pts, 0)
    assert s["of"] == 5000 and s["points"] <= 1001 and 3 in s["remaining_tokens"]
    assert s["t_s"] == sorted(s["t_s"])


def test_throttled_run_says_so_and_its_lag_is_not_the_generators() -> None:
    agg = Aggregator()
    for i in range(3):
        r = _ok(i, 0, throttle_ns=200 * MS)
        r.sent_ns = 200 * MS  # it waited for the cap before the send
        r.events = [TokenEvent(205 * MS, "a"), TokenEvent(208 * MS, "b")]
        r.end_ns = 210 * MS
        agg.add(r, compute(r))
    v = validity(agg, ClientStats(), ValidityBounds(min_requests=1, min_duration_s=0))
    checks = {c["name"]: c for c in v["checks"]}
    assert checks["schedule_lag_p99"]["ok"] and v["valid"]
    assert checks["offered_load_not_capped"]["ok"] is False and "capped" in v["offered_load"]
    assert agg.provider_result()["client_rate_cap"]["throttled_requests"] == 3


def test_loop_lag_p99_is_reported_and_bounded() -> None:
    """The event-loop lag p99 is a number in the validity output (and result.client), and over
    its bound the run is INVALID, limited by the client."""
    agg = Aggregator()
    for i in range(3):
        r = _ok(i, 0)
        agg.add(r, compute(r))
    lags = [0.1] * 98 + [30.0, 30.0]
    v = validity(agg, ClientStats(loop_lag_ms=lags), ValidityBounds(min_requests=1, min_duration_s=0))
    assert v["loop_lag_p99_ms"] == pytest.approx(30.0)  # rank 98.01 of 0..99 lies between the two 30s
    assert not v["valid"] and v["limited_by"] == "client"
    v = validity(agg, ClientStats(), ValidityBounds(min_requests=1, min_duration_s=0))
    assert v["loop_lag_p99_ms"] is None and v["valid"]


@pytest.mark.timing
def test_only_the_connect_after_the_scheduled_time_excuses_schedule_lag() -> None:
    """A prepared request connects before its scheduled time: if that connect ends late (say
    the loop was busy preparing others), only its late part is the handshake's fault."""
    import asyncio
    from types import SimpleNamespace

    from loadgen.core.clock import now_ns
    from loadgen.endpoints.pool import _on_conn_end

    t = now_ns()
    rec = RequestRecord(0, "measure", t - 8 * MS)  # scheduled 8 ms ago
    ctx = SimpleNamespace(trace_request_ctx=rec, conn_start_ns=t - 18 * MS)  # connect began 10 ms before that
    asyncio.run(_on_conn_end(None, ctx, None))  # type: ignore[arg-type]  # the callback reads neither session nor params
    assert 18 * MS <= rec.connect_ns < 1018 * MS  # (upper bounds: a busy machine's asyncio.run start)
    assert 8 * MS <= rec.connect_late_ns < 1008 * MS and rec.connect_late_ns <= rec.connect_ns
    assert rec.connect_ns - rec.connect_late_ns == 10 * MS  # the early part exactly
    # the validity check: 100 requests sent 10 ms late, each after an 18 ms connect
    for late_part, valid in ((2 * MS, False), (18 * MS, True)):  # 10 - 2 = 8 ms > 5 ms; 10 - 18 -> 0
        agg = Aggregator()
        for i in range(100):
            r = _ok(i, i * 100 * MS, connect_ns=18 * MS, connect_late_ns=late_part)
            r.sent_ns = r.scheduled_ns + 10 * MS
            agg.add(r, compute(r))
        v = validity(
            agg,
            ClientStats(open_loop=True, schedule_realized_rps=agg.throughput()["achieved_send_rps"]),
            ValidityBounds(min_requests=1, min_duration_s=0),
        )
        lag = next(c for c in v["checks"] if c["name"] == "schedule_lag_p99")
        assert lag["ok"] is valid, lag["detail"]
