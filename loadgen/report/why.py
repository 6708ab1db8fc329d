"""The cause of each SLO miss in words: the console lines and the report.html section.

The figures come from ``sweep.json`` ``probes[i].why`` (:mod:`loadgen.engine.why`, where each phase
and the attribution rule are defined); this room only writes them out.
"""

from __future__ import annotations

import html
import re
from typing import Any

from rich.console import Console

from loadgen.engine.why import PHASE_WORDS

__all__ = ["cause_words", "miss_counts", "probe_why_lines", "render_sweep_why", "why_html"]


def _rate(p: dict[str, Any], sessions: bool = False) -> str:
    if p.get("concurrency"):
        return f"{p['concurrency']} {'concurrent sessions' if sessions else 'users'}"
    return f"{float(p.get('offered_rps') or 0):.2f} {'sessions/s' if sessions else 'req/s'}"  # sessions: issue 17


def cause_words(wt: dict[str, Any]) -> str:
    """The causes of one target's misses in words, most first: "19 server queueing (inferred), 3 decode stall"."""
    return ", ".join(f"{n} {PHASE_WORDS.get(c, c)}" for c, n in (wt.get("causes") or {}).items())


def target_counts(p: dict[str, Any]) -> dict[str, tuple[int, int]]:
    """Per SLO target of a ``sweep.json`` probe: (over, measured), its ``targets[j]`` ``exceedances`` and
    ``requests`` -- the one count of a probe, shown alike everywhere. Per-token targets (ITL) have none."""
    return {
        str(x.get("target")): (int(x["exceedances"]), int(x["requests"]))
        for x in p.get("targets") or []
        if x.get("requests") is not None and x.get("exceedances") is not None
    }


def miss_counts(p: dict[str, Any], wt: dict[str, Any]) -> str:
    """A target's misses as the probe counted them: "23 of 40 measured requests over ttft:p99<=300ms".

    The probe's own counts (``targets[j]``, :func:`target_counts`), the ones
    every place shows; when the attribution could not give a cause to each of them (a request cancelled
    in flight after its first token: its record has no phases), it says how many it attributed.
    """
    counts = target_counts(p).get(str(wt.get("target")))
    if counts is None:  # older files, or a per-token target: the attribution's own counts
        return f"{wt['misses']} of {wt['judged']} missed {wt['target']}"
    k, n = counts
    s = f"{k} of {n} measured requests over {wt['target']}"
    m = wt.get("misses")
    if isinstance(m, int) and m < k:
        s += f" (causes of {m} of them; {k - m} cancelled in flight, their phases not recorded)"
    elif m != k:
        s += f" (causes of {m})"
    return s


def probe_why_lines(res: dict[str, Any]) -> list[str]:
    """One line per probe and target that had misses: "probe 3 at 12.00 req/s: 23 of 765 measured requests
    over ...: 19 server queueing (inferred), ..." (the counts the probe's table shows)."""
    out = []
    for i, p in enumerate(res.get("probes") or (), 1):
        for wt in (p.get("why") or {}).get("targets") or ():
            if wt.get("misses"):
                causes = wt["text"].partition(": ")[2] if ": " in wt["text"] else cause_words(wt)
                k = target_counts(p).get(str(wt["target"]), (0, 0))[0]
                if wt["misses"] < k:  # miss_counts says what became of the cancelled ones
                    causes = re.sub(r" \(\d+ cancelled in flight, not judged\)$", "", causes)
                line = f"probe {i} at {_rate(p, bool(res.get('sessions')))}: {miss_counts(p, wt)}"
                out.append(line + (f": {causes}" if causes else ""))
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
            causes = cause_words(wt)
            share = ", ".join(
                f"{PHASE_WORDS.get(k, k)} {v * 100:.0f} %" for k, v in (wt.get("time_share") or {}).items() if v >= 0.01
            )
            rows.append(
                f"<tr><td>{i}</td><td>{html.escape(_rate(p, bool(res.get('sessions'))))}</td><td>{html.escape(str(wt['target']))}</td>"
                f"<td>{html.escape(miss_counts(p, wt))}</td><td>{html.escape(causes)}</td><td>{html.escape(share)}</td></tr>"
            )
    if not rows:
        return "<p class='note'>No probe missed its SLO targets.</p>"
    head = (
        "<tr><th>probe</th><th>load</th><th>target</th><th>over of measured</th><th>cause (requests)</th>"
        "<th>share of the missed time</th></tr>"
    )
    return (
        f"<table class='probes why'>{head}{''.join(rows)}</table><p class='note'>Each miss goes to the phase that "
        "took the largest share of its value: schedule lag, client cap, connection set-up, rate limiting, server "
        "queueing (inferred: server TTFT over the unloaded TTFT), buffering, prefill, decode stall, decode. "
        "The rule and each phase's formula: loadgen/engine/why.py.</p>"
    )
