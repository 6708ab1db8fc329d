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


def _f(v: object, digits: int = 2) -> str:
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
    c = result.get("counts") or {}
    n = (c.get("requests") or 0) + (c.get("abandoned") or 0)  # sends offered, walked away from (--abandon) or not
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
    if c.get("lost_with_client"):  # a lost worker's requests due within its lease (loadgen.spread.lease)
        head += f", {c['lost_with_client']} lost with the client (maybe sent)"
    if c.get("warmup"):
        head += f" (+{c['warmup']} warm-up)"
    console.print(head + f" in {result['duration_s']:.2f} s")
    if result.get("abandon"):
        ab = result["abandon"]
        after = f"{ab['after_s']:g} s" if ab.get("after_s") is not None else f"{ab['after_tokens']} tokens"
        console.print(
            f"abandoned: {ab['abandoned']:,} requests whose users walked away after {after} (--abandon "
            f"{ab['share'] * 100:g} %): sent, counted apart, not failures and not in the latency figures"
        )
    if c["errors_by_kind"]:
        console.print("errors by kind: " + ", ".join(f"{k}={v}" for k, v in c["errors_by_kind"].items()))
    for line in replica_lines(result):
        console.print(line, markup=False)
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
    console.print(cache_phrase(result), markup=False)
    prep = preparation_phrase(result)
    if prep:
        console.print(prep, markup=False)
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
    if result.get("stages"):
        console.print(stages_table(result["stages"]))
    if result.get("by_model"):
        console.print(models_table(result["by_model"]))
    if not result.get("slo"):  # a run without SLO targets: the strict rule, each headline's error beside it
        for line in latency_error_lines(result):
            console.print(line, markup=False)
    render_validity(result["validity"], console, result.get("server_kept_up"))
    slo = result.get("slo")
    if slo:
        for tg in slo["targets"]:
            mark = "[green]met[/]" if tg["met"] else "[red]MISSED[/]"
            val = "-" if tg["value_ms"] is None else f"{tg['value_ms']:.2f} ms"
            console.print(f"SLO {tg['target']}: {mark} (value {val}; {tg['exceedances']} of {tg['denominator']} over)")
            if tg.get("judged_tokens"):  # a token deadline: the share of tokens that came after theirs
                console.print(
                    f"  late tokens: {tg['late_tokens']:,} of {tg['judged_tokens']:,} "
                    f"({tg['late_token_share'] * 100:.2f} %; token i due by the first + i x {tg['threshold_ms']:g} ms)"
                )
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


_HEADLINES = (("TTFT", "ttft", "p50", "ttft_p50"), ("TTFT", "ttft", "p99", "ttft_p99"), ("ITL", "itl", "p99", "itl_p99"),
              ("TPOT", "tpot", "p99", None), ("E2E", "e2e", "p99", None))  # fmt: skip


def replica_lines(result: dict[str, Any]) -> list[str]:
    """One line per replica of a balanced run (``--endpoint`` given several times): its requests, failures and
    ejections, and its verdict when it failed most of its share (the server's fault, never the client's)."""
    reps = ((result.get("conditions") or {}).get("endpoint") or {}).get("balance", {}).get("replicas") or []
    out = []
    for r in reps:
        n, failed, ej = r.get("requests", 0), r.get("failed", 0), r.get("ejections", 0)
        line = f"replica {r.get('replica')} {r.get('url')}: {n} requests, {r.get('ok', 0)} ok, {failed} failed"
        if ej:
            line += f", ejected {ej} time{'s' if ej != 1 else ''} (failed connects; re-probed after a back-off)"
        if n and failed / n > 0.5:
            line += ": it failed most of its share (the server's fault, not the client's)"
        out.append(line)
    return out


