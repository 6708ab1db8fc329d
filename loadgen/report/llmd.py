"""The llm-d Benchmark Report v0.2.1 of a run (``loadgen export --format llmd-br``, ``--export llmd-br``).

Written from the published schema: llm-d/llm-d-benchmark,
``llmdbenchmark/analysis/benchmark_report/br_v0_2_1_json_schema.json`` (read at commit 8bc9f1dd,
2026-12; its example ``br_v0_2_1_example.yaml`` beside it). The report's required parts are
``run.uid`` and ``results``; this writes:

* ``run``: ``uid`` (a hash of the run's start and output directory), ``eid`` (the sweep's, for its
  probes), ``time`` (start, end: ISO 8601; duration ``PT<s>S``), ``description`` (the run's label).
* ``scenario.load``: ``standardized`` (tool ``loadgen`` and its version, ``source`` ``random`` for
  synthetic prompts, ``sampled`` from a trace or data set, input/output lengths as a
  ``SequenceLength`` with its distribution, ``rate_qps`` or ``concurrency``, ``stage`` for a sweep's
  probe) and ``native.args`` (``result.json`` ``config``, secrets already redacted there).
* ``results.request_performance.aggregate``: requests (total, failures, incomplete: unsent),
  latency (TTFT, TPOT, ITL: loadgen's per-token ITL, E2E as ``request_latency``; ms and ms/token)
  and throughput (request, input, output, total token rates over the run's measurement window:
  :mod:`loadgen.core.window`; ``queries/s`` and ``tokens/s``). A statistic the run did not measure
  is left out (``null``), never 0.

Percentile keys follow the schema: p50, p90, p95, p99 and p99.9 as ``p99p9``.
"""

from __future__ import annotations

import hashlib
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import orjson

from loadgen.core.contract import load_versioned
from loadgen.core.errors import InputFileError
from loadgen.version import __version__

__all__ = ["BR_FILE", "BR_VERSION", "benchmark_report", "export_dir"]

BR_VERSION = "0.2.1"
BR_FILE = "benchmark_report_v0.2.1.json"
LOAD_METADATA_SCHEMA = "0.0.1"

# loadgen's percentile keys -> the report's
PCT_KEYS = {"p50": "p50", "p90": "p90", "p95": "p95", "p99": "p99", "p999": "p99p9"}
LATENCY = (  # (report key, result.json latency_ms key, units)
    ("time_to_first_token", "ttft", "ms"),
    ("time_per_output_token", "tpot", "ms/token"),
    ("inter_token_latency", "itl", "ms/token"),
    ("request_latency", "e2e", "ms"),
)


def _stats(block: object, units: str) -> dict[str, Any] | None:
    """A report ``Statistics`` (units and mean required) from a loadgen latency block, or None."""
    if not isinstance(block, dict) or not isinstance(block.get("mean"), int | float):
        return None
    out: dict[str, Any] = {"units": units, "mean": float(block["mean"])}
    for src, dst in PCT_KEYS.items():
        if isinstance(block.get(src), int | float):
            out[dst] = float(block[src])
    if isinstance(block.get("max"), int | float):
        out["max"] = float(block["max"])
    return out


def _rate(v: object, units: str) -> dict[str, Any] | None:
    return {"units": units, "mean": float(v)} if isinstance(v, int | float) and not isinstance(v, bool) else None


def _length(spec: object) -> dict[str, Any] | None:
    """A ``SequenceLength`` from a length option as the run recorded it ("256", "lognormal:...")."""
    if spec is None:
        return None
    text = str(spec)
    try:
        return {"distribution": "fixed", "value": int(text)}
    except ValueError:
        pass
    try:
        return {"distribution": "fixed", "value": float(text)}
    except ValueError:
        return None


def _iso(t: datetime) -> str:
    return t.isoformat().replace("+00:00", "Z")


