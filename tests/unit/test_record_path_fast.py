"""The record path's shortcuts (issue 22) give exactly what the general rules give.

Each shortcut is checked against the rule it stands for, on generated streams (gaps of 0, sub-ms,
ms and long silences; with and without continuous usage; one token an event or not):
``compute`` with the buffered-stream early exit against ``compute`` with the exit disabled,
``allocate_tokens`` for one token a chunk, ``token_bins`` against its per-event rule, the
per-token ms lists against ``round(v / 1e6, 6)``, and ``record_many_ns`` into two histograms
at once against ``record_ns`` value by value.
"""

from __future__ import annotations

import copy

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import loadgen.core.metrics as metrics_mod
from loadgen.core.histograms import LatencyHistogram
from loadgen.core.metrics import BUFFERED_TOKEN_SHARE, allocate_tokens, compute, itl_samples, tokens_per_event
from loadgen.core.types import RequestRecord, TokenEvent
from loadgen.core.window import BIN_NS, token_bins
from loadgen.endpoints.http import settle
from loadgen.engine.recordlog import _ms_list

GAPS = st.one_of(
    st.just(0), st.integers(1, 499_999), st.integers(500_000, 3_000_000), st.integers(10**8, 10**9)
)  # fmt: skip


def _record(gaps: list[int], first_ns: int, usage: bool, extra: int) -> RequestRecord:
    t0 = 10**9
    rec = RequestRecord(index=0, phase="measure", scheduled_ns=t0, requested_output_tokens=len(gaps))
    rec.sent_ns = t0 + 1000
    t = rec.sent_ns + first_ns
    events = []
    for k, g in enumerate(gaps):
        t += g
        events.append(TokenEvent(t, "ab", True, k + 1 if usage else None))
    rec.events = events
    rec.end_ns = t + 5
    rec.status = "ok"
    rec.completion_tokens = len(gaps) + (0 if usage else extra)
    return rec


@settings(max_examples=300, deadline=None)
@given(st.lists(GAPS, min_size=1, max_size=60), st.integers(0, 10**9), st.booleans(), st.integers(0, 3))
def test_compute_equals_the_general_rules(gaps: list[int], first_ns: int, usage: bool, extra: int) -> None:
    rec = _record(gaps, first_ns, usage, extra)
    fast = compute(rec)
    general_exit = metrics_mod._may_be_burst
    try:
        metrics_mod._may_be_burst = lambda events, start_ns: True  # no early exit: the arrival-group rule
        slow = compute(rec)
    finally:
        metrics_mod._may_be_burst = general_exit
    assert fast == slow
    settled = copy.deepcopy(rec)
    settle(settled)  # the reader's end: decides buffered by the same rule, compute takes it as decided
    assert settled.buffered_judged and compute(settled) == slow
    n = fast.output_tokens
    if fast.itl_ns and len(rec.events) == n:  # the one-token-an-event shortcut is itl_samples' own result
        ks, _ = tokens_per_event(rec.events, n)
        assert fast.itl_ns == itl_samples(rec.events, ks, n)


def test_a_burst_is_still_caught_with_the_early_exit() -> None:
    # 1 token, a 2 s silence, then 99 tokens within 1 ms: buffered (no TPOT / ITL)
    rec = _record([0] + [2 * 10**9] + [10_000] * 98, 10**7, usage=True, extra=0)
    assert metrics_mod._may_be_burst(rec.events, rec.sent_ns or 0)
    m = compute(rec)
    assert m.tpot_ns is None and m.itl_ns == []
    assert BUFFERED_TOKEN_SHARE < 1


@pytest.mark.parametrize("weights", [[1], [3, 1], [1, 1, 9, 1], [5] * 7, [0, 0, 2]])
def test_one_token_a_chunk_allocates_ones(weights: list[int]) -> None:
    assert allocate_tokens(weights, len(weights)) == [1] * len(weights)


@settings(max_examples=200, deadline=None)
@given(st.lists(GAPS, min_size=1, max_size=80), st.integers(0, 10**9))
def test_token_bins_one_token_an_event(gaps: list[int], first_ns: int) -> None:
    rec = _record(gaps, first_ns, usage=True, extra=0)
    want: list[tuple[int, int]] = []
    for ev in rec.events:  # the per-event rule: a run of events in one bin is one entry
        b = ev.t_ns // BIN_NS
        if want and want[-1][0] == b:
            want[-1] = (b, want[-1][1] + 1)
        else:
            want.append((b, 1))
    assert token_bins(rec.events, len(rec.events), rec.end_ns) == tuple(want)


@pytest.mark.timing
@given(st.lists(st.one_of(st.integers(0, 2**53 - 1), st.floats(0, 1e12, allow_nan=False)), max_size=50))
def test_ms_lists_equal_rounding(values: list[int | float]) -> None:
    assert _ms_list(values) == [round(v / 1e6, 6) for v in values]


@pytest.mark.timing
@given(st.lists(st.one_of(st.integers(0, 5 * 10**12), st.floats(0, 5e12, allow_nan=False)), max_size=80))
def test_record_many_into_two_histograms_equals_one_by_one(values: list[float]) -> None:
    a, b, ref = LatencyHistogram("itl"), LatencyHistogram("inter_chunk"), LatencyHistogram("ref")
    b.record_ns(7_000)  # b holds something already: the batch adds to it
    a.record_many_ns(values, b)
    for v in values:
        ref.record_ns(v)
    ref_b = LatencyHistogram("ref_b")
    ref_b.record_ns(7_000)
    for v in values:
        ref_b.record_ns(v)
    for got, want in ((a, ref), (b, ref_b)):
        assert (got.count, got.sum_us, got.overflow_count, got.overflow_max_us) == (
            want.count, want.sum_us, want.overflow_count, want.overflow_max_us,
        )  # fmt: skip
        assert list(got.hist.counts) == list(want.hist.counts)
        assert got.hist.get_total_count() == want.hist.get_total_count()
        if want.hist.get_total_count():
            assert (got.hist.min_value, got.hist.max_value) == (want.hist.min_value, want.hist.max_value)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 4), min_size=1, max_size=40), st.integers(-2, 2))
def test_cumulative_usage_shortcut_is_the_difference_rule(steps: list[int], off: int) -> None:
    """Continuous usage: each event's tokens are the differences of the cumulative counts (kept when they
    sum to the output and none is below 1); 1..n is the shortcut's case, and everything else too."""
    cum, c = [], 0
    for s in steps:
        c += s
        cum.append(c)
    events = [TokenEvent(1000 * i, "ab", True, u) for i, u in enumerate(cum)]
    output = cum[-1] + off
    diffs = [b - a for a, b in zip([0, *cum[:-1]], cum, strict=True)]
    ks, est = tokens_per_event(events, output)
    if sum(diffs) == output and min(diffs) >= 1:
        assert (ks, est) == (diffs, False)
    else:
        assert est  # the general rule's estimate (by characters), never the shortcut's exact ones
    ones = [TokenEvent(1000 * i, "ab", True, i + 1) for i in range(len(steps))]
    assert tokens_per_event(ones, len(ones)) == ([1] * len(ones), False)
