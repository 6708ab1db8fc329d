"""The max-throughput run's batch scorecard in the console (``result.json`` ``max_throughput``).

Definitions in :mod:`loadgen.engine.throughput`; this room only words them.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console

__all__ = ["NOT_MEASURED", "batch_lines", "render_batch"]

NOT_MEASURED = "not measured"


def _n(v: object, fmt: str = ",.1f", unit: str = "") -> str:
    return NOT_MEASURED if v is None else f"{v:{fmt}}{unit}"


def batch_lines(card: dict[str, Any]) -> list[str]:
    """The scorecard as plain lines (the console prints them; tests read them)."""
    lines = [f"max-throughput scorecard ({card['mode']}; latency from the send)"]
    w = card.get("sustained_window")
    if w:
        lines.append(
            f"  sustained output tok/s at batch {card['batch']}: {_n(card['sustained_output_tps'])} "
            f"({_n(card['sustained_output_tps_per_slot'], ',.2f')} per slot; "
            f"{_n(card['sustained_completion_rps'], ',.2f')} req/s completed)"
        )
        lines.append(
            f"  sustained window: {w['duration_s']:.2f} s, {w['start_s']:.3f} s to {w['end_s']:.3f} s after t0 "
            f"({card['rule']})"
        )
    else:
        lines.append(
            f"  sustained output tok/s at batch {card['batch']}: {NOT_MEASURED} ({card.get('sustained_not_measured')})"
        )
    if card.get("note"):
        lines.append(f"  note: {card['note']}")
    lines.append(
        f"  output tok/s incl. ramp and drain (first send to last completion): {_n(card['output_tps_incl_drain'])}"
    )
    if card.get("run_window"):
        lines.append(f"  ({card['run_window']})")
    cost = _n(card.get("cost_per_million_output_tokens_usd"), ",.4f")
    if card.get("cost_per_hour_usd") is not None and card.get("cost_per_million_output_tokens_usd") is not None:
        cost = f"${cost} at ${card['cost_per_hour_usd']:,.2f}/h"
    elif card.get("cost_per_hour_usd") is None:
        cost += " (give --cost-per-hour)"
    lines.append(f"  cost per million output tokens: {cost}")
    if card.get("token_priced_cost_per_million_output_tokens_usd") is not None:
        lines.append(
            "  cost per million output tokens at the per-token prices: "
            f"${card['token_priced_cost_per_million_output_tokens_usd']:,.4f}"
        )
    j = card.get("energy_per_million_output_tokens_j")
    energy = (
        f"{j:,.0f} J ({card['energy_per_million_output_tokens_kwh']:,.4f} kWh) at {card['power_w']:,.1f} W"
        if j is not None
        else NOT_MEASURED
    )
    lines.append(f"  energy per million output tokens: {energy}; power: {card['power_source']}")
    return lines


def render_batch(card: dict[str, Any], console: Console) -> None:
    """Print the batch scorecard after the run's summary."""
    for line in batch_lines(card):
        console.print(line, markup=False, highlight=False)
