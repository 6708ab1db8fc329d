"""Console summary of a run with rich: metrics table, throughput, validity lines, SLO verdict."""

from __future__ import annotations

import os
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

PIPE_WIDTH = 400
"""Columns of a command's output to a pipe or a file (:func:`output_console`): wide enough that no
table cell is cut, so every number stays whole."""


def output_console() -> Console:
    """The console a command writes its results to (stdout).

    On a terminal: its width, as rich finds it. To a pipe or a file there is no screen to fit: lines
    are not wrapped (``soft_wrap``) and tables get :data:`PIPE_WIDTH` columns (or ``COLUMNS`` when
    wider), so a number is never cut to ``2,369.…`` as it was at rich's default of 80 columns.
    """
    c = Console()
    if c.is_terminal:
        return c
    try:
        cols = int(os.environ.get("COLUMNS") or 0)
    except ValueError:
        cols = 0
    return Console(soft_wrap=True, width=max(cols, PIPE_WIDTH))


_LABELS = {
    "ttft": "TTFT",
    "time_to_first_answer_token": "time to first answer token",
    "itl": "ITL (per token)",
    "inter_chunk": "inter-chunk latency",
    "tpot": "TPOT",
    "e2e": "E2E latency",
    "schedule_lag": "schedule lag",
    "error_e2e": "failed requests: time to failure",
}


def _f(v: Any, digits: int = 2) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:,.{digits}f}"
    return f"{v:,}"


def window_phrase(w: dict[str, Any]) -> str:
    """One line naming the measurement window the rates are over (``result.json`` ``window``)."""
    what = {
        "scheduled_sends": "window of scheduled sends",
        "closed_loop_steady": "window from the end of the users' ramp to the first user's stop",
        "first_send_to_last_completion": "window from the first send to the last completion",
    }.get(w.get("basis", ""), "window")
    s = f"rates over the {w['duration_s']:.2f} s {what} ({w['requests']} requests counted)"
    if w.get("fallback_reason"):
        s += f"; fallback: {w['fallback_reason']}"
    return s


def offered_phrase(result: dict[str, Any]) -> str | None:
    """The rate the schedule offered, next to the rate asked (``config.rate``), or None for a run with no
    schedule rate (closed loop, a burst): "offered 10.00 req/s (asked 10.00 req/s): 300 requests over 30.00 s".

    The offered rate is ``throughput.offered_rps``, or where the rates fell back to another window the
    schedule's own realized rate (``client.schedule_realized_rps``, the same (N - 1) / span)."""
    offered = (result.get("throughput") or {}).get("offered_rps")
    if offered is None:
        offered = (result.get("client") or {}).get("schedule_realized_rps")
    if not offered:
        return None
    asked = (result.get("config") or {}).get("rate")
    s = f"offered {_f(float(offered))} req/s"
    if isinstance(asked, int | float):
        s += f" (asked {_f(float(asked))} req/s)"
    n = (result.get("counts") or {}).get("requests")
    if n:
        s += f": {n:,} requests over {n / offered:.2f} s"
    return s


