"""Prometheus text exposition: parse a /metrics page, and the deltas of a run that matter.

Pure: text in, numbers out. :func:`parse` reads the text format
(https://prometheus.io/docs/instrumenting/exposition_formats/#text-based-format):
``name{label="v",...} value [timestamp]`` lines, ``#`` comments skipped, label
values unescaped. :func:`vllm_summary` and :func:`triton_summary` turn a scrape
before a run, one after, and the gauge samples taken during it into the figures a
result keeps; a series the server does not export is left out (never reported as 0).

vLLM series (V1 engine names, older names accepted):
``vllm:num_preemptions_total``, ``vllm:kv_cache_usage_perc`` (was
``vllm:gpu_cache_usage_perc``), ``vllm:prefix_cache_queries_total`` /
``vllm:prefix_cache_hits_total`` (tokens), ``vllm:request_queue_time_seconds``,
``vllm:prompt_tokens_total``, ``vllm:generation_tokens_total``,
``vllm:request_success_total``, ``vllm:num_requests_running`` / ``_waiting``,
``vllm:time_to_first_token_seconds``, ``vllm:e2e_request_latency_seconds``.
Triton series: ``nv_inference_request_success`` / ``_failure``,
``nv_inference_count``, ``nv_inference_exec_count``, ``nv_inference_queue_duration_us``,
``nv_inference_request_duration_us``, ``nv_inference_compute_infer_duration_us``,
``nv_inference_pending_request_count``, ``nv_energy_consumption``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from loadgen.serve.counters import counter_figures

__all__ = [
    "GAUGE_NAMES",
    "Scrape",
    "bucket_bound",
    "histogram_quantile",
    "parse",
    "ranks_once",
    "server_gauges",
    "triton_summary",
    "vllm_summary",
]

Labels = tuple[tuple[str, str], ...]
Scrape = dict[str, list[tuple[Labels, float]]]
"""Series name -> [(sorted label pairs, value)]."""

_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)(\s+\S+)?\s*$")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')


def _unescape(v: str) -> str:
    return v.replace("\\\\", "\0").replace('\\"', '"').replace("\\n", "\n").replace("\0", "\\")


def _value(text: str) -> float | None:
    t = text.strip()
    if t in ("+Inf", "Inf"):
        return math.inf
    if t == "-Inf":
        return -math.inf
    try:
        return float(t)
    except ValueError:
        return None


def parse(text: str) -> Scrape:
    """Parse Prometheus text format into ``{name: [(labels, value), ...]}``; bad lines are skipped."""
    out: Scrape = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = _LINE.match(line)
        if not m:
            continue
        name, _, body, val = m.group(1), m.group(2), m.group(3), m.group(4)
        v = _value(val)
        if v is None:
            continue
        labels: list[tuple[str, str]] = []
        if body:
            for lm in _LABEL.finditer(body):
                labels.append((lm.group(1), _unescape(lm.group(2))))
        out.setdefault(name, []).append((tuple(sorted(labels)), v))
    return out


def _match(labels: Labels, where: Mapping[str, str] | None) -> bool:
    if not where:
        return True
    d = dict(labels)
    return all(d.get(k) == v for k, v in where.items())


def total(s: Scrape, name: str, where: Mapping[str, str] | None = None, *, exclude: Iterable[str] = ()) -> float | None:
    """Sum of a series over its label sets (filtered by ``where``); None when absent."""
    rows = s.get(name)
    if not rows:
        return None
    ex = set(exclude)
    vals = [v for lab, v in rows if _match(lab, where) and not (ex & {k for k, _ in lab})]
    return float(sum(vals)) if vals else None


RANK_LABELS = frozenset({"tp_rank", "pp_rank", "moe_ep_rank"})
"""Labels of one engine's ranks (SGLang 0.4.10+): each rank of a tensor-, pipeline- or expert-parallel engine
exports the same scheduler figure, so it counts once per engine (:func:`ranks_once`)."""


def ranks_once(s: Scrape, name: str, where: Mapping[str, str] | None = None) -> float | None:
    """A request-count gauge summed over engines, each engine counted once: label sets that differ only
    in :data:`RANK_LABELS` are one engine (its largest value is taken); None when absent."""
    rows = s.get(name)
    if not rows:
        return None
    engines: dict[Labels, float] = {}
    for lab, v in rows:
        if _match(lab, where):
            key = tuple(kv for kv in lab if kv[0] not in RANK_LABELS)
            engines[key] = max(engines.get(key, v), v)
    return float(sum(engines.values())) if engines else None


def peak(s: Scrape, name: str, where: Mapping[str, str] | None = None) -> float | None:
    """Largest value of a gauge over its label sets; None when absent."""
    rows = s.get(name)
    if not rows:
        return None
    vals = [v for lab, v in rows if _match(lab, where)]
    return max(vals) if vals else None


def delta(before: Scrape, after: Scrape, name: str, where: Mapping[str, str] | None = None) -> float | None:
    """after - before of a counter (summed over label sets). None when the series is absent;
    a counter that went down (server restarted) gives None too."""
    a = total(after, name, where)
    if a is None:
        return None
    b = total(before, name, where) or 0.0
    d = a - b
    return d if d >= 0 else None


def _buckets(s: Scrape, name: str, where: Mapping[str, str] | None) -> dict[float, float]:
    out: dict[float, float] = {}
    for lab, v in s.get(name + "_bucket", []):
        if not _match(lab, where):
            continue
        le = dict(lab).get("le")
        b = _value(le) if le is not None else None
        if b is not None:
            out[b] = out.get(b, 0.0) + v
    return out


def histogram_quantile(q: float, buckets: Mapping[float, float]) -> float | None:
    """Quantile ``q`` (0..1) of a cumulative bucket histogram, interpolated linearly inside the
    bucket as Prometheus ``histogram_quantile`` does; None without observations."""
    found = _rank_bucket(q, buckets)
    if found is None:
        return None
    bounds, i, rank = found
    if i == len(bounds):
        return bounds[-1]
    b, c = bounds[i], buckets[bounds[i]]
    prev_b, prev_c = (bounds[i - 1], buckets[bounds[i - 1]]) if i else (0.0, 0.0)
    if math.isinf(b):
        return prev_b
    if c == prev_c:
        return b
    return prev_b + (b - prev_b) * (rank - prev_c) / (c - prev_c)


def _rank_bucket(q: float, buckets: Mapping[float, float]) -> tuple[list[float], int, float] | None:
    """Where quantile ``q`` of a cumulative bucket histogram lies: its sorted bounds, the index of the
    first bucket whose count reaches the rank (``len(bounds)`` if none does) and the rank; None without
    observations."""
    if not buckets:
        return None
    bounds = sorted(buckets)
    count = buckets[bounds[-1]]
    if count <= 0:
        return None
    rank = q * count
    i = next((i for i, b in enumerate(bounds) if buckets[b] >= rank), len(bounds))
    return bounds, i, rank


def histogram_delta(
    before: Scrape, after: Scrape, name: str, where: Mapping[str, str] | None = None, scale: float = 1.0
) -> dict[str, Any] | None:
    """Count, mean (exact), and bucket bounds for p50 and p99 of the observations a histogram
    gained between two scrapes.

    ``scale`` converts the series' unit (1000 turns seconds into milliseconds)."""
    n = delta(before, after, name + "_count", where)
    s = delta(before, after, name + "_sum", where)
    if n is None or s is None:
        return None
    b0, b1 = _buckets(before, name, where), _buckets(after, name, where)
    db = {b: max(b1[b] - b0.get(b, 0.0), 0.0) for b in b1}
    out: dict[str, Any] = {"count": int(n), "mean": (s / n * scale) if n else None}
    for q, key in ((0.5, "p50_at_most"), (0.99, "p99_at_most")):
        v = bucket_bound(q, db) if n else None
        out[key] = v * scale if v is not None else None
    return out


