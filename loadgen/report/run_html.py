"""report.html of one run: the client's and the server's series on one time axis.

One self-contained page (inline SVG, no script, no network), drawn from ``result.json``
alone: its ``timeseries`` (:mod:`loadgen.engine.timeseries`: the run cut into equal intervals on
the client's clock, seconds from t0) holds per interval the client's figures and, when the
server was observed (``--serve`` or ``--server-metrics``), the server's gauges sampled in
the same interval. The combined figure stacks, against the same x axis (interval midpoints):

1. client: p99 TTFT (ms, by arrival) and requests in flight (time-weighted mean);
2. server: running and waiting requests (mean of the interval's samples; the max dotted);
3. server: KV-cache usage (%, mean and max);
4. GPU power (W, mean), when NVML measured it.

Panels without data are left out. The headline figures and the miss causes (``why``) sit
above the figure.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import TYPE_CHECKING, Any

from loadgen.report.console import replica_lines
from loadgen.report.plotting import figure_svg, pyplot

if TYPE_CHECKING:
    from matplotlib.axes import Axes

__all__ = ["combined_figure_svg", "write_run_report"]

CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:2em auto;max-width:1100px;color:#222;padding:0 1em}
h1{font-size:1.6em;margin-bottom:.2em} h2{font-size:1.2em;margin-top:1.6em;border-bottom:1px solid #ddd;padding-bottom:.2em}
.sub{color:#666;margin-top:0}
table{border-collapse:collapse;margin:.5em 0} td,th{border:1px solid #ddd;padding:4px 10px;font-size:13px}
th{background:#f5f5f5;text-align:left} figure{margin:1em 0} figcaption{color:#555;font-size:13px}
figure svg{max-width:100%;height:auto}
"""


def _col(intervals: list[dict[str, Any]], *path: str) -> list[float | None]:
    out: list[float | None] = []
    for iv in intervals:
        v: Any = iv
        for k in path:
            v = v.get(k) if isinstance(v, dict) else None
        out.append(float(v) if isinstance(v, int | float) else None)
    return out


def _has(vals: list[float | None]) -> bool:
    return any(v is not None for v in vals)


def combined_figure_svg(ts: dict[str, Any]) -> str | None:
    """The stacked client + server figure of a ``timeseries`` block as inline SVG; None without matplotlib."""
    plt = pyplot()
    if plt is None or not ts or not ts.get("intervals"):
        return None
    ivs = ts["intervals"]
    w = float(ts["interval_s"])
    x = [float(ts["start_s"]) + (k + 0.5) * w for k in range(len(ivs))]
    ttft = _col(ivs, "ttft_ms", "p99")
    infl = _col(ivs, "inflight_mean")
    run_m, run_x = _col(ivs, "server", "running", "mean"), _col(ivs, "server", "running", "max")
    wait_m, wait_x = _col(ivs, "server", "waiting", "mean"), _col(ivs, "server", "waiting", "max")
    kv_m, kv_x = _col(ivs, "server", "kv_cache_usage", "mean"), _col(ivs, "server", "kv_cache_usage", "max")
    power = _col(ivs, "server", "power_w", "mean")
    panels = ["client"]
    if _has(run_m) or _has(wait_m):
        panels.append("requests")
    if _has(kv_m):
        panels.append("kv")
    if _has(power):
        panels.append("power")
    fig, axes = plt.subplots(len(panels), 1, sharex=True, figsize=(10, 2.3 * len(panels) + 0.6), squeeze=False)
    axes = [a[0] for a in axes]
    edges = [float(ts["start_s"]) + k * w for k in range(len(ivs) + 1)]
    for ax in axes:
        for e in edges:
            ax.axvline(e, color="#eeeeee", lw=0.8, zorder=0)
        ax.grid(axis="y", color="#eeeeee")
    nan = float("nan")

    def line(ax: Axes, ys: list[float | None], **kw: Any) -> None:
        ax.plot(x, [nan if v is None else v for v in ys], marker="o", ms=3, **kw)

    ax = axes[0]
    line(ax, ttft, color="#1565c0", label="client p99 TTFT (ms, by arrival)", gid="client-ttft")
    ax.set_ylabel("TTFT p99 ms")
    ax2 = ax.twinx()
    sessions = _col(ivs, "sessions_active_mean")
    line(ax2, infl, color="#6a1b9a", ls="--", label="client in flight (mean)" if not _has(sessions)
         else "turns in flight (mean)", gid="client-inflight")  # fmt: skip
    if _has(sessions):
        line(ax2, sessions, color="#00838f", ls="-.", label="sessions active (mean)", gid="client-sessions")
    ax2.set_ylabel("in flight")
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, loc="upper left", fontsize=8)
    ax.set_title("client (this machine's clock)", fontsize=10, loc="left")
    for name, ax in zip(panels[1:], axes[1:], strict=True):
        if name == "requests":
            line(ax, run_m, color="#2e7d32", label="server running (mean)", gid="server-running")
            line(ax, wait_m, color="#c62828", label="server waiting (mean)", gid="server-waiting")
            line(ax, run_x, color="#2e7d32", ls=":", lw=1, label="running (max)")
            line(ax, wait_x, color="#c62828", ls=":", lw=1, label="waiting (max)")
            ax.set_ylabel("requests")
            ax.set_title("server /metrics, sampled on the same axis", fontsize=10, loc="left")
        elif name == "kv":
            line(ax, [None if v is None else v * 100 for v in kv_m], color="#ef6c00", label="KV-cache usage % (mean)",
                 gid="server-kv")  # fmt: skip
            line(ax, [None if v is None else v * 100 for v in kv_x], color="#ef6c00", ls=":", lw=1, label="(max)")
            ax.set_ylabel("KV cache %")
        else:
            line(ax, power, color="#455a64", label="GPU power W (mean)", gid="gpu-power")
            ax.set_ylabel("W")
        ax.legend(loc="upper left", fontsize=8)
    axes[-1].set_xlabel(f"seconds from the run's t0 (intervals of {w:.3g} s)")
    fig.tight_layout()
    svg = figure_svg(fig, salt="run-combined")
    plt.close(fig)
    return svg


