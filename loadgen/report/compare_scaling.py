"""The scorecard's scaling rows: capacity per accelerator and scaling efficiency across sizes.

When two or more compared sweeps record distinct accelerator counts (``sweep.json``
``settings.accelerators``: ``--accelerators``, set per size by ``loadgen sweep`` over a brace
list), the scorecard gains two rows and a ``scaling`` block, both from
:func:`loadgen.capacity.scaling.scaling_document` (formulas there):

* max rate meeting the SLO per accelerator = capacity(N) / N (req/s), ranked (higher is better);
* scaling efficiency = capacity(N) / ((N / N0) x capacity(N0)), N0 the smallest size with an
  answer, with its interval; not ranked (the base is 1 by definition).

Runs (``result.json``) and sweeps without a recorded count are left out of the block; their
cells say "not measured". The block is drawn in scorecard.html by :func:`scaling_html`.
"""

from __future__ import annotations

import html
from typing import Any

__all__ = ["SCALING_ROWS", "scaling_html", "scaling_section"]

SCALING_ROWS = (
    ("capacity_per_accelerator_rps", "max rate meeting the SLO per accelerator (req/s)", "high"),
    ("scaling_efficiency", "scaling efficiency, capacity(N) / (N / N0 x capacity(N0))", None),
)


def scaling_section(systems: list[Any]) -> dict[str, Any] | None:
    """The scaling block of compared ``systems`` (:class:`loadgen.report.compare.System`), or None
    when fewer than two sweeps record distinct accelerator counts; fills their scaling cells."""
    from loadgen.capacity.scaling import scaling_document
    from loadgen.capacity.source import load_sweep
    from loadgen.core.errors import LoadgenError

    sized = []
    for s in systems:
        if s.kind != "sweep":
            continue
        try:
            cap = load_sweep(s.source, s.label)
        except LoadgenError:  # a sweep.json the scorecard reads but the capacity reader does not (no probes)
            continue
        if isinstance(cap.accelerators, int) and cap.accelerators >= 1:
            sized.append((cap.accelerators, cap))
    counts = [n for n, _ in sized]
    if len(set(counts)) < 2:
        return None
    if len(set(counts)) != len(counts):
        return {"rule": None, "rows": [], "notes": [f"two systems share an accelerator count ({counts}): no table"]}
    try:
        doc = scaling_document(sized)
    except LoadgenError as exc:  # different SLOs: no efficiency between them
        return {"rule": None, "rows": [], "notes": [str(exc)]}
    by_label = {r["label"]: r for r in doc["rows"]}
    for s in systems:
        r = by_label.get(s.label)
        if r is None:
            continue
        if r["capacity_per_accelerator_rps"] is not None:
            s.values["capacity_per_accelerator_rps"] = r["capacity_per_accelerator_rps"]
        if r["efficiency"] is not None:
            s.values["scaling_efficiency"] = r["efficiency"]
    return doc


def _num(v: object, pct: bool = False) -> str:
    if v is None:
        return "–"
    return f"{v:.1%}" if pct else f"{v:,.2f}"


def scaling_html(card: dict[str, Any]) -> str:
    """The scaling table of a scorecard (empty when the card has no scaling block)."""
    sc = card.get("scaling")
    if not sc:
        return ""
    rows = ""
    for r in sc["rows"]:
        lo, hi = r["efficiency_ci"]
        ci = "–" if r["efficiency"] is None else f"[{_num(lo, True)}, {_num(hi, True)}]"
        cells = [r["label"], str(r["accelerators"]), _num(r["capacity_rps"]), _num(r["capacity_per_accelerator_rps"]),
                 _num(r["efficiency"], True), ci, _num(r["step_efficiency"], True), r.get("note") or ""]  # fmt: skip
        rows += "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>"
    head = "".join(f"<th>{h}</th>" for h in ("system", "accelerators", "max SLO load (req/s)", "per accelerator",
                                              "efficiency", "efficiency interval", "step efficiency", "note"))  # fmt: skip
    notes = "".join(f"<p class='note'>{html.escape(n)}</p>" for n in sc.get("notes") or [])
    rule = f"<p class='note'>{html.escape(sc['rule'])}.</p>" if sc.get("rule") else ""
    return f"<h2>Scaling</h2><table id='scaling'><tr>{head}</tr>{rows}</table>{rule}{notes}"
