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
output tokens per joule = output_tps / mean power (W), the steady-state rate of the
measurement window (``result.json`` ``window``, :mod:`loadgen.core.window`) over the energy
meter's mean power (energy J / its window s); without the meter's window, output tokens /
energy over the whole run. Rates (output tok/s, goodput) are the answer probe's, over its
measurement window, never over the drain.

Sustained behaviour: from the time series of the run at the answer (``result.json``
``timeseries``, or rebuilt from its ``requests.jsonl``), the change of output tok/s, TTFT
p50 and E2E p50 from the first to the last third of the run; a system beyond the drift
threshold of :mod:`loadgen.engine.timeseries` is flagged in ``warnings``. Not ranked.

Quality: a ``check.json`` (:mod:`loadgen.check`) next to the result, or given with
``check=``, fills the quality rows (agreement with its reference, accuracy).

What each system is (model, server and version, accelerator and count, price per hour:
:func:`loadgen.report.sweep_facts.system_facts`) opens the scorecard as ``description_rows``;
never ranked. The page itself (scorecard.html) is :mod:`loadgen.report.compare_html`.

Interactivity: where a sweep is a concurrency sweep, its per-user output tok/s (1000 /
TPOT p50) against total output tok/s, one point per concurrency, plotted per system.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from loadgen.check import QUALITY_ROWS, load_check, scorecard_values
from loadgen.core.contract import check_version
from loadgen.core.errors import InputFileError
from loadgen.engine.throughput import WINDOW_RULE
from loadgen.engine.timeseries import DRIFT_MIN_LATENCY_MS, DRIFT_THRESHOLD, drift, series
from loadgen.report.compare_html import NOT_MEASURED, fmt_cell, render_html
from loadgen.report.compare_scaling import SCALING_ROWS, scaling_section
from loadgen.report.sweep_facts import probe_state, system_facts
from loadgen.report.sweep_plots import METRIC_NAME, PCT_KEY

SCORECARD_SCHEMA_VERSION = 1
__all__ = ["NOT_MEASURED", "System", "fmt_cell", "load_system", "scorecard", "write_outputs"]

# what each system is: the first rows of the scorecard (key of sweep_facts.system_facts, label)
DESCRIBE = (
    ("model", "model"),
    ("server", "server and version"),
    ("accelerator", "accelerator and count"),
    ("cost_per_hour", "price per hour (USD)"),
)

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
    ("inter_chunk_p50_ms", "inter-chunk gap p50 (ms)", "low"),
    ("inter_chunk_p99_ms", "inter-chunk gap p99 (ms)", "low"),
    ("e2e_p50_ms", "E2E p50 (ms)", "low"),
    ("e2e_p99_ms", "E2E p99 (ms)", "low"),
    ("error_rate", "error rate", "low"),
    ("output_tokens_per_joule", "output tokens per joule", "high"),
    ("cost_per_million_output_tokens_usd", "cost per million output tokens (USD)", "low"),
    ("max_concurrency", "max concurrency meeting the SLO (concurrency sweep)", "high"),
    ("sustained", "sustained: verdict (last third against first)", None),
    ("sustained_output_tps_change", "sustained: output tok/s change, last third / first - 1", None),
    ("sustained_ttft_p50_change", "sustained: TTFT p50 change, last third / first - 1", None),
    ("sustained_e2e_p50_change", "sustained: E2E p50 change, last third / first - 1", None),
    *QUALITY_ROWS,
)

# session-capacity sweeps (loadgen sweep --sessions, issue 17): shown when one of the systems is one
SESSION_ROWS = (
    ("max_session_rps", "max session rate meeting the SLO (sessions/s)", "high"),
    ("max_concurrent_sessions", "max concurrent sessions meeting the SLO", "high"),
)