def latency_error_lines(result: dict[str, Any]) -> list[str]:
    """One line per headline percentile with the client's timing error beside it (``result.json``
    ``latency_error_ms``): "TTFT p99 123.40 ms (±2.50 ms client timing; late stamps moved it by an estimated
    +0.80 ms)".

    The ± figure is the bound, ``latency_error_ms.bound_ms`` (the most one stamp can be late,
    :func:`loadgen.engine.validity.timing_error_bound_ms`; moving every value by at most that moves any
    percentile by at most that); the estimate, where the run has one, is the stamp-lateness estimate of how
    far late stamps did move TTFT p50/p99 and ITL p99 (``estimated_moves_ms``,
    :meth:`loadgen.engine.stamp_lateness.StampLateness.moves_ms`). Empty for a file without the block."""
    le = result.get("latency_error_ms")
    if not le:
        return []
    bound, moves = le.get("bound_ms"), le.get("estimated_moves_ms") or {}
    if bound is None:
        return ["client timing error: not bounded (no stamp measured, or one over 1 s late): the percentiles above "
                "carry a client error of unknown size"]  # fmt: skip
    lines = []
    for name, metric, col, move in _HEADLINES:
        v = (result.get("latency_ms") or {}).get(metric) or {}
        if not v.get("count") or v.get(col) is None:
            continue
        est = f"; late stamps moved it by an estimated {moves[move]:+.2f} ms" if move in moves else ""
        lines.append(f"{name} {col} {v[col]:,.2f} ms (±{bound:.2f} ms client timing{est})")
    return lines


def render_validity(v: dict[str, Any], console: Console, kept_up: dict[str, Any] | None = None) -> None:
    """MLPerf-style verdict: ``Result is: VALID/INVALID`` then one line per check.

    ``kept_up`` is ``result.json`` ``server_kept_up`` (:mod:`loadgen.engine.keepup`): a server that did
    not keep up is said on the verdict line ("VALID — the server did not keep up: ..."), one that did on
    a check line of its own. A run with SLO targets whose failed checks were only the client's timing
    (``verdict_stands``, :func:`loadgen.engine.validity.verdict_stands`) reads "VALID for its SLO verdict
    (client timing error ≤ e ms a stamp; margin m ms)" when no target could flip, and says which could
    when one could; its failed checks are listed below as for any run."""
    vs = v.get("verdict_stands")
    if v["valid"] and vs and vs.get("stands"):
        margin = vs.get("margin_ms")
        verdict = (
            f"[green]VALID for its SLO verdict[/] (client timing error ≤ {vs['stamp_error_bound_ms']:.2f} ms a stamp"
            + (f"; margin {margin:,.2f} ms" if margin is not None else "")
            + ")"
        )
    else:
        verdict = "[green]VALID[/]" if v["valid"] else f"[red]INVALID[/] (limited by {v['limited_by']})"
    if vs and not vs.get("stands"):
        flips = [x["target"] for x in vs.get("targets") or () if not x["stands"]]
        why = vs.get("reason") or f"the client's timing error could flip {escape(', '.join(flips))}"
        verdict += f": {why}"
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
    for x in (vs or {}).get("targets") or ():
        mark = "[green]ok[/]  " if x["stands"] else "[red]FAIL[/]"
        words = {True: "met", False: "not met"}
        m = x.get("margin_ms")
        console.print(
            f"  {mark} verdict {escape(x['target'])}: {words[x['met']]} as measured"
            + (f" (margin {m:+,.2f} ms)" if m is not None else "")
            + f", {words[x['met_low']]} with the client's timing error taken out, {words[x['met_high']]} with it added"
            + (": stands" if x["stands"] else ": could flip")
        )
    if kept_up:
        mark = "[green]ok[/]  " if kept_up["kept_up"] else "[yellow]warn[/]"
        console.print(f"  {mark} server_kept_up: {escape('; '.join(kept_up['reasons']) or kept_up['detail'])}")
    if v.get("remedy"):
        console.print(f"  remedy: {v['remedy']}")


def cache_phrase(result: dict[str, Any]) -> str:
    """Every run's prefix-cache line (issue 32): the share of prompt tokens the server says it served from its
    cache, or why there is none; the server counters' share beside it, and ``--cache-hit-target``'s word."""
    tok = result.get("tokens") or {}
    rate, n = tok.get("cached_input_rate"), tok.get("cached_input_reported_requests") or 0
    if rate is None:
        line = ("prefix cache: no hit share (the server reported no usage.prompt_tokens_details.cached_tokens: "
                "not reported, or caching off)")  # fmt: skip
    else:
        line = (f"prefix cache: {rate:.1%} of prompt tokens served from the server's cache ({tok.get('cached_input', 0):,} "
                f"tokens, {n} requests reporting{'; caching off, or no shared prefix?' if rate == 0 else ''})")  # fmt: skip
    server = (((result.get("server") or {}).get("metrics")) or {}).get("prefix_cache_hit_rate")
    if server is not None:
        line += f"; the server's counters: {server:.1%}"
        if rate is not None and abs(server - rate) > 0.05:
            line += " (they disagree: traffic from elsewhere, or an engine the page does not count)"
    t = result.get("cache_hit_target")
    if t:
        held = {True: "held", False: "NOT held", None: "not judged"}[t.get("held")]
        line += f"\n--cache-hit-target {t['target']:g}: {held} (within {t['tolerance']:g})" + (
            f": {t['why']}" if t.get("why") else ""
        )
    return line


