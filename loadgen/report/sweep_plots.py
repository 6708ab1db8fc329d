"""The sweep report's figures (matplotlib): latency per SLO target, throughput, distributions.

Every latency axis is linear in milliseconds. Per SLO metric one panel: the p50-p99 band of
the probes that ran to their end (p90 dashed inside it), every SLO target of that metric as a
red line, each probe marked by its state (:mod:`loadgen.report.plotting`), the bracket (last
PASS .. first FAIL) shaded and the answer drawn. Probes stopped early are marked, never joined to
the lines: their numbers describe a cut-short window. An INVALID (rate-limited, interrupted) probe
has no latency at its load: it is marked on the load axis with its reason (:func:`load_axis_mark`),
never drawn as a point at 0 ms.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from loadgen.report.plotting import (
    BRACKET_COLOR,
    SLO_COLOR,
    STATE_STYLE,
    clip_mark,
    ms_ceiling,
    readable_axis,
)
from loadgen.report.sweep_facts import probe_state, stopped_on, verdict_text

if TYPE_CHECKING:
    from types import ModuleType

    from matplotlib.artist import Artist
    from matplotlib.axes import Axes
    from matplotlib.lines import Line2D

PCT_KEY = {50.0: "p50", 90.0: "p90", 95.0: "p95", 99.0: "p99", 99.9: "p999"}
METRIC_NAME = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL", "e2e": "E2E", "tbt_deadline": "token pace",
               "time_to_first_answer_token": "time to first answer token"}  # fmt: skip


def _x(p: dict[str, Any]) -> float:
    return float(p["concurrency"]) if p.get("concurrency") else float(p.get("offered_rps") or 0.0)


def _state_legend(ax: Axes, states: set[str]) -> list[Line2D]:
    from matplotlib.lines import Line2D

    return [Line2D([], [], linestyle="", marker=STATE_STYLE[s]["marker"], color=STATE_STYLE[s]["color"],
                   markerfacecolor=STATE_STYLE[s]["mfc"], label=STATE_STYLE[s]["label"])
            for s in ("pass", "fail", "stopped_early", "invalid") if s in states]  # fmt: skip


def probe_titles(res: dict[str, Any]) -> dict[str, str]:
    """Hover text of every probe mark (SVG id -> words): the probe, its verdict, its percentiles."""
    out = {}
    metrics = {str(t["metric"]) for t in res.get("slo") or []}
    for i, p in enumerate(res.get("probes") or [], 1):
        state = probe_state(p).replace("_", "-")
        load = f"c={p['concurrency']}" if p.get("concurrency") else f"{p.get('offered_rps') or 0:,.2f} req/s"
        base = f"probe {i}: {load}: {verdict_text(p)}"
        out[f"probe-{state}-rate-{i}"] = base
        for m in metrics:
            lat = (p.get("latency_ms") or {}).get(m) or {}
            pcts = ", ".join(f"{k} {lat[k]:,.1f} ms" for k in ("p50", "p90", "p99") if lat.get(k) is not None)
            if state == "invalid":  # marked on the load axis: its reason, no latency drawn
                detail = "; ".join(str(d) for d in p.get("validity_detail") or [])
                head = f"probe {i}: {load}: {verdict_text(p).split(':')[0]}: {detail}" if detail else base
                out[f"probe-{state}-{m}-{i}"] = head + "; no latency drawn"
                continue
            if pcts and state != "pass" and state != "fail":
                pcts += " (of its finished requests only)"
            out[f"probe-{state}-{m}-{i}"] = base + (f"; {METRIC_NAME.get(m, m)} {pcts}" if pcts else "")
    return out


def invalid_reason(p: dict[str, Any]) -> str:
    """Why a probe has no verdict on the load, in a few words: its verdict text ("INVALID: p99 schedule lag
    378.717 ms", "RATE LIMITED ...", "INTERRUPTED: undecided")."""
    return verdict_text(p)


def load_axis_mark(ax: Axes, same: list[dict[str, Any]], gid: str) -> None:
    """The INVALID (rate-limited, interrupted) probes at one load on a latency panel: a marker on the load
    axis and a dotted line up from it, the last one's reason written beside it (and how many probes there
    were) -- never a point at latency 0 (their percentiles are not the server's at that load). ``gid``: the
    SVG id its hover text is keyed by (:func:`probe_titles`, the last probe's)."""
    st = STATE_STYLE["invalid"]
    p = same[-1]
    x = _x(p)
    reason = invalid_reason(p) + (f" ({len(same)} probes here)" if len(same) > 1 else "")
    trans = ax.get_xaxis_transform()  # x in data, y in axes fraction: the mark sits on the axis, not at 0 ms
    (m,) = ax.plot([x], [0.0], transform=trans, linestyle="", marker=st["marker"], color=st["color"],
                   markerfacecolor=st["mfc"], markersize=8, clip_on=False, zorder=5)  # fmt: skip
    m.set_gid(gid)
    ax.plot([x, x], [0.0, 1.0], transform=trans, color=st["color"], ls=":", lw=1.0, zorder=1)
    ax.annotate(reason, (x, 0.04), xycoords=trans, xytext=(-2, 0), textcoords="offset points",
                fontsize=7, color=st["color"], rotation=90, ha="right", va="bottom")  # fmt: skip


def _bracket(ax: Axes, res: dict[str, Any], key: str) -> list[Artist]:
    a = res.get("answer") or {}
    handles: list[Artist] = []
    br = a.get("bracket_rps")
    if not a.get("concurrency") and br and br[0] is not None and br[1] is not None and br[1] > br[0]:
        handles.append(
            ax.axvspan(br[0], br[1], color=BRACKET_COLOR, alpha=0.12, label="bracket (last PASS .. first FAIL)")
        )
        handles[-1].set_gid(f"bracket-{key}")
    x = a.get("concurrency") or a.get("max_rate_rps")
    if x:
        (ln,) = ax.plot([x, x], [0, 1], transform=ax.get_xaxis_transform(), color=BRACKET_COLOR, lw=1.4, label="answer")
        ln.set_gid(f"answer-{key}")
        handles.append(ln)
    return handles


def latency_figures(plt: ModuleType, res: dict[str, Any]) -> list[tuple[str, Any]]:
    """One figure per SLO metric: bands, SLO lines, probe states, bracket. [(title, figure)]."""
    index = {id(p): i for i, p in enumerate(res.get("probes") or [], 1)}
    probes = sorted(res.get("probes") or [], key=_x)
    closed = any(p.get("concurrency") for p in probes)
    metrics: dict[str, list[tuple[int, dict[str, Any]]]] = {}
    for i, t in enumerate(res.get("slo") or []):
        metrics.setdefault(str(t["metric"]), []).append((i, t))
    out = []
    for metric, targets in metrics.items():
        fig, ax = plt.subplots(figsize=(9, 4.2))
        full = [p for p in probes if probe_state(p) in ("pass", "fail") and (p.get("latency_ms") or {}).get(metric)]
        lat = [(_x(p), p["latency_ms"][metric]) for p in full]
        thresholds = [float(t["threshold_ms"]) for _, t in targets]
        shown = [v for _, m in lat for k in ("p50", "p90", "p99") if isinstance(v := m.get(k), (int, float))]
        top = ms_ceiling(thresholds, shown)
        handles = []
        if lat:
            xs = [x for x, _ in lat]

            cols = {k: [min(float(m.get(k) or 0.0), top) for _, m in lat] for k in ("p50", "p90", "p99")}
            band = ax.fill_between(xs, cols["p50"], cols["p99"], color="#1565c0", alpha=0.15, label="p50 .. p99")
            band.set_gid(f"band-{metric}")
            handles.append(band)
            handles += ax.plot(xs, cols["p50"], "-", color="#1565c0", lw=1.2, label="p50")
            handles += ax.plot(xs, cols["p90"], "--", color="#1565c0", lw=1.0, label="p90")
            handles += ax.plot(xs, cols["p99"], "-", color="#0d47a1", lw=1.6, label="p99")
            for x, m in lat:
                clip_mark(ax, x, float(m.get("p99") or 0.0), top, "#0d47a1")
        for i, t in targets:
            ln = ax.axhline(t["threshold_ms"], color=SLO_COLOR, ls="--", lw=1.2)
            ln.set_gid(f"slo-{i}")
            ax.annotate(f"SLO {t['target']}", (0.005, t["threshold_ms"]), xycoords=("axes fraction", "data"),
                        xytext=(0, 3), textcoords="offset points", fontsize=8, color=SLO_COLOR)  # fmt: skip
        states: set[str] = set()
        for p in probes:
            s = probe_state(p)
            st = STATE_STYLE[s]
            x = _x(p)
            if s == "invalid":  # no latency to draw: marked on the load axis with its reason (once per load)
                same = [q for q in probes if probe_state(q) == "invalid" and _x(q) == x]
                if p is same[-1]:
                    load_axis_mark(ax, same, f"probe-invalid-{metric}-{index[id(p)]}")
                states.add(s)
                continue
            for j, (_i, t) in enumerate(targets):
                key = PCT_KEY.get(float(t["percentile"]), "p99")
                if s == "stopped_early":
                    if not stopped_on(p, t):
                        continue  # another target stopped it: this one has no cut-short FAIL to show
                    y = float(t["threshold_ms"]) + 0.04 * top
                else:
                    v = ((p.get("latency_ms") or {}).get(metric) or {}).get(key)
                    if v is None:
                        continue
                    y = clip_mark(ax, x, float(v), top, st["color"])
                (m,) = ax.plot([x], [y], linestyle="", marker=st["marker"], color=st["color"], markerfacecolor=st["mfc"],
                               markersize=8, clip_on=False, zorder=5)  # fmt: skip
                m.set_gid(f"probe-{s.replace('_', '-')}-{metric}-{index[id(p)]}" + (f"-{j}" if j else ""))
                states.add(s)
        handles += _bracket(ax, res, metric)
        ax.set_ylim(0, top)
        ax.set_xlim(0, max([_x(p) for p in probes] + [1.0]) * 1.06)
        readable_axis(ax.yaxis)
        readable_axis(ax.xaxis)
        name = METRIC_NAME.get(metric, metric)
        ax.set_ylabel(f"{name} (ms)")
        ax.set_xlabel("concurrency (users)" if closed else "offered load (req/s)")
        ax.grid(True, color="#e0e0e0", lw=0.6)
        ax.set_axisbelow(True)
        ax.legend(handles=handles + _state_legend(ax, states), fontsize=7.5, loc="upper left",
                  bbox_to_anchor=(1.01, 1.0), frameon=False)  # fmt: skip
        ax.set_title(f"{name} against load ({', '.join(str(t['target']) for _, t in targets)})", fontsize=10)
        out.append((f"{name} percentiles against load, SLO {', '.join(str(t['target']) for _, t in targets)}", fig))
    return out


def throughput_figure(plt: ModuleType, res: dict[str, Any]) -> tuple[str, Any] | None:
    """Completed req/s and goodput against the offered rate (open-loop sweeps)."""
    index = {id(p): i for i, p in enumerate(res.get("probes") or [], 1)}
    probes = sorted([p for p in res.get("probes") or [] if not p.get("concurrency")], key=_x)
    full = [p for p in probes if probe_state(p) in ("pass", "fail")]
    if not full:
        return None
    fig, ax = plt.subplots(figsize=(9, 4.0))
    xs = [_x(p) for p in full]
    handles = ax.plot(xs, [p.get("request_rps") or 0 for p in full], "o-", color="#1565c0", label="completed req/s")
    handles += ax.plot(xs, [p.get("goodput_rps") or 0 for p in full], "s--", color="#6a1b9a", label="goodput req/s")
    lim = max(_x(p) for p in probes) * 1.05
    handles += ax.plot([0, lim], [0, lim], ":", color="grey", label="achieved = offered")
    early = [p for p in probes if probe_state(p) != "pass" and probe_state(p) != "fail"]
    for p in early:
        s = probe_state(p)
        ln = ax.axvline(_x(p), color=STATE_STYLE[s]["color"], ls=":", lw=1.2)
        ln.set_gid(f"probe-{s.replace('_', '-')}-rate-{index[id(p)]}")
        why = "stopped early" if s == "stopped_early" else verdict_text(p).split(":")[0]
        why += ": rate not drawn"
        ax.annotate(why, (_x(p), 0.03), xycoords=("data", "axes fraction"), xytext=(-2, 0), textcoords="offset points",
                    fontsize=7, color=STATE_STYLE[s]["color"], rotation=90, ha="right", va="bottom")  # fmt: skip
    handles += _bracket(ax, res, "rate")
    ax.set_xlim(0, lim)
    ax.set_ylim(0, lim)
    readable_axis(ax.xaxis)
    readable_axis(ax.yaxis)
    ax.set_xlabel("offered load (req/s)")
    ax.set_ylabel("achieved (req/s)")
    ax.grid(True, color="#e0e0e0", lw=0.6)
    ax.legend(handles=handles, fontsize=7.5, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    ax.set_title("achieved throughput against offered load", fontsize=10)
    return "Achieved throughput against offered load (probes run to their end)", fig


def distribution_figure(plt: ModuleType, at_dir: Path) -> tuple[str, Any] | None:
    """TTFT and ITL histograms (linear ms) of the answer probe's measured, successful requests."""
    path = at_dir / "requests.jsonl"
    if not path.exists():
        return None
    ttft: list[float] = []
    itl: list[float] = []
    for line in path.read_bytes().splitlines():
        r = orjson.loads(line)
        if r.get("phase") == "measure" and r.get("status") == "ok":
            if r.get("ttft_ms") is not None:
                ttft.append(r["ttft_ms"])
            itl.extend(r.get("itl_ms") or [])
    if not ttft and not itl:
        return None
    fig, axs = plt.subplots(1, 2, figsize=(10, 3.4))
    for ax, vals, name in ((axs[0], ttft, "TTFT"), (axs[1], itl, "ITL")):
        if vals:
            ax.hist(vals, bins=50, color="#1565c0")
        ax.set_xlabel(f"{name} (ms)")
        ax.set_ylabel("requests" if name == "TTFT" else "tokens")
        ax.set_title(f"{name} at the answer ({len(vals):,} values)", fontsize=10)
        readable_axis(ax.xaxis)
        readable_axis(ax.yaxis)
    return "TTFT and ITL distributions at the answer", fig


def interactivity_figure(plt: ModuleType, res: dict[str, Any]) -> tuple[str, Any] | None:
    """Per-user output tok/s against total output tok/s, one point per concurrency (concurrency sweeps)."""
    inter = [r for r in res.get("interactivity") or [] if r.get("output_tps") is not None]
    if not inter:
        return None
    fig, ax = plt.subplots(figsize=(9, 4.0))
    xs = [r["output_tps"] for r in inter]
    ys = [r.get("per_user_output_tps") or 0 for r in inter]
    ax.plot(xs, ys, "-", color="#1565c0")
    for r, x, y in zip(inter, xs, ys, strict=True):
        st = STATE_STYLE["pass" if r.get("meets_slo") else "fail"]
        ax.plot([x], [y], linestyle="", marker=st["marker"], color=st["color"], markerfacecolor=st["mfc"])
        ax.annotate(f"c={r['concurrency']}", (x, y), fontsize=8, textcoords="offset points", xytext=(4, 4))
    ax.set_xlabel("total output tok/s")
    ax.set_ylabel("per-user output tok/s (1000 / TPOT p50)")
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    readable_axis(ax.xaxis)
    readable_axis(ax.yaxis)
    ax.grid(True, color="#e0e0e0", lw=0.6)
    ax.set_title("interactivity (green: meets the SLO; red: misses it)", fontsize=10)
    return "Interactivity curve", fig
