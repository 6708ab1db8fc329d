"""The figures of one run from SGLang's and TGI's /metrics pages, with the same keys as vLLM's.

Pure: scrapes in, numbers out, as :func:`loadgen.serve.prom.vllm_summary` (whose keys these share:
``prompt_tokens``, ``generation_tokens``, ``requests_finished``, ``requests_running_peak``,
``requests_waiting_peak``, ``kv_cache_usage_peak``, ``ttft_ms``, ``e2e_ms``, ``queue_time_ms``, the
prefix cache's tokens and hit rate). Counters are read over every scrape, resets and wraps bridged and
older names read (:func:`loadgen.serve.counters.counter_figures`); a series the server does not export
is left out, never reported as 0. The names, their types and the versions that renamed or added them
are the table in docs/measurement.md ("Server counters"), taken from each project's source.

**SGLang** (``--enable-metrics``; ``sglang:`` since 0.3.6, never renamed as a prefix): tokens are
counters (``sglang:prompt_tokens_total``, ``sglang:generation_tokens_total``), finished requests
``sglang:num_requests_total`` (0.4.2+, successes and failures), the prefix cache's hit tokens
``sglang:cached_tokens_total`` (0.4.4+; from 0.5.x a ``cache_source`` label splits it: the ``total``
row is read where present). SGLang looks every prompt token up in its radix cache, so the hit rate
is cached tokens / prompt tokens. Its ``sglang:cache_hit_rate`` gauge is the last batch's, not the
run's: kept as ``prefix_cache_hit_rate_gauge_last``, never compared. Scheduler gauges carry
``tp_rank`` / ``pp_rank`` / ``moe_ep_rank`` (0.4.10+): every rank of one engine reports the same
figure, so it is read once per engine (:func:`loadgen.serve.prom.ranks_once`) and summed over
``dp_rank`` groups.

**TGI** (``tgi_``; no metric renamed since v0.3.0): no token counter exists; the totals are the
``_sum`` of the per-request histograms ``tgi_request_input_length`` and
``tgi_request_generated_tokens``. Finished requests ``tgi_request_success``, failures
``tgi_request_failure`` (by ``err``), running ``tgi_batch_current_size``, waiting ``tgi_queue_size``,
E2E ``tgi_request_duration`` and queue time ``tgi_request_queue_duration`` (seconds). TGI exports no
TTFT, KV-cache or prefix-cache figure.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from loadgen.serve.counters import RENAMED, counter_figures, first_present
from loadgen.serve.prom import Scrape, histogram_delta, peak, ranks_once

__all__ = ["sglang_summary", "tgi_summary"]


def _r(x: float | None, nd: int = 4) -> float | None:
    return None if x is None else round(x, nd)


def _where_model(after: Scrape, name: str, model: str | None) -> dict[str, str] | None:
    if model and any(dict(lab).get("model_name") == model for lab, _ in after.get(name, [])):
        return {"model_name": model}
    return None


def _peaks(
    scrapes: Sequence[Scrape], gauges: Sequence[tuple[str, str]], where: dict[str, str] | None
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, name in gauges:
        if "kv" in key:
            vals = [peak(s, name, where) for s in scrapes]
        else:
            vals = [ranks_once(s, name, where) for s in scrapes]
        present = [v for v in vals if v is not None]
        if present:
            out[key] = _r(max(present)) if "kv" in key else int(max(present))
    return out


def _histograms(
    before: Scrape, after: Scrape, hists: Sequence[tuple[str, str]], where: dict[str, str] | None
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, name in hists:
        used = first_present([before, after], RENAMED.get(name, (name,))) or name
        hd = histogram_delta(before, after, used, where, scale=1000.0)
        if hd is not None:
            out[key] = {k: _r(v, 3) if isinstance(v, float) else v for k, v in hd.items()}
            if used != name:
                out.setdefault("series_names", {})[key] = used
    return out


def sglang_summary(
    before: Scrape, after: Scrape, samples: Sequence[Scrape] = (), model: str | None = None
) -> dict[str, Any]:
    """The SGLang figures of one run (module docstring); latencies in milliseconds."""
    where = _where_model(after, "sglang:generation_tokens_total", model)
    scrapes = [before, *samples, after]
    got = counter_figures(
        scrapes,
        (
            ("prompt_tokens", "sglang:prompt_tokens_total"),
            ("generation_tokens", "sglang:generation_tokens_total"),
            ("requests_finished", "sglang:num_requests_total"),
        ),
        where,
    )
    cache_where = dict(where or {})
    if any(dict(lab).get("cache_source") == "total" for lab, _ in after.get("sglang:cached_tokens_total", [])):
        cache_where["cache_source"] = "total"  # 0.5.x splits hits by tier: device, host, storage, and their total
    hits = counter_figures(scrapes, (("prefix_cache_hits_tokens", "sglang:cached_tokens_total"),), cache_where)
    out: dict[str, Any] = {**got.values, **hits.values}
    for part in (got.flags(), hits.flags()):
        for k, v in part.items():
            out.setdefault(k, {}).update(v)
    h, q = out.get("prefix_cache_hits_tokens"), out.get("prompt_tokens")
    if h is not None and q is not None:
        out["prefix_cache_queries_tokens"] = q  # every prompt token is looked up in the radix cache
        out["prefix_cache_hit_rate"] = _r(h / q) if q else None
    last = peak(after, "sglang:cache_hit_rate", where)
    if last is not None:
        out["prefix_cache_hit_rate_gauge_last"] = _r(last)  # the last batch's, not the run's
    out.update(
        _peaks(
            scrapes,
            (
                ("kv_cache_usage_peak", "sglang:token_usage"),
                ("requests_running_peak", "sglang:num_running_reqs"),
                ("requests_waiting_peak", "sglang:num_queue_reqs"),
            ),
            where,
        )
    )
    hists = _histograms(
        before,
        after,
        (
            ("queue_time_ms", "sglang:queue_time_seconds"),
            ("ttft_ms", "sglang:time_to_first_token_seconds"),
            ("itl_ms", "sglang:inter_token_latency_seconds"),
            ("e2e_ms", "sglang:e2e_request_latency_seconds"),
        ),
        where,
    )
    for k, v in hists.pop("series_names", {}).items():
        out.setdefault("series_names", {})[k] = v
    out.update(hists)
    return out


def tgi_summary(
    before: Scrape, after: Scrape, samples: Sequence[Scrape] = (), model: str | None = None
) -> dict[str, Any]:
    """The TGI figures of one run (module docstring; TGI's series carry no model label: ``model`` is unused)."""
    scrapes = [before, *samples, after]
    got = counter_figures(
        scrapes,
        (
            ("prompt_tokens", "tgi_request_input_length_sum"),  # the per-request histograms' sums
            ("generation_tokens", "tgi_request_generated_tokens_sum"),
            ("requests_finished", "tgi_request_success"),
            ("requests_failed", "tgi_request_failure"),
        ),
    )
    out: dict[str, Any] = {**got.values, **got.flags()}
    out.update(
        _peaks(
            scrapes,
            (("requests_running_peak", "tgi_batch_current_size"), ("requests_waiting_peak", "tgi_queue_size")),
            None,
        )
    )
    out.update(
        _histograms(
            before,
            after,
            (("queue_time_ms", "tgi_request_queue_duration"), ("e2e_ms", "tgi_request_duration")),
            None,
        )
    )
    return out
