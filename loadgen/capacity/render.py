"""The files of ``loadgen plan`` and ``loadgen capacity``: JSON, CSV, and a self-contained HTML page.

The page follows the report pages' rules (:mod:`loadgen.report.plotting`): inline SVG, no
script, no network. Without matplotlib (extra ``report``) the page has its tables only.
"""

from __future__ import annotations

import csv
import html
import io
from pathlib import Path
from typing import Any

from loadgen.engine.recordlog import write_json
from loadgen.report.plotting import figure_svg, pyplot, readable_axis

__all__ = ["pareto_html", "write_pareto", "write_plan"]

_CSS = ("body{font-family:system-ui,sans-serif;margin:1.5em;max-width:70em}table{border-collapse:collapse;"
        "margin:.6em 0}td,th{border:1px solid #ccc;padding:.2em .5em;text-align:right}th{background:#f3f3f3}"
        "td:first-child,th:first-child{text-align:left}figure{margin:.8em 0}svg{max-width:100%;height:auto}"
        ".note{color:#8a5a00}.ok{color:#1b5e20}.bad{color:#b71c1c}")  # fmt: skip


def _f(v: object, nd: int = 2) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:,.{nd}f}"
    return html.escape(str(v))


SHOWN_ROWS = 60
"""Interval rows a page or the console shows (every one is in plan.csv and plan.json): a demand of 50,000
intervals was a 50,000-row table and a 4.7 MB page before (issue 35)."""
PLOTTED_STEPS = 2000
"""Steps a figure draws at most: more intervals are merged, each step the largest of its intervals (peaks kept)."""


