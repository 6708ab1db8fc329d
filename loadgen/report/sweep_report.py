"""Sweep output: console table and answer line, PNG plots, a self-contained HTML report."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
from rich.console import Console
from rich.table import Table

from loadgen.report.sweep_facts import COUNTED, counts_words
from loadgen.sweep.verdict import interrupted_answer, text_of

CLIENT_REMEDY = "give the client CPUs of its own (--cpus), more client processes (--workers), or another machine"
POINT_NOTE = "a point estimate: its probe held fewer requests than the evidence rule asks, or stayed undecided"


METRIC_WORDS = {"ttft": "TTFT", "e2e": "E2E", "tpot": "TPOT", "itl": "ITL", "stall": "stall", "tbt_deadline": "token pace",
                "time_to_first_answer_token": "time to first answer token"}  # fmt: skip


def slo_words(res: dict[str, Any]) -> str:
    """The SLO in plain words: "p99 TTFT ≤ 300 ms" (and the others, joined)."""
    return " and ".join(
        f"p{t['percentile']:g} {METRIC_WORDS.get(t['metric'], t['metric'])} ≤ {t['threshold_ms']:g} ms"
        for t in res.get("slo") or []
    )


def headline(res: dict[str, Any]) -> str | None:
    """The answer in plain words, the first line of the console and of report.html (issue 30):
    "9.5 req/s meets p99 TTFT ≤ 300 ms (95 % interval 9.1–10.4 req/s)". The interval is
    ``answer.interval_rps``: [highest certified-PASS rate, lowest certified-FAIL rate]; a side no probe
    certified is said in words, and an answer whose own probe is a point estimate says so. None for a
    concurrency sweep, an interrupted one, or no answer (:func:`answer_line` says those)."""
    a = res.get("answer") or {}
    rate = a.get("max_rate_rps")
    if rate is None or res.get("interrupted") or a.get("concurrency") or "interval_rps" not in a:
        return None  # (a file from before issue 30 has no interval)
    u = sweep_units(res)[0]
    conf = (res.get("settings") or {}).get("confidence") or 0.975
    pair = max(0.0, 1 - 2 * (1 - conf))  # each end tested at conf: the pair covers 1 - 2(1 - conf)
    lo, hi = (list(a["interval_rps"] or []) + [None, None])[:2]
    head = f"{_n(rate)} {u} meets {slo_words(res)}"
    if lo is not None and hi is not None:
        head += f" ({pair * 100:.3g} % interval {_n(lo)}–{_n(hi)} {u})"
    elif lo is not None:
        head += f" (certified at {_n(lo)} {u}; no rate above it was certified to fail"
        head += {"max_rate": ": --max-rate reached)", "client": ": the client could test no higher)"}.get(
            a.get("limited_by") or "", ")"
        )
    else:
        p = answer_probe(res)
        more = p.get("certify_more_s") if p else None
        head += " (a point estimate: no probe certified a PASS" + (
            f"; about {more:.0f} s more at {_n(rate)} {u} would have certified it)" if more else ")"
        )
        if hi is not None:
            head = head[:-1] + f"; {_n(hi)} {u} certainly fails)"
    if lo is not None and a.get("point_estimate"):
        head += f", on a point estimate at {_n(rate)} {u}"  # the answer's own probe was not certified
    above = a.get("point_estimate_pass_above_rps")
    if above is not None:
        head += f"; {_n(above)} {u} passed too, on a point estimate only"
    return head


def answer_line(res: dict[str, Any]) -> str:
    """The sweep's answer in one line (console and report): what was decided, and on what evidence."""
    if res.get("interrupted"):  # at most a bracket or lower bound (loadgen.sweep.verdict)
        return interrupted_answer(res)
    a = res["answer"]
    u, done, users_word = sweep_units(res)  # req/s, or sessions/s and turns/s for a session sweep (issue 17)
    slos = " and ".join(t["target"] for t in res["slo"])
    point = f" ({POINT_NOTE})" if a.get("point_estimate") else ""
    if a.get("client_starved"):  # the client could not serve the test (loadgen.sweep.starved)
        return f"no answer: {a['client_starved']}"
    if a.get("slo_below_unloaded"):
        return f"no rate met {slos}: {a['slo_below_unloaded']}; no probe was run"
    users = a.get("untested_concurrency")
    untested = (
        f"; {users} {users_word} could not be tested by this client (a lower bound; remedy: {CLIENT_REMEDY})"
        if users
        else ""
    )
    if a.get("concurrency"):
        return (
            f"highest concurrency meeting {slos}: {a['concurrency']} {users_word}{point}, "
            f"{_n(a['output_tps'], 1)} output tok/s, {_n(a['request_rps'])} {done}{untested}"
        )
    if users:
        return f"no user count met {slos} below {users} {users_word}{untested}"
    if a["max_rate_rps"] is None:
        if a["limited_by"] == "client":
            low = a.get("untested_above_rps")
            return (
                f"no answer: client limited at every rate tried, down to {_n(low)} {u} ({slos}); "
                f"see the validity lines; remedy: {CLIENT_REMEDY}"
            )
        if a["limited_by"] == "rate_limit":
            return (
                f"no answer: the provider's quota limited the first probe (HTTP 429 at {_n(a.get('rate_limited_at'))}"
                f" {u}): a quota, not the server's latency"
            )
        return f"no rate met {slos}: even the lowest probe failed (bracket fail at {_n(a['bracket_rps'][1])} {u})"
    s = f"max {'session ' if u != 'req/s' else ''}rate meeting {slos}: {_n(a['max_rate_rps'])} {u}{point}"
    if a["limited_by"] == "client":
        s = (
            f"client limited: {_n(a['max_rate_rps'])} {u} meets {slos}{point}; rates above "
            f"{_n(a.get('untested_above_rps'))} {u} could not be tested by this client (a lower bound; "
            f"remedy: {CLIENT_REMEDY})"
        )
    elif a["limited_by"] == "max_rate":
        s += " (reached --max-rate; the server may carry more)"
    elif a["limited_by"] == "rate_limit":
        s += f" (then the provider's quota: HTTP 429 took over at {_n(a.get('rate_limited_at'))} {u})"
    else:
        s += f" (bracket {_n(a['bracket_rps'][0])}..{_n(a['bracket_rps'][1])})"
        low = a.get("untested_above_rps")
        if low is not None and a["bracket_rps"][1] is not None and low < a["bracket_rps"][1]:
            s += f"; the client's timing could not decide rates from {_n(low)} {u} up to that FAIL"
    s += f"; there {_n(a['output_tps'], 1)} output tok/s, {_n(a['total_tps'], 1)} total tok/s, goodput {_n(a['goodput_rps'])} {done}"
    if a.get("cost_per_million_output_tokens_usd") is not None:
        s += f"; ${a['cost_per_million_output_tokens_usd']:.4f} per million output tokens"
    return s


