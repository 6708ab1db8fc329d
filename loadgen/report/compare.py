"""``loadgen compare``: a scorecard of several systems, ranked only where the comparison is fair.

Each input is a sweep (directory with ``sweep.json``, or the file) or a run (``result.json``).
Per system: max rate meeting the SLO, output tok/s there (and per accelerator), TTFT / TPOT / ITL /
E2E p50 and p99 at that load, goodput, error rate, output tokens per joule and cost per million
output tokens. Rows without inputs say "not measured", never 0.

Comparability: the conditions that must match (model, input/output lengths, SLO targets, arrival
process, latency origin, streaming, API, loadgen metric schema) are compared first; a mismatch is
reported (``comparable: false`` with reasons) and the ranking withheld unless ``force``.

Formulas: cost per million output tokens = cost_per_hour / (output_tps * 3600) * 1e6 (or, with
per-token prices, the input and output prices weighted by the tokens of the run);
output tokens per joule = output tokens / energy (J) over the same window.
"""

from __future__ import annotations

import csv
import html
import io
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from loadgen.errors import InputFileError

SCORECARD_SCHEMA_VERSION = 1
NOT_MEASURED = "not measured"

# (key, label, better): better is "high", "low" or None (not ranked)
ROWS = (
    ("max_rate_rps", "max rate meeting the SLO (req/s)", "high"),
    ("output_tps", "output tok/s at that rate", "high"),
    ("output_tps_per_accelerator", "output tok/s per accelerator", "high"),
    ("goodput_rps", "goodput (req/s)", "high"),
    ("ttft_p50_ms", "TTFT p50 (ms)", "low"),
    ("ttft_p99_ms", "TTFT p99 (ms)", "low"),
    ("tpot_p50_ms", "TPOT p50 (ms)", "low"),
    ("tpot_p99_ms", "TPOT p99 (ms)", "low"),
    ("itl_p50_ms", "ITL p50 (ms)", "low"),
    ("itl_p99_ms", "ITL p99 (ms)", "low"),
    ("e2e_p50_ms", "E2E p50 (ms)", "low"),
    ("e2e_p99_ms", "E2E p99 (ms)", "low"),
    ("error_rate", "error rate", "low"),
    ("output_tokens_per_joule", "output tokens per joule", "high"),
    ("cost_per_million_output_tokens_usd", "cost per million output tokens (USD)", "low"),
)

MUST_MATCH = ("model", "api", "stream", "input_tokens", "output_tokens", "slo", "arrival", "latency_origin", "schema")


@dataclass
class System:
    label: str
    source: str
    kind: str
    values: dict[str, Any] = field(default_factory=dict)
    conditions: dict[str, Any] = field(default_factory=dict)
    curve: list[tuple[float, float | None]] = field(default_factory=list)
    links: dict[str, str] = field(default_factory=dict)


def _load_json(path: Path) -> dict[str, Any]:
    try:
        return orjson.loads(path.read_bytes())
    except FileNotFoundError:
        raise InputFileError(str(path), None, None, "no such file") from None
    except orjson.JSONDecodeError as exc:
        raise InputFileError(str(path), getattr(exc, "lineno", None), None, f"not valid JSON ({exc})") from None


def _pick(p: Path) -> tuple[Path, str]:
    if p.is_dir():
        if (p / "sweep.json").exists():
            return p / "sweep.json", "sweep"
        if (p / "result.json").exists():
            return p / "result.json", "run"
        raise InputFileError(str(p), None, None, "directory holds neither sweep.json nor result.json")
    return p, ("sweep" if p.name.startswith("sweep") else "run")


def _lat(res: dict[str, Any], metric: str, key: str) -> Any:
    v = (res.get("latency_ms") or {}).get(metric, {}).get(key)
    return NOT_MEASURED if v is None else v


