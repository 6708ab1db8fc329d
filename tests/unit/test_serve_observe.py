"""ServerObserver and server conditions against an in-process fake vLLM (aiohttp on 127.0.0.1)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from loadgen.serve.observe import ServerObserver
from loadgen.serve.process import ServerProcess
from loadgen.serve.server_facts import package_versions, parse_engine_log, server_conditions

ENGINE_LINE = (
    "(EngineCore pid=25386) INFO 11-30 10:48:49 [core.py:133] Initializing a V1 LLM engine (v0.32.0) with config: "
    "model='/tmp/tiny-model', speculative_config=None, tokenizer='/tmp/tiny-model', trust_remote_code=False, "
    "dtype=torch.bfloat16, max_seq_len=1024, download_dir=None, load_format=auto, tensor_parallel_size=1, "
    "pipeline_parallel_size=1, quantization=None, enforce_eager=True, kv_cache_dtype=auto, device_config=cpu, "
    "seed=0, served_model_name=tiny, enable_prefix_caching=True, enable_chunked_prefill=True, pooler_config=None"
)


class FakeVLLM:
    def __init__(self, dev_mode: bool = True) -> None:
        self.gen = 0.0
        self.resets = 0
        self.dev_mode = dev_mode
        self.url = ""

    async def version(self, r: web.Request) -> web.Response:
        return web.json_response({"version": "0.32.0"})

    async def models(self, r: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [
            {"id": "tiny", "root": "/nonexistent/tiny-model", "max_model_len": 1024}]})  # fmt: skip

    async def metrics(self, r: web.Request) -> web.Response:
        self.gen += 100
        return web.Response(
            text=(
                f'vllm:generation_tokens_total{{engine="0",model_name="tiny"}} {self.gen}\n'
                f'vllm:kv_cache_usage_perc{{engine="0",model_name="tiny"}} {0.05 if self.gen < 300 else 0.5}\n'
                'vllm:num_preemptions_total{engine="0",model_name="tiny"} 0.0\n'
            )
        )

    async def reset(self, r: web.Request) -> web.Response:
        if not self.dev_mode:
            return web.Response(status=404, text="Not Found")
        self.resets += 1
        return web.json_response({"success": True})


async def _serve(fake: FakeVLLM) -> web.AppRunner:
    app = web.Application()
    app.router.add_get("/version", fake.version)
    app.router.add_get("/v1/models", fake.models)
    app.router.add_get("/metrics", fake.metrics)
    app.router.add_post("/reset_prefix_cache", fake.reset)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    fake.url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]  # a started site's asyncio Server
    return runner


def test_parse_engine_log() -> None:
    facts = parse_engine_log("noise\n" + ENGINE_LINE + "\nmore")
    assert facts["engine_version"] == "0.32.0" and facts["dtype"] == "bfloat16" and facts["max_seq_len"] == "1024"
    assert facts["device_config"] == "cpu" and facts["enable_prefix_caching"] == "True"
    assert parse_engine_log("nothing here") == {}


@pytest.mark.timing
def test_observer_window_reset_and_conditions(tmp_path: Path) -> None:
    fake = FakeVLLM()

    async def go() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any], dict[str, Any]]:
        runner = await _serve(fake)
        obs = ServerObserver("vllm", fake.url, model="tiny", sample_period_s=0.05)
        try:
            cond = await obs.conditions()
            await obs.begin()
            await asyncio.sleep(0.3)
            result: dict[str, Any] = {"tokens": {"output": 640}}
            section = await obs.end(result)
            reset = await obs.reset_prefix_cache()
            return cond, section, result, reset
        finally:
            await obs.close()
            await runner.cleanup()

    cond, section, result, reset = asyncio.run(go())
    assert cond["kind"] == "vllm" and cond["version"] == "0.32.0" and cond["served_model"] == "tiny"
    assert cond["max_model_len"] == 1024 and cond["launched_by_loadgen"] is False
    assert "dtype" in cond["unknown"] and "packages" in cond["unknown"]  # not launched by us: no log, no interpreter
    assert cond["accelerator"]["kind"] in ("cpu", "nvidia-gpu") and cond["loadgen_version"]
    assert result["server"] is section
    m = section["metrics"]
    assert m["generation_tokens"] >= 200 and m["preemptions"] == 0 and m["kv_cache_usage_peak"] == 0.5
    assert section["scrapes"] >= 3
    if not section["energy"]["measured"]:
        assert section["energy"]["reason"].startswith("no NVIDIA GPU: energy not measured")
    assert reset == {"reset": True, "how": "POST /reset_prefix_cache"} and fake.resets == 1


def test_reset_not_offered() -> None:
    fake = FakeVLLM(dev_mode=False)

    async def go() -> tuple[dict[str, Any], dict[str, Any]]:
        runner = await _serve(fake)
        try:
            v = ServerObserver("vllm", fake.url)
            t = ServerObserver("triton", fake.url)
            out = (await v.reset_prefix_cache(), await t.reset_prefix_cache())
            await v.close()
            await t.close()
            return out
        finally:
            await runner.cleanup()

    v, t = asyncio.run(go())
    assert v["reset"] is False and "VLLM_SERVER_DEV_MODE=1" in v["detail"]
    assert t == {"reset": False, "how": None, "detail": "triton offers no prefix-cache reset"}


def test_metrics_unreachable_is_said() -> None:
    async def go() -> dict[str, Any]:
        obs = ServerObserver("vllm", "http://127.0.0.1:9")
        try:
            await obs.begin()
            return await obs.end()
        finally:
            await obs.close()

    s = asyncio.run(go())
    assert s["metrics"] is None and "reading http://127.0.0.1:9/metrics" in s["metrics_unavailable"]


def test_conditions_of_launched_server_use_its_log_and_interpreter(tmp_path: Path) -> None:
    fake = FakeVLLM()
    srv = ServerProcess(kind="vllm", command=["python"], ready_url="", base_url="", log_dir=str(tmp_path),
                        info={"engine_options": ["--max-model-len", "1024"], "server_python": sys.executable})  # fmt: skip
    Path(srv.log_path).write_text(ENGINE_LINE + "\n")

    async def go() -> dict[str, Any]:
        runner = await _serve(fake)
        try:
            return await server_conditions("vllm", fake.url, server=srv, model="tiny")
        finally:
            await runner.cleanup()

    cond = asyncio.run(go())
    assert cond["dtype"] == "bfloat16" and cond["dtype_source"] == "server log (engine config)"
    assert cond["engine_options"] == ["--max-model-len", "1024"] and cond["launched_by_loadgen"]
    assert cond["packages"]["python"] and cond["unknown"] == []


def test_package_versions() -> None:
    v = package_versions(sys.executable, ("aiohttp", "surely-not-installed-pkg"))
    assert v is not None and "aiohttp" in v and "surely-not-installed-pkg" not in v
    assert package_versions("/nonexistent/python") is None


@pytest.mark.timing
def test_gauges_over_time_on_the_run_clock_and_kind_told_by_names() -> None:
    # issue 18: the server's gauges each scrape, stamped on the client's monotonic clock, in s from the run's t0
    from loadgen.core.clock import now_ns
    from loadgen.serve import prom

    fake = FakeVLLM()

    async def go() -> tuple[dict[str, Any], str, int, int]:
        runner = await _serve(fake)
        obs = ServerObserver("auto", fake.url, metrics_url=fake.url + "/metrics", sample_period_s=0.05, energy=False)
        try:
            t0 = now_ns()
            await obs.begin()
            await asyncio.sleep(0.4)
            section = await obs.end({"conditions": {"t0_monotonic_ns": t0}})
            return section, obs.kind, t0, now_ns()
        finally:
            await obs.close()
            await runner.cleanup()

    section, kind, t0, t1 = asyncio.run(go())
    assert kind == "vllm" and section["kind"] == "vllm"  # told from the vllm: names
    ser = section["series"]
    assert len(ser["t_s"]) >= 3 and ser["t_s"] == sorted(ser["t_s"])
    assert 0 < ser["t_s"][0] and ser["t_s"][-1] <= (t1 - t0) / 1e9
    assert set(ser["gauges"]) == {"kv_cache_usage"} and ser["gauges"]["kv_cache_usage"][-1] == 0.5
    text = 'vllm:num_requests_running{engine="0"} 3\nvllm:num_requests_running{engine="1"} 2\n'
    text += 'vllm:num_requests_waiting{engine="0"} 7\nvllm:kv_cache_usage_perc{engine="0"} 0.25\n'
    text += 'vllm:kv_cache_usage_perc{engine="1"} 0.5\n'
    assert prom.server_gauges(prom.parse(text)) == {"running": 5.0, "waiting": 7.0, "kv_cache_usage": 0.5}
    assert prom.server_gauges(prom.parse("sglang:num_queue_reqs 4\nsglang:token_usage 0.1\n")) == {
        "waiting": 4.0, "kv_cache_usage": 0.1}  # fmt: skip