def sweep_units(res: dict[str, Any]) -> tuple[str, str, str]:
    """(offered-rate unit, completed-rate unit, closed-loop word): req/s, req/s, users; for a session
    sweep (``sweep.json`` ``sessions``, issue 17) sessions/s, turns/s, concurrent sessions."""
    if res.get("sessions"):
        return "sessions/s", "turns/s", "concurrent sessions"
    return "req/s", "req/s", "users"


def answer_probe(res: dict[str, Any]) -> dict[str, Any] | None:
    """The probe whose rates the answer reports (the passing probe at the answer), or None."""
    a = res["answer"]
    for p in reversed(res.get("probes") or []):
        if p.get("verdict") != "pass":
            continue
        if a.get("concurrency") is not None and p.get("concurrency") == a["concurrency"]:
            return p
        if a.get("concurrency") is None and p.get("concurrency") is None and p["offered_rps"] == a["max_rate_rps"]:
            return p
    return None


def answer_window_line(res: dict[str, Any], out_dir: Path) -> str | None:
    """ "rates over the 10.07 s window of scheduled sends ..." of the answer's probe (its result.json)."""
    from loadgen.report.console import window_phrase

    p = answer_probe(res)
    if p is None:
        return None
    try:
        w = orjson.loads((out_dir / p["dir"] / "result.json").read_bytes()).get("window")
    except (OSError, orjson.JSONDecodeError):
        return None
    return f"the answer's {window_phrase(w)}" if w else None


