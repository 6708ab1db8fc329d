"""Sweep output: console table and answer line, PNG plots, a self-contained HTML report."""

from __future__ import annotations

import base64
import html
import io
from pathlib import Path
from typing import Any

import orjson
from rich.console import Console
from rich.table import Table


def answer_line(res: dict[str, Any]) -> str:
    a = res["answer"]
    slos = " and ".join(t["target"] for t in res["slo"])
    if a.get("concurrency"):
        return (
            f"highest concurrency meeting {slos}: {a['concurrency']} users, "
            f"{_n(a['output_tps'], 1)} output tok/s, {_n(a['request_rps'])} req/s"
        )
    if a["max_rate_rps"] is None:
        if a["limited_by"] == "client":
            return f"no answer: the client limited the first probe ({slos}); see the validity lines"
        if a["limited_by"] == "rate_limit":
            return (
                f"no answer: the provider's quota limited the first probe (HTTP 429 at {_n(a.get('rate_limited_at'))}"
                " req/s): a quota, not the server's latency"
            )
        return f"no rate met {slos}: even the lowest probe failed (bracket fail at {_n(a['bracket_rps'][1])} req/s)"
    s = f"max rate meeting {slos}: {_n(a['max_rate_rps'])} req/s"
    if a["limited_by"] == "client":
        s = f"client limited: at least {_n(a['max_rate_rps'])} req/s meets {slos} (the generator could not go higher)"
    elif a["limited_by"] == "max_rate":
        s += " (reached --max-rate; the server may carry more)"
    elif a["limited_by"] == "rate_limit":
        s += f" (then the provider's quota: HTTP 429 took over at {_n(a.get('rate_limited_at'))} req/s)"
    else:
        s += f" (bracket {_n(a['bracket_rps'][0])}..{_n(a['bracket_rps'][1])})"
    s += f"; there {_n(a['output_tps'], 1)} output tok/s, {_n(a['total_tps'], 1)} total tok/s, goodput {_n(a['goodput_rps'])} req/s"
    if a.get("cost_per_million_output_tokens_usd") is not None:
        s += f"; ${a['cost_per_million_output_tokens_usd']:.4f} per million output tokens"
    return s


def answer_probe(res: dict[str, Any]) -> dict[str, Any] | None:
    """The probe whose rates the answer reports (the passing probe at the answer), or None."""
    a = res["answer"]
    for p in reversed(res.get("probes") or []):
        if p.get("verdict") != "pass":
            continue
        if a.get("concurrency") is not None and p.get("concurrency") == a["concurrency"]:
            return p
        if a.get("concurrency") is None and p.get("concurrency") is None and p["offered_rps"] == a["max_rate_rps"]:
            return p
    return None


def answer_window_line(res: dict[str, Any], out_dir: Path) -> str | None:
    """ "rates over the 10.07 s window of scheduled sends ..." of the answer's probe (its result.json)."""
    from loadgen.report.console import window_phrase

    p = answer_probe(res)
    if p is None:
        return None
    try:
        w = orjson.loads((out_dir / p["dir"] / "result.json").read_bytes()).get("window")
    except (OSError, orjson.JSONDecodeError):
        return None
    return f"the answer's {window_phrase(w)}" if w else None


def rerun_lines(res: dict[str, Any]) -> list[str]:
    """One line per probe that was INVALID on the client's timing and run again (``reruns``)."""
    max_r = (res.get("settings") or {}).get("max_reruns")
    out = []
    for r in res.get("reruns") or []:
        rate = f"c={r['concurrency']}" if r.get("concurrency") else f"{r['offered_rps']:.2f} req/s"
        why = "; ".join(r.get("validity_detail") or []) or "client timing"
        out.append(
            f"re-run {r.get('rerun')}{f' of {max_r}' if max_r else ''} at {rate}: "
            f"{r.get('invalid_probe')} was INVALID ({why}); run again"
        )
    return out


def _n(v: Any, d: int = 2) -> str:
    return "-" if v is None else f"{v:,.{d}f}"