def bucket_bound(q: float, buckets: Mapping[float, float]) -> float | None:
    """The upper bound of the bucket holding quantile ``q``: the quantile is at most this.

    No interpolation inside the bucket (Prometheus ``histogram_quantile`` interpolates,
    which turns 31 sub-millisecond queue times in a 0..300 ms bucket into "150 ms").
    None without observations or when the quantile lies in the +Inf bucket."""
    found = _rank_bucket(q, buckets)
    if found is None:
        return None
    bounds, i, _ = found
    return None if i == len(bounds) or math.isinf(bounds[i]) else bounds[i]


HIT_RATE_TOLERANCE = 0.05
"""A server hit-rate gauge further than this from the counters' Δhits / Δqueries is flagged."""


def _r(x: float | None, nd: int = 4) -> float | None:
    return None if x is None else round(x, nd)


def vllm_summary(
    before: Scrape,
    after: Scrape,
    samples: Sequence[Scrape] = (),
    model: str | None = None,
) -> dict[str, Any]:
    """The vLLM figures of one run: counter deltas and gauge peaks (see the module docstring).

    ``kv_cache_usage_peak`` is a fraction (0..1); ``prefix_cache_hit_rate`` is
    Δhits / Δqueries in tokens; latencies are in milliseconds.
    """
    where = (
        {"model_name": model}
        if model and _has_label(after, "vllm:generation_tokens_total", "model_name", model)
        else None
    )
    scrapes = [before, *samples, after]
    got = counter_figures(  # resets and wraps bridged, older names read (loadgen.serve.counters)
        scrapes,
        (
            ("preemptions", "vllm:num_preemptions_total"),
            ("prompt_tokens", "vllm:prompt_tokens_total"),
            ("generation_tokens", "vllm:generation_tokens_total"),
            ("requests_finished", "vllm:request_success_total"),
            ("prefix_cache_queries_tokens", "vllm:prefix_cache_queries_total"),
            ("prefix_cache_hits_tokens", "vllm:prefix_cache_hits_total"),
        ),
        where,
    )
    out: dict[str, Any] = dict(got.values)
    per_engine = got.by_label.get("generation_tokens") or {}
    engines = {dict(lab).get("engine") for lab in per_engine} - {None}
    if len(engines) > 1:  # several engines behind one page: each counted
        out["engines"] = len(engines)
        out["generation_tokens_by_engine"] = {
            str(dict(lab).get("engine")): int(v) for lab, v in sorted(per_engine.items())
        }
    out.update(got.flags())
    q, h = out.get("prefix_cache_queries_tokens"), out.get("prefix_cache_hits_tokens")
    if q is not None and h is not None:
        out["prefix_cache_hit_rate"] = _r(h / q) if q else None
        gauge = peak(after, "vllm:gpu_prefix_cache_hit_rate", where)  # the V0 engine's own figure (blocks)
        if gauge is not None and out["prefix_cache_hit_rate"] is not None:
            out["prefix_cache_hit_rate_gauge"] = _r(gauge)
            if abs(gauge - out["prefix_cache_hit_rate"]) > HIT_RATE_TOLERANCE:
                out["prefix_cache_hit_rate_disagrees"] = (
                    f"the server's hit-rate gauge reads {gauge:.3f}, its counters give "
                    f"{out['prefix_cache_hit_rate']:.3f} over the run: the counters' figure is kept"
                )
    for key, gauge_names in (
        ("kv_cache_usage_peak", ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "vllm:cpu_cache_usage_perc")),
        ("requests_running_peak", ("vllm:num_requests_running",)),
        ("requests_waiting_peak", ("vllm:num_requests_waiting",)),
    ):
        for name in gauge_names:
            vals = [total(s, name, where) if "requests" in key else peak(s, name, where) for s in scrapes]
            vals = [v for v in vals if v is not None]
            if vals:
                top = max(v for v in vals if v is not None)
                out[key] = _r(top) if "kv" in key else int(top)
                break
    for key, name in (
        ("queue_time_ms", "vllm:request_queue_time_seconds"),
        ("ttft_ms", "vllm:time_to_first_token_seconds"),
        ("e2e_ms", "vllm:e2e_request_latency_seconds"),
    ):
        hd = histogram_delta(before, after, name, where, scale=1000.0)
        if hd is not None:
            out[key] = {k: _r(v, 3) if isinstance(v, float) else v for k, v in hd.items()}
    return out


