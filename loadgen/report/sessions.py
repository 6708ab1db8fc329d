"""Console summary of a session run: sessions, turns, per-turn-depth TTFT, prefix-cache hit rate."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

__all__ = ["render_sessions"]


def _ms(v: Any) -> str:
    return "-" if v is None else f"{v:,.1f}"


def _pct(v: Any) -> str:
    return "-" if v is None else f"{v * 100:.1f} %"


def render_sessions(s: dict[str, Any], console: Console) -> None:
    """The ``sessions`` block of ``result.json`` (:mod:`loadgen.session_run`) as lines and a table."""
    mode = "open loop" if s["mode"] == "open" else f"closed loop, {s.get('concurrency')} at once"
    rate = f" at {s['sessions_rps']:g} sessions/s" if s.get("sessions_rps") else ""
    console.print(
        f"sessions ({mode}{rate}, starts: {s.get('arrivals')}): {s['started']} started, {s['completed']} completed, "
        f"{s['ended_by_failure']} ended by a failed turn; {s['turns']} measured turns, "
        f"{s['unsent_turns']} turns not sent"
    )
    dur = s.get("duration_s") or {}
    if dur.get("count"):
        console.print(
            f"session duration p50 {dur['p50']:.2f} s, max {dur['max']:.2f} s; waiting on the system p50 "
            f"{s['system_wait_s']['p50']:.2f} s, on tools/think time p50 {s['tool_wait_s']['p50']:.2f} s"
        )
    console.print(
        f"prefix-cache hit rate {_pct(s.get('prefix_cache_hit_rate'))} "
        f"({s['cached_tokens']:,} cached of {s['prompt_tokens_of_those']:,} prompt tokens, "
        f"{s['turns_reporting_cached_tokens']} turns reporting usage.prompt_tokens_details.cached_tokens)"
    )
    t = Table(title="per turn depth")
    for col in ("turn", "turns", "ok", "TTFT p50 ms", "TTFT p99 ms", "input tokens", "cached tokens", "hit rate"):
        t.add_column(col, justify="right")
    for row in s.get("by_turn", []):
        ttft = row.get("ttft_ms") or {}
        cached = row.get("cached_tokens_mean")
        t.add_row(
            str(row["turn"]), str(row["turns"]), str(row["ok"]), _ms(ttft.get("p50")), _ms(ttft.get("p99")),
            _ms(row.get("input_tokens_mean")), _ms(cached), _pct(row.get("prefix_cache_hit_rate")),
        )  # fmt: skip
    console.print(t)
