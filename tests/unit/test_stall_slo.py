"""The stall SLO (issue 18): a request's longest wall-clock pause between token arrivals."""

from __future__ import annotations

import math

import pytest

from loadgen.core.errors import ConfigError
from loadgen.core.metrics import RequestMetrics
from loadgen.core.slo import exceeds, parse_slo, request_value


def test_stall_parses_with_its_alias() -> None:
    assert parse_slo("stall:p99<=500ms").metric == "stall"
    assert parse_slo("itl_max:p90<=1s") == parse_slo("stall:p90<=1000ms")
    assert parse_slo("stall:p99<=500ms").label == "stall:p99<=500ms"
    with pytest.raises(ConfigError):
        parse_slo("stalls:p99<=500ms")


def test_stall_is_the_longest_gap_between_arrivals_not_divided_by_the_chunk() -> None:
    t = parse_slo("stall:p99<=300ms")
    # 4 arrivals: 10 ms, a 400 ms pause before a chunk of 8 tokens, 10 ms; per-token ITL spreads the pause
    m = RequestMetrics(output_tokens=11, inter_chunk_ns=[10_000_000, 400_000_000, 10_000_000],
                       itl_ns=[10e6] + [50e6] * 8 + [10e6])  # fmt: skip
    assert request_value(t, m) == 400_000_000 and exceeds(t, request_value(t, m))
    assert max(m.itl_ns) < t.threshold_ns  # an ITL-based "longest gap" would have hidden the stall
    smooth = RequestMetrics(output_tokens=3, inter_chunk_ns=[20_000_000, 30_000_000])
    assert request_value(t, smooth) == 30_000_000 and not exceeds(t, request_value(t, smooth))
    assert request_value(t, RequestMetrics(output_tokens=1)) == 0.0  # one arrival: nothing to pause between
    assert not math.isinf(request_value(t, RequestMetrics(output_tokens=1)))
