"""What the report pages' plots share: matplotlib set-up, inline SVG, readable millisecond axes.

The pages are self-contained: every figure is an inline SVG (text kept as text, so it is sharp
and searchable), no script and no network. Probe states are drawn the same way everywhere:

* PASS: a filled green circle;
* FAIL: a red cross at the measured value;
* FAIL (stopped early): a hollow orange triangle just above the SLO line — the probe was cut
  short once a FAIL was certain, so its percentiles (finished requests only) are not drawn and
  its short window's throughput is not a collapse;
* INVALID (the client's timing), RATE LIMITED and INTERRUPTED (no verdict): a grey diamond on the x axis.

Artists carry SVG ids (``slo-<i>``, ``probe-pass``, ...) so that tests can find them.
"""

from __future__ import annotations

import base64
import html
import io
import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from types import ModuleType

    from matplotlib.axes import Axes
    from matplotlib.axis import Axis
    from matplotlib.figure import Figure

STATE_STYLE: dict[str, dict[str, Any]] = {
    "pass": {"marker": "o", "color": "#2e7d32", "mfc": "#2e7d32", "label": "PASS"},
    "fail": {"marker": "X", "color": "#c62828", "mfc": "#c62828", "label": "FAIL"},
    "stopped_early": {"marker": "^", "color": "#ef6c00", "mfc": "white", "label": "FAIL (stopped early)"},
    "invalid": {"marker": "D", "color": "#757575", "mfc": "white", "label": "INVALID / rate limited / interrupted"},
}
BRACKET_COLOR = "#2e7d32"
SLO_COLOR = "#c62828"


def pyplot() -> ModuleType | None:
    """matplotlib.pyplot on the Agg backend, or None when matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def figure_svg(fig: Figure, *, salt: str = "loadgen", titles: dict[str, str] | None = None) -> str:
    """The figure as an inline ``<svg>`` element (text as text, no XML prologue).

    ``salt``: distinct per figure of a page, so that matplotlib's generated ids (clip paths)
    cannot collide between figures; ``titles``: hover text (an SVG ``<title>``, shown by every
    browser without a script) for the artists with these ids.
    """
    import matplotlib

    buf = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": salt}):
        fig.savefig(buf, format="svg", bbox_inches="tight")
    text = buf.getvalue()
    text = text[text.index("<svg") :]
    for gid, title in (titles or {}).items():
        text = text.replace(f'<g id="{gid}">', f'<g id="{gid}"><title>{html.escape(title)}</title>', 1)
    return text


def figure_png(fig: Figure, dpi: int = 110) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")
    return buf.getvalue()


def png_data_uri(data: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(data).decode()


def tick_text(v: float, step: float) -> str:
    """A tick label with as many decimals as the tick step needs (1,000 / 2.5 / 0.25), thousands grouped."""
    if step <= 0 or not math.isfinite(step):
        return f"{v:,g}"
    decimals = max(0, -math.floor(math.log10(step) + 1e-9)) if step < 1 else 0
    if decimals == 0 and abs(step - round(step)) > 1e-9:
        decimals = 1
    return f"{v:,.{decimals}f}"


def readable_axis(axis: Axis) -> None:
    """Linear axis with at most ~6 round ticks labelled in plain numbers (no offset, no 1e3)."""
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    loc = MaxNLocator(nbins=6, steps=[1, 2, 2.5, 5, 10])
    axis.set_major_locator(loc)

    def fmt(v: float, _pos: int | None) -> str:
        ticks = [t for t in loc.tick_values(*axis.get_view_interval()) if math.isfinite(t)]
        step = (ticks[1] - ticks[0]) if len(ticks) > 1 else abs(v) or 1.0
        return tick_text(v, step)

    axis.set_major_formatter(FuncFormatter(fmt))


def ms_ceiling(thresholds: list[float], values: list[float]) -> float:
    """Top of a latency axis: the SLO lines and the measured values in view, at most 3x the largest line.

    A collapsed probe's p99 (seconds) would otherwise squash the SLO line against the floor;
    values above the ceiling are drawn at the edge with their number (:func:`clip_mark`).
    """
    top_line = max(thresholds, default=0.0)
    top_val = max((v for v in values if math.isfinite(v)), default=0.0)
    if top_line <= 0:
        return top_val * 1.1 or 1.0
    return max(top_line * 1.25, min(top_val * 1.1, top_line * 3.0))


def clip_mark(ax: Axes, x: float, y: float, top: float, color: str) -> float:
    """Draw a value beyond the axis top as an arrow at the edge labelled with its value; returns the y drawn."""
    if y <= top:
        return y
    ax.annotate(
        f"{y:,.0f} ms",
        (x, top),
        xytext=(0, -14),
        textcoords="offset points",
        ha="center",
        fontsize=7,
        color=color,
        arrowprops={"arrowstyle": "->", "color": color, "lw": 0.8},
    )
    return top