# the "throughput" section: max-throughput runs (--rate inf, loadgen.engine.throughput) compared with each other only
THROUGHPUT_ROWS = (
    ("tp_batch", "max-throughput: batch (requests in flight)", None),
    ("tp_sustained_output_tps", "max-throughput: sustained output tok/s", "high"),
    ("tp_sustained_output_tps_per_slot", "max-throughput: sustained output tok/s per slot", "high"),
    ("tp_sustained_window_s", "max-throughput: sustained window (s)", None),
    ("tp_output_tps_incl_drain", "max-throughput: output tok/s incl. ramp and drain", None),
    ("tp_cost_per_million_output_tokens_usd", "max-throughput: cost per million output tokens (USD)", "low"),
    ("tp_energy_per_million_output_tokens_j", "max-throughput: energy per million output tokens (J)", "low"),
)
TP_KEYS = {
    "tp_batch": "batch",
    "tp_sustained_output_tps": "sustained_output_tps",
    "tp_sustained_output_tps_per_slot": "sustained_output_tps_per_slot",
    "tp_output_tps_incl_drain": "output_tps_incl_drain",
    "tp_cost_per_million_output_tokens_usd": "cost_per_million_output_tokens_usd",
    "tp_energy_per_million_output_tokens_j": "energy_per_million_output_tokens_j",
}
NOT_THROUGHPUT_RUN = "not a max-throughput run"

UNPACED_ITL_ROWS = (
    "itl_p50_ms",
    "itl_p99_ms",
    "inter_chunk_p50_ms",
    "inter_chunk_p99_ms",
)  # a 0 here is not a best (see scorecard)

MUST_MATCH = (
    "model", "api", "stream", "input_tokens", "output_tokens", "slo", "arrival", "latency_origin", "schema",
    "max_throughput", "tool", "rate_window",
)  # fmt: skip


@dataclass
class System:
    label: str
    source: str
    kind: str
    values: dict[str, Any] = field(default_factory=dict)
    conditions: dict[str, Any] = field(default_factory=dict)
    curve: list[tuple[float, float | None, int | None]] = field(default_factory=list)  # (load, SLO metric, concurrency)
    links: dict[str, str] = field(default_factory=dict)
    interactivity: list[dict[str, Any]] = field(default_factory=list)
    drift: dict[str, Any] = field(default_factory=dict)
    check: dict[str, Any] | None = None  # reference, unit and load of the attached check
    slo_line_ms: float | None = None
    facts: dict[str, str] = field(default_factory=dict)  # what the system is (DESCRIBE)
    curve_states: list[str] = field(default_factory=list)  # per curve point: sweep_facts.probe_state
    slo_lines: list[dict[str, Any]] = field(default_factory=list)  # the targets on the curve's metric
    slo_metric: str | None = None  # the first SLO target's metric: the curve's values
    slo_metric_label: str | None = None  # "TTFT p99": what the curve's values are
    answer_load_rps: float | None = None  # the curve's x at the answer
    answer_concurrency: int | None = None  # a concurrency sweep's answer
    answer_verdict: str | None = None  # sweep.json answer.verdict_text when it is a point estimate
    interrupted: bool = False  # the run or sweep was stopped by the user (its "interrupted")
    tool: str = "loadgen"  # the tool that measured it (a peer's file: loadgen.report.peers)
    definitions: list[str] = field(default_factory=list)  # where its figures' definitions differ from loadgen's


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


