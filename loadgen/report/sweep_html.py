"""report.html of a sweep: one self-contained page a reader can forward.

Sections: the answer (the one line of :func:`loadgen.report.sweep_report.answer_line` and its
figures in words), the test conditions (:func:`loadgen.report.sweep_facts.conditions_rows`),
the figures (inline SVG, :mod:`loadgen.report.sweep_plots`; also written as ``plot-N.png``),
the probes with their verdict texts, and the sweep's notes (non-monotonic verdicts, re-runs).
No script, no link to the network: the page opens the same from a mail attachment.
"""

from __future__ import annotations

import html
import math
from pathlib import Path
from typing import Any

from loadgen.report import sweep_plots
from loadgen.report.plotting import STATE_STYLE, figure_png, figure_svg, pyplot
from loadgen.report.session_summary import session_sweep_html
from loadgen.report.sweep_facts import COUNTED, conditions_rows, identity_line, probe_state, target_texts, verdict_text
from loadgen.report.why import why_html

CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:2em auto;max-width:1100px;color:#222;padding:0 1em}
h1{font-size:1.6em;margin-bottom:.2em} h2{font-size:1.2em;margin-top:1.6em;border-bottom:1px solid #ddd;padding-bottom:.2em}
.sub{color:#666;margin-top:0}
.answer{font-size:1.2em;background:#eef7ee;padding:.8em 1em;border-left:6px solid #2e7d32;margin:1em 0}
.answer.none{background:#fdecea;border-left-color:#c62828}
table{border-collapse:collapse;margin:.5em 0}
td,th{border:1px solid #ddd;padding:4px 10px;font-size:13px;vertical-align:top}
th{background:#f5f5f5;text-align:left}
table.facts{min-width:70%} table.facts th{width:15em;font-weight:600;white-space:nowrap}
table.probes td.num{text-align:right;font-variant-numeric:tabular-nums}
.state{font-weight:600;max-width:22em} table.probes{width:100%} table.probes td{overflow-wrap:anywhere}
.pass .state{color:#2e7d32} .fail .state{color:#c62828} .stopped_early .state{color:#ef6c00} .invalid .state{color:#757575}
tr.stopped_early td,tr.invalid td{background:#fafafa}
figure{margin:1em 0} figcaption{color:#555;font-size:13px}
figure svg{max-width:100%;height:auto}
.key span{display:inline-block;margin-right:1.2em;font-size:13px}
.note{color:#555;font-size:13px}
"""


def _n(v: object, d: int = 2) -> str:
    return "-" if v is None else f"{v:,.{d}f}"


def usd(v: float) -> str:
    """Dollars with four significant digits and no exponent: $1.356, $0.00004277."""
    if v <= 0 or not math.isfinite(v):
        return f"${v:,.2f}"
    return f"${v:,.{max(2, 3 - math.floor(math.log10(v)))}f}"


def answer_dir(res: dict[str, Any]) -> str | None:
    """The directory (relative to the sweep's) of the probe the answer reports, or None."""
    a = res.get("answer") or {}
    for p in reversed(res.get("probes") or []):
        if p.get("verdict") != "pass" or not p.get("dir"):
            continue
        if a.get("concurrency") and p.get("concurrency") == a["concurrency"]:
            return str(p["dir"])
        if not a.get("concurrency") and a.get("max_rate_rps") is not None and p.get("offered_rps") == a["max_rate_rps"]:
            return str(p["dir"])
    return None


LIMITED_BY = {
    None: "the SLO (the next rate up failed)",
    "max_rate": "--max-rate (the server may carry more)",
    "client": "the load generator (a lower bound: see the validity lines)",
    "rate_limit": "the provider's quota (HTTP 429)",
}


def answer_rows(res: dict[str, Any]) -> list[tuple[str, str]]:
    """The answer's figures in words (the raw ``answer`` keys are in sweep.json)."""
    a = res.get("answer") or {}
    rows: list[tuple[str, str]] = []
    if a.get("concurrency"):
        rows.append(("Highest concurrency meeting the SLO", f"{a['concurrency']} users"))
    elif a.get("max_rate_rps") is not None:
        rows.append(("Highest offered rate meeting the SLO", f"{_n(a['max_rate_rps'])} req/s"))
    br = a.get("bracket_rps")
    if br and not a.get("concurrency") and br[0] is not None:
        rows.append(("Bracket", f"PASS at {_n(br[0])} req/s, FAIL at {_n(br[1])} req/s"))
    elif br and not a.get("concurrency") and br[1] is not None:
        rows.append(("Bracket", f"no rate passed; FAIL already at {_n(br[1])} req/s"))
    if a.get("max_rate_rps") is not None or a.get("concurrency"):
        rows.append(("Limited by", LIMITED_BY.get(a.get("limited_by"), str(a.get("limited_by")))))
    for key, label, unit, d in (("request_rps", "Completed requests", "req/s", 2), ("goodput_rps", "Goodput", "req/s", 2),
                                ("output_tps", "Output tokens", "tok/s", 1), ("total_tps", "Input + output tokens", "tok/s", 1),
                                ("output_tps_per_accelerator", "Output tokens per accelerator", "tok/s", 1)):  # fmt: skip
        if a.get(key) is not None:
            rows.append((label, f"{_n(a[key], d)} {unit}"))
    for key, label in (("cost_per_million_output_tokens_usd", "Cost per million output tokens"),
                       ("cost_per_million_total_tokens_usd", "Cost per million tokens (input + output)"),
                       ("cost_per_successful_request_usd", "Cost per successful request")):  # fmt: skip
        if a.get(key) is not None:
            rows.append((label, usd(a[key])))
    return rows


def _table(rows: list[tuple[str, str]], cls: str) -> str:
    body = "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>" for k, v in rows)
    return f"<table class='{cls}'>{body}</table>"


def probes_table(res: dict[str, Any]) -> str:
    """The probes, one row each, classed and worded by state (PASS, FAIL, stopped early, INVALID)."""
    head = (
        "#",
        "offered",
        "sent req/s",
        "completed req/s",
        "output tok/s",
        "verdict",
        "per target (over of measured)",
        "duration s",
        "censored",
    )
    rows = ""
    for i, p in enumerate(res.get("probes") or [], 1):
        state = probe_state(p)
        offered = f"c={p['concurrency']}" if p.get("concurrency") else f"{p.get('offered_rps') or 0:,.3f} req/s"
        # the reasons name each target with its counts (and, in newer files, its verdict text)
        lines = [str(r) for r in p.get("reasons") or []] or [f"{k}: {v}" for k, v in target_texts(p).items()]
        per_target = "<br>".join(html.escape(x) for x in lines)
        cells = [
            (str(i), "num"), (offered, "num"), (_n(p.get("sent_rps", p.get("achieved_send_rps"))), "num"), (_n(p.get("request_rps")), "num"),
            (_n(p.get("output_tps"), 1), "num"),
        ]  # fmt: skip
        rows += f"<tr class='{state}'>" + "".join(f"<td class='{c}'>{html.escape(v)}</td>" for v, c in cells)
        rows += f"<td class='state'>{html.escape(verdict_text(p))}</td><td>{per_target}</td>"
        rows += f"<td class='num'>{_n(p.get('duration_s'), 1)}</td><td class='num'>{p.get('censored', '-')}</td></tr>"
    return "<table class='probes'><tr>" + "".join(f"<th>{h}</th>" for h in head) + f"</tr>{rows}</table>"


def _key() -> str:
    sym = {"pass": "●", "fail": "✖", "stopped_early": "△", "invalid": "◇"}
    return (
        "<p class='key'>"
        + "".join(
            f"<span style='color:{STATE_STYLE[s]['color']}'>{sym[s]} {html.escape(STATE_STYLE[s]['label'])}</span>"
            for s in ("pass", "fail", "stopped_early", "invalid")
        )
        + "<span>a stopped-early probe was cut short once its FAIL was certain: its percentiles and rates are not drawn</span></p>"
    )


def figures(res: dict[str, Any], out_dir: Path) -> list[tuple[str, str]] | None:
    """[(caption, inline svg)] of the sweep, each also written as ``plot-N.png``; None without matplotlib."""
    plt = pyplot()
    if plt is None:
        return None
    figs = sweep_plots.latency_figures(plt, res)
    for extra in (sweep_plots.throughput_figure(plt, res), sweep_plots.interactivity_figure(plt, res)):
        if extra is not None:
            figs.append(extra)
    d = answer_dir(res)
    if d is not None:
        dist = sweep_plots.distribution_figure(plt, out_dir / d)
        if dist is not None:
            figs.append(dist)
    out = []
    titles = sweep_plots.probe_titles(res)
    for i, (title, fig) in enumerate(figs, 1):
        out.append((title, figure_svg(fig, salt=f"loadgen-sweep-{i}", titles=titles)))
        (out_dir / f"plot-{i}.png").write_bytes(figure_png(fig))
        plt.close(fig)
    return out


def write_report(
    res: dict[str, Any], out_dir: Path, *, answer: str, window: str | None, reruns: list[str], first: str | None = None
) -> Path | None:
    """Write report.html (and plot-N.png) for a sweep result into ``out_dir``; None if matplotlib is missing.

    ``answer``, ``window``, ``reruns``: the sweep's own words for its answer line, the answer's
    window and its re-runs (:mod:`loadgen.report.sweep_report`, the same as on the console); ``first``:
    the answer in plain words (:func:`loadgen.report.sweep_report.headline`), the page's first line.
    """
    figs = figures(res, out_dir)
    if figs is None:
        return None
    a = res.get("answer") or {}
    has_answer = a.get("max_rate_rps") is not None or bool(a.get("concurrency"))
    slo = ", ".join(str(t.get("target")) for t in res.get("slo") or [])
    window = window or ""
    cond = dict(conditions_rows(res, out_dir, answer_dir(res)))
    fig_html = "".join(f"<figure>{svg}<figcaption>{html.escape(t)}</figcaption></figure>" for t, svg in figs)
    notes = "; ".join(res.get("non_monotonic") or []) or "none"
    rerun_text = "; ".join(reruns) or "none"
    interrupted = (
        "<p class='answer none'>The sweep was interrupted: the answer covers the probes run.</p>"
        if res.get("interrupted")
        else ""
    )
    label = str((res.get("config") or {}).get("label") or "")  # --label: the system's name, heading the page
    doc = f"""<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{html.escape(label + ": " if label else "")}loadgen sweep: {html.escape(slo)}</title>
<meta name="viewport" content="width=device-width, initial-scale=1"><style>{CSS}</style></head><body>
<h1>{html.escape(label + ": " if label else "")}load sweep: highest load meeting {html.escape(slo)}</h1>
{f'<p class="answer">{html.escape(first)}</p>' if first else ""}
<p class="sub system">System: {html.escape(identity_line(res, with_label=False))} — {html.escape(cond.get("Date", ""))}</p>
{interrupted}<p class="answer{"" if has_answer else " none"}">{html.escape(answer)}</p>
<p class="note">{html.escape(window)}</p>
{_table(answer_rows(res), "facts")}
<h2>Test conditions</h2>
{_table(list(cond.items()), "facts")}
<h2>Latency and throughput against load</h2>
{_key()}
{fig_html}
<h2>Probes</h2>
{probes_table(res)}
<p class="note">{html.escape(COUNTED)}.</p>
{session_sweep_html(res)}
<h2>Why probes missed</h2>
{why_html(res)}
<p class="note">Non-monotonic verdicts: {html.escape(notes)}</p>
<p class="note">Probes re-run after a client stall (INVALID on the client's own timing): {html.escape(rerun_text)}</p>
<p class="note">Every figure here is in sweep.json and the probes' result.json files next to this page.</p>
</body></html>"""
    path = out_dir / "report.html"
    path.write_text(doc, encoding="utf-8")
    return path