def preparation_phrase(result: dict[str, Any]) -> str | None:
    """One line on what was built before the clock started (``client.preparation``) and what the
    run built itself (None: no preparation recorded, e.g. sessions)."""
    p = (result.get("client") or {}).get("preparation")
    if not p:
        return None
    of = f" of {p['of']:,}" if p.get("of") is not None else ""
    why = {"memory": "its memory budget", "time": "its time budget", "turns": "its count for a timed run",
           "cheap": "cheap requests (the rest are built in the run)",
           "stop": "a stop"}.get(p.get("stopped_by") or "", "")  # fmt: skip
    line = (f"prepared before the clock: {p['requests']:,}{of} requests ({p['bytes'] / 1e6:.1f} MB) in "
            f"{p['seconds']:.2f} s" + (f", stopped by {why}" if why else ""))  # fmt: skip
    if p.get("built_in_run"):
        line += (f"; built during the run: {p['built_in_run']:,} ({p['built_in_run_cpu_s'] * 1e3:.0f} ms of client CPU, "
                 "inside the window's figures)")  # fmt: skip
    return line


def stages_table(stages: list[dict[str, Any]]) -> Table:
    """``--stages``: one row a stage, its level, window, rates over that window, latency and verdict."""
    table = Table(title="stages (each over its own window)", show_lines=False)
    for col in ("stage", "level", "window s", "req/s", "output tok/s", "TTFT p50", "TTFT p99", "ITL p99", "verdict"):
        table.add_column(col, justify="right" if col not in ("level", "verdict") else "left")
    for st in stages:
        w = st.get("window") or {}
        tp = st.get("throughput") or {}
        lat = st.get("latency_ms") or {}
        level = f"{st['rate_rps']:g} req/s" if st.get("rate_rps") is not None else f"{st.get('concurrency')} users"
        verdict = "VALID" if st.get("valid") else "INVALID (" + ", ".join(st.get("failed_checks") or ()) + ")"
        if (st.get("server_kept_up") or {}).get("kept_up") is False:
            verdict += "; the server fell behind"
        slo = st.get("slo")
        if slo is not None:
            verdict += "; SLO " + ("met" if slo.get("met") else "missed")
        table.add_row(
            str(st["stage"]),
            level,
            f"{w.get('start_s', 0):.1f}-{w.get('end_s', 0):.1f}" if w else "-",
            _f(tp.get("request_rps")),
            _f(tp.get("output_tps")),
            _f((lat.get("ttft") or {}).get("p50")),
            _f((lat.get("ttft") or {}).get("p99")),
            _f((lat.get("itl") or {}).get("p99")),
            verdict,
        )
    return table


def models_table(by_model: dict[str, Any]) -> Table:
    """``--model a=0.7,b=0.3``: one row a model, its share, rates over the run's window, latency, SLO verdict."""
    table = Table(title="by model (--model mix)", show_lines=False)
    for col in (
        "model",
        "weight",
        "requests",
        "failed",
        "req/s",
        "output tok/s",
        "TTFT p50",
        "TTFT p99",
        "ITL p99",
        "SLO",
    ):
        table.add_column(col, justify="left" if col in ("model", "SLO") else "right")
    for name, e in (by_model.get("models") or {}).items():
        c, tp, lat = e.get("counts") or {}, e.get("throughput") or {}, e.get("latency_ms") or {}
        slo = e.get("slo")
        table.add_row(
            name,
            f"{e.get('weight', 0) * 100:.0f} %",
            _f(c.get("requests")),
            _f(c.get("failed")),
            _f(tp.get("request_rps")),
            _f(tp.get("output_tps")),
            _f((lat.get("ttft") or {}).get("p50")),
            _f((lat.get("ttft") or {}).get("p99")),
            _f((lat.get("itl") or {}).get("p99")),
            "-" if slo is None else ("met" if slo.get("met") else "MISSED"),
        )
    return table
