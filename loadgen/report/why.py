"""The cause of each SLO miss in words: the console lines and the report.html section.

The figures come from ``sweep.json`` ``probes[i].why`` (:mod:`loadgen.engine.why`, where each phase
and the attribution rule are defined); this room only writes them out.
"""

from __future__ import annotations

import html
from typing import Any

from rich.console import Console

from loadgen.engine.why import PHASE_WORDS

__all__ = ["probe_why_lines", "render_sweep_why", "why_html"]


def _rate(p: dict[str, Any], sessions: bool = False) -> str:
    if p.get("concurrency"):
        return f"{p['concurrency']} {'concurrent sessions' if sessions else 'users'}"
    return f"{float(p.get('offered_rps') or 0):.2f} {'sessions/s' if sessions else 'req/s'}"  # sessions: issue 17


def probe_why_lines(res: dict[str, Any]) -> list[str]:
    """One line per probe and target that had misses: "probe 3 at 12.00 req/s: 23 of 765 missed ..."."""
    out = []
    for i, p in enumerate(res.get("probes") or (), 1):
        for wt in (p.get("why") or {}).get("targets") or ():
            if wt.get("misses"):
                out.append(f"probe {i} at {_rate(p, bool(res.get('sessions')))}: {wt['text']}")
    return out


def render_sweep_why(res: dict[str, Any], console: Console) -> None:
    """The sweep's miss causes on the console (after its summary)."""
    lines = probe_why_lines(res)
    if lines:
        console.print("why the probes missed (each miss goes to the phase that dominated it; loadgen/engine/why.py):")
        for ln in lines:
            console.print(f"  {ln}", markup=False)


def why_html(res: dict[str, Any]) -> str:
    """The report.html section: per probe and target, misses by cause and each phase's share of their time."""
    rows = []
    for i, p in enumerate(res.get("probes") or (), 1):
        for wt in (p.get("why") or {}).get("targets") or ():
            if not wt.get("misses"):
                continue
            causes = ", ".join(f"{n} {PHASE_WORDS.get(c, c)}" for c, n in (wt.get("causes") or {}).items())
            share = ", ".join(
                f"{PHASE_WORDS.get(k, k)} {v * 100:.0f} %" for k, v in (wt.get("time_share") or {}).items() if v >= 0.01
            )
            rows.append(
                f"<tr><td>{i}</td><td>{html.escape(_rate(p, bool(res.get('sessions'))))}</td><td>{html.escape(str(wt['target']))}</td>"
                f"<td>{wt['misses']} of {wt['judged']}</td><td>{html.escape(causes)}</td><td>{html.escape(share)}</td></tr>"
            )
    if not rows:
        return "<p class='note'>No probe missed its SLO targets.</p>"
    head = (
        "<tr><th>probe</th><th>load</th><th>target</th><th>misses</th><th>cause (requests)</th>"
        "<th>share of the missed time</th></tr>"
    )
    return (
        f"<table class='probes why'>{head}{''.join(rows)}</table><p class='note'>Each miss goes to the phase that "
        "took the largest share of its value: schedule lag, client cap, connection set-up, rate limiting, server "
        "queueing (inferred: server TTFT over the unloaded TTFT), buffering, prefill, decode stall, decode. "
        "The rule and each phase's formula: loadgen/engine/why.py.</p>"
    )
