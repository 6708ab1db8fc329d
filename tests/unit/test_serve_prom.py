"""Prometheus text parsing and the per-run deltas kept from vLLM and Triton /metrics."""

from __future__ import annotations

import math

import pytest

from loadgen.serve import prom

VLLM_BEFORE = """
# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{engine="0",model_name="tiny"} 2.0
vllm:prompt_tokens_total{engine="0",model_name="tiny"} 100.0
vllm:generation_tokens_total{engine="0",model_name="tiny"} 50.0
vllm:prefix_cache_queries_total{engine="0",model_name="tiny"} 1000.0
vllm:prefix_cache_hits_total{engine="0",model_name="tiny"} 100.0
vllm:request_success_total{engine="0",finished_reason="length",model_name="tiny"} 3.0
vllm:request_success_total{engine="0",finished_reason="stop",model_name="tiny"} 1.0
vllm:kv_cache_usage_perc{engine="0",model_name="tiny"} 0.0
vllm:num_requests_running{engine="0",model_name="tiny"} 0.0
vllm:num_requests_waiting{engine="0",model_name="tiny"} 0.0
vllm:request_queue_time_seconds_bucket{engine="0",le="0.01",model_name="tiny"} 4.0
vllm:request_queue_time_seconds_bucket{engine="0",le="0.1",model_name="tiny"} 4.0
vllm:request_queue_time_seconds_bucket{engine="0",le="+Inf",model_name="tiny"} 4.0
vllm:request_queue_time_seconds_count{engine="0",model_name="tiny"} 4.0
vllm:request_queue_time_seconds_sum{engine="0",model_name="tiny"} 0.004
"""

VLLM_AFTER = """
vllm:num_preemptions_total{engine="0",model_name="tiny"} 5.0
vllm:prompt_tokens_total{engine="0",model_name="tiny"} 1124.0
vllm:generation_tokens_total{engine="0",model_name="tiny"} 690.0
vllm:prefix_cache_queries_total{engine="0",model_name="tiny"} 3000.0
vllm:prefix_cache_hits_total{engine="0",model_name="tiny"} 600.0
vllm:request_success_total{engine="0",finished_reason="length",model_name="tiny"} 13.0
vllm:request_success_total{engine="0",finished_reason="stop",model_name="tiny"} 1.0
vllm:kv_cache_usage_perc{engine="0",model_name="tiny"} 0.01
vllm:num_requests_running{engine="0",model_name="tiny"} 0.0
vllm:num_requests_waiting{engine="0",model_name="tiny"} 0.0
vllm:request_queue_time_seconds_bucket{engine="0",le="0.01",model_name="tiny"} 9.0
vllm:request_queue_time_seconds_bucket{engine="0",le="0.1",model_name="tiny"} 14.0
vllm:request_queue_time_seconds_bucket{engine="0",le="+Inf",model_name="tiny"} 14.0
vllm:request_queue_time_seconds_count{engine="0",model_name="tiny"} 14.0
vllm:request_queue_time_seconds_sum{engine="0",model_name="tiny"} 0.304
"""

# as served by tritonserver 2.51 (PyTriton), trimmed
TRITON = """
# HELP nv_inference_request_success Number of successful inference requests, all batch sizes
# TYPE nv_inference_request_success counter
nv_inference_request_success{model="tiny_llm",version="1"} {ok}
nv_inference_request_failure{model="tiny_llm",reason="OTHER",version="1"} 0
nv_inference_request_failure{model="tiny_llm",reason="BACKEND",version="1"} {bad}
nv_inference_count{model="tiny_llm",version="1"} {ok}
nv_inference_exec_count{model="tiny_llm",version="1"} {ok}
nv_inference_request_duration_us{model="tiny_llm",version="1"} {dur}
nv_inference_queue_duration_us{model="tiny_llm",version="1"} {queue}
nv_inference_compute_infer_duration_us{model="tiny_llm",version="1"} {dur}
nv_inference_pending_request_count{model="tiny_llm",version="1"} {pending}
nv_cpu_utilization 0.995
"""


def _triton(ok: int, bad: int, dur: int, queue: int, pending: int) -> prom.Scrape:
    text = TRITON
    for k, v in dict(ok=ok, bad=bad, dur=dur, queue=queue, pending=pending).items():
        text = text.replace("{" + k + "}", str(v))
    return prom.parse(text)


def test_parse_labels_escapes_and_special_values() -> None:
    s = prom.parse(
        "# comment\n"
        "a_total 3\n"
        'b{x="q\\"uote",y="back\\\\slash",z="new\\nline"} 1.5e3 1700000000000\n'
        'c{le="+Inf"} +Inf\n'
        "not a metric line\n"
        'd{x="1"} NaN\n'
    )
    assert s["a_total"] == [((), 3.0)]
    ((labels, v),) = s["b"]
    assert dict(labels) == {"x": 'q"uote', "y": "back\\slash", "z": "new\nline"} and v == 1500.0
    assert s["c"][0][1] == math.inf
    assert math.isnan(s["d"][0][1])
    assert "not" not in s