def load_system(path: str, label: str | None = None) -> System:
    """Read one result or sweep into the scorecard's terms. Raises InputFileError."""
    f, kind = _pick(Path(path))
    doc = _load_json(f)
    if kind == "run" and "answer" in doc:
        kind = "sweep"
    cfg = doc.get("config") or {}
    cond = doc.get("conditions") or {}
    ep = cond.get("endpoint") or {}
    sys_ = System(label=label or Path(path).resolve().name, source=str(f), kind=kind)
    res: dict[str, Any] = doc
    if kind == "sweep":
        a = doc.get("answer") or {}
        at = None
        for p in doc.get("probes") or []:
            if a.get("max_rate_rps") is not None and p.get("offered_rps") == a["max_rate_rps"] and p.get("verdict") == "pass":
                at = p
            sys_.curve.append((p.get("offered_rps") or 0.0, _first_slo_value(doc, p)))
        res = {}
        if at is not None and at.get("dir"):
            rp = f.parent / Path(at["dir"]).name / "result.json"
            if rp.exists():
                res = _load_json(rp)
                sys_.links["answer_probe"] = str(rp)
        v = sys_.values
        v["max_rate_rps"] = a.get("max_rate_rps")
        v["output_tps"] = a.get("output_tps")
        v["output_tps_per_accelerator"] = a.get("output_tps_per_accelerator")
        v["goodput_rps"] = a.get("goodput_rps")
        v["cost_per_million_output_tokens_usd"] = a.get("cost_per_million_output_tokens_usd")
        slo = sorted(t.get("target") for t in doc.get("slo") or [])
    else:
        v = sys_.values
        v["max_rate_rps"] = None
        t = res.get("throughput") or {}
        v["output_tps"] = t.get("output_tps")
        v["goodput_rps"] = t.get("goodput_rps")
        v["output_tps_per_accelerator"] = None
        v["cost_per_million_output_tokens_usd"] = None
        slo = sorted(x.get("target") for x in (res.get("slo") or {}).get("targets", []))
    for m in ("ttft", "tpot", "itl", "e2e"):
        v[f"{m}_p50_ms"] = _lat(res, m, "p50")
        v[f"{m}_p99_ms"] = _lat(res, m, "p99")
    counts = res.get("counts") or {}
    v["error_rate"] = (counts.get("failed", 0) / counts["requests"]) if counts.get("requests") else NOT_MEASURED
    energy = res.get("energy") or {}
    joules = energy.get("joules")
    out_tokens = (res.get("tokens") or {}).get("output")
    v["output_tokens_per_joule"] = (out_tokens / joules) if (joules and out_tokens) else NOT_MEASURED
    for k in list(v):
        if v[k] is None:
            v[k] = NOT_MEASURED
    sys_.conditions = {
        "model": ep.get("model") or cfg.get("model"),
        "api": ep.get("api") or cfg.get("api"),
        "stream": ep.get("stream"),
        "input_tokens": cfg.get("input_tokens"),
        "output_tokens": cfg.get("output_tokens"),
        "slo": slo,
        "arrival": cfg.get("arrival"),
        "latency_origin": cfg.get("latency_origin") or cond.get("latency_origin"),
        "schema": doc.get("schema_version"),
        "server_version": ep.get("server_version"),
        "loadgen_version": cond.get("loadgen_version") or doc.get("loadgen_version"),
    }
    return sys_


def _first_slo_value(doc: dict[str, Any], p: dict[str, Any]) -> float | None:
    slos = doc.get("slo") or []
    if not slos:
        return None
    t = slos[0]
    key = {50.0: "p50", 90.0: "p90", 95.0: "p95", 99.0: "p99", 99.9: "p999"}.get(t.get("percentile"), "p99")
    lat = (p.get("latency_ms") or {}).get(t.get("metric")) or {}
    return lat.get(key)


def comparability(systems: list[System]) -> list[str]:
    """Reasons the systems may not be ranked against each other (empty when comparable)."""
    reasons = []
    for key in MUST_MATCH:
        vals = {s.label: s.conditions.get(key) for s in systems}
        distinct = {orjson.dumps(v) for v in vals.values()}
        if len(distinct) > 1:
            reasons.append(f"{key} differs: " + ", ".join(f"{k}={v}" for k, v in vals.items()))
    return reasons


