"""Session output: a run's summary (sessions, turns, per-turn-depth TTFT, hit rate) and a session sweep's words."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

__all__ = ["render_session_sweep", "render_sessions", "session_sweep_html", "session_sweep_lines"]


def _ms(v: Any) -> str:
    return "-" if v is None else f"{v:,.1f}"


def _pct(v: Any) -> str:
    return "-" if v is None else f"{v * 100:.1f} %"


def render_sessions(s: dict[str, Any], console: Console) -> None:
    """The ``sessions`` block of ``result.json`` (:mod:`loadgen.sessions.measured`) as lines and a table."""
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
    tc = s.get("tool_calls") or {}
    if any(tc.values()):  # issue 32: tool calls round-trip; a reply that should have called a tool is shown
        line = f"tool calls: {tc.get('replies_with_calls', 0)} replies called tools and their calls went back"
        if tc.get("missing"):
            line += (f"; {tc['missing']} replies should have called a tool and did not (the recorded calls stood "
                     "in: does the server parse tool calls, and were --tools given?)")  # fmt: skip
        if tc.get("unexpected"):
            line += f"; {tc['unexpected']} called a tool where the session went on with a user turn (text kept)"
        console.print(line, markup=False)
    if s.get("max_inflight_turns"):
        console.print(f"turns in flight capped at {s['max_inflight_turns']} (--max-concurrency)", markup=False)
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


def _depth_rows(by_turn: list[dict[str, Any]]) -> list[list[str]]:
    rows = []
    for row in by_turn:
        ttft = row.get("ttft_ms") or {}
        rows.append([
            str(row["turn"]), str(row["turns"]), _ms(row.get("input_tokens_mean")), _ms(ttft.get("p50")),
            _ms(ttft.get("p99")), _ms(row.get("cached_tokens_mean")), _pct(row.get("prefix_cache_hit_rate")),
        ])  # fmt: skip
    return rows


DEPTH_COLUMNS = ("turn", "turns", "input tokens (context)", "TTFT p50 ms", "TTFT p99 ms", "cached tokens", "hit rate")


def _shown_probe(res: dict[str, Any]) -> tuple[int, dict[str, Any]] | None:
    """The probe whose depth table the sweep shows: the answer's probe, else the last one run."""
    s = res.get("sessions") or {}
    probes = res.get("probes") or []
    per = {p["dir"]: p for p in s.get("probes") or []}
    a = res.get("answer") or {}
    pick = None
    for i, p in enumerate(probes, 1):
        at_answer = (a.get("concurrency") and p.get("concurrency") == a["concurrency"]) or (
            not a.get("concurrency") and a.get("max_rate_rps") is not None and p.get("offered_rps") == a["max_rate_rps"]
        )
        if p.get("verdict") == "pass" and at_answer:
            pick = i
    if pick is None and probes:
        pick = len(probes)
    if pick is None or probes[pick - 1]["dir"] not in per:
        return None
    return pick, per[probes[pick - 1]["dir"]]


def session_sweep_lines(res: dict[str, Any]) -> list[str]:
    """What a session sweep adds to the sweep's words: the unit, salting and why, hit rate per probe."""
    s = res.get("sessions")
    if not s:
        return []
    src = ", ".join(f"{k}={v}" for k, v in s["source"].items() if k != "source")
    out = [
        f"session sweep of {s['source']['source']}{f' ({src})' if src else ''}: the load is {s['unit']}, "
        f"{s['turns_per_session_mean']:.1f} turns per session on average (at most {s['turns_per_session_max']}); "
        "every measured turn is judged, its latency from its due time",
        f"salting: {s['salting']}",
    ]
    hits = []
    for i, (p, q) in enumerate(zip(res.get("probes") or [], s.get("probes") or []), 1):
        load = f"c={p['concurrency']}" if p.get("concurrency") else f"{p['offered_rps']:.3g}/s"
        hits.append(f"{i} ({load}): {_pct(q.get('prefix_cache_hit_rate'))}")
    if hits:
        out.append("prefix-cache hit rate per probe: " + "; ".join(hits))
    return out


def render_session_sweep(res: dict[str, Any], console: Console) -> None:
    """The session sweep's own lines and the per-turn-depth latency of the answer's probe (console)."""
    for line in session_sweep_lines(res):
        console.print(line)
    shown = _shown_probe(res)
    if shown is None:
        return
    i, q = shown
    t = Table(title=f"per turn depth, probe {i}")
    for col in DEPTH_COLUMNS:
        t.add_column(col, justify="right")
    for r in _depth_rows(q.get("by_turn") or []):
        t.add_row(*r)
    console.print(t)


def session_sweep_html(res: dict[str, Any]) -> str:
    """report.html's session section: the same lines and the per-turn-depth latency table."""
    import html

    lines = session_sweep_lines(res)
    if not lines:
        return ""
    body = "".join(f"<p class='note'>{html.escape(x)}</p>" for x in lines)
    shown = _shown_probe(res)
    if shown is not None:
        i, q = shown
        head = "".join(f"<th>{html.escape(c)}</th>" for c in DEPTH_COLUMNS)
        rows = "".join(
            "<tr>" + "".join(f"<td class='num'>{html.escape(c)}</td>" for c in r) + "</tr>"
            for r in _depth_rows(q.get("by_turn") or [])
        )
        body += (
            f"<p>Per-turn latency against turn depth (context length) at probe {i}:</p>"
            f"<table class='probes'><tr>{head}</tr>{rows}</table>"
        )
    return f"<h2>Sessions</h2>{body}"