def test_delta_total_peak() -> None:
    b, a = prom.parse(VLLM_BEFORE), prom.parse(VLLM_AFTER)
    assert prom.delta(b, a, "vllm:request_success_total") == 10
    assert prom.delta(b, a, "vllm:request_success_total", {"finished_reason": "stop"}) == 0
    assert prom.delta(b, a, "vllm:absent") is None
    assert prom.delta(a, b, "vllm:prompt_tokens_total") is None  # counter reset: no delta
    assert prom.peak(a, "vllm:kv_cache_usage_perc") == 0.01


def test_histogram_quantile_interpolates_like_prometheus() -> None:
    buckets = {0.1: 10.0, 0.2: 20.0, math.inf: 20.0}
    assert prom.histogram_quantile(0.5, buckets) == pytest.approx(0.1)
    assert prom.histogram_quantile(0.75, buckets) == pytest.approx(0.15)
    assert prom.histogram_quantile(1.0, {0.1: 1.0, math.inf: 2.0}) == 0.1  # top bucket: its lower bound
    assert prom.histogram_quantile(0.5, {}) is None
    assert prom.histogram_quantile(0.5, {1.0: 0.0}) is None


def test_bucket_bound_does_not_interpolate() -> None:
    assert prom.bucket_bound(0.5, {0.3: 31.0, 0.5: 31.0, math.inf: 31.0}) == 0.3
    assert prom.bucket_bound(0.99, {0.3: 1.0, math.inf: 10.0}) is None  # beyond the largest finite bucket
    assert prom.bucket_bound(0.5, {}) is None and prom.bucket_bound(0.5, {1.0: 0.0}) is None


def test_vllm_summary() -> None:
    b, a = prom.parse(VLLM_BEFORE), prom.parse(VLLM_AFTER)
    mid = prom.parse(VLLM_AFTER.replace("kv_cache_usage_perc{engine=\"0\",model_name=\"tiny\"} 0.01",
                                        "kv_cache_usage_perc{engine=\"0\",model_name=\"tiny\"} 0.42")
                     .replace("num_requests_waiting{engine=\"0\",model_name=\"tiny\"} 0.0",
                              "num_requests_waiting{engine=\"0\",model_name=\"tiny\"} 7.0"))  # fmt: skip
    s = prom.vllm_summary(b, a, [mid], model="tiny")
    assert s["preemptions"] == 3
    assert s["prompt_tokens"] == 1024 and s["generation_tokens"] == 640
    assert s["requests_finished"] == 10
    assert s["prefix_cache_hit_rate"] == 0.25  # 500 hits / 2000 queried tokens
    assert s["kv_cache_usage_peak"] == 0.42
    assert s["requests_waiting_peak"] == 7 and s["requests_running_peak"] == 0
    q = s["queue_time_ms"]
    assert q["count"] == 10 and q["mean"] == pytest.approx(30.0)
    assert q["p50_at_most"] == 10.0 and q["p99_at_most"] == 100.0  # 5 of 10 within 10 ms, all within 100 ms


def test_vllm_summary_leaves_out_what_the_server_lacks() -> None:
    s = prom.vllm_summary(prom.parse(""), prom.parse("vllm:prompt_tokens_total 5\n"))
    assert s == {"prompt_tokens": 5}


def test_triton_summary() -> None:
    b = _triton(ok=2, bad=0, dur=1000, queue=100, pending=0)
    mid = _triton(ok=5, bad=0, dur=5000, queue=200, pending=9)
    a = _triton(ok=12, bad=1, dur=14000, queue=1400, pending=0)
    s = prom.triton_summary(b, a, [mid], model="tiny_llm")
    assert s["requests_success"] == 10 and s["requests_failure"] == 1
    assert s["inference_count"] == 10 and s["execution_count"] == 10
    assert s["queue_time_ms_total"] == 1.3 and s["queue_time_ms_mean"] == pytest.approx(1.3 / 11, abs=1e-3)
    assert s["request_time_ms_total"] == 13.0
    assert s["pending_requests_peak"] == 9
    assert "gpu_energy_j" not in s and "vllm" not in s


# --------------------------------------------------------------------------- counters read right (issue 33 item 4)