def load_system(path: str, label: str | None = None, check: str | None = None) -> System:
    """Read one result or sweep into the scorecard's terms. Raises InputFileError.

    ``check``: a ``check.json`` for the quality rows; by default the one next to the result.
    """
    f, kind = _pick(Path(path))
    doc = _load_json(f)
    if kind == "run" and isinstance(doc, dict) and "answer" in doc:
        kind = "sweep"
    check_version(doc, "sweep" if kind == "sweep" else "result", f)  # loadgen.core.contract: read or refuse
    cfg = doc.get("config") or {}
    cond = doc.get("conditions") or {}
    ep = cond.get("endpoint") or {}
    sys_ = System(label=label or cfg.get("label") or Path(path).resolve().name, source=str(f), kind=kind)
    res: dict[str, Any] = doc
    if kind == "sweep":
        a = doc.get("answer") or {}
        at = None
        for p in doc.get("probes") or []:
            if p.get("verdict") == "pass" and (
                (a.get("max_rate_rps") is not None and p.get("offered_rps") == a["max_rate_rps"])
                or (a.get("concurrency") is not None and p.get("concurrency") == a["concurrency"])
            ):
                at = p
            # closed-loop probes have no offered rate: their achieved request rate stands in
            x = p.get("offered_rps") if p.get("concurrency") is None else p.get("request_rps")
            sys_.curve.append((x or 0.0, _first_slo_value(doc, p), p.get("concurrency")))
            sys_.curve_states.append(probe_state(p))
        slos = doc.get("slo") or []
        sys_.slo_line_ms = slos[0].get("threshold_ms") if slos else None
        if slos:
            t0 = slos[0]
            sys_.slo_lines = [{"target": t.get("target"), "threshold_ms": t.get("threshold_ms")}
                              for t in slos if t.get("metric") == t0.get("metric")]  # fmt: skip
            key = PCT_KEY.get(t0.get("percentile"), "p99")
            sys_.slo_metric = t0.get("metric")
            sys_.slo_metric_label = f"{METRIC_NAME.get(t0.get('metric'), t0.get('metric'))} {key}"
        if at is not None:
            sys_.answer_load_rps = at.get("offered_rps") if at.get("concurrency") is None else at.get("request_rps")
            sys_.answer_concurrency = at.get("concurrency")
        sys_.interactivity = [r for r in doc.get("interactivity") or [] if r.get("per_user_output_tps") is not None]
        res = {}
        if at is not None and at.get("dir"):
            rp = f.parent / Path(at["dir"]).name / "result.json"
            if rp.exists():
                res = _load_json(rp)
                sys_.links["answer_probe"] = str(rp)
        if a.get("point_estimate"):
            sys_.answer_verdict = str(a.get("verdict_text") or "PASS (point estimate)")
        sys_.interrupted = bool(doc.get("interrupted"))
        v = sys_.values
        v["max_rate_rps"] = a.get("max_rate_rps")
        v["max_concurrency"] = a.get("concurrency")
        if v["max_rate_rps"] is None and a.get("concurrency") is not None:
            v["max_rate_rps"] = a.get("request_rps")  # closed loop: the rate achieved at the answer
        if doc.get("sessions"):  # a session sweep: its load is sessions, not independent requests
            v["max_session_rps"] = a.get("max_rate_rps") if a.get("concurrency") is None else NOT_MEASURED
            v["max_concurrent_sessions"] = a.get("concurrency") if a.get("concurrency") is not None else NOT_MEASURED
            v["max_rate_rps"] = v["max_concurrency"] = NOT_MEASURED
        v["output_tps"] = a.get("output_tps")
        v["output_tps_per_accelerator"] = a.get("output_tps_per_accelerator")
        v["goodput_rps"] = a.get("goodput_rps")
        v["cost_per_million_output_tokens_usd"] = a.get("cost_per_million_output_tokens_usd")
        slo = sorted(t.get("target") for t in doc.get("slo") or [])
    else:
        v = sys_.values
        v["max_rate_rps"] = None
        v["max_concurrency"] = None
        t = res.get("throughput") or {}
        v["output_tps"] = t.get("output_tps")
        v["goodput_rps"] = t.get("goodput_rps")
        v["output_tps_per_accelerator"] = None
        v["cost_per_million_output_tokens_usd"] = None
        slo = sorted(x.get("target") for x in (res.get("slo") or {}).get("targets", []))
    for m in ("ttft", "tpot", "itl", "inter_chunk", "e2e"):
        v[f"{m}_p50_ms"] = _lat(res, m, "p50")
        v[f"{m}_p99_ms"] = _lat(res, m, "p99")
    counts = res.get("counts") or {}
    v["error_rate"] = (counts.get("failed", 0) / counts["requests"]) if counts.get("requests") else NOT_MEASURED
    run_dir = (
        Path(sys_.links["answer_probe"]).parent
        if "answer_probe" in sys_.links
        else (f.parent if kind == "run" else None)
    )
    ts = res.get("timeseries")
    if ts is None and run_dir is not None and (run_dir / "requests.jsonl").exists():
        origin = (res.get("conditions") or {}).get("latency_origin") or "scheduled"
        ts = series(run_dir / "requests.jsonl", origin, window=res.get("window"))
    sys_.drift = drift(ts)
    ch = sys_.drift["changes"]
    v["sustained"] = sys_.drift["verdict"] + (
        "" if sys_.drift["verdict"] == NOT_MEASURED else f" ({sys_.drift['reason']})"
    )
    v["sustained_output_tps_change"] = ch.get("output_tps")
    v["sustained_ttft_p50_change"] = ch.get("ttft_p50_ms")
    v["sustained_e2e_p50_change"] = ch.get("e2e_p50_ms")
    check_path = Path(check) if check else f.parent / "check.json"
    if check or check_path.exists():
        cdoc = load_check(check_path)
        v.update(scorecard_values(cdoc))
        ag = cdoc.get("agreement") or {}
        sys_.check = {"source": str(check_path), "reference": (cdoc.get("reference") or {}).get("source"),
                      "token_unit": ag.get("token_unit"), "load": (cdoc.get("settings") or {}).get("load")}  # fmt: skip
        sys_.links["check"] = str(check_path)
    v["output_tokens_per_joule"] = tokens_per_joule(res) or NOT_MEASURED
    v.update(throughput_values(res.get("max_throughput")))
    for k in list(v):
        if v[k] is None:
            v[k] = NOT_MEASURED
    sys_.facts = system_facts(doc)
    sys_.conditions = {
        "model": ep.get("model") or cfg.get("model"),
        "api": ep.get("api") or cfg.get("api"),
        "stream": ep.get("stream"),
        "input_tokens": cfg.get("input_tokens"),
        "output_tokens": cfg.get("output_tokens"),
        "slo": slo,
        # a closed-loop run records the arrival option's default too: its load is its users
        "arrival": f"closed loop, {cfg['concurrency']} concurrent" if cfg.get("concurrency") else cfg.get("arrival"),
        "latency_origin": cond.get("latency_origin") or cfg.get("latency_origin"),  # the run's own over the option's
        "rate_window": "measurement window",
        "tool": "loadgen",
        "schema": doc.get("schema_version"),
        "server_version": ep.get("server_version"),
        "loadgen_version": cond.get("loadgen_version") or doc.get("loadgen_version"),
        # max-throughput mode and its batch: such runs are compared with each other only, at one batch
        "max_throughput": {"batch": (res.get("max_throughput") or {}).get("batch")}
        if res.get("max_throughput")
        else None,
    }
    return sys_


