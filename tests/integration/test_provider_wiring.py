"""Providers, quotas and prices through ``loadgen run`` / the sweep (127.0.0.1 only).

* ``run --provider azure`` and ``--provider anthropic`` against byte-exact fakes: the
  result carries the rate-limit series, the cost block (exact, from the usage the
  fake reports) and no key anywhere in the output directory.
* A sweep against the simulated endpoint answering mostly 429 ends with
  ``limited_by: rate_limit``.
* A sweep priced per token reports the cost per million output tokens at the answer:
  p_out + p_in * input_tokens / output_tokens (loadgen/core/pricing.py), checked against the
  answer probe's own token counts.
* The confirmation before a non-loopback endpoint, as a function (no traffic at all).

Skipped until the CLI/sweep wiring of these options is in place.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from loadgen.cli.run import run_cmd
from tests.fixtures.cli_proc import cli_run

WIRED = any(p.name == "provider" for p in run_cmd.params)
pytestmark = pytest.mark.skipif(not WIRED, reason="--provider/--price-* not wired into loadgen.cli yet")

P_IN, P_OUT = 2.5, 10.0


def all_output_text(out: Path, p: subprocess.CompletedProcess[str]) -> str:
    parts = [p.stdout, p.stderr]
    for f in out.rglob("*"):
        if f.is_file():
            parts.append(f.read_text(errors="replace"))
    return "\n".join(parts)


def test_run_azure_cost_and_quota_series(tmp_path: Path) -> None:
    from tests.fixtures.fake_platforms import PlatformServer, azure_chat_writes

    n = 4
    scripts = []
    for i in range(n):
        w = azure_chat_writes(
            ["a", "b", "c"],
            [0.01, 0.02, 0.03],
            filter_at_s=0.0,
            usage={"prompt_tokens": 100, "completion_tokens": 3, "total_tokens": 103},
        )
        scripts.append(
            {
                "writes": w,
                "headers": {
                    "x-ratelimit-remaining-requests": str(100 - i),
                    "x-ratelimit-remaining-tokens": str(10000 - 103 * i),
                    "x-ratelimit-reset-tokens": "6m0s",
                },
            }
        )
    srv = PlatformServer(scripts).start_in_thread()
    key = "azure-SENTINEL-KEY-7d1f0c2b9a"
    out = tmp_path / "out"
    try:
        p = cli_run(
            "run",
            "--provider",
            "azure",
            "--endpoint",
            srv.url,
            "--deployment",
            "gpt4o",
            "--api-key-env",
            "AZ_TEST_KEY",
            "--rate",
            "20",
            "--arrival",
            "constant",
            "--requests",
            str(n),
            "--no-preflight",
            "--input-tokens",
            "100",
            "--output-tokens",
            "3",
            "--price-input-per-million",
            str(P_IN),
            "--price-output-per-million",
            str(P_OUT),
            out=out,
            env={"AZ_TEST_KEY": key},
        )
    finally:
        srv.stop_thread()
    assert p.returncode in (0, 1), p.stderr
    assert all(r.headers.get("api-key") == key for r in srv.posts)
    assert all(r.path.startswith("/openai/deployments/gpt4o/chat/completions?api-version=") for r in srv.posts)
    res = json.loads((out / "result.json").read_text())
    assert res["counts"]["completed"] == n
    cost = res["cost"]
    assert cost["total_usd"] == pytest.approx((n * 100 * P_IN + n * 3 * P_OUT) / 1e6)
    assert cost["per_million_output_tokens_usd"] == pytest.approx(P_OUT + P_IN * 100 / 3)
    series = res["rate_limit"]["series"]
    assert sorted(series["remaining_requests"]) == [97, 98, 99, 100] and set(series["reset_tokens_s"]) == {360.0}
    assert res["conditions"]["endpoint"]["provider"] == "azure"
    assert key not in all_output_text(out, p)


def test_run_anthropic(tmp_path: Path) -> None:
    from tests.fixtures.fake_platforms import PlatformServer, anthropic_writes

    w = anthropic_writes([("text", [(0.01, "Hi"), (0.02, " there")])], input_tokens=20, output_deltas=[(0.03, 2)])
    srv = PlatformServer([{"writes": w} for _ in range(3)], models=["claude-test"]).start_in_thread()
    key = "sk-ant-SENTINEL-0a9b8c7d6e"
    out = tmp_path / "out"
    try:
        p = cli_run(
            "run",
            "--provider",
            "anthropic",
            "--endpoint",
            srv.url,
            "--model",
            "claude-test",
            "--api-key-env",
            "ANT_TEST_KEY",
            "--rate",
            "20",
            "--requests",
            "3",
            "--output-tokens",
            "2",
            out=out,
            env={"ANT_TEST_KEY": key},
        )
    finally:
        srv.stop_thread()
    assert p.returncode in (0, 1), p.stderr
    assert all(r.path == "/v1/messages" and r.headers.get("x-api-key") == key for r in srv.posts)
    res = json.loads((out / "result.json").read_text())
    assert res["counts"]["completed"] == 3 and res["tokens"]["output"] == 6 and res["tokens"]["input"] == 60
    assert res["conditions"]["endpoint"]["kind"] == "anthropic"
    assert key not in all_output_text(out, p)


def _sweep(sim_args: list[str], out: Path, **scfg_kw: Any) -> Any:
    from loadgen.core.slo import parse_slo
    from loadgen.endpoints.providers import make_endpoint
    from loadgen.engine.runplan import LoadConfig
    from loadgen.engine.validity import ValidityBounds
    from loadgen.sim.launch import SimProcess
    from loadgen.sweep import Sweep, SweepConfig

    with SimProcess(sim_args) as sim:

        async def go() -> Any:
            ep = make_endpoint("openai-compatible", base_url=sim.url, api="completions", preflight=False)
            await ep.open()
            try:
                scfg = SweepConfig(
                    slos=[parse_slo("ttft:p50<=2s")],
                    probe_duration_s=1.0,
                    probe_warmup_s=0.0,
                    calibration_s=0.0,
                    max_extensions=0,
                    **scfg_kw,
                )
                # loose generator bounds: a busy 2-core test machine must not make the probe "invalid"
                loose = ValidityBounds(
                    max_schedule_lag_p99_ms=1000, send_rate_tolerance=1.0, max_client_cpu=2.0, max_loop_lag_p99_ms=1000
                )
                base = LoadConfig(input_tokens=64, output_tokens=8, arrival="constant", bounds=loose)
                return await Sweep(ep, base, scfg, out, config_record={}).search()
            finally:
                await ep.close()

        return asyncio.run(go())


@pytest.mark.timing
def test_sweep_dominated_by_429_is_limited_by_rate_limit(tmp_path: Path) -> None:
    outcome = _sweep(
        ["--fault-429", "0.9", "--seed", "3", "--ttft-ms", "5", "--itl-ms", "1"],
        tmp_path,
        start_rate_rps=20.0,
        max_rate_rps=40.0,
    )
    a = outcome.result["answer"]
    assert a["limited_by"] == "rate_limit" and a["rate_limited_at"] == 20.0
    assert a["max_rate_rps"] is None and len(outcome.probes) == 1
    p = outcome.probes[0]
    assert p.verdict == "rate_limited" and p.rate_limited_fraction > 0.5
    assert any("429" in r for r in p.reasons)
    from loadgen.report.sweep_report import answer_line

    assert "quota" in answer_line(outcome.result)


@pytest.mark.timing
def test_sweep_priced_per_token_reports_cost_per_million_output_tokens(tmp_path: Path) -> None:
    from loadgen.core.pricing import TokenPrices

    outcome = _sweep(
        ["--ttft-ms", "5", "--itl-ms", "1"],
        tmp_path,
        start_rate_rps=10.0,
        max_rate_rps=10.0,
        prices=TokenPrices(P_IN, P_OUT),
    )
    a = outcome.result["answer"]
    assert a["limited_by"] == "max_rate" and a["pricing"] == "per_token"
    probe = next(p for p in outcome.probes if p.verdict == "pass")
    res = json.loads((tmp_path / probe.dir / "result.json").read_text())
    i, o = res["tokens"]["input"], res["tokens"]["output"]
    assert i > 0 and o > 0
    # the documented formula, from the answer probe's own token counts
    assert a["cost_per_million_output_tokens_usd"] == pytest.approx(P_OUT + P_IN * i / o, rel=1e-9)
    # paid on the measured requests' own tokens: input and demanded output over the window
    per_s = (a["total_tps"] - a["output_tps"]) * P_IN / 1e6 + a["demanded_output_tps"] * P_OUT / 1e6
    assert a["cost_per_successful_request_usd"] == pytest.approx(per_s / a["goodput_rps"], rel=1e-9)
    assert outcome.result["settings"]["prices"]["output_per_million_usd"] == P_OUT


def test_confirmation_before_a_non_loopback_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    import click
    from rich.console import Console

    from loadgen.cli import target as cli
    from loadgen.core.pricing import estimate_run

    est = estimate_run(100, 128, 64, None)
    err = Console(stderr=True)
    # loopback and the embedded sim: nothing asked
    cli.confirm_remote(False, "http://127.0.0.1:8000", False, est, err)
    cli.confirm_remote(False, "http://203.0.113.7:8000", True, est, err)
    # a script (no terminal) must say --yes
    monkeypatch.setattr(sys.stdin, "isatty", lambda: False, raising=False)
    with pytest.raises(click.UsageError, match="--yes"):
        cli.confirm_remote(False, "http://203.0.113.7:8000", False, est, err)
    cli.confirm_remote(True, "http://203.0.113.7:8000", False, est, err)
    # a terminal is asked
    monkeypatch.setattr(sys.stdin, "isatty", lambda: True, raising=False)
    monkeypatch.setattr(click, "confirm", lambda *a, **k: False)
    with pytest.raises(click.Abort):
        cli.confirm_remote(False, "http://203.0.113.7:8000", False, est, err)
    monkeypatch.setattr(click, "confirm", lambda *a, **k: True)
    cli.confirm_remote(False, "http://203.0.113.7:8000", False, est, err)