def rerun_lines(res: dict[str, Any]) -> list[str]:
    """One line per probe that was INVALID on the client's timing and run again (``reruns``)."""
    max_r = (res.get("settings") or {}).get("max_reruns")
    out = []
    for r in res.get("reruns") or []:
        rate = f"c={r['concurrency']}" if r.get("concurrency") else f"{r['offered_rps']:.2f} {sweep_units(res)[0]}"
        why = "; ".join(r.get("validity_detail") or []) or "client timing"
        out.append(
            f"re-run {r.get('rerun')}{f' of {max_r}' if max_r else ''} at {rate}: "
            f"{r.get('invalid_probe')} was INVALID ({why}); run again"
        )
    return out


def sent_rps(p: dict[str, Any]) -> float | None:
    """The rate a probe really sent (``sent_rps``; older sweep.json files: ``achieved_send_rps``)."""
    return p.get("sent_rps", p.get("achieved_send_rps"))


def target_lines(res: dict[str, Any]) -> list[str]:
    """One line per target of each probe judged on several targets: its own verdict text and counts."""
    out = []
    for i, p in enumerate(res.get("probes") or [], 1):
        ts = p.get("targets") or []
        if len(ts) < 2:
            continue
        parts = []
        for x in ts:
            counts = f" ({x['exceedances']} of {x['requests']} over)" if "requests" in x else ""
            parts.append(f"{x['target']}: {x['verdict_text']}{counts}")
        out.append(f"probe {i} targets: " + "; ".join(parts))
    return out


def _n(v: object, d: int = 2) -> str:
    return "-" if v is None else f"{v:,.{d}f}"


def probes_table(res: dict[str, Any]) -> Table:
    """The console's table of probes: one row each, its counts those of ``sweep.json`` (:data:`COUNTED`).

    Numbers never wrap (a cell is one whole number); the words of a verdict fold rather than end in "…".
    """
    t = Table(title="probes", caption=f"{COUNTED}", caption_justify="left")
    for c in ("#", "offered", "sent req/s", "done req/s", "out tok/s"):
        t.add_column(c, justify="right", no_wrap=True)
    t.add_column("verdict", justify="right", overflow="fold")
    t.add_column("over of measured", justify="right", overflow="fold")
    for c in ("exceedance", "duration s", "censored"):
        t.add_column(c, justify="right", no_wrap=True)
    for i, p in enumerate(res["probes"], 1):
        offered = f"c={p['concurrency']}" if p.get("concurrency") else f"{p['offered_rps']:.2f}"
        ex = ", ".join("-" if v is None else f"{v * 100:.2f}%" for v in p["exceedance_fraction"].values())
        t.add_row(
            str(i),
            offered,
            _n(sent_rps(p)),
            _n(p["request_rps"]),
            _n(p["output_tps"], 1),
            text_of(p),
            counts_words(p),
            ex,
            f"{p['duration_s']:.1f}",
            str(p["censored"]),
        )
    return t


def render_sweep(res: dict[str, Any], console: Console, out_dir: str) -> None:
    first = headline(res)
    if first:
        console.print(f"[bold]{first}[/]")
    t = probes_table(res)
    if res["probes"]:
        console.print(t)
    for line in target_lines(res):
        console.print(line)
    if res.get("evidence_rule"):
        console.print(f"evidence rule: {res['evidence_rule']}")
    for f in res.get("non_monotonic") or []:
        console.print(f"[yellow]non-monotonic:[/] {f}")
    invalid = [p for p in res["probes"] if p["verdict"] == "invalid"]
    for p in invalid:
        for d in p.get("validity_detail", []):
            console.print(f"[red]client limit:[/] {d}")
    if invalid:
        console.print(f"remedy: lower the rate, or {CLIENT_REMEDY}")
    for line in rerun_lines(res):
        console.print(f"[yellow]{line}[/]")
    console.print(f"total probe time {res['probe_time_s']:.1f} s")
    console.print(f"[bold]{answer_line(res)}[/]")
    wl = answer_window_line(res, Path(out_dir))
    if wl:
        console.print(wl)
    console.print(f"results in {out_dir} (sweep.json, report.html)")


def write_report(res: dict[str, Any], out_dir: Path) -> Path | None:
    """Write report.html and plot-N.png (:mod:`loadgen.report.sweep_html`); None if matplotlib is missing."""
    from loadgen.report.sweep_html import write_report as write_html

    return write_html(
        res,
        out_dir,
        answer=answer_line(res),
        window=answer_window_line(res, out_dir),
        reruns=rerun_lines(res),
        first=headline(res),
    )
