"""Peers' result files as systems of the scorecard (``loadgen compare``): ``vllm bench serve
--save-result`` JSON, GuideLLM's ``benchmarks.json`` and AIPerf's ``profile_export_aiperf.json``.

Each file becomes one :class:`~loadgen.report.compare.System` a run (GuideLLM: one a benchmark
of the file) holding the peer's own figures, placed in loadgen's rows only where the definitions
are the same, and each definition that is not the same named (``System.definitions``, printed
as the scorecard's warnings). Mapped from the tools' sources and their documentation (vLLM
0.33 ``benchmarks/serve.py``, GuideLLM 0.8 ``benchmark/schemas``, AIPerf 0.13 metric docs):

============================  ==========================  ==========================  ===========================
loadgen row                   vllm bench serve            GuideLLM                    AIPerf
============================  ==========================  ==========================  ===========================
TTFT                          ``pNN_ttft_ms``             ``time_to_first_token_ms``  ``time_to_first_token``
TPOT ((last-first)/(n-1))     ``pNN_tpot_ms``             ``inter_token_latency_ms``  ``inter_token_latency``
                                                          (its per-request mean)      (its per-request mean)
inter-chunk gap               ``pNN_itl_ms`` (per chunk)  (none)                      ``inter_chunk_latency``
per-token ITL                 (none: per chunk)           (none)                      (none)
E2E                           ``pNN_e2el_ms``             ``request_latency`` (s)     ``request_latency``
output tok/s                  ``output_throughput``       ``output_tokens_per_        ``output_token_throughput``
                              (whole run)                 second`` mean (whole run)   (whole run)
============================  ==========================  ==========================  ===========================

Every peer measures latency from its own send of a request (``latency_origin: sent``, as loadgen's
closed loop does), not from the time the request was due: in open loop a client that fell behind its
schedule hides that lag (loadgen: from the scheduled time, :mod:`loadgen.core.metrics`). Their rates are over the whole run, ramp and drain included
(loadgen: the measurement window, :mod:`loadgen.core.window`). Both are conditions of the
comparison (``latency_origin``, ``rate_window``), so the ranking is withheld against a loadgen
run unless ``--force``. GuideLLM's ``time_per_output_token_ms`` divides the whole request by its
tokens (TTFT included): not loadgen's TPOT, so not placed.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from loadgen.core.contract import peer_format
from loadgen.core.errors import InputFileError
from loadgen.report.compare import NOT_MEASURED, ROWS, System, load_system

__all__ = ["PEER_FORMATS", "detect", "load_any", "peer_systems"]

PEER_MAX_BYTES = 512 * 1024 * 1024
"""The largest peer file read (GuideLLM keeps every request in its file)."""

DISPATCH = (
    "from the tool's own send of each request (after its concurrency gate): in open loop a client behind its "
    "schedule hides its lag (loadgen measures from the due time)"
)
WHOLE_RUN = "over the whole run, ramp and drain included"


def detect(doc: object) -> str | None:
    """The peer format of a parsed JSON document, or None (a loadgen file, or nothing known):
    :func:`loadgen.core.contract.peer_format`."""
    return peer_format(doc)


def _num(v: object) -> float | None:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def _ms(v: object, scale: float = 1.0) -> float | str:
    x = _num(v)
    return NOT_MEASURED if x is None else x * scale


def _system(label: str, source: Path, tool: str) -> System:
    return System(label=label, source=str(source), kind="run", tool=tool)


def _finish(s: System, cond: dict[str, Any], values: dict[str, Any]) -> System:
    values.setdefault("sustained", f"{NOT_MEASURED} (a peer's summary holds no time series)")
    for k, _, _ in ROWS:  # a row its file does not give: "not measured", never 0
        values.setdefault(k, NOT_MEASURED)
    s.values = {k: NOT_MEASURED if v is None else v for k, v in values.items()}
    s.conditions = {
        "model": cond.get("model"),
        "api": cond.get("api"),
        "stream": cond.get("stream"),
        # as loadgen records its length options (text): 256 and "256" are the same length
        "input_tokens": None if cond.get("input_tokens") is None else str(cond["input_tokens"]),
        "output_tokens": None if cond.get("output_tokens") is None else str(cond["output_tokens"]),
        "slo": [],
        "arrival": cond.get("arrival"),
        "latency_origin": "sent",  # loadgen's word for it: the same as a closed-loop loadgen run's
        "rate_window": "whole run",
        "schema": None,
        "server_version": None,
        "loadgen_version": None,
        "max_throughput": None,
        "tool": s.tool,
    }
    s.facts = {"model": cond.get("model") or NOT_MEASURED, "server": NOT_MEASURED, "accelerator": NOT_MEASURED,
               "cost_per_hour": NOT_MEASURED}  # fmt: skip
    return s


def _vllm_bench(doc: dict[str, Any], path: Path, label: str) -> list[System]:
    s = _system(label, path, f"vllm bench serve ({doc.get('backend')})")
    s.definitions = [
        f"TTFT, TPOT, E2E {DISPATCH}",
        "ITL is the gap between chunks (loadgen's inter-chunk gap row); loadgen's per-token ITL is not measured by it",
        f"output tok/s {WHOLE_RUN}",
    ]
    v: dict[str, Any] = {}
    for m, key in (("ttft", "ttft"), ("tpot", "tpot"), ("inter_chunk", "itl"), ("e2e", "e2el")):
        for p in ("p50", "p99"):
            v[f"{m}_{p}_ms"] = _ms(doc.get(f"{p}_{key}_ms", doc.get(f"median_{key}_ms") if p == "p50" else None))
    done, failed = _num(doc.get("completed")) or 0.0, _num(doc.get("failed")) or 0.0
    v["error_rate"] = failed / (done + failed) if done + failed else NOT_MEASURED
    v["output_tps"] = _num(doc.get("output_throughput"))
    v["goodput_rps"] = _num(doc.get("request_goodput"))
    rate = doc.get("request_rate")
    conc = doc.get("max_concurrency")
    arrival = (
        f"closed loop, {conc} concurrent" if rate in ("inf", None) and conc
        else f"{'poisson' if doc.get('burstiness') in (1, 1.0, None) else 'gamma'} at {rate} req/s"
    )  # fmt: skip
    # its backends: "vllm" / "openai" post to /v1/completions, "openai-chat" to /v1/chat/completions
    api = {"vllm": "completions", "openai": "completions", "openai-chat": "chat"}.get(str(doc.get("backend")))
    cond = {"model": doc.get("model_id"), "api": api, "stream": True, "arrival": arrival,
            "input_tokens": _mean_of(doc.get("total_input_tokens"), done),
            "output_tokens": _mean_of(doc.get("total_output_tokens"), done)}  # fmt: skip
    return [_finish(s, cond, v)]


def _mean_of(total: object, n: float) -> int | None:
    t = _num(total)
    return round(t / n) if t is not None and n else None


def _aiperf(doc: dict[str, Any], path: Path, label: str) -> list[System]:
    s = _system(label, path, f"AIPerf {doc.get('aiperf_version') or ''}".strip())
    s.definitions = [
        f"TTFT, E2E {DISPATCH}",
        "its inter_token_latency is a per-request mean, (last - first) / (tokens - 1): loadgen's TPOT row",
        "its inter_chunk_latency is the gap between chunks: loadgen's inter-chunk gap row",
        f"output tok/s {WHOLE_RUN}",
    ]

    def stat(name: str, key: str) -> float | str:
        blk = doc.get(name)
        return _ms(blk.get(key)) if isinstance(blk, dict) else NOT_MEASURED

    v: dict[str, Any] = {}
    for m, name in (("ttft", "time_to_first_token"), ("tpot", "inter_token_latency"),
                    ("inter_chunk", "inter_chunk_latency"), ("e2e", "request_latency")):  # fmt: skip
        for p in ("p50", "p99"):
            v[f"{m}_{p}_ms"] = stat(name, p)
    v["output_tps"] = _num((doc.get("output_token_throughput") or {}).get("avg"))
    v["goodput_rps"] = _num((doc.get("good_request_throughput") or {}).get("avg"))
    err = _num((doc.get("request_error_rate") or {}).get("avg"))
    v["error_rate"] = err / 100.0 if err is not None else NOT_MEASURED
    cfg = doc.get("input_config") or {}
    ep = cfg.get("endpoint") or {}
    models = ((cfg.get("models") or {}).get("items") or [{}])[0]
    phases = [p for p in cfg.get("phases") or [] if isinstance(p, dict) and p.get("kind") == "profiling"]
    ph = phases[0] if phases else {}
    arrival = (
        f"closed loop, {ph.get('concurrency')} concurrent" if ph.get("type") == "concurrency" and ph.get("concurrency")
        else ph.get("type")
    )  # fmt: skip
    cond = {"model": models.get("name"), "api": ep.get("type"), "stream": ep.get("streaming"), "arrival": arrival,
            "input_tokens": _ms((doc.get("input_sequence_length") or {}).get("avg")),
            "output_tokens": _ms((doc.get("output_sequence_length") or {}).get("avg"))}  # fmt: skip
    for k in ("input_tokens", "output_tokens"):
        cond[k] = round(cond[k]) if isinstance(cond[k], float) else None
    return [_finish(s, cond, v)]


def _guidellm(doc: dict[str, Any], path: Path, label: str) -> list[System]:
    version = (doc.get("metadata") or {}).get("guidellm_version") or ""
    spec = (doc.get("config") or {}).get("spec") or {}
    backend = spec.get("backend") or {}
    data = (spec.get("data") or [{}])[0] if isinstance(spec.get("data"), list) else {}
    out: list[System] = []
    benches = [b for b in doc["benchmarks"] if isinstance(b, dict)]
    for i, b in enumerate(benches):
        strat = (b.get("config") or {}).get("strategy") or {}
        kind = strat.get("type_")
        name = label if len(benches) == 1 else f"{label} #{i + 1} ({kind})"
        s = _system(name, path, f"GuideLLM {version}".strip())
        s.definitions = [
            f"TTFT, E2E {DISPATCH}",
            "its inter_token_latency is a per-request mean, (last - first) / (tokens - 1): loadgen's TPOT row; "
            "it has no per-chunk or per-token gap",
            "its time_per_output_token divides the whole request by its tokens (TTFT included): not placed",
            f"output tok/s {WHOLE_RUN}",
        ]
        m = b.get("metrics") or {}

        def pct(name: str, p: str, scale: float = 1.0, m: dict[str, Any] = m) -> float | str:
            blk = ((m.get(name) or {}).get("successful") or {}) if isinstance(m.get(name), dict) else {}
            return _ms((blk.get("percentiles") or {}).get(p), scale)

        v: dict[str, Any] = {}
        for met, name, scale in (("ttft", "time_to_first_token_ms", 1.0), ("tpot", "inter_token_latency_ms", 1.0),
                                 ("e2e", "request_latency", 1000.0)):  # fmt: skip
            for p in ("p50", "p99"):
                v[f"{met}_{p}_ms"] = pct(name, p, scale)
        v["output_tps"] = _num(((m.get("output_tokens_per_second") or {}).get("successful") or {}).get("mean"))
        tot = (m.get("request_totals") or {}) if isinstance(m.get("request_totals"), dict) else {}
        n, bad = _num(tot.get("total")), (_num(tot.get("errored")) or 0.0) + (_num(tot.get("incomplete")) or 0.0)
        v["error_rate"] = bad / n if n else NOT_MEASURED
        arrival = (
            f"closed loop, {strat.get('streams')} concurrent" if kind == "concurrent"
            else f"{kind} at {strat.get('rate')} req/s" if strat.get("rate") else kind
        )  # fmt: skip
        fmt = str(backend.get("request_format") or "")
        cond = {"model": backend.get("model"), "stream": backend.get("stream"), "arrival": arrival,
                "api": "completions" if fmt.endswith("/completions") and "chat" not in fmt else ("chat" if "chat" in fmt else None),
                "input_tokens": data.get("prompt_tokens"), "output_tokens": data.get("output_tokens")}  # fmt: skip
        out.append(_finish(s, cond, v))
    return out


PEER_FORMATS: dict[str, Callable[[dict[str, Any], Path, str], list[System]]] = {
    "vllm-bench": _vllm_bench,
    "guidellm": _guidellm,
    "aiperf": _aiperf,
}


def peer_systems(path: Path, label: str | None = None) -> list[System] | None:
    """The systems of a peer's result file, or None where ``path`` is not one (read it as loadgen's)."""
    if path.is_dir() or path.suffix.lower() != ".json":
        return None
    try:
        if path.stat().st_size > PEER_MAX_BYTES:
            return None
        doc = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None  # loadgen's own reader names the fault in one line
    kind = detect(doc)
    if kind is None:
        return None
    try:
        return PEER_FORMATS[kind](doc, path, label or path.stem)
    except (AttributeError, TypeError, KeyError, IndexError, ValueError) as exc:
        raise InputFileError(str(path), None, None, f"a {kind} result file this loadgen cannot read ({exc})") from None


def load_any(path: str, label: str | None = None, check: str | None = None) -> list[System]:
    """The systems of one input of ``loadgen compare``: a peer's result file, or loadgen's run or sweep."""
    peers = peer_systems(Path(path), label)
    if peers is not None:
        return peers
    return [load_system(path, label, check)]
