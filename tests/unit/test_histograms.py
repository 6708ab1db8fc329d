"""HDR histograms: exact merge across shards, percentiles within HDR precision, overflow counted."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from loadgen.core.histograms import LatencyHistogram


def _hist(values_ns: list[float]) -> LatencyHistogram:
    h = LatencyHistogram("x")
    for v in values_ns:
        h.record_ns(v)
    return h


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.floats(min_value=0, max_value=5e11, allow_nan=False), min_size=1, max_size=400),
    st.integers(min_value=1, max_value=5),
)
def test_merge_of_shards_equals_the_whole(values: list[float], shards: int) -> None:
    whole = _hist(values)
    parts = [_hist(values[i::shards]) for i in range(shards)]
    merged = LatencyHistogram("x")
    for p in parts:
        # ship through the encoded form, as worker processes do
        merged.merge(LatencyHistogram.from_state(p.to_state()))
    assert merged.count == whole.count == len(values)
    assert merged.sum_us == whole.sum_us
    for q in (50, 90, 99, 99.9, 100):
        assert merged.percentile_ms(q) == whole.percentile_ms(q)
    assert merged.max_ms() == whole.max_ms()


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(min_value=1_000, max_value=10**10), min_size=50, max_size=500))
def test_percentiles_within_hdr_precision(values: list[int]) -> None:
    h = _hist([float(v) for v in values])
    us = sorted(int(v / 1000 + 0.5) for v in values)
    for q in (50, 90, 99):
        # HDR's rank convention: the sample at rank round(q/100 * n) (at least 1)
        rank = max(1, int(q / 100 * len(us) + 0.5))
        exact = float(us[rank - 1])
        got_ms = h.percentile_ms(q)
        assert got_ms is not None
        got = got_ms * 1000
        assert abs(got - exact) <= max(exact * 0.001, 1.0) + 1e-9


def test_mean_is_exact_and_overflow_is_counted() -> None:
    h = LatencyHistogram("x")
    h.record_ns(1_000_000)  # 1 ms
    h.record_ns(3_000_000)  # 3 ms
    h.record_ns(2 * 3600 * 10**9)  # 2 h: above the 1 h range
    assert h.count == 3
    assert h.overflow_count == 1
    assert h.mean_ms() == (1000 + 3000 + 7_200_000_000) / 3 / 1000
    assert h.max_ms() == 7_200_000.0
    assert h.percentile_ms(100) == 7_200_000.0
    p50_ms = h.percentile_ms(50)
    assert p50_ms is not None
    assert abs(p50_ms - 3.0) <= 3.0 * 0.001  # HDR precision


def test_zero_is_recorded() -> None:
    h = _hist([0.0, 0.0, 1000.0])
    assert h.count == 3 and h.hist.get_total_count() == 3
    assert h.percentile_ms(50) == 0.0
