"""Exact tiny cases for loadgen.core.metrics, in integer nanoseconds.

Expected values are written out by hand from the conventions (shared/cases/streams.json);
formulas are never re-derived here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Literal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadgen.core import metrics
from loadgen.core.metrics import (
    allocate_tokens,
    compute,
    count_output_tokens,
    estimate_tokens,
    itl_samples,
    tokens_per_event,
)
from loadgen.core.types import RequestRecord, TokenEvent

MS = 1_000_000


def rec(
    events: list[TokenEvent],
    *,
    completion_tokens: int | None = None,
    status: Literal["ok", "error"] = "ok",
    scheduled: int = 0,
    sent: int | None = None,
    end: int | None = None,
    **kw: Any,
) -> RequestRecord:
    r = RequestRecord(
        index=0,
        phase="measure",
        scheduled_ns=scheduled,
        sent_ns=sent,
        end_ns=end,
        status=status,
        completion_tokens=completion_tokens,
        **kw,
    )
    r.events = list(events)
    return r


def ev(t_ms: float, text: str = "x", answer: bool = True, usage: int | None = None) -> TokenEvent:
    return TokenEvent(int(round(t_ms * MS)), text, answer, usage)


# --------------------------------------------------------------------------- basics


def test_ttft_tpot_e2e_itl_inter_chunk() -> None:
    # 4 single-token chunks at 200, 230, 260, 290 ms; clean end at 300 ms; usage 4
    r = rec(
        [ev(200, "A"), ev(230, "B"), ev(260, "C"), ev(290, "D")],
        completion_tokens=4,
        scheduled=0,
        sent=1 * MS,
        end=300 * MS,
    )
    m = compute(r)
    assert m.ttft_ns == 200 * MS
    assert m.e2e_ns == 300 * MS
    assert m.tpot_ns == 30 * MS
    assert m.itl_ns == [30 * MS] * 3
    assert m.inter_chunk_ns == [30 * MS] * 3
    assert m.output_tokens == 4 and not m.output_tokens_estimated
    assert m.schedule_lag_ns == 1 * MS
    assert m.time_to_first_answer_token_ns == 200 * MS
    assert m.error_e2e_ns is None


def test_itl_count_and_mean_equal_tpot() -> None:
    # 3 chunks, 6 tokens (usage), text lengths 11, 5, 8 -> character shares 2.75, 1.25, 2.0
    # -> largest remainder 3, 1, 2
    r = rec([ev(200, "Hello world"), ev(250, "! How"), ev(300, " are you")], completion_tokens=6, end=310 * MS)
    m = compute(r)
    assert m.tpot_ns == 20 * MS
    assert len(m.itl_ns) == 5
    assert m.itl_ns == [0.0, 0.0, 50 * MS, 25 * MS, 25 * MS]
    assert math.isclose(sum(m.itl_ns) / len(m.itl_ns), m.tpot_ns)
    assert m.inter_chunk_ns == [50 * MS, 50 * MS]
    assert m.itl_estimated is True
    assert m.output_tokens_estimated is False


def test_continuous_usage_allocation_is_exact() -> None:
    # cumulative usage 2, 3, 6 on the token chunks: k = 2, 1, 3
    r = rec([ev(100, "aa", usage=2), ev(130, "b", usage=3), ev(190, "ccc", usage=6)], completion_tokens=6, end=200 * MS)
    ks, est = tokens_per_event(r.events, 6)
    assert ks == [2, 1, 3] and est is False
    m = compute(r)
    assert m.itl_estimated is False
    assert m.itl_ns == [0.0, 30 * MS, 20 * MS, 20 * MS, 20 * MS]
    assert m.tpot_ns == 18 * MS


def test_character_allocation_is_estimated() -> None:
    es = [ev(100, "a" * 3), ev(200, "b"), ev(300, "c" * 2)]
    ks, est = tokens_per_event(es, 6)
    assert est is True
    assert ks == [3, 1, 2]
    assert sum(ks) == 6


def test_tokenizer_allocation_scales_to_output_tokens() -> None:
    class Words:
        def count(self, text: str) -> int:
            return len(text.split())

    es = [ev(100, "one two three"), ev(200, "four"), ev(300, "five six")]
    ks, est = tokens_per_event(es, 12, Words())
    assert est is True and sum(ks) == 12 and all(k >= 1 for k in ks)
    assert ks == [6, 2, 4]


def test_continuous_usage_that_disagrees_with_the_total_falls_back() -> None:
    es = [ev(100, "a", usage=1), ev(200, "b", usage=2)]
    ks, est = tokens_per_event(es, 5)
    assert est is True and sum(ks) == 5


def test_first_chunk_with_k_tokens_gives_k_minus_1_zero_samples() -> None:
    r = rec([ev(100, "abcd", usage=4), ev(150, "e", usage=5)], completion_tokens=5, end=160 * MS)
    m = compute(r)
    assert m.itl_ns == [0.0, 0.0, 0.0, 50 * MS]
    assert m.tpot_ns == 12.5 * MS
    assert m.ttft_ns == 100 * MS


def test_all_tokens_in_one_chunk_is_buffered_not_tpot_zero() -> None:
    # one event carrying every token: nothing says how fast they were generated (was TPOT 0.0)
    r = rec([ev(100, "abc", usage=3)], completion_tokens=3, end=110 * MS)
    m = compute(r)
    assert m.ttft_ns == 100 * MS and m.e2e_ns == 110 * MS
    assert m.tpot_ns is None and m.itl_ns == [] and m.inter_chunk_ns == []


# --------------------------------------------------------------------------- buffered streams


def _burst(times_ms: Sequence[float], per_event: int = 1, usage: bool = True) -> RequestRecord:
    """A record with one event per time, ``per_event`` tokens each (continuous usage when ``usage``)."""
    es = [ev(t, "w" * 4 * per_event, usage=(i + 1) * per_event if usage else None) for i, t in enumerate(times_ms)]
    return rec(es, completion_tokens=per_event * len(times_ms), end=int(times_ms[-1] * MS) + MS)


_STEP_1MS = [200 + i for i in range(8)]
BUFFERED_CASES = [
    # (name, times in ms (one event each), tokens per event, buffered?)
    ("one event, every token", [200.0], 8, True),
    ("two reads 3 ms apart", [200.0] * 4 + [203.0] * 4, 1, True),
    ("first token, then the rest in one read 3 ms later", [200.0] + [203.0] * 99, 1, True),
    ("proxy flushes a few reads 0.5-2 ms apart", [900.0] * 30 + [901.0] * 30 + [903.0] * 40, 1, True),
    ("gRPC messages handled back to back (50 us apart)", [200 + 0.05 * i for i in range(20)], 1, True),
    ("two tokens in one read", [150.0, 150.0], 1, True),
    ("two events of 50 tokens, 3 ms apart", [200.0, 203.0], 50, True),
    # must not flag
    ("8 tokens 1 ms apart after 10 ms", [10.0 + i for i in range(8)], 1, False),
    ("8 tokens 1 ms apart after 200 ms", _STEP_1MS, 1, False),
    ("2 tokens 1 ms apart after 100 ms", [100.0, 101.0], 1, False),
    ("4-token chunks 20 ms apart after 100 ms", [100.0 + 20 * i for i in range(10)], 4, False),
    ("4-token chunks 4 ms apart after 2 s", [2000.0 + 4 * i for i in range(40)], 4, False),
    ("a 1 s stall, then 1 token a ms", [10.0, 20, 30, 40, 50] + [1050.0 + i for i in range(95)], 1, False),
    ("one token", [100.0], 1, False),
    ("client stall coalesced the last 3 of 20", [50.0 + 10 * i for i in range(17)] + [250.0] * 3, 1, False),
]


@pytest.mark.parametrize(
    "times, per_event, buffered", [c[1:] for c in BUFFERED_CASES], ids=[c[0] for c in BUFFERED_CASES]
)
@pytest.mark.parametrize("usage", [True, False])
def test_buffered_rule(times: list[float], per_event: int, buffered: bool, usage: bool) -> None:
    r = _burst(times, per_event, usage=usage)
    assert metrics.stream_buffered(r) is buffered
    m = compute(r)
    if buffered:
        assert m.tpot_ns is None and m.itl_ns == [] and m.inter_chunk_ns == []
        assert m.ttft_ns == int(times[0] * MS)
    elif len(times) * per_event > 1:
        assert m.tpot_ns is not None and m.tpot_ns > 0


def test_honest_fast_stream_keeps_its_exact_tpot() -> None:
    m = compute(_burst(_STEP_1MS))
    assert m.tpot_ns == 1 * MS and m.itl_ns == [float(MS)] * 7


def test_buffered_gap_runs_from_the_send() -> None:
    # the gap before the first arrival is the TTFT from the send: 8 tokens 1 ms apart sent late
    r = _burst([200.0 + 0.05 * i for i in range(8)])
    assert metrics.stream_buffered(r)
    r.sent_ns = 199 * MS + 900_000  # the send 0.1 ms before: the burst is no shorter than a tenth of it
    assert not metrics.stream_buffered(r)


# --------------------------------------------------------------------------- edge counts


def test_zero_output_request_gives_no_samples() -> None:
    for r in (
        rec([], completion_tokens=0, end=70 * MS),
        rec([], end=70 * MS),  # no usage, no text
        rec([ev(50, "x")], completion_tokens=0, end=70 * MS),  # usage says 0 wins
    ):
        m = compute(r)
        assert m.zero_output
        assert m.ttft_ns is None and m.tpot_ns is None and m.e2e_ns is None
        assert m.time_to_first_answer_token_ns is None
        assert m.itl_ns == [] and m.inter_chunk_ns == []
        assert m.error_e2e_ns is None


def test_one_token_request_has_no_tpot() -> None:
    r = rec([ev(400, "x")], completion_tokens=1, end=401 * MS)
    m = compute(r)
    assert m.output_tokens == 1
    assert m.tpot_ns is None
    assert m.itl_ns == []
    assert m.ttft_ns == 400 * MS and m.e2e_ns == 401 * MS


def test_failed_request_gives_only_error_e2e() -> None:
    r = rec(
        [ev(200, "The"), ev(250, " answer")], status="error", end=300 * MS, error_kind="incomplete_stream", sent=1 * MS
    )
    m = compute(r)
    assert m.error_e2e_ns == 300 * MS
    assert m.ttft_ns is None and m.tpot_ns is None and m.e2e_ns is None
    assert m.time_to_first_answer_token_ns is None
    assert m.itl_ns == [] and m.inter_chunk_ns == []
    r = rec([], status="error", end=50 * MS, error_kind="rate_limited", http_status=429)
    assert compute(r).error_e2e_ns == 50 * MS


def test_origin_sent() -> None:
    r = rec([ev(200, "a"), ev(250, "b")], completion_tokens=2, scheduled=0, sent=40 * MS, end=260 * MS)
    m = compute(r, origin="sent")
    assert m.ttft_ns == 160 * MS
    assert m.e2e_ns == 220 * MS
    assert m.tpot_ns == 50 * MS  # not affected by the origin
    assert m.schedule_lag_ns == 40 * MS
    m = compute(r)  # default: scheduled
    assert m.ttft_ns == 200 * MS and m.e2e_ns == 260 * MS
    # never sent: "sent" falls back to the scheduled time
    r2 = rec([], status="error", scheduled=0, sent=None, end=10 * MS, error_kind="connect")
    assert compute(r2, origin="sent").error_e2e_ns == 10 * MS


def test_time_to_first_answer_token() -> None:
    r = rec(
        [ev(300, "Okay", answer=False), ev(330, ", so", answer=False), ev(900, "Answer"), ev(930, ".")],
        completion_tokens=4,
        end=960 * MS,
    )
    m = compute(r)
    assert m.ttft_ns == 300 * MS
    assert m.time_to_first_answer_token_ns == 900 * MS
    assert m.tpot_ns == 210 * MS
    r = rec([ev(300, "Okay", answer=False), ev(330, ", so", answer=False)], completion_tokens=2, end=960 * MS)
    assert compute(r).time_to_first_answer_token_ns is None


def test_non_streamed_body_gives_only_e2e() -> None:
    r = rec([], completion_tokens=7, end=500 * MS, body_text="some text", streamed=False)
    m = compute(r)
    assert m.e2e_ns == 500 * MS
    assert m.output_tokens == 7 and not m.output_tokens_estimated
    assert m.ttft_ns is None and m.tpot_ns is None and m.time_to_first_answer_token_ns is None
    assert m.itl_ns == [] and m.inter_chunk_ns == []
    r = rec([], end=500 * MS, body_text="abcdefghi", streamed=False)  # no usage: estimated
    m = compute(r)
    assert m.output_tokens == 3 and m.output_tokens_estimated
    assert m.e2e_ns == 500 * MS and m.ttft_ns is None


# --------------------------------------------------------------------------- counting


def test_output_tokens_never_counts_chunks() -> None:
    es = [ev(200, "Hello world"), ev(250, "! How"), ev(300, " are you")]
    assert count_output_tokens(rec(es, completion_tokens=6)) == (6, False)
    # no usage: ceil(24 chars / 4) = 6, estimated; not 3 chunks
    assert count_output_tokens(rec(es)) == (6, True)
    assert estimate_tokens("Hello world! How are you") == 6

    class Fixed:
        def count(self, text: str) -> int:
            return 11

    assert count_output_tokens(rec(es), Fixed()) == (11, True)
    # the last continuous-usage value when no final usage arrived
    assert count_output_tokens(rec([ev(1, "a", usage=4), ev(2, "b", usage=9)])) == (9, False)


@pytest.mark.parametrize(
    "weights,total,want",
    [
        ([1], 5, [5]),
        ([3, 1, 2], 6, [3, 1, 2]),
        ([1, 1, 1], 3, [1, 1, 1]),
        ([5, 5], 1, [1, 0]),
        ([], 4, []),
        ([1, 1, 1, 1], 7, [2, 2, 2, 1]),
    ],
)
def test_allocate_tokens_examples(weights: list[int], total: int, want: list[int]) -> None:
    assert allocate_tokens(weights, total) == want


@settings(max_examples=300, deadline=None)
@given(weights=st.lists(st.integers(0, 10_000), min_size=1, max_size=40), total=st.integers(0, 5_000))
def test_allocate_tokens_sums_and_gives_one_per_chunk(weights: list[int], total: int) -> None:
    ks = allocate_tokens(weights, total)
    assert len(ks) == len(weights)
    assert sum(ks) == total
    assert all(k >= 0 for k in ks)
    if total >= len(weights):
        assert all(k >= 1 for k in ks)


# --------------------------------------------------------------------------- properties


@st.composite
def streams(draw: st.DrawFn, min_k: int = 1):
    n_events = draw(st.integers(1, 30))
    gaps = draw(st.lists(st.integers(0, 200 * MS), min_size=n_events - 1, max_size=n_events - 1))
    t0 = draw(st.integers(1, 2_000 * MS))
    ks = draw(st.lists(st.integers(min_k, 8), min_size=n_events, max_size=n_events))
    times = [t0]
    for g in gaps:
        times.append(times[-1] + g)
    cum, events = 0, []
    for t, k in zip(times, ks):
        cum += k
        events.append(TokenEvent(t, "t" * max(k, 1), True, cum))
    return events, cum


@settings(max_examples=300, deadline=None)
@given(s=streams())
def test_mean_itl_equals_tpot_with_continuous_usage(s) -> None:
    events, total = s
    r = rec(events, completion_tokens=total, end=events[-1].t_ns + 1)
    m = compute(r)
    assert m.output_tokens == total
    if metrics.stream_buffered(r):  # tokens in one burst: no TPOT, no ITL (never 0)
        assert total >= 2 and m.tpot_ns is None and m.itl_ns == []
        return
    if total <= 1:
        assert m.tpot_ns is None and m.itl_ns == []
        return
    assert len(m.itl_ns) == total - 1
    assert m.itl_estimated is False
    assert m.tpot_ns is not None
    mean = sum(m.itl_ns) / len(m.itl_ns)
    assert math.isclose(mean, m.tpot_ns, rel_tol=1e-6, abs_tol=1e-6)
    assert len(m.inter_chunk_ns) == len(events) - 1


@settings(max_examples=300, deadline=None)
@given(s=streams(), drop_usage=st.booleans())
def test_mean_itl_equals_tpot_with_estimated_allocation(s, drop_usage: bool) -> None:
    events, total = s
    if drop_usage:
        events = [TokenEvent(e.t_ns, e.text, e.answer, None) for e in events]
    r = rec(events, completion_tokens=total, end=events[-1].t_ns + 1)
    m = compute(r)
    if metrics.stream_buffered(r):
        assert total >= 2 and m.tpot_ns is None and m.itl_ns == []
        return
    if total <= 1:
        assert m.tpot_ns is None and m.itl_ns == []
        return
    assert len(m.itl_ns) == total - 1
    assert m.tpot_ns is not None
    assert math.isclose(sum(m.itl_ns) / len(m.itl_ns), m.tpot_ns, rel_tol=1e-6, abs_tol=1e-6)


def test_k_zero_on_the_first_chunk_keeps_n_minus_1_itl_samples() -> None:
    # usage 0, 2, 3 on three token-bearing chunks: 3 tokens -> 2 ITL samples
    es = [ev(0, "a", usage=0), ev(10, "b", usage=2), ev(20, "c", usage=3)]
    m = compute(rec(es, completion_tokens=3, end=21 * MS))
    assert len(m.itl_ns) == 2
    assert m.tpot_ns is not None
    assert math.isclose(sum(m.itl_ns) / len(m.itl_ns), m.tpot_ns)


def test_k_zero_on_the_last_chunk_keeps_mean_itl_equal_to_tpot() -> None:
    # usage 1, 3, 3: the last token-bearing chunk reports no new token
    es = [ev(0, "a", usage=1), ev(10, "bb", usage=3), ev(20, "c", usage=3)]
    m = compute(rec(es, completion_tokens=3, end=21 * MS))
    assert m.tpot_ns == 10 * MS
    assert len(m.itl_ns) == 2
    assert math.isclose(sum(m.itl_ns) / len(m.itl_ns), m.tpot_ns)


def test_itl_samples_more_events_than_tokens() -> None:
    es = [ev(0), ev(10), ev(20), ev(40)]
    out = itl_samples(es, [1, 1, 0, 0], 2)
    assert out == [40 * MS]
    assert metrics.compute(rec(es, completion_tokens=2, end=41 * MS)).tpot_ns == 40 * MS