def shown_rows(rows: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
    """The rows a table shows (the first :data:`SHOWN_ROWS`) and how many it leaves to plan.csv."""
    return rows[:SHOWN_ROWS], max(len(rows) - SHOWN_ROWS, 0)


def _plotted(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    if len(rows) <= PLOTTED_STEPS:
        return rows
    k = -(-len(rows) // PLOTTED_STEPS)
    out = []
    for i in range(0, len(rows), k):
        part = rows[i : i + k]
        out.append({"start_s": part[0]["start_s"], "duration_s": sum(r["duration_s"] for r in part),
                    "demand": max(r["demand"] for r in part),
                    "provisioned_capacity": max(r["provisioned_capacity"] for r in part)})  # fmt: skip
    return out


def _demand_figure(plan: dict[str, Any], unit_label: str) -> str:
    plt = pyplot()
    if plt is None:
        return ""
    rows = _plotted(plan["intervals"])
    fig, ax = plt.subplots(figsize=(7.5, 3.4))
    xs = [r["start_s"] / 3600.0 for r in rows] + [(rows[-1]["start_s"] + rows[-1]["duration_s"]) / 3600.0]
    ax.stairs([r["demand"] for r in rows], xs, label="demand", color="#1565c0", lw=1.4, gid="demand")
    ax.stairs([r["provisioned_capacity"] for r in rows], xs, label="provisioned SLO capacity", color="#2e7d32",
              lw=1.4, gid="provisioned")  # fmt: skip
    readable_axis(ax.yaxis)
    ax.set_ylim(bottom=0)
    ax.set_xlabel("hours from the demand's start")
    ax.set_ylabel(unit_label)
    ax.grid(True, color="#e0e0e0", lw=0.6)
    ax.legend(fontsize=8, frameon=False)
    ax.set_title(f"{plan['label']}: demand against provisioned capacity", fontsize=10)
    svg = figure_svg(fig, salt=f"loadgen-plan-{plan['label']}")
    plt.close(fig)
    return f"<figure>{svg}</figure>"


def plan_section(doc: dict[str, Any]) -> str:
    """The plan's HTML section: per system the figure, the costs and the interval table."""
    unit = doc["demand"]["unit"]
    unit_label = "req/s" if unit == "rate_rps" else "output tok/s"
    parts = ["<section id='plan'><h2>Capacity plan</h2>",
             f"<p>demand {html.escape(doc['demand']['source'])} ({html.escape(doc['demand']['kind'])}, "
             f"{len(doc['demand']['intervals'])} intervals, {doc['demand']['span_s'] / 3600:.2f} h); headroom "
             f"{doc['headroom']:.0%}; model: {html.escape(doc['model'])}</p>"]  # fmt: skip
    for plan in doc["plans"]:
        s = plan["summary"]
        ci = plan.get("capacity_interval") or {}
        parts.append(f"<h3>{html.escape(plan['label'])}</h3><p>capacity per replica {_f(plan['capacity_per_replica'])} "
                     f"{unit_label} ({html.escape(ci.get('text', ''))}); peak {s['peak_replicas']} replicas "
                     f"({s['peak_accelerators']} accelerators); fleet duty {_f(s['fleet_duty'], 3)}; break-even "
                     f"utilisation {_f(s['break_even_utilisation'], 3)}</p>")  # fmt: skip
        parts += [f"<p class='note'>{html.escape(n)}</p>" for n in plan["notes"]]
        parts.append(_demand_figure(plan, unit_label))
        parts.append(_validation_html(plan.get("validation")))
        parts.append("<table><tr><th>pricing model</th><th>total USD</th><th>USD per million output tokens</th>"
                     "<th>USD per successful request</th><th>how</th></tr>")  # fmt: skip
        for name, c in plan["costs"].items():
            parts.append(f"<tr><td>{name}</td><td>{_f(c['total_usd'])}</td><td>{_f(c['per_million_output_tokens_usd'], 4)}"
                         f"</td><td>{_f(c['per_successful_request_usd'], 6)}</td><td>{html.escape(c['how'])}</td></tr>")  # fmt: skip
        parts.append("</table><table><tr><th>start s</th><th>duration s</th><th>demand</th><th>replicas</th>"
                     "<th>utilisation</th><th>autoscaled replicas</th></tr>")  # fmt: skip
        rows, hidden = shown_rows(plan["intervals"])
        for r in rows:
            parts.append(f"<tr><td>{_f(r['start_s'], 0)}</td><td>{_f(r['duration_s'], 0)}</td><td>{_f(r['demand'])}</td>"
                         f"<td>{r['replicas']}</td><td>{_f(r['utilisation'], 3)}</td>"
                         f"<td>{_f(r.get('autoscaled_replicas'))}</td></tr>")  # fmt: skip
        parts.append("</table>")
        if hidden:
            parts.append(f"<p class='note'>{hidden:,} more intervals in plan.csv and plan.json</p>")
    parts.append("</section>")
    return "\n".join(parts)


def _validation_html(v: dict[str, Any] | None) -> str:
    """The replay of the plan (``loadgen plan --validate``): its verdict, slice, fleet and per-replica counts."""
    if not v:
        return ""
    cls = {"held": "ok", "not held": "bad"}.get(v["verdict"], "note")
    rows = "".join(f"<tr><td>{r['replica']}</td><td>{html.escape(str(r['url']))}</td><td>{r['requests']}</td>"
                   f"<td>{r['failed']}</td></tr>" for r in v.get("per_replica") or [])  # fmt: skip
    table = (
        ("<table><tr><th>replica</th><th>URL</th><th>requests</th><th>failed</th></tr>" + rows + "</table>")
        if rows
        else ""
    )
    return (f"<h4>Validation by replay</h4><p class='{cls}'><b>{html.escape(v['verdict'].upper())}</b> at {v['replicas']} "
            f"replica{'s' if v['replicas'] != 1 else ''} (planned {v['planned_replicas']}; {html.escape(v['replicas_source'])}): "
            f"{html.escape(v['slice_text'])}. {html.escape(v['text'])}</p><p class='note'>{html.escape(v['rule'])}; "
            f"the replay's files: {html.escape(v['run_dir'])}</p>{table}")  # fmt: skip


def _page(title: str, body: str) -> str:
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{_CSS}</style></head><body><h1>{html.escape(title)}</h1>{body}</body></html>")  # fmt: skip


def write_plan(doc: dict[str, Any], out_dir: Path) -> list[Path]:
    """plan.json, plan.csv (one row per system and interval) and plan.html in ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    write_json(out_dir / "plan.json", doc)
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["label", "start_s", "duration_s", "demand", "unit", "replicas", "accelerators", "utilisation",
                "autoscaled_replicas"])  # fmt: skip
    for plan in doc["plans"]:
        for r in plan["intervals"]:
            w.writerow([plan["label"], r["start_s"], r["duration_s"], r["demand"], plan["unit"], r["replicas"],
                        r["accelerators"], r["utilisation"], r.get("autoscaled_replicas")])  # fmt: skip
    (out_dir / "plan.csv").write_text(buf.getvalue())
    (out_dir / "plan.html").write_text(_page("loadgen capacity plan", plan_section(doc)))
    return [out_dir / "plan.json", out_dir / "plan.csv", out_dir / "plan.html"]


def pareto_html(doc: dict[str, Any]) -> str:
    """A figure of every system's points and Pareto front (tok/s per accelerator against tok/s per user)."""
    plt = pyplot()
    if plt is None:
        return ""
    fig, ax = plt.subplots(figsize=(7.5, 4.0))
    for i, sys_ in enumerate(doc["systems"]):
        pts = sys_["points"]
        front = sys_["front"]
        (line,) = ax.plot([p["tps_per_accelerator"] for p in front], [p["tps_per_user"] for p in front], "-",
                          label=f"{sys_['label']} (front)", gid=f"front-{i}")  # fmt: skip
        for p in pts:
            ok = p.get("meets_slo")
            ax.plot([p["tps_per_accelerator"]], [p["tps_per_user"]], "o", color=line.get_color(),
                    markerfacecolor=line.get_color() if ok else "white")  # fmt: skip
    t = doc.get("target_tps_per_user")
    if t:
        ax.axhline(t, color="#c62828", lw=0.8, ls="--", label=f"target {t:g} tok/s per user")
    readable_axis(ax.xaxis)
    readable_axis(ax.yaxis)
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    ax.set_xlabel("output tok/s per accelerator")
    ax.set_ylabel("output tok/s per user (1000 / TPOT p50)")
    ax.grid(True, color="#e0e0e0", lw=0.6)
    ax.legend(fontsize=8, frameon=False)
    ax.set_title("interactivity: Pareto fronts (hollow: misses the SLO)", fontsize=10)
    svg = figure_svg(fig, salt="loadgen-pareto")
    plt.close(fig)
    return f"<figure>{svg}</figure>"


def write_pareto(doc: dict[str, Any], out_dir: Path) -> list[Path]:
    """pareto.json and pareto.html in ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    write_json(out_dir / "pareto.json", doc)
    rows = ["<table><tr><th>system</th><th>tok/s per accelerator</th><th>USD per million output tokens</th>"
            "<th>output tokens per joule</th><th>between</th></tr>"]  # fmt: skip
    for s in doc["systems"]:
        a = s["at_target"]
        rows.append(f"<tr><td>{html.escape(s['label'])}</td><td>{_f(a['tps_per_accelerator'])}</td>"
                    f"<td>{_f(a['cost_per_million_output_tokens_usd'], 4)}</td><td>{_f(a['output_tokens_per_joule'], 3)}"
                    f"</td><td>{html.escape(' .. '.join(a['between'] or []))}</td></tr>")  # fmt: skip
    body = (f"<section id='pareto'><h2>Interactivity</h2><p>at {doc.get('target_tps_per_user')} tok/s per user</p>"
            + "".join(rows) + "</table>" + pareto_html(doc) + "</section>")  # fmt: skip
    (out_dir / "pareto.html").write_text(_page("loadgen interactivity", body))
    return [out_dir / "pareto.json", out_dir / "pareto.html"]
