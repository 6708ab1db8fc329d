"""SGLang's, TGI's and Triton's /metrics pages read into a run's figures (issue 33 item 4), on recorded page texts.

The lines follow pages the projects publish (SGLang's docs/references/production_metrics.md and PR #4444's
output, the tensorrtllm_backend README for Triton) and, for TGI, the names and exporter of its router source
(metrics-exporter-prometheus: counters without ``_total``). Before, ``--server-metrics`` against SGLang or TGI
kept only three gauges' peaks: no token, request, latency or cache figure, and a tensor-parallel SGLang
engine's running requests counted once per rank.
"""

from __future__ import annotations

from loadgen.serve.engines import sglang_summary, tgi_summary
from loadgen.serve.prom import parse, server_gauges, triton_summary

M = 'model_name="meta-llama/Llama-3.1-8B-Instruct"'


def _sglang_036(prompt: float, gen: float, ttft_sum: float, ttft_n: float, queue: float, usage: float) -> str:
    """SGLang 0.3.6-0.4.3: ``model_name`` only, no finished-request counter, no cached-token counter."""
    return (
        "# HELP sglang:prompt_tokens_total Number of prefill tokens processed.\n"
        "# TYPE sglang:prompt_tokens_total counter\n"
        f"sglang:prompt_tokens_total{{{M}}} {prompt}\n"
        f"sglang:generation_tokens_total{{{M}}} {gen}\n"
        "# TYPE sglang:token_usage gauge\n"
        f"sglang:token_usage{{{M}}} {usage}\n"
        f"sglang:num_queue_reqs{{{M}}} {queue}\n"
        f"sglang:num_running_reqs{{{M}}} 4.0\n"
        f"sglang:cache_hit_rate{{{M}}} 0.61\n"
        f"sglang:time_to_first_token_seconds_sum{{{M}}} {ttft_sum}\n"
        f'sglang:time_to_first_token_seconds_bucket{{le="0.1",{M}}} 11000\n'
        f'sglang:time_to_first_token_seconds_bucket{{le="0.5",{M}}} {ttft_n}\n'
        f'sglang:time_to_first_token_seconds_bucket{{le="+Inf",{M}}} {ttft_n}\n'
        f"sglang:time_to_first_token_seconds_count{{{M}}} {ttft_n}\n"
    )


def test_sglang_0_3_6_page_gives_tokens_gauges_and_ttft_and_no_made_up_counts() -> None:
    before = parse(_sglang_036(8.128902e06, 1.0e06, 2351.0, 11008.0, 2826.0, 0.28))
    mid = parse(_sglang_036(8.13e06, 1.0005e06, 2352.0, 11010.0, 2900.0, 0.91))
    after = parse(_sglang_036(8.138902e06, 1.002e06, 2353.0, 11018.0, 10.0, 0.30))
    m = sglang_summary(before, after, [mid], model="meta-llama/Llama-3.1-8B-Instruct")
    assert m["prompt_tokens"] == 10_000 and m["generation_tokens"] == 2_000
    assert m["requests_waiting_peak"] == 2900 and m["requests_running_peak"] == 4
    assert m["kv_cache_usage_peak"] == 0.91
    assert m["ttft_ms"]["count"] == 10 and m["ttft_ms"]["mean"] == 200.0 and m["ttft_ms"]["p99_at_most"] == 500.0
    # 0.3.6 has no finished-request or cached-token counter: left out, never 0
    assert "requests_finished" not in m and "prefix_cache_hit_rate" not in m
    assert m["prefix_cache_hit_rate_gauge_last"] == 0.61  # the last batch's, kept apart from the run's figures


