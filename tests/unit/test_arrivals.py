"""Arrival processes: seeded, non-decreasing, right mean rate and inter-arrival CV."""

from __future__ import annotations

import numpy as np
import pytest

from loadgen.core.errors import ConfigError
from loadgen.workload.arrivals import arrival_offsets_ns, realized_rate_rps


@pytest.mark.parametrize(
    "kind,burst,cv", [("poisson", 1.0, 1.0), ("gamma", 0.25, 2.0), ("gamma", 4.0, 0.5), ("constant", 1.0, 0.0)]
)
def test_rate_and_cv(kind: str, burst: float, cv: float) -> None:
    offs = arrival_offsets_ns(kind, 50.0, count=20000, seed=3, burstiness=burst)
    assert offs[0] == 0
    assert all(b >= a for a, b in zip(offs, offs[1:]))
    gaps = np.diff(np.asarray(offs, dtype=float))
    rate_rps = realized_rate_rps(offs)
    assert rate_rps is not None
    assert abs(rate_rps - 50.0) / 50.0 < 0.03
    assert abs(gaps.std() / gaps.mean() - cv) < 0.05


def test_same_seed_same_schedule_byte_for_byte() -> None:
    a = arrival_offsets_ns("poisson", 10.0, duration_s=60, seed=11)
    b = arrival_offsets_ns("poisson", 10.0, duration_s=60, seed=11)
    c = arrival_offsets_ns("poisson", 10.0, duration_s=60, seed=12)
    assert a == b and a != c
    assert max(a) < 60e9


def test_duration_bounds_the_schedule() -> None:
    offs = arrival_offsets_ns("constant", 10.0, duration_s=2.0)
    assert offs == [i * 100_000_000 for i in range(20)]


@pytest.mark.parametrize("kw", [dict(rate_rps=0, count=5), dict(rate_rps=-1, count=5), dict(rate_rps=1)])
def test_bad_arguments(kw: dict) -> None:
    rate = kw.pop("rate_rps")
    with pytest.raises(ConfigError):
        arrival_offsets_ns("poisson", rate, **kw)
    with pytest.raises(ConfigError):
        arrival_offsets_ns("weibull", 1.0, count=3)
