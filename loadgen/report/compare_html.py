"""scorecard.html: the scorecard page, drawn from ``scorecard.json`` alone.

The table opens with the rows that say what each system is (model, server and version,
accelerator and count, price per hour), then the measured rows; the best value of a ranked
row is marked, "not measured" is grey. Values are plain text; the files behind each column
are linked in the last row only. The figures (inline SVG, no script, no network): latency
against load with one panel per system, each on its own linear x axis (a 5 req/s and a
40 req/s system are both readable; concurrency for a concurrency sweep) and its own SLO lines, probes marked by state
(:mod:`loadgen.report.plotting`); and the interactivity curves of concurrency sweeps.
"""

from __future__ import annotations

import html
import math
from typing import TYPE_CHECKING, Any

from loadgen.report.compare_pareto import pareto_figure
from loadgen.report.compare_scaling import scaling_html
from loadgen.report.plotting import (
    BRACKET_COLOR,
    SLO_COLOR,
    STATE_STYLE,
    clip_mark,
    figure_svg,
    ms_ceiling,
    pyplot,
    readable_axis,
)

if TYPE_CHECKING:
    from types import ModuleType

    from matplotlib.figure import Figure

NOT_MEASURED = "not measured"
THROUGHPUT_FIRST_ROW = "tp_batch"  # the first row of the max-throughput section (compare.THROUGHPUT_ROWS)
_PERCENT_KEYS = ("_change", "_agreement", "_rate", "quality_accuracy")

CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:1.5em auto;max-width:1300px;color:#222;padding:0 1em}
h1{font-size:1.5em} h2{font-size:1.15em;margin-top:1.5em;border-bottom:1px solid #ddd}
table{border-collapse:collapse} td,th{border:1px solid #ddd;padding:4px 10px;font-size:13px;vertical-align:top}
th{background:#f5f5f5;text-align:left;font-weight:600} td{text-align:right;font-variant-numeric:tabular-nums}
tr.describe td{text-align:left;background:#fbfbfb}
tr.section th{background:#e8eef7;font-size:12px;text-transform:uppercase;letter-spacing:.04em}
td.best{background:#dff0d8;font-weight:700} td.nm{color:#999}
tr.files td{text-align:left} tr.files a{color:#0645ad}
.warn{color:#a00} .drift{color:#a60} .note{font-size:85%;color:#555}
figure{margin:1em 0} figure svg{max-width:100%;height:auto} figcaption{color:#555;font-size:13px}
"""


def fmt_cell(v: object, key: str = "") -> str:
    """A cell's text; changes, agreements and rates of a row ``key`` as percentages."""
    if isinstance(v, (int, float)) and not isinstance(v, bool) and key.endswith(_PERCENT_KEYS):
        return f"{v:+.1%}" if key.endswith("_change") else f"{v:.1%}"
    if isinstance(v, float):
        return f"{v:,.4g}" if abs(v) < 1 else f"{v:,.2f}"
    return str(v)


def _points(card: dict[str, Any], label: str) -> list[dict[str, Any]]:
    """A system's curve in drawing order: open-loop probes by rate, closed-loop ones by concurrency."""
    return sorted(card["latency_curves"][label], key=lambda p: (p.get("concurrency") or 0, p["load_rps"]))


def _px(p: dict[str, Any]) -> float:
    """A point's x in its system's panel: the concurrency of a closed-loop probe, else the offered rate."""
    return float(p["concurrency"]) if p.get("concurrency") else float(p["load_rps"])


def _systems(card: dict[str, Any]) -> list[dict[str, Any]]:
    return [s for s in card["systems"] if card.get("latency_curves", {}).get(s["label"])]


def point_titles(card: dict[str, Any]) -> dict[str, str]:
    """Hover text of every probe mark of :func:`latency_figure` (SVG id -> words)."""
    out = {}
    for k, s in enumerate(_systems(card)):
        for n, p in enumerate(_points(card, s["label"])):
            state = p.get("state") or "pass"
            v = p.get("slo_metric_ms") if state in ("pass", "fail") else None  # a cut-short window's is not shown
            load = f"c={p['concurrency']}, " if p.get("concurrency") else ""
            out[f"probe-{state.replace('_', '-')}-{k}-{n}"] = (
                f"{s['label']}: {load}{p['load_rps']:,.2f} req/s: {STATE_STYLE[state]['label']}"
                + (f"; {s.get('slo_metric_label') or 'SLO metric'} {v:,.1f} ms" if v is not None else "")
            )
    return out


def latency_figure(plt: ModuleType, card: dict[str, Any]) -> Figure | None:
    """One panel per system: its SLO metric against its own load axis, its SLO lines, probe states.

    Returns the figure (its axes in system order), or None when no system has a latency curve.
    """
    systems = _systems(card)
    if not systems:
        return None
    metrics = {s.get("slo_metric_label") for s in systems}
    n = len(systems)
    cols = min(n, 3)
    rows = math.ceil(n / cols)
    share = len(metrics) == 1
    fig, axs = plt.subplots(rows, cols, figsize=(4.6 * cols, 3.6 * rows), squeeze=False, sharey=share)
    values = [p["slo_metric_ms"] for s in systems for p in card["latency_curves"][s["label"]]
              if p.get("slo_metric_ms") is not None and p.get("state") in ("pass", "fail", None)]  # fmt: skip
    lines = [x["threshold_ms"] for s in systems for x in s.get("slo_lines") or []]
    top_all = ms_ceiling(lines, values)
    states: set[str] = set()
    for k, s in enumerate(systems):
        ax = axs[k // cols][k % cols]
        pts = _points(card, s["label"])
        own = [x["threshold_ms"] for x in s.get("slo_lines") or []]
        mine = [
            p["slo_metric_ms"]
            for p in pts
            if p.get("slo_metric_ms") is not None and p.get("state") in ("pass", "fail", None)
        ]
        top = top_all if share else ms_ceiling(own, mine)
        full = [p for p in pts if p.get("state") in ("pass", "fail", None) and p.get("slo_metric_ms") is not None]
        ax.plot([_px(p) for p in full], [min(p["slo_metric_ms"], top) for p in full], "-", color="#1565c0", lw=1.4)
        for n_pt, p in enumerate(pts):
            st_name = p.get("state") or "pass"
            st = STATE_STYLE[st_name]
            if st_name == "invalid":
                y = 0.0
            elif st_name == "stopped_early":
                y = (own[0] if own else top) + 0.04 * top
            elif p.get("slo_metric_ms") is None:
                continue
            else:
                y = clip_mark(ax, _px(p), p["slo_metric_ms"], top, st["color"])
            (m,) = ax.plot([_px(p)], [y], linestyle="", marker=st["marker"], color=st["color"],
                           markerfacecolor=st["mfc"], markersize=7, clip_on=False, zorder=5)  # fmt: skip
            m.set_gid(f"probe-{st_name.replace('_', '-')}-{k}-{n_pt}")
            states.add(st_name)
        for j, line in enumerate(s.get("slo_lines") or []):
            ln = ax.axhline(line["threshold_ms"], color=SLO_COLOR, ls="--", lw=1.1)
            ln.set_gid(f"slo-{k}-{j}")
            ax.annotate(f"SLO {line['target']}", (0.01, line["threshold_ms"]), xycoords=("axes fraction", "data"),
                        xytext=(0, 3), textcoords="offset points", fontsize=7.5, color=SLO_COLOR)  # fmt: skip
        closed = any(p.get("concurrency") for p in pts)
        answer_x = s.get("answer_concurrency") if closed else s.get("answer_load_rps")
        if answer_x:
            ax.axvline(answer_x, color=BRACKET_COLOR, lw=1.2).set_gid(f"answer-{k}")
        ax.set_ylim(0, top)
        ax.set_xlim(0, max([_px(p) for p in pts] + [1e-9]) * 1.08 or 1.0)
        readable_axis(ax.xaxis)
        readable_axis(ax.yaxis)
        ax.grid(True, color="#e0e0e0", lw=0.6)
        ax.set_axisbelow(True)
        ax.set_xlabel("concurrency (users)" if closed else "offered load (req/s)", fontsize=9)
        if k % cols == 0 or not share:
            ax.set_ylabel(f"{s.get('slo_metric_label') or 'SLO metric'} (ms)", fontsize=9)
        ax.set_title(s["label"], fontsize=10)
    for k in range(n, rows * cols):
        axs[k // cols][k % cols].set_visible(False)
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], linestyle="", marker=STATE_STYLE[x]["marker"], color=STATE_STYLE[x]["color"],
                      markerfacecolor=STATE_STYLE[x]["mfc"], label=STATE_STYLE[x]["label"])
               for x in ("pass", "fail", "stopped_early", "invalid") if x in states]  # fmt: skip
    handles += [Line2D([], [], color=SLO_COLOR, ls="--", label="SLO target"),
                Line2D([], [], color=BRACKET_COLOR, label="the system's answer")]  # fmt: skip
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), fontsize=8, frameon=False,
               bbox_to_anchor=(0.5, -0.02))  # fmt: skip
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    return fig


def _latency_panels(plt: ModuleType, card: dict[str, Any]) -> str:
    fig = latency_figure(plt, card)
    if fig is None:
        return ""
    svg = figure_svg(fig, salt="loadgen-card-latency", titles=point_titles(card))
    plt.close(fig)
    return (f"<figure>{svg}<figcaption>The SLO metric against load, one panel per system on its own load axis "
            "(linear, milliseconds); probes stopped early are marked above their SLO line, not drawn as a collapse."
            "</figcaption></figure>")  # fmt: skip


def _interactivity(plt: ModuleType, card: dict[str, Any]) -> str:
    """The Pareto figure of the compared concurrency sweeps (:mod:`loadgen.report.compare_pareto`)."""
    return pareto_figure(plt, card)


def _cell(v: object, key: str, best: bool) -> str:
    cls = " class='best'" if best else (" class='nm'" if v == NOT_MEASURED else "")
    return f"<td{cls}>{html.escape(fmt_cell(v, key))}</td>"


def render_html(card: dict[str, Any]) -> str:
    """The scorecard page of a ``scorecard.json`` document."""
    labels = [s["label"] for s in card["systems"]]
    head = "".join(f"<th>{html.escape(x)}</th>" for x in labels)
    width = len(labels) + 1
    body = f"<tr class='section'><th colspan='{width}'>System</th></tr>"
    for r in card.get("description_rows") or []:
        cells = "".join(f"<td>{html.escape(str(r['values'].get(x, NOT_MEASURED)))}</td>" for x in labels)
        body += f"<tr class='describe'><th>{html.escape(r['label'])}</th>{cells}</tr>"
    body += f"<tr class='section'><th colspan='{width}'>Measured</th></tr>"
    for r in card["rows"]:
        if r["key"] == THROUGHPUT_FIRST_ROW:  # the max-throughput runs' section (loadgen.engine.throughput)
            body += f"<tr class='section'><th colspan='{width}'>Max throughput (batch)</th></tr>"
        cells = "".join(_cell(r["values"][x], r["key"], r["best"] == x) for x in labels)
        body += f"<tr><th>{html.escape(r['label'])}</th>{cells}</tr>"
    files = ""
    for s in card["systems"]:
        links = [("result", s["source"])] + [(k.replace("_", " "), v) for k, v in (s.get("links") or {}).items()]
        files += "<td>" + "<br>".join(f"<a href='{html.escape(v)}'>{html.escape(k)}</a>" for k, v in links) + "</td>"
    body += f"<tr class='files'><th>files</th>{files}</tr>"
    warn = ""
    if not card["comparable"]:
        warn = ("<p class='warn'><b>Not comparable:</b> " + "; ".join(html.escape(x) for x in card["reasons"])
                + f" — ranking {html.escape(card['ranking'])}</p>")  # fmt: skip
    for w in card.get("warnings") or []:
        warn += f"<p class='drift'><b>Drift:</b> {html.escape(w)}</p>"
    notes = f"<p class='note'>Sustained: {html.escape(card['sustained']['rule'])}.</p>"
    if card.get("throughput"):
        notes += f"<p class='note'>Max throughput: {html.escape(card['throughput']['rule'])}.</p>"
    for label, c in (card.get("checks") or {}).items():
        notes += (f"<p class='note'>Quality of {html.escape(label)}: {html.escape(str(c.get('source')))} against "
                  f"{html.escape(str(c.get('reference')))} ({html.escape(str(c.get('token_unit')))}; {html.escape(str(c.get('load')))}).</p>")  # fmt: skip
    notes += "<p class='note'>Best value of a ranked row in green; rows are ranked only when the conditions match.</p>"
    plt = pyplot()
    plots = (_latency_panels(plt, card) + _interactivity(plt, card)) if plt is not None else ""
    return f"""<!doctype html><html lang="en"><head><meta charset="utf-8"><title>loadgen scorecard: {html.escape(", ".join(labels))}</title>
<meta name="viewport" content="width=device-width, initial-scale=1"><style>{CSS}</style></head><body>
<h1>Scorecard: {html.escape(", ".join(labels))}</h1>{warn}
<table><tr><th></th>{head}</tr>{body}</table>{notes}{scaling_html(card)}
{"<h2>Latency against load</h2>" + plots if plots else ""}
</body></html>"""