def _has_label(s: Scrape, name: str, label: str, value: str) -> bool:
    return any(dict(lab).get(label) == value for lab, _ in s.get(name, []))


def triton_summary(
    before: Scrape,
    after: Scrape,
    samples: Sequence[Scrape] = (),
    model: str | None = None,
) -> dict[str, Any]:
    """The Triton figures of one run: inference counts, queue and compute time (per request, ms),
    pending-request peak, and GPU energy when Triton exports it. vLLM-backend series
    (``vllm:*``), when the model reports them, are summarized under ``vllm``."""
    where = {"model": model} if model and _has_label(after, "nv_inference_count", "model", model) else None
    out: dict[str, Any] = {}
    for key, name in (
        ("requests_success", "nv_inference_request_success"),
        ("requests_failure", "nv_inference_request_failure"),
        ("inference_count", "nv_inference_count"),
        ("execution_count", "nv_inference_exec_count"),
    ):
        d = delta(before, after, name, where)
        if d is not None:
            out[key] = int(d)
    n = (out.get("requests_success") or 0) + (out.get("requests_failure") or 0)
    for key, name in (
        ("queue_time_ms_mean", "nv_inference_queue_duration_us"),
        ("request_time_ms_mean", "nv_inference_request_duration_us"),
        ("compute_infer_time_ms_mean", "nv_inference_compute_infer_duration_us"),
    ):
        d = delta(before, after, name, where)
        if d is not None:
            out[key.replace("_mean", "_total")] = _r(d / 1000.0, 3)
            out[key] = _r(d / 1000.0 / n, 3) if n else None
    vals = [total(s, "nv_inference_pending_request_count", where) for s in (before, *samples, after)]
    present = [v for v in vals if v is not None]
    if present:
        out["pending_requests_peak"] = int(max(present))
    hits = delta(before, after, "nv_cache_num_hits_per_model", where)  # the response cache (2.19+)
    misses = delta(before, after, "nv_cache_num_misses_per_model", where)
    if hits is not None and misses is not None:
        out["response_cache_hits"], out["response_cache_misses"] = int(hits), int(misses)
        out["response_cache_hit_rate"] = _r(hits / (hits + misses)) if hits + misses else None
    ttft = histogram_delta(before, after, "nv_inference_first_response_histogram_ms", where)  # 24.11+, opt-in
    if ttft is not None:
        out["ttft_ms"] = {k: _r(v, 3) if isinstance(v, float) else v for k, v in ttft.items()}
    e = delta(before, after, "nv_energy_consumption")
    if e is not None:
        out["gpu_energy_j"] = _r(e, 3)
    if any(k.startswith("vllm:") for k in after):
        out["vllm"] = vllm_summary(before, after, samples, model)
    return out


