"""Console summary of a run with rich: metrics table, throughput, validity lines, SLO verdict."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

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
    render_validity(result["validity"], console)
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


def render_validity(v: dict[str, Any], console: Console) -> None:
    """MLPerf-style verdict: ``Result is: VALID/INVALID`` then one line per check."""
    verdict = "[green]VALID[/]" if v["valid"] else f"[red]INVALID[/] (limited by {v['limited_by']})"
    if v.get("server_failed"):
        verdict += f" [red]but FAIL[/]: {v['server_failed']}"
    console.print(f"Result is: {verdict}")
    for ch in v["checks"]:
        if ch["ok"]:
            mark = "[green]ok[/]  "
        elif ch["group"] == "generator":
            mark = "[red]FAIL[/]"
        else:
            mark = "[yellow]warn[/]"
        console.print(f"  {mark} {ch['name']}: {ch['detail']}")
    if v.get("remedy"):
        console.print(f"  remedy: {v['remedy']}")
