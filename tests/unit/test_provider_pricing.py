"""Cost per useful output: exact values of the formulas in loadgen/core/pricing.py's docstring."""

from __future__ import annotations

import pytest

from loadgen.core.errors import ConfigError
from loadgen.core.pricing import (
    TokenPrices,
    answer_cost,
    cost_per_million_output_tokens_usd,
    cost_per_successful_request_usd,
    estimate_run,
    hourly_cost_per_million_tokens_usd,
    request_cost_usd,
    run_cost,
    token_prices,
)

P = TokenPrices(input_per_million_usd=2.5, output_per_million_usd=10.0, cached_input_per_million_usd=1.25)


def test_request_cost_exact() -> None:
    # 1000 input (400 cached) + 500 output: 600*2.5 + 400*1.25 + 500*10 = 7000 micro-USD
    assert request_cost_usd(P, 1000, 500, 400) == pytest.approx(0.007, abs=1e-15)
    assert request_cost_usd(P, 1000, 500) == pytest.approx(0.0075, abs=1e-15)
    # without a cached price, cached input costs the input price
    assert request_cost_usd(TokenPrices(2.5, 10.0), 1000, 500, 400) == pytest.approx(0.0075, abs=1e-15)
    # cached can never exceed input
    assert request_cost_usd(P, 100, 0, 1000) == pytest.approx(100 * 1.25 / 1e6, abs=1e-15)


def test_cost_per_million_output_tokens_is_p_out_plus_input_ratio() -> None:
    # p_out + p_in * I / O = 10 + 2.5 * 4 = 20
    assert cost_per_million_output_tokens_usd(P, 4_000_000, 1_000_000) == pytest.approx(20.0)
    assert cost_per_million_output_tokens_usd(P, 128, 64) == pytest.approx(15.0)
    assert cost_per_million_output_tokens_usd(P, 100, 0) is None


def test_cost_per_successful_request() -> None:
    assert cost_per_successful_request_usd(3.0, 4) == 0.75
    assert cost_per_successful_request_usd(3.0, 0) is None
    assert cost_per_successful_request_usd(None, 4) is None


def test_hourly_matches_the_sweeps_existing_formula() -> None:
    from loadgen.sweep import cost_per_million

    assert hourly_cost_per_million_tokens_usd(3.6, 1000.0) == pytest.approx(1.0)
    assert hourly_cost_per_million_tokens_usd(3.6, 1000.0) == cost_per_million(3.6, 1000.0)
    assert hourly_cost_per_million_tokens_usd(None, 1000.0) is None


def test_run_cost_block() -> None:
    c = run_cost(P, {"input": 12800, "output": 6400, "cached_input": 0}, completed=100, conforming=80)
    assert c is not None
    assert c["total_usd"] == pytest.approx(0.096)
    assert c["per_request_usd"] == pytest.approx(0.00096)
    assert c["per_million_output_tokens_usd"] == pytest.approx(15.0)
    assert c["per_successful_request_at_slo_usd"] == pytest.approx(0.0012)
    assert run_cost(None, {"input": 1, "output": 1}, completed=1) is None
    cost = run_cost(P, {"input": 1, "output": 1}, completed=1)
    assert cost is not None
    assert cost["per_successful_request_at_slo_usd"] is None


def test_answer_cost_from_rates() -> None:
    a = answer_cost(prices=P, cost_per_hour_usd=36.0, input_tps=2000.0, output_tps=1000.0, goodput_rps=5.0)
    # per second: (2000*2.5 + 1000*10)/1e6 = 0.015 USD; per M output = 15; per good request = 0.003
    assert a["token_priced_cost_per_million_output_tokens_usd"] == pytest.approx(15.0)
    assert a["token_priced_cost_per_successful_request_usd"] == pytest.approx(0.003)
    assert a["hourly_cost_per_successful_request_usd"] == pytest.approx(36.0 / 3600 / 5.0)
    none = answer_cost(prices=None, cost_per_hour_usd=None, input_tps=None, output_tps=None, goodput_rps=None)
    assert set(none.values()) == {None}


def test_token_prices_from_options() -> None:
    assert token_prices(None, None) is None
    assert token_prices(1.0, 2.0, 0.5) == TokenPrices(1.0, 2.0, 0.5)
    with pytest.raises(ConfigError):
        token_prices(1.0, None)
    with pytest.raises(ConfigError):
        token_prices(None, None, 0.5)
    with pytest.raises(ConfigError):
        TokenPrices(-1.0, 2.0)


def test_estimate() -> None:
    e = estimate_run(100, 128, 64, P)
    assert (e.requests, e.input_tokens, e.output_tokens) == (100, 12800, 6400)
    assert e.cost_usd == pytest.approx(0.096)
    assert "100 requests" in e.text() and "$0.10" in e.text()
    assert estimate_run(None, 128, 64, P).text().startswith("about to send unknown requests")
    assert "no price given" in estimate_run(10, 1, 1, None).text()
