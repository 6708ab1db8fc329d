"""Cost per useful output: per-token prices (managed platforms) or an hourly price (self-hosted).

Formulas (all USD; token counts as the platform reports them in ``usage``):

* cost of a request = ((I - C) * p_in + C * p_cached + O * p_out) / 1e6, where I is its
  input (prompt) tokens, C the part of them read from the prompt cache, O its output
  tokens (reasoning included: it is billed as output) and p_* the prices per million
  tokens; without a cached-input price, cached tokens cost p_in.
* cost per million output tokens = cost of the requests / their output tokens * 1e6
  = p_out + p_in * (I - C) / O + p_cached * C / O over the requests' totals: the
  input/output ratio sets it, not the rate. For an hourly price (``--cost-per-hour``):
  cost_per_hour / (output_tps * 3600) * 1e6.
* cost per successful request at the SLO = the cost of all completed requests / the
  requests that met every SLO target (with per-second figures: cost per second /
  goodput_rps; hourly: cost_per_hour / 3600 / goodput_rps). Requests that fail are
  not priced (their usage is unknown); a 429 is not billed.

Rates (``output_tps``, ``input_tps``, ``goodput_rps``) are those of ``result.json``
``throughput``: over the run's measurement window (:mod:`loadgen.core.window`), never over
the drain after the last send, so a price per million tokens does not move with the
length of the tail.

Everything here is a pure function.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from loadgen.core.errors import ConfigError


@dataclass(frozen=True)
class TokenPrices:
    """USD per million tokens. ``cached_input_per_million_usd`` None: cached input costs the input price."""

    input_per_million_usd: float
    output_per_million_usd: float
    cached_input_per_million_usd: float | None = None

    def __post_init__(self) -> None:
        for name in ("input_per_million_usd", "output_per_million_usd", "cached_input_per_million_usd"):
            v = getattr(self, name)
            if v is not None and (not math.isfinite(v) or v < 0):
                raise ConfigError(f"{name.replace('_', '-')}: a price must be a finite number >= 0")

    def describe(self) -> dict[str, Any]:
        return {
            "input_per_million_usd": self.input_per_million_usd,
            "output_per_million_usd": self.output_per_million_usd,
            "cached_input_per_million_usd": self.cached_input_per_million_usd,
        }


def token_prices(
    input_per_million: float | None, output_per_million: float | None, cached_input_per_million: float | None = None
) -> TokenPrices | None:
    """Prices from the CLI options; None when none is given. Raises ConfigError when only one side is."""
    if input_per_million is None and output_per_million is None:
        if cached_input_per_million is not None:
            raise ConfigError(
                "--price-cached-input-per-million needs --price-input-per-million and --price-output-per-million"
            )
        return None
    if input_per_million is None or output_per_million is None:
        raise ConfigError("give both --price-input-per-million and --price-output-per-million")
    return TokenPrices(input_per_million, output_per_million, cached_input_per_million)


def request_cost_usd(
    prices: TokenPrices, input_tokens: float, output_tokens: float, cached_input_tokens: float = 0
) -> float:
    """((I - C) * p_in + C * p_cached + O * p_out) / 1e6 (see the module docstring)."""
    cached = min(max(cached_input_tokens, 0), max(input_tokens, 0))
    p_cached = prices.cached_input_per_million_usd
    if p_cached is None:
        p_cached = prices.input_per_million_usd
    return (
        (input_tokens - cached) * prices.input_per_million_usd
        + cached * p_cached
        + output_tokens * prices.output_per_million_usd
    ) / 1e6


def cost_per_million_output_tokens_usd(
    prices: TokenPrices, input_tokens: float, output_tokens: float, cached_input_tokens: float = 0
) -> float | None:
    """USD per million output tokens over token totals (or rates); None without output."""
    if not output_tokens or output_tokens <= 0:
        return None
    return request_cost_usd(prices, input_tokens, output_tokens, cached_input_tokens) / output_tokens * 1e6


def cost_per_successful_request_usd(total_cost_usd: float | None, successful_requests: float | None) -> float | None:
    """Total cost / requests that met the SLO (or per-second cost / goodput_rps); None when none did."""
    if total_cost_usd is None or not successful_requests or successful_requests <= 0:
        return None
    return total_cost_usd / successful_requests


def hourly_cost_per_million_tokens_usd(cost_per_hour_usd: float | None, tokens_per_s: float | None) -> float | None:
    """cost_per_hour / (tokens_per_s * 3600) * 1e6 (self-hosted accelerators)."""
    if not cost_per_hour_usd or not tokens_per_s:
        return None
    return cost_per_hour_usd / (tokens_per_s * 3600.0) * 1e6


def run_cost(
    prices: TokenPrices | None,
    tokens: dict[str, Any],
    *,
    completed: int,
    conforming: int | None = None,
) -> dict[str, Any] | None:
    """The ``cost`` block of a run's result from its ``tokens`` block (``input``, ``output``,
    ``cached_input``), its completed requests and those that met the SLO (None: no SLO)."""
    if prices is None:
        return None
    i = tokens.get("input") or 0
    o = tokens.get("output") or 0
    c = tokens.get("cached_input") or 0
    total = request_cost_usd(prices, i, o, c)
    return {
        "prices": prices.describe(),
        "total_usd": total,
        "per_request_usd": (total / completed) if completed else None,
        "per_million_output_tokens_usd": cost_per_million_output_tokens_usd(prices, i, o, c),
        "per_successful_request_at_slo_usd": cost_per_successful_request_usd(total, conforming)
        if conforming is not None
        else None,
        "method": "usage tokens of completed requests at the given prices; failed requests are not priced",
    }


def answer_cost(
    *,
    prices: TokenPrices | None,
    cost_per_hour_usd: float | None,
    input_tps: float | None,
    output_tps: float | None,
    goodput_rps: float | None,
    cached_input_tps: float = 0.0,
) -> dict[str, Any]:
    """Prices at a sweep's answer from its probe's rates (tokens/s, successful requests/s).

    Per-token prices: cost per second = request_cost_usd(prices, input_tps, output_tps);
    hourly: cost_per_hour / 3600. Each gives cost per million output tokens and cost
    per successful request at the SLO (cost per second / goodput_rps).
    """
    out: dict[str, Any] = {
        "token_priced_cost_per_million_output_tokens_usd": None,
        "token_priced_cost_per_successful_request_usd": None,
        "hourly_cost_per_successful_request_usd": None,
    }
    if prices is not None and input_tps is not None and output_tps:
        per_s = request_cost_usd(prices, input_tps, output_tps, cached_input_tps)
        out["token_priced_cost_per_million_output_tokens_usd"] = per_s / output_tps * 1e6
        out["token_priced_cost_per_successful_request_usd"] = cost_per_successful_request_usd(per_s, goodput_rps)
    if cost_per_hour_usd:
        out["hourly_cost_per_successful_request_usd"] = cost_per_successful_request_usd(
            cost_per_hour_usd / 3600.0, goodput_rps
        )
    return out


@dataclass(frozen=True)
class RunEstimate:
    """What a run is about to send, for the confirmation before a non-loopback endpoint."""

    requests: int | None  # None: unbounded by request count (closed loop for a duration)
    input_tokens: int | None
    output_tokens: int | None
    cost_usd: float | None
    note: str = ""

    def text(self) -> str:
        """One line for the terminal."""

        def n(v: int | None) -> str:
            return "unknown" if v is None else f"{v:,}"

        cost = "no price given" if self.cost_usd is None else f"about ${self.cost_usd:,.2f}"
        line = (
            f"about to send {n(self.requests)} requests: ~{n(self.input_tokens)} input and at most "
            f"{n(self.output_tokens)} output tokens ({cost})"
        )
        return line + (f"; {self.note}" if self.note else "")


def estimate_run(
    requests: int | None,
    input_tokens_per_request: int | None,
    output_tokens_per_request: int | None,
    prices: TokenPrices | None,
    *,
    note: str = "",
) -> RunEstimate:
    """Tokens and cost of ``requests`` requests of the given sizes (an upper bound on output:
    the requested length is a maximum on platforms that cannot force it)."""
    if requests is None:
        return RunEstimate(None, None, None, None, note)
    i = requests * input_tokens_per_request if input_tokens_per_request is not None else None
    o = requests * output_tokens_per_request if output_tokens_per_request is not None else None
    cost = None
    if prices is not None and i is not None and o is not None:
        cost = request_cost_usd(prices, i, o)
    return RunEstimate(requests, i, o, cost, note)