def _sglang_tp(running: float, cached: dict[str, float], prompt: float, itl_name: str, itl_n: float) -> str:
    """SGLang 0.4.10+ with TP 2 (``tp_rank`` 0 and 1) and two DP groups; 0.5.x's ``cache_source`` split."""
    lines = []
    for dp in ("0", "1"):
        for tp in ("0", "1"):  # every rank of one engine reports the same scheduler figure
            lab = f'engine_type="unified",{M},dp_rank="{dp}",tp_rank="{tp}",pp_rank="0"'
            lines.append(f"sglang:num_running_reqs{{{lab}}} {running + int(dp)}")
            lines.append(f"sglang:token_usage{{{lab}}} 0.5")
    lines.append(f"sglang:prompt_tokens_total{{{M}}} {prompt}")
    lines.append(f"sglang:num_requests_total{{{M}}} {prompt / 100}")
    for src, v in cached.items():
        lines.append(f'sglang:cached_tokens_total{{cache_source="{src}",{M}}} {v}')
    lines.append(f"{itl_name}_sum{{{M}}} {itl_n * 0.02}")
    lines.append(f'{itl_name}_bucket{{le="0.05",{M}}} {itl_n}')
    lines.append(f'{itl_name}_bucket{{le="+Inf",{M}}} {itl_n}')
    lines.append(f"{itl_name}_count{{{M}}} {itl_n}")
    return "\n".join(lines) + "\n"


def test_sglang_ranks_count_once_per_engine_and_cache_hits_come_from_the_total_row() -> None:
    before = parse(
        _sglang_tp(3, {"device": 100, "host": 50, "total": 150}, 1000, "sglang:inter_token_latency_seconds", 0)
    )
    after = parse(
        _sglang_tp(5, {"device": 400, "host": 150, "total": 550}, 2000, "sglang:inter_token_latency_seconds", 50)
    )
    m = sglang_summary(before, after)
    # DP group 0 runs 5, group 1 runs 6: 11, not 22 (each TP rank repeats its engine's figure)
    assert m["requests_running_peak"] == 11
    assert server_gauges(after)["running"] == 11.0
    assert m["prefix_cache_hits_tokens"] == 400  # the "total" row, not device + host + total (800)
    assert m["prefix_cache_queries_tokens"] == 1000 and m["prefix_cache_hit_rate"] == 0.4
    assert m["requests_finished"] == 10
    assert m["itl_ms"]["count"] == 50 and m["itl_ms"]["mean"] == 20.0 and "series_names" not in m


def test_sglang_older_inter_token_name_is_read_and_named() -> None:
    """SGLang 0.4.3 and before: ``sglang:time_per_output_token_seconds`` (renamed in 0.4.4, gone in 0.4.5)."""
    old = "sglang:time_per_output_token_seconds"
    m = sglang_summary(parse(_sglang_tp(1, {}, 10, old, 10)), parse(_sglang_tp(1, {}, 20, old, 30)))
    assert m["itl_ms"]["count"] == 20 and m["series_names"] == {"itl_ms": old}


def test_sglang_counter_reset_is_bridged_and_flagged() -> None:
    def page(p: float) -> str:
        return f"sglang:prompt_tokens_total{{{M}}} {p}\nsglang:generation_tokens_total{{{M}}} 1\n"

    m = sglang_summary(parse(page(5000)), parse(page(300)), [parse(page(5200)), parse(page(100))])
    assert m["prompt_tokens"] == 200 + 100 + 200  # 5000->5200, reset, 0->100->300
    assert m["counter_resets"] == {"sglang:prompt_tokens_total": 1}