def scorecard(systems: list[System], force: bool = False) -> dict[str, Any]:
    reasons = comparability(systems)
    comparable = not reasons
    ranked = comparable or force
    rows = []
    for key, label, better in ROWS:
        vals = {s.label: s.values.get(key, NOT_MEASURED) for s in systems}
        best = None
        nums = {k: v for k, v in vals.items() if isinstance(v, (int, float))}
        if ranked and better and len(nums) >= 2:
            best = (max if better == "high" else min)(nums, key=nums.get)  # type: ignore[arg-type]
        rows.append({"key": key, "label": label, "values": vals, "best": best})
    return {
        "schema_version": SCORECARD_SCHEMA_VERSION,
        "systems": [{"label": s.label, "kind": s.kind, "source": s.source, "links": s.links, "conditions": s.conditions} for s in systems],
        "comparable": comparable,
        "reasons": reasons,
        "ranking": "shown" if ranked else "withheld (conditions differ; --force to rank anyway)",
        "forced": bool(force and not comparable),
        "rows": rows,
    }


def write_outputs(card: dict[str, Any], systems: list[System], out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "scorecard.json").write_bytes(orjson.dumps(card, option=orjson.OPT_INDENT_2))
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["metric"] + [s.label for s in systems] + ["best"])
    for r in card["rows"]:
        w.writerow([r["label"]] + [r["values"][s.label] for s in systems] + [r["best"] or ""])
    (out_dir / "scorecard.csv").write_text(buf.getvalue(), encoding="utf-8")
    (out_dir / "scorecard.html").write_text(_html(card, systems), encoding="utf-8")


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:,.4g}" if abs(v) < 1 else f"{v:,.2f}"
    return str(v)


def _html(card: dict[str, Any], systems: list[System]) -> str:
    plot = ""
    try:
        import base64

        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        curves = [s for s in systems if s.curve]
        if curves:
            fig, ax = plt.subplots(figsize=(7, 4))
            for s in curves:
                pts = sorted((x, y) for x, y in s.curve if y is not None)
                ax.plot([x for x, _ in pts], [y for _, y in pts], "o-", label=s.label)
            ax.set_xlabel("offered load (req/s)")
            ax.set_ylabel("SLO metric (ms)")
            ax.set_yscale("log")
            ax.legend()
            b = io.BytesIO()
            fig.savefig(b, format="png", dpi=100, bbox_inches="tight")
            plt.close(fig)
            plot = f"<img alt='latency vs offered load' src='data:image/png;base64,{base64.b64encode(b.getvalue()).decode()}'/>"
    except ImportError:
        pass
    head = "".join(f"<th><a href='{html.escape(s.source)}'>{html.escape(s.label)}</a></th>" for s in systems)
    body = ""
    for r in card["rows"]:
        cells = ""
        for s in systems:
            v = r["values"][s.label]
            mark = " style='background:#dfd;font-weight:bold'" if r["best"] == s.label else ""
            cells += f"<td{mark}>{html.escape(_fmt(v))}</td>"
        body += f"<tr><th style='text-align:left'>{html.escape(r['label'])}</th>{cells}</tr>"
    warn = ""
    if not card["comparable"]:
        warn = "<p style='color:#a00'><b>Not comparable:</b> " + "; ".join(html.escape(x) for x in card["reasons"]) + f" — ranking {html.escape(card['ranking'])}</p>"
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>loadgen scorecard</title>
<style>body{{font-family:sans-serif;margin:2em}} td,th{{border:1px solid #ccc;padding:4px 8px}} table{{border-collapse:collapse}}</style>
</head><body><h1>loadgen scorecard</h1>{warn}<table><tr><th></th>{head}</tr>{body}</table>{plot}</body></html>"""