def _fmt(v: object, nd: int = 1) -> str:
    return "-" if not isinstance(v, int | float) else f"{v:,.{nd}f}"


def _validity(v: dict[str, Any]) -> str:
    if "valid" not in v:
        return "-"
    if v["valid"]:  # a failed timing check that could flip no SLO verdict (loadgen.engine.validity.verdict_stands)
        return "VALID for its SLO verdict" if (v.get("verdict_stands") or {}).get("stands") else "VALID"
    return "INVALID" + (f" (limited by the {v['limited_by']})" if v.get("limited_by") else "")


def write_run_report(result: dict[str, Any], out_dir: Path) -> Path | None:
    """Write ``out_dir/report.html`` for one run's ``result``; None when matplotlib is not installed."""
    ts = result.get("timeseries") or {}
    svg = combined_figure_svg(ts)
    if svg is None:
        return None
    counts = result.get("counts") or {}
    thr = result.get("throughput") or {}
    ttft = (result.get("latency_ms") or {}).get("ttft") or {}
    server = result.get("server") or {}
    rows = [
        ("requests", f"{counts.get('completed', '-')} completed, {counts.get('failed', '-')} failed"),
        ("offered", f"{_fmt(thr.get('offered_rps'), 2)} req/s"),
        ("completion", f"{_fmt(thr.get('completion_rps'), 2)} req/s, {_fmt(thr.get('output_tps'))} output tok/s"),
        ("TTFT p50 / p99", f"{_fmt(ttft.get('p50'))} / {_fmt(ttft.get('p99'))} ms"),
        ("client timing", _validity(result.get("validity") or {})),
        ("server observed", f"{server.get('kind')} at {server.get('metrics_url')}, {server.get('scrapes')} scrapes"
         if server else "no (--serve or --server-metrics URL puts the server's gauges on this axis)"),
    ]  # fmt: skip
    rows += [("replica", line.removeprefix("replica ")) for line in replica_lines(result)]
    why = [wt["text"] for wt in (result.get("why") or {}).get("targets") or () if wt.get("misses")]
    body = "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>" for k, v in rows)
    why_html = "".join(f"<li>{html.escape(t)}</li>" for t in why)
    page = (
        f"<!doctype html><html><head><meta charset='utf-8'><title>loadgen run</title><style>{CSS}</style></head>"
        f"<body><h1>loadgen run</h1><p class='sub'>{html.escape(str(out_dir))}</p>"
        f"<table>{body}</table>"
        + (f"<h2>Why requests missed</h2><ul>{why_html}</ul>" if why_html else "")
        + "<h2>Client and server on one time axis</h2><figure>"
        + svg
        + "<figcaption>Each point is one interval of the run (grey lines: the interval boundaries, the same for"
        " client and server). Client latency by arrival; in flight as a time-weighted mean; server gauges as"
        " the mean (and max) of the scrapes that fell in the interval.</figcaption></figure></body></html>"
    )
    path = out_dir / "report.html"
    path.write_text(page, encoding="utf-8")
    return path