def throughput_values(card: dict[str, Any] | None) -> dict[str, Any]:
    """The ``tp_*`` cells of one system from its ``result.json`` ``max_throughput`` (:mod:`loadgen.engine.throughput`)."""
    if not card:
        return {k: NOT_THROUGHPUT_RUN for k, _, _ in THROUGHPUT_ROWS}
    out = {k: card.get(src) for k, src in TP_KEYS.items()}
    out["tp_sustained_window_s"] = (card.get("sustained_window") or {}).get("duration_s")
    if out["tp_sustained_output_tps"] is None and card.get("sustained_not_measured"):
        out["tp_sustained_output_tps"] = f"{NOT_MEASURED} ({card['sustained_not_measured']})"
    return {k: NOT_MEASURED if v is None else v for k, v in out.items()}


def tokens_per_joule(res: dict[str, Any]) -> float | None:
    """Output tokens per joule at the steady state: output_tps / (energy_j / energy window s)."""
    energy = res.get("energy") or {}
    joules = energy.get("joules")
    if not joules:
        return None
    out_tps = (res.get("throughput") or {}).get("output_tps")
    window_s = (res.get("server") or {}).get("window_s")
    if out_tps and window_s:
        return out_tps / (joules / window_s)
    out_tokens = (res.get("tokens") or {}).get("output")
    return (out_tokens / joules) if out_tokens else None


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
    warnings: list[str] = []
    in_mode = [s for s in systems if s.conditions.get("max_throughput")]
    scaling = scaling_section(systems)  # sizes of one system (loadgen.report.compare_scaling): fills its cells
    sessions = SESSION_ROWS if any("max_session_rps" in s.values for s in systems) else ()
    for key, label, better in (
        sessions + ROWS + (SCALING_ROWS if scaling else ()) + (THROUGHPUT_ROWS if in_mode else ())
    ):
        vals = {s.label: s.values.get(key, NOT_MEASURED) for s in systems}
        best = None
        nums = {k: v for k, v in vals.items() if isinstance(v, (int, float))}
        if key in UNPACED_ITL_ROWS:
            # An ITL percentile of 0 ms: at least that share of the tokens came in the same chunk as
            # the token before (multi-token chunks, a buffering server or proxy): the row says
            # nothing of that system's token pacing and its 0 must not win.
            for k in [k for k, v in nums.items() if v == 0]:
                del nums[k]
                warnings.append(f"{k}: {label} is 0 (tokens arrived together in multi-token chunks); not ranked on it")
        if ranked and better and len(nums) >= 2 and len(set(nums.values())) > 1:  # a tie for all: no best
            best = (max if better == "high" else min)(nums, key=nums.get)  # type: ignore[arg-type]  # dict.get as the key function
        rows.append({"key": key, "label": label, "values": vals, "best": best})
    warnings += [f"{s.label} ({s.tool}): {d}" for s in systems for d in s.definitions]
    warnings += [
        f"{s.label} drifts over its run: {s.drift['reason']}" for s in systems if s.drift.get("verdict") == "drifting"
    ]
    warnings += [
        f"{s.label}: the answer is {s.answer_verdict}: its probe did not hold the requests needed to decide "
        "the percentile at the chosen confidence"
        for s in systems
        if s.answer_verdict
    ]
    warnings += [
        f"{s.label}: the sweep was interrupted: its answer is at most the lower bound or bracket its decided "
        "probes show"
        for s in systems
        if s.interrupted
    ]
    return {
        "schema_version": SCORECARD_SCHEMA_VERSION,
        "systems": [
            {
                "label": s.label,
                "kind": s.kind,
                "tool": s.tool,
                "definitions": s.definitions,
                "source": s.source,
                "links": s.links,
                "conditions": s.conditions,
                "description": s.facts,
                "slo_lines": s.slo_lines,
                "slo_metric_label": s.slo_metric_label,
                "slo_metric": s.slo_metric,
                "answer_load_rps": s.answer_load_rps,
                "answer_concurrency": s.answer_concurrency,
            }
            for s in systems
        ],
        "description_rows": [
            {"key": k, "label": label, "values": {s.label: s.facts.get(k, NOT_MEASURED) for s in systems}}
            for k, label in DESCRIBE
        ],
        "comparable": comparable,
        "reasons": reasons,
        "ranking": ("shown" if comparable else "forced with --force although the conditions differ")
        if ranked
        else "withheld (conditions differ; --force to rank anyway)",
        "forced": bool(force and not comparable),
        "rows": rows,
        "warnings": warnings,
        "sustained": {
            "rule": f"drifting when |last third / first third - 1| > {DRIFT_THRESHOLD:.0%} for output tok/s, TTFT p50 or "
            f"E2E p50 (a latency also by more than {DRIFT_MIN_LATENCY_MS:g} ms)",
            "systems": {s.label: s.drift for s in systems},
        },
        "latency_curves": {
            s.label: [
                {"load_rps": x, "slo_metric_ms": y, "concurrency": c, "state": st}
                for (x, y, c), st in zip(s.curve, s.curve_states, strict=True)
            ]
            for s in systems
            if s.curve
        },
        "interactivity": {s.label: s.interactivity for s in systems if s.interactivity},
        "checks": {s.label: s.check for s in systems if s.check},
        "scaling": scaling,
        "throughput": {
            "systems": [s.label for s in in_mode],
            "rule": "max-throughput runs (--rate inf) only, ranked with each other at one batch under the same "
            f"conditions; sustained: {WINDOW_RULE}",
        }
        if in_mode
        else None,
    }


def write_outputs(card: dict[str, Any], systems: list[System], out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "scorecard.json").write_bytes(orjson.dumps(card, option=orjson.OPT_INDENT_2))
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["metric"] + [s.label for s in systems] + ["best"])
    for r in card["description_rows"]:
        w.writerow([r["label"]] + [r["values"][s.label] for s in systems] + [""])
    for r in card["rows"]:
        w.writerow([r["label"]] + [r["values"][s.label] for s in systems] + [r["best"] or ""])
    (out_dir / "scorecard.csv").write_text(buf.getvalue(), encoding="utf-8")
    (out_dir / "scorecard.html").write_text(render_html(card), encoding="utf-8")