def render_run(result: dict[str, Any], console: Console, out_dir: str | None = None) -> None:
    """Print the summary of one ``result.json`` body."""
    c = result["counts"]
    t = result["throughput"]
    tok = result["tokens"]
    console.print()
    head = (
        f"[bold]{c['requests']}[/] measured requests: {c['completed']} ok, {c['failed']} failed"
        f", {c['zero_output']} zero-output, {c['unsent']} unsent"
    )
    if c.get("warmup"):
        head += f" (+{c['warmup']} warm-up)"
    console.print(head + f" in {result['duration_s']:.2f} s")
    if c["errors_by_kind"]:
        console.print("errors by kind: " + ", ".join(f"{k}={v}" for k, v in c["errors_by_kind"].items()))
    console.print(
        f"throughput: {_f(t.get('completion_rps', t['request_rps']))} req/s completed, {_f(t['output_tps'], 1)} "
        f"output tok/s, {_f(t['total_tps'], 1)} total tok/s; sends {_f(t['achieved_send_rps'])} req/s"
        + (f"; goodput {_f(t['goodput_rps'])} req/s" if t.get("goodput_rps") is not None else "")
    )
    offered = offered_phrase(result)
    if offered:
        console.print(offered)
    if result.get("window"):
        console.print(window_phrase(result["window"]))
    console.print(
        f"tokens: {tok['input']:,} in, {tok['output']:,} out"
        + (f" ({tok['output_estimated_requests']} requests estimated)" if tok.get("output_estimated_requests") else "")
    )
    tr = ((result.get("config") or {}).get("workload") or {}).get("trace") or {}
    if tr.get("skipped_zero_output_rows"):
        console.print(
            f"trace: skipped {tr['skipped_zero_output_rows']:,} rows with 0 output tokens (failed requests in the "
            "original log; --trace-keep-zero-output replays them)"
        )
    if tr.get("kept_zero_output_rows"):
        console.print(f"trace: kept {tr['kept_zero_output_rows']:,} rows with 0 output tokens, each asking for 1 token")
    table = Table(title="latency (ms)", show_lines=False)
    table.add_column("metric")
    for col in ("count", "mean", "p50", "p90", "p99", "p99.9", "max"):
        table.add_column(col, justify="right")
    for name, s in result["latency_ms"].items():
        if not s.get("count"):
            continue
        table.add_row(
            _LABELS.get(name, name),
            _f(s["count"]),
            _f(s["mean"]),
            _f(s["p50"]),
            _f(s["p90"]),
            _f(s["p99"]),
            _f(s["p999"]),
            _f(s["max"]),
        )
    console.print(table)
    render_validity(result["validity"], console, result.get("server_kept_up"))
    slo = result.get("slo")
    if slo:
        for tg in slo["targets"]:
            mark = "[green]met[/]" if tg["met"] else "[red]MISSED[/]"
            val = "-" if tg["value_ms"] is None else f"{tg['value_ms']:.2f} ms"
            console.print(f"SLO {tg['target']}: {mark} (value {val}; {tg['exceedances']} of {tg['denominator']} over)")
        att = slo["attainment"]
        console.print(
            f"SLO attainment: {slo['conforming_requests']} of {slo['denominator']} requests"
            + (f" ({att * 100:.1f} %)" if att is not None else "")
            + "; failed and zero-output requests count as misses"
        )
        for wt in (result.get("why") or {}).get("targets") or ():  # loadgen.engine.why: the cause of each miss
            if wt["misses"]:
                console.print(f"why: {wt['text']}", markup=False)
    if result.get("interrupted"):
        console.print("[yellow]interrupted: results cover what finished before the stop[/]")
    if out_dir:
        console.print(f"results in {out_dir}")


def render_validity(v: dict[str, Any], console: Console, kept_up: dict[str, Any] | None = None) -> None:
    """MLPerf-style verdict: ``Result is: VALID/INVALID`` then one line per check.

    ``kept_up`` is ``result.json`` ``server_kept_up`` (:mod:`loadgen.engine.keepup`): a server that did
    not keep up is said on the verdict line ("VALID — the server did not keep up: ..."), one that did on
    a check line of its own."""
    verdict = "[green]VALID[/]" if v["valid"] else f"[red]INVALID[/] (limited by {v['limited_by']})"
    if v.get("server_failed"):
        verdict += f" [red]but FAIL[/]: {v['server_failed']}"
    if kept_up and not kept_up["kept_up"]:
        verdict += f" — [red]{escape(kept_up['detail'])}[/]"
    console.print(f"Result is: {verdict}")
    for ch in v["checks"]:
        if ch["ok"]:
            mark = "[green]ok[/]  "
        elif ch["group"] == "generator":
            mark = "[red]FAIL[/]"
        else:
            mark = "[yellow]warn[/]"
        console.print(f"  {mark} {ch['name']}: {ch['detail']}")
    if kept_up:
        mark = "[green]ok[/]  " if kept_up["kept_up"] else "[yellow]warn[/]"
        console.print(f"  {mark} server_kept_up: {escape('; '.join(kept_up['reasons']) or kept_up['detail'])}")
    if v.get("remedy"):
        console.print(f"  remedy: {v['remedy']}")