def render_sweep(res: dict[str, Any], console: Console, out_dir: str) -> None:
    t = Table(title="probes")
    for c in (
        "#",
        "offered",
        "sent req/s",
        "done req/s",
        "out tok/s",
        "verdict",
        "exceedance",
        "duration s",
        "censored",
    ):
        t.add_column(c, justify="right")
    for i, p in enumerate(res["probes"], 1):
        offered = f"c={p['concurrency']}" if p.get("concurrency") else f"{p['offered_rps']:.2f}"
        verdict = (
            p["verdict"].upper()
            + (" (low conf.)" if p["low_confidence"] else "")
            + (" early" if p["stopped_early"] else "")
        )
        ex = ", ".join("-" if v is None else f"{v * 100:.2f}%" for v in p["exceedance_fraction"].values())
        t.add_row(
            str(i),
            offered,
            _n(p["achieved_send_rps"]),
            _n(p["request_rps"]),
            _n(p["output_tps"], 1),
            verdict,
            ex,
            f"{p['duration_s']:.1f}",
            str(p["censored"]),
        )
    console.print(t)
    for f in res.get("non_monotonic") or []:
        console.print(f"[yellow]non-monotonic:[/] {f}")
    for p in res["probes"]:
        if p["verdict"] == "invalid":
            for d in p.get("validity_detail", []):
                console.print(f"[red]client limit:[/] {d}")
            console.print("remedy: lower the rate, use more client CPU (--workers), or run the client elsewhere")
    for line in rerun_lines(res):
        console.print(f"[yellow]{line}[/]")
    console.print(f"total probe time {res['probe_time_s']:.1f} s")
    console.print(f"[bold]{answer_line(res)}[/]")
    wl = answer_window_line(res, Path(out_dir))
    if wl:
        console.print(wl)
    console.print(f"results in {out_dir} (sweep.json, report.html)")


def _png(fig: Any) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    return base64.b64encode(buf.getvalue()).decode()


def write_report(res: dict[str, Any], out_dir: Path) -> Path | None:
    """Write plots (PNG) and a self-contained report.html; None if matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    imgs: list[tuple[str, str]] = []
    probes = [p for p in res["probes"] if p["verdict"] in ("pass", "fail") and not p.get("concurrency")]
    probes.sort(key=lambda p: p["offered_rps"])
    ans = res["answer"]
    if probes:
        fig, ax = plt.subplots(figsize=(7, 4))
        for t in res["slo"]:
            m = t["metric"]
            key = {50.0: "p50", 90.0: "p90", 95.0: "p95", 99.0: "p99", 99.9: "p999"}.get(t["percentile"], "p99")
            xs = [
                p["offered_rps"] for p in probes if p["latency_ms"].get(m) and p["latency_ms"][m].get(key) is not None
            ]
            ys = [
                p["latency_ms"][m][key]
                for p in probes
                if p["latency_ms"].get(m) and p["latency_ms"][m].get(key) is not None
            ]
            ax.plot(xs, ys, "o-", label=f"{m} {key}")
            ax.axhline(t["threshold_ms"], linestyle="--", color="red", alpha=0.6)
            ax.annotate(
                f"SLO {t['target']}",
                (0.01, t["threshold_ms"]),
                xycoords=("axes fraction", "data"),
                fontsize=8,
                color="red",
            )
        if ans["max_rate_rps"]:
            ax.axvline(ans["max_rate_rps"], color="green", alpha=0.5, label="answer")
        ax.set_xlabel("offered load (req/s)")
        ax.set_ylabel("latency (ms)")
        ax.set_yscale("log")
        ax.legend()
        ax.set_title("SLO metric vs offered load")
        imgs.append(("SLO metric percentiles vs offered load", _png(fig)))
        plt.close(fig)
        fig, ax = plt.subplots(figsize=(7, 4))
        ax.plot(
            [p["offered_rps"] for p in probes], [p["request_rps"] or 0 for p in probes], "o-", label="completed req/s"
        )
        ax.plot(
            [p["offered_rps"] for p in probes], [p["goodput_rps"] or 0 for p in probes], "s--", label="goodput req/s"
        )
        lim = max(p["offered_rps"] for p in probes)
        ax.plot([0, lim], [0, lim], ":", color="grey", label="offered = achieved")
        ax.set_xlabel("offered load (req/s)")
        ax.set_ylabel("req/s")
        ax.legend()
        ax.set_title("achieved throughput vs offered load")
        imgs.append(("Achieved throughput vs offered load", _png(fig)))
        plt.close(fig)
    at_dir = None
    for p in res["probes"]:
        if ans["max_rate_rps"] is not None and p["offered_rps"] == ans["max_rate_rps"] and p["verdict"] == "pass":
            at_dir = out_dir / p["dir"]
        if ans.get("concurrency") and p.get("concurrency") == ans["concurrency"]:
            at_dir = out_dir / p["dir"]
    if at_dir is not None and (at_dir / "requests.jsonl").exists():
        ttft: list[float] = []
        itl: list[float] = []
        for line in (at_dir / "requests.jsonl").read_bytes().splitlines():
            r = orjson.loads(line)
            if r["phase"] == "measure" and r["status"] == "ok":
                if r["ttft_ms"] is not None:
                    ttft.append(r["ttft_ms"])
                itl.extend(r.get("itl_ms") or [])
        fig, axs = plt.subplots(1, 2, figsize=(10, 3.6))
        if ttft:
            axs[0].hist(ttft, bins=50)
        axs[0].set_title("TTFT at the answer (ms)")
        if itl:
            axs[1].hist(itl, bins=50)
        axs[1].set_title("ITL at the answer (ms)")
        imgs.append(("TTFT and ITL distributions at the answer", _png(fig)))
        plt.close(fig)
    inter = res.get("interactivity")
    if inter:
        fig, ax = plt.subplots(figsize=(7, 4))
        xs = [r["output_tps"] or 0 for r in inter]
        ys = [r["per_user_output_tps"] or 0 for r in inter]
        ax.plot(xs, ys, "o-")
        for r, x, y in zip(inter, xs, ys):
            ax.annotate(f"c={r['concurrency']}" + ("" if r["meets_slo"] else " ✗"), (x, y), fontsize=8)
        ax.set_xlabel("total output tok/s")
        ax.set_ylabel("per-user output tok/s (1 / median TPOT)")
        ax.set_title("interactivity curve")
        imgs.append(("Interactivity curve", _png(fig)))
        plt.close(fig)
    for i, (_title, data) in enumerate(imgs):
        (out_dir / f"plot-{i + 1}.png").write_bytes(base64.b64decode(data))
    rows = "".join(
        "<tr>"
        + "".join(
            f"<td>{html.escape(str(v))}</td>"
            for v in (
                i,
                f"c={p['concurrency']}" if p.get("concurrency") else f"{p['offered_rps']:.3f}",
                _n(p["achieved_send_rps"]),
                _n(p["request_rps"]),
                _n(p["output_tps"], 1),
                p["verdict"].upper()
                + (" (low confidence)" if p["low_confidence"] else "")
                + (" (stopped early)" if p["stopped_early"] else ""),
                "; ".join(p["reasons"]),
                f"{p['duration_s']:.1f}",
                p["censored"],
            )
        )
        + "</tr>"
        for i, p in enumerate(res["probes"], 1)
    )
    figs = "".join(
        f"<figure><img alt='{html.escape(t)}' src='data:image/png;base64,{d}'/><figcaption>{html.escape(t)}</figcaption></figure>"
        for t, d in imgs
    )
    a = res["answer"]

    def _short(v: Any) -> str:
        if isinstance(v, float):
            return f"{v:.6g}"
        if isinstance(v, list):
            return "[" + ", ".join(_short(x) for x in v) + "]"
        return str(v)

    facts = "".join(f"<li>{html.escape(k)}: {html.escape(_short(v))}</li>" for k, v in a.items() if v is not None)
    doc = f"""<!doctype html><html><head><meta charset="utf-8"><title>loadgen sweep</title>