def benchmark_report(
    doc: dict[str, Any], where: Path, *, eid: str | None = None, stage: int | None = None
) -> dict[str, Any]:
    """The Benchmark Report v0.2.1 of one ``result.json`` (``doc``, read from ``where``)."""
    cfg = doc.get("config") or {}
    counts = doc.get("counts") or {}
    lat = doc.get("latency_ms") or {}
    tput = doc.get("throughput") or {}
    tokens = doc.get("tokens") or {}
    started = doc.get("started_at")
    run: dict[str, Any] = {
        "uid": hashlib.sha256(f"{started}|{where.resolve()}".encode()).hexdigest()[:32],
        "description": cfg.get("label"),
    }
    if eid is not None:
        run["eid"] = eid
    if isinstance(started, str) and isinstance(doc.get("duration_s"), int | float):
        t0 = datetime.fromisoformat(started)
        run["time"] = {"start": _iso(t0), "end": _iso(t0 + timedelta(seconds=float(doc["duration_s"]))),
                       "duration": f"PT{float(doc['duration_s'])}S"}  # fmt: skip
    standardized: dict[str, Any] = {
        "tool": "loadgen",
        "tool_version": str(doc.get("loadgen_version") or __version__),
        "source": "sampled" if cfg.get("trace") or cfg.get("dataset") else "random",
        "input_seq_len": _length(cfg.get("input_tokens")) or {"distribution": "other", "value": _mean_len(tokens, counts, "input")},
    }  # fmt: skip
    out_len = _length(cfg.get("output_tokens"))
    if out_len is not None:
        standardized["output_seq_len"] = out_len
    rate = tput.get("offered_rps")
    if isinstance(rate, int | float):
        standardized["rate_qps"] = float(rate)
    if cfg.get("concurrency") is not None:
        standardized["concurrency"] = int(cfg["concurrency"])
    if stage is not None:
        standardized["stage"] = stage
    latency = {k: s for k, m, u in LATENCY if (s := _stats(lat.get(m), u)) is not None}
    throughput = {
        k: s for k, v, u in (
            ("request_rate", tput.get("request_rps"), "queries/s"),
            ("input_token_rate", tput.get("input_tps"), "tokens/s"),
            ("output_token_rate", tput.get("output_tps"), "tokens/s"),
            ("total_token_rate", tput.get("total_tps"), "tokens/s"),
        ) if (s := _rate(v, u)) is not None
    }  # fmt: skip
    requests: dict[str, Any] = {"total": int(counts.get("requests") or 0), "failures": int(counts.get("failed") or 0),
                                "incomplete": int(counts.get("unsent") or 0)}  # fmt: skip
    return {
        "version": BR_VERSION,
        "run": run,
        "scenario": {
            "load": {
                "metadata": {"schema_version": LOAD_METADATA_SCHEMA, "cfg_id": _cfg_id(cfg)},
                "standardized": standardized,
                "native": {"args": cfg},
            }
        },
        "results": {
            "request_performance": {
                "aggregate": {"requests": requests, "latency": latency or None, "throughput": throughput or None}
            }
        },
    }


def _mean_len(tokens: dict[str, Any], counts: dict[str, Any], which: str) -> float:
    n = counts.get("completed") or counts.get("requests") or 0
    total = tokens.get(which)
    return float(total) / n if isinstance(total, int | float) and n else 0.0


def _cfg_id(cfg: dict[str, Any]) -> str:
    keep = {k: v for k, v in cfg.items() if k not in ("out_dir", "label")}
    return hashlib.sha256(orjson.dumps(keep, option=orjson.OPT_SORT_KEYS)).hexdigest()[:32]


def export_dir(out: Path) -> list[Path]:
    """Write the report beside each ``result.json`` of a run directory, or of each probe of a sweep
    directory (its ``eid`` the sweep's, ``stage`` the probe's order). Returns the files written."""
    written: list[Path] = []
    if (out / "sweep.json").exists():
        sweep = load_versioned(out / "sweep.json", "sweep")
        eid = hashlib.sha256(f"{sweep.get('started_at')}|{out.resolve()}".encode()).hexdigest()[:32]
        for i, p in enumerate(sweep.get("probes") or []):
            d = out / Path(str(p.get("dir") or "")).name if p.get("dir") else None
            if d is None or not (d / "result.json").exists():
                continue
            rep = benchmark_report(load_versioned(d / "result.json", "result"), d, eid=eid, stage=i)
            written.append(_write(d / BR_FILE, rep))
        return written
    if (out / "result.json").exists():
        return [_write(out / BR_FILE, benchmark_report(load_versioned(out / "result.json", "result"), out))]
    raise InputFileError(str(out), None, None, "holds neither sweep.json nor result.json")


def _write(path: Path, rep: dict[str, Any]) -> Path:
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(orjson.dumps(rep, option=orjson.OPT_INDENT_2))
    tmp.replace(path)
    return path