def _page(**kw: float) -> prom.Scrape:
    """A vLLM page: ``gen0``/``gen1`` generation tokens of engines 0 and 1 (1 absent when not given), ``ok``
    finished requests, ``q``/``h`` prefix-cache queried and hit tokens, old names when ``old``."""
    pre = "vllm:gpu_prefix_cache" if kw.get("old") else "vllm:prefix_cache"
    lines = [f'vllm:generation_tokens_total{{engine="0",model_name="m"}} {kw.get("gen0", 0)}',
             f'vllm:request_success_total{{engine="0",finished_reason="length",model_name="m"}} {kw.get("ok", 0)}',
             f'{pre}_queries_total{{engine="0",model_name="m"}} {kw.get("q", 0)}',
             f'{pre}_hits_total{{engine="0",model_name="m"}} {kw.get("h", 0)}']  # fmt: skip
    if "gen1" in kw:
        lines.append(f'vllm:generation_tokens_total{{engine="1",model_name="m"}} {kw["gen1"]}')
    if "gauge" in kw:
        lines.append(f'vllm:gpu_prefix_cache_hit_rate{{model_name="m"}} {kw["gauge"]}')
    return prom.parse("\n".join(lines) + "\n")


def test_a_counter_reset_mid_run_is_bridged_and_flagged() -> None:
    # 1,000 tokens, then the server restarts (the counter reads 200 at the next scrape), then 300 more
    s = prom.vllm_summary(_page(gen0=5000), _page(gen0=500), [_page(gen0=6000), _page(gen0=200)])
    assert s["generation_tokens"] == 1000 + 200 + 300  # before: no figure at all (a delta that went down)
    assert s["counter_resets"] == {"vllm:generation_tokens_total": 1}


def test_a_32_bit_wrap_is_bridged() -> None:
    top = 2**32 - 100
    s = prom.vllm_summary(_page(gen0=top - 900), _page(gen0=400), [_page(gen0=top)])
    assert s["generation_tokens"] == 900 + 100 + 400 and s["counter_wraps"] == {"vllm:generation_tokens_total": 1}
    assert "counter_resets" not in s


def test_the_older_prefix_cache_names_are_read() -> None:
    # vLLM 0.8-0.10 (V1) exported vllm:gpu_prefix_cache_*: the hit rate silently disappeared
    s = prom.vllm_summary(_page(q=1000, h=100, old=True), _page(q=3000, h=600, old=True))
    assert s["prefix_cache_hit_rate"] == 0.25
    assert s["series_names"]["prefix_cache_queries_tokens"] == "vllm:gpu_prefix_cache_queries_total"


def test_several_engines_are_summed_with_their_labels_kept() -> None:
    s = prom.vllm_summary(_page(gen0=100, gen1=50), _page(gen0=400, gen1=250))
    assert s["generation_tokens"] == 500 and s["engines"] == 2
    assert s["generation_tokens_by_engine"] == {"0": 300, "1": 200}
    # an engine whose series appeared during the run counts from 0 (servers create labelled series lazily)
    s = prom.vllm_summary(_page(gen0=100), _page(gen0=400, gen1=250))
    assert s["generation_tokens"] == 300 + 250


def test_a_hit_rate_gauge_that_disagrees_with_the_counters_is_flagged() -> None:
    s = prom.vllm_summary(_page(q=1000, h=100, gauge=0.9), _page(q=3000, h=600, gauge=0.9))
    assert s["prefix_cache_hit_rate"] == 0.25 and s["prefix_cache_hit_rate_gauge"] == 0.9
    assert "the counters' figure is kept" in s["prefix_cache_hit_rate_disagrees"]
    s = prom.vllm_summary(_page(q=1000, h=100, gauge=0.26), _page(q=3000, h=600, gauge=0.26))
    assert "prefix_cache_hit_rate_disagrees" not in s


def test_a_short_run_gets_its_gauges_from_the_end_scrapes_and_a_partial_page_is_flagged() -> None:
    import asyncio

    from loadgen.serve.observe import ServerObserver

    pages = iter([_page(ok=10) | prom.parse('vllm:num_requests_running{engine="0"} 3\n'),
                  _page(ok=30) | prom.parse('vllm:num_requests_running{engine="0"} 5\n')])  # fmt: skip
    obs = ServerObserver("vllm", "http://127.0.0.1:9", sample_period_s=60.0, energy=False)

    async def scrape() -> prom.Scrape:
        return next(pages)

    obs.scrape = scrape  # type: ignore[method-assign]  # recorded pages
    result = {"counts": {"completed": 40}}

    async def go() -> dict[str, object]:
        await obs.begin()
        sec = await obs.end(result)
        await obs.close()
        return sec

    sec = asyncio.run(go())
    assert sec["gauges"] == {"running": {"mean": 4.0, "max": 5.0, "samples": 2}}  # no sample in between
    assert "the page counted 20 finished requests over the run, the client completed 40" in str(sec["coverage"])