<style>body{{font-family:sans-serif;margin:2em;max-width:1100px}} table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:4px 8px;font-size:13px}} .answer{{font-size:1.3em;background:#eef7ee;padding:.8em;border-left:6px solid #3a3}}
figure{{display:inline-block;margin:1em}}</style></head><body>
<h1>loadgen sweep</h1>
<p class="answer">{html.escape(answer_line(res))}</p>
<p>{html.escape(answer_window_line(res, out_dir) or "")}</p>
<ul>{facts}</ul>
<p>SLO: {html.escape(", ".join(t["target"] for t in res["slo"]))}; confidence {res["settings"]["confidence"]},
precision {res["settings"]["precision"] * 100:g} %, probes of at least {res["settings"]["probe_duration_s"]:g} s and
{res["settings"]["min_requests_per_probe"]} requests; total probe time {res["probe_time_s"]:.1f} s.</p>
{figs}
<h2>Probes</h2><table><tr><th>#</th><th>offered req/s</th><th>sent req/s</th><th>completed req/s</th><th>output tok/s</th><th>verdict</th><th>counts</th><th>duration s</th><th>censored</th></tr>{rows}</table>
<p>Non-monotonic verdicts: {html.escape("; ".join(res.get("non_monotonic") or []) or "none")}</p>
<p>Probes re-run after a client stall (INVALID on the client's own timing): {html.escape("; ".join(rerun_lines(res)) or "none")}</p>
</body></html>"""
    path = out_dir / "report.html"
    path.write_text(doc, encoding="utf-8")
    return path