def _tgi(ok: float, failed: float, gen_sum: float, inp_sum: float, n: float, running: float, queue: float) -> str:
    return (
        "# HELP tgi_request_success Number of successful requests\n"
        "# TYPE tgi_request_success counter\n"
        f"tgi_request_success {ok}\n"
        f'tgi_request_failure{{err="validation"}} {failed}\n'
        f'tgi_request_failure{{err="overloaded"}} {failed}\n'
        "# TYPE tgi_queue_size gauge\n"
        f"tgi_queue_size {queue}\n"
        f"tgi_batch_current_size {running}\n"
        f"tgi_request_generated_tokens_sum {gen_sum}\n"
        f"tgi_request_generated_tokens_count {n}\n"
        f"tgi_request_input_length_sum {inp_sum}\n"
        f"tgi_request_input_length_count {n}\n"
        f"tgi_request_duration_sum {n * 1.5}\n"
        f'tgi_request_duration_bucket{{le="1.0"}} {n / 2}\n'
        f'tgi_request_duration_bucket{{le="2.5"}} {n}\n'
        f'tgi_request_duration_bucket{{le="+Inf"}} {n}\n'
        f"tgi_request_duration_count {n}\n"
        f'tgi_batch_forward_duration_bucket{{method="prefill",le="0.00015"}} 0\n'
    )


def test_tgi_tokens_are_its_histograms_sums_and_it_claims_no_ttft() -> None:
    before = parse(_tgi(42, 1, 50_000, 20_000, 100, 0, 0))
    mid = parse(_tgi(60, 1, 60_000, 25_000, 120, 8, 3))
    after = parse(_tgi(142, 2, 150_000, 70_000, 200, 1, 0))
    m = tgi_summary(before, after, [mid])
    assert m["generation_tokens"] == 100_000 and m["prompt_tokens"] == 50_000
    assert m["requests_finished"] == 100 and m["requests_failed"] == 2  # summed over err labels
    assert m["requests_running_peak"] == 8 and m["requests_waiting_peak"] == 3
    assert m["e2e_ms"]["count"] == 100 and m["e2e_ms"]["mean"] == 1500.0 and m["e2e_ms"]["p50_at_most"] == 1000.0
    assert not {"ttft_ms", "kv_cache_usage_peak", "prefix_cache_hit_rate"} & set(m)  # TGI exports none of them


def _triton(ok: float, hits: float, misses: float, first: float, old_cache_names: bool = False) -> str:
    lab = 'model="tensorrt_llm",version="1"'
    hit_time = "nv_cache_hit_lookup_duration_per_model" if old_cache_names else "nv_cache_hit_duration_per_model"
    return (
        "# HELP nv_inference_request_success Number of successful inference requests, all batch sizes\n"
        "# TYPE nv_inference_request_success counter\n"
        f"nv_inference_request_success{{{lab}}} {ok}\n"
        f"nv_inference_count{{{lab}}} {ok}\n"
        f"nv_inference_queue_duration_us{{{lab}}} {ok * 1500}\n"
        f"nv_inference_pending_request_count{{{lab}}} 2\n"
        f"nv_cache_num_hits_per_model{{{lab}}} {hits}\n"
        f"nv_cache_num_misses_per_model{{{lab}}} {misses}\n"
        f"{hit_time}{{{lab}}} {hits * 3}\n"
        f'nv_inference_first_response_histogram_ms_bucket{{{lab},le="100"}} {first / 2}\n'
        f'nv_inference_first_response_histogram_ms_bucket{{{lab},le="500"}} {first}\n'
        f'nv_inference_first_response_histogram_ms_bucket{{{lab},le="+Inf"}} {first}\n'
        f"nv_inference_first_response_histogram_ms_sum{{{lab}}} {first * 120}\n"
        f"nv_inference_first_response_histogram_ms_count{{{lab}}} {first}\n"
    )


def test_triton_response_cache_and_first_response_histogram() -> None:
    m = triton_summary(parse(_triton(10, 2, 8, 10)), parse(_triton(50, 12, 38, 50)), model="tensorrt_llm")
    assert m["requests_success"] == 40 and m["queue_time_ms_mean"] == 1.5 and m["pending_requests_peak"] == 2
    assert (m["response_cache_hits"], m["response_cache_misses"], m["response_cache_hit_rate"]) == (10, 30, 0.25)
    assert m["ttft_ms"]["count"] == 40 and m["ttft_ms"]["mean"] == 120.0 and m["ttft_ms"]["p50_at_most"] == 100.0
