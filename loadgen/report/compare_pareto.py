"""The scorecard's Pareto figure: throughput per accelerator against speed per user, one front per system.

From the compared sweeps' ``interactivity`` rows (``sweep.json``, one per concurrency level with a
steady load; :meth:`loadgen.sweep.search.Sweep.concurrency_sweep`): x = output tok/s per accelerator
(``output_tps_per_accelerator``; the whole server's ``output_tps`` when the sweep did not state
``--accelerators``, and the axis says so), y = output tok/s per user = 1000 / TPOT p50 (ms), as
InferenceX and ``vllm bench sweep plot_pareto`` draw it. Each system's Pareto front is
:func:`loadgen.capacity.interactivity.pareto_front` (the points no other point of that system
beats on both axes), drawn as a line through its points by rising speed per user; points off
the front are drawn unjoined. Filled: the level met the SLO; hollow: it missed it. Prices and
tokens per joule at a target speed are read off the same fronts by ``loadgen capacity pareto``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from loadgen.capacity.interactivity import InteractivityPoint, pareto_front
from loadgen.report.plotting import figure_svg, readable_axis

if TYPE_CHECKING:
    from types import ModuleType

__all__ = ["pareto_figure", "points_of_card"]


def points_of_card(card: dict[str, Any]) -> tuple[dict[str, list[InteractivityPoint]], bool]:
    """Per system label, its points; and whether every x is per accelerator (all sweeps stated ``--accelerators``)."""
    out: dict[str, list[InteractivityPoint]] = {}
    per_acc = True
    for label, rows in (card.get("interactivity") or {}).items():
        pts = []
        for r in rows or []:
            x = r.get("output_tps_per_accelerator")
            if x is None and r.get("output_tps") is not None:
                x, per_acc = r["output_tps"], False
            y = r.get("per_user_output_tps")
            if x is None or y is None or x <= 0 or y <= 0:
                continue
            load = f"c{r['concurrency']}" if r.get("concurrency") else "rate"
            pts.append(InteractivityPoint(label, load, float(x), float(y), None, r.get("meets_slo")))
        if pts:
            out[label] = pts
    return out, per_acc


def pareto_figure(plt: ModuleType, card: dict[str, Any]) -> str:
    """The figure of the module docstring as an inline-SVG ``<figure>``, or "" without points."""
    systems, per_acc = points_of_card(card)
    if not systems:
        return ""
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    for label, pts in systems.items():
        front = pareto_front(pts)
        (line,) = ax.plot([p.tps_per_accelerator for p in front], [p.tps_per_user for p in front], "-",
                          label=f"{label} (Pareto front)")  # fmt: skip
        for p in pts:
            on = p in front
            ax.plot([p.tps_per_accelerator], [p.tps_per_user], "o" if on else "s", color=line.get_color(),
                    markerfacecolor=line.get_color() if p.meets_slo else "white", alpha=1.0 if on else 0.6)  # fmt: skip
            ax.annotate(p.load, (p.tps_per_accelerator, p.tps_per_user), fontsize=7, textcoords="offset points",
                        xytext=(3, 3))  # fmt: skip
    readable_axis(ax.xaxis)
    readable_axis(ax.yaxis)
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    ax.set_xlabel("output tok/s per accelerator" if per_acc else "output tok/s per server (accelerators not stated)")
    ax.set_ylabel("output tok/s per user (1000 / TPOT p50)")
    ax.grid(True, color="#e0e0e0", lw=0.6)
    ax.set_title("interactivity: Pareto fronts (hollow: misses the SLO; squares: off the front)", fontsize=10)
    ax.legend(fontsize=8, frameon=False)
    svg = figure_svg(fig, salt="loadgen-card-pareto")
    plt.close(fig)
    return (f"<figure id='pareto'>{svg}<figcaption>Throughput per accelerator against speed per user, one point per "
            "concurrency level; the line joins each system's Pareto front. Cost per million tokens and tokens per "
            "joule at a target speed: <code>loadgen capacity pareto --target-tps-per-user</code>.</figcaption></figure>")  # fmt: skip