GAUGE_NAMES: dict[str, tuple[str, ...]] = {
    "running": ("vllm:num_requests_running", "sglang:num_running_reqs", "tgi_batch_current_size"),
    "waiting": (
        "vllm:num_requests_waiting",
        "sglang:num_queue_reqs",
        "tgi_queue_size",
        "nv_inference_pending_request_count",
    ),  # fmt: skip
    "kv_cache_usage": (
        "vllm:kv_cache_usage_perc",
        "vllm:gpu_cache_usage_perc",
        "vllm:cpu_cache_usage_perc",
        "sglang:token_usage",
    ),  # fmt: skip
}
"""The server gauges put on a run's time axis, and their names per server (the first present wins):
``running`` (requests in the batch), ``waiting`` (requests queued for it; Triton: pending requests),
``kv_cache_usage`` (fraction 0..1 of the KV cache in use). Request counts are summed over label sets
(engines, models); the KV-cache fraction is the largest over them."""


def server_gauges(s: Scrape) -> dict[str, float]:
    """The :data:`GAUGE_NAMES` gauges of one scrape (a gauge the server does not export is left out)."""
    out: dict[str, float] = {}
    for key, names in GAUGE_NAMES.items():
        for name in names:
            v = peak(s, name) if key == "kv_cache_usage" else ranks_once(s, name)
            if v is not None:
                out[key] = v
                break
    return out
