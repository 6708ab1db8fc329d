"""loadgen.core.stats: one-sided Clopper-Pearson bounds and the minimum request count.

Known values are Beta quantiles (``scipy.stats.beta.ppf``): the one-sided upper bound of k
exceedances out of n at confidence c is ``beta.ppf(c, k + 1, n - k)``, the lower bound
``beta.ppf(1 - c, k, n - k + 1)``. Edge cases have closed forms: k = 0 gives
``1 - (1 - c) ** (1 / n)``, k = n gives a lower bound of ``(1 - c) ** (1 / n)``.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadgen.core.stats import binom_cdf, lower_bound, min_requests, upper_bound

REL = 1e-9


# --------------------------------------------------------------------------- known values


@pytest.mark.parametrize(
    "fn,k,n,c,expected",
    [
        (upper_bound, 0, 299, 0.95, 0.0099691467929),  # 1 - 0.05 ** (1 / 299)
        (lower_bound, 10, 299, 0.95, 0.0182550591552),
        (upper_bound, 3, 299, 0.95, 0.0257264674069),
    ],
)
def test_known_beta_quantiles(
    fn: Callable[[int, int, float], float], k: int, n: int, c: float, expected: float
) -> None:
    assert fn(k, n, c) == pytest.approx(expected, rel=1e-9)


def test_zero_exceedances_closed_form() -> None:
    assert upper_bound(0, 299, 0.95) == pytest.approx(1 - 0.05 ** (1 / 299), rel=REL)
    for n in (1, 5, 29, 100, 459, 3000):
        for c in (0.9, 0.95, 0.99):
            assert upper_bound(0, n, c) == pytest.approx(1 - (1 - c) ** (1 / n), rel=REL)


def test_all_exceed_closed_forms() -> None:
    for n in (1, 7, 29, 299):
        for c in (0.9, 0.95, 0.99):
            assert lower_bound(n, n, c) == pytest.approx((1 - c) ** (1 / n), rel=REL)
            # P(X <= n - 1) = 1 - p^n = 1 - c  <=>  p = c ** (1 / n)
            assert upper_bound(n - 1, n, c) == pytest.approx(c ** (1 / n), rel=REL)


def test_degenerate_inputs() -> None:
    assert upper_bound(0, 0, 0.95) == 1.0
    assert lower_bound(0, 0, 0.95) == 0.0
    assert lower_bound(0, 100, 0.95) == 0.0
    assert upper_bound(100, 100, 0.95) == 1.0
    assert upper_bound(120, 100, 0.95) == 1.0


def test_decision_boundary_of_p99_at_95_percent() -> None:
    # 299 requests with none over the threshold prove p99 (upper bound <= 1 %); 298 do not
    assert upper_bound(0, 299, 0.95) <= 0.01 < upper_bound(0, 298, 0.95)


@pytest.mark.parametrize(
    "k,n,p,expected",
    [
        (0, 10, 0.5, 0.5**10),
        (10, 10, 0.3, 1.0),
        (-1, 10, 0.3, 0.0),
        (1, 3, 0.5, 0.5),  # (1 + 3) / 8
        (2, 4, 0.25, (81 + 108 + 54) / 256),
    ],
)
def test_binom_cdf_exact(k: int, n: int, p: float, expected: float) -> None:
    assert binom_cdf(k, n, p) == pytest.approx(expected, rel=1e-12)


def _cdf_ref(k: int, n: int, p: float) -> float:
    return sum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(k + 1))


def test_bounds_solve_the_binomial_tail_equations() -> None:
    # independent check: the bounds are where the exact binomial tails reach 1 - c
    for k, n in ((1, 50), (3, 299), (10, 299), (25, 400)):
        for c in (0.9, 0.95, 0.99):
            ub, lb = upper_bound(k, n, c), lower_bound(k, n, c)
            assert _cdf_ref(k, n, ub) == pytest.approx(1 - c, rel=1e-7)
            assert 1 - _cdf_ref(k - 1, n, lb) == pytest.approx(1 - c, rel=1e-7)


# --------------------------------------------------------------------------- min_requests


@pytest.mark.parametrize(
    "pct,c,n",
    [
        (99, 0.95, 299),
        (90, 0.95, 29),
        (50, 0.95, 5),
        (95, 0.95, 59),
        (99.9, 0.95, 2995),
        (99, 0.99, 459),
        (90, 0.9, 22),
    ],
)
def test_min_requests_known(pct: float, c: float, n: int) -> None:
    assert min_requests(pct, c) == n


@settings(max_examples=200, deadline=None)
@given(pct=st.floats(50, 99.9), c=st.floats(0.5, 0.999))
def test_min_requests_is_the_smallest_decidable_count(pct: float, c: float) -> None:
    n = min_requests(pct, c)
    q, alpha = pct / 100, 1 - c
    assert n >= 1
    assert q**n <= alpha * (1 + 1e-9)  # n requests with no exceedance prove the percentile ...
    assert n == 1 or q ** (n - 1) > alpha * (1 - 1e-9)  # ... and n - 1 do not
    # the same statement through the bound a verdict uses
    assert upper_bound(0, n, c) <= (1 - q) * (1 + 1e-9)


# --------------------------------------------------------------------------- properties

ks_ns = st.integers(1, 250).flatmap(lambda n: st.tuples(st.integers(0, n), st.just(n)))
confs = st.sampled_from([0.8, 0.9, 0.95, 0.99])


@settings(max_examples=40, deadline=None)
@given(kn=ks_ns, c=confs)
def test_bounds_bracket_the_point_estimate(kn: tuple[int, int], c: float) -> None:
    k, n = kn
    lo, hi = lower_bound(k, n, c), upper_bound(k, n, c)
    assert 0.0 <= lo <= k / n <= hi <= 1.0
    assert lo < hi


@settings(max_examples=40, deadline=None)
@given(kn=ks_ns, c=confs)
def test_bounds_are_symmetric(kn: tuple[int, int], c: float) -> None:
    # exceedances of the fraction are non-exceedances of its complement
    k, n = kn
    assert lower_bound(k, n, c) == pytest.approx(1 - upper_bound(n - k, n, c), abs=1e-12)


@settings(max_examples=40, deadline=None)
@given(kn=ks_ns.filter(lambda kn: kn[0] < kn[1]), c=confs)
def test_bounds_grow_with_the_count(kn: tuple[int, int], c: float) -> None:
    k, n = kn
    assert upper_bound(k + 1, n, c) > upper_bound(k, n, c)
    assert lower_bound(k + 1, n, c) > lower_bound(k, n, c)


@settings(max_examples=40, deadline=None)
@given(kn=ks_ns, c=confs)
def test_bounds_shrink_with_more_requests(kn: tuple[int, int], c: float) -> None:
    # the same exceedances out of more requests: a smaller fraction
    k, n = kn
    assert upper_bound(k, n + 1, c) <= upper_bound(k, n, c) or upper_bound(k, n, c) == 1.0
    assert lower_bound(k, n + 1, c) <= lower_bound(k, n, c) + 1e-15


@settings(max_examples=40, deadline=None)
@given(kn=ks_ns, c1=confs, c2=confs)
def test_more_confidence_widens_the_interval(kn: tuple[int, int], c1: float, c2: float) -> None:
    k, n = kn
    lo_c, hi_c = sorted((c1, c2))
    assert upper_bound(k, n, hi_c) >= upper_bound(k, n, lo_c) - 1e-15
    assert lower_bound(k, n, hi_c) <= lower_bound(k, n, lo_c) + 1e-15


# --------------------------------------------------------------------------- fail_threshold (proposed)

fail_threshold = getattr(__import__("loadgen.core.stats", fromlist=["x"]), "fail_threshold", None)


@pytest.mark.skipif(fail_threshold is None, reason="loadgen.core.stats.fail_threshold not present (proposed patch)")
@pytest.mark.parametrize(
    "n,q,c",
    [
        (29, 0.1, 0.95),
        (450, 0.1, 0.95),
        (900, 0.01, 0.95),
        (2700, 0.1, 0.95),
        (3, 0.1, 0.95),
        (5, 0.5, 0.95),
        (897, 0.01, 0.99),
        (1, 0.5, 0.9),
    ],
)
def test_fail_threshold_is_the_smallest_count_proving_fail(n: int, q: float, c: float) -> None:
    k = fail_threshold(n, q, c)  # type: ignore[misc]  # None only where the test is skipped
    if k <= n:
        assert lower_bound(k, n, c) > q
    assert k == 0 or lower_bound(k - 1, n, c) <= q
