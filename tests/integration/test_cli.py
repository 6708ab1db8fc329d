"""``loadgen run`` from the command line: usage errors, exit codes and the output files.

Usage errors go through click's CliRunner (nothing is started: ``--endpoint`` points
at a local port and every check fails before any connection); runs are real
subprocesses against the embedded simulated endpoint (127.0.0.1).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from loadgen.cli import main
from loadgen.core.contract import RESULT_SCHEMA_VERSION
from tests.fixtures.cli_proc import cli_run

NOWHERE = ["--endpoint", "http://127.0.0.1:9"]

DOCUMENTED_KEYS = {
    "schema_version",
    "interrupted",
    "config",
    "conditions",
    "duration_s",
    "counts",
    "tokens",
    "throughput",
    "latency_ms",
    "validity",
}
LATENCY_KEYS = {"ttft", "time_to_first_answer_token", "itl", "inter_chunk", "tpot", "e2e", "schedule_lag", "error_e2e"}
SUMMARY_KEYS = {"count", "mean", "p50", "p90", "p95", "p99", "p999", "max"}


def load(out: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    res = json.loads((out / "result.json").read_text())
    lines = [json.loads(x) for x in (out / "requests.jsonl").read_text().splitlines()]
    return res, lines


def expected_rc(res: dict[str, Any]) -> int:
    """0 when valid and the SLO (if any) is met, else 1."""
    ok = res["validity"]["valid"] and (res.get("slo") is None or res["slo"]["met"])
    return 0 if ok else 1


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --------------------------------------------------------------------------- usage errors

USAGE = [
    (["--rate", "5", "--concurrency", "2"], "--rate (open loop) and --concurrency (closed loop) clash: give one"),
    ([], "give --rate R (open loop), --concurrency N (closed loop) or --trace FILE"),
    (["--rate", "5", "--requests", "5", "--duration", "5s"], "--requests and --duration clash: give one"),
    (
        ["--concurrency", "2", "--max-concurrency", "3"],
        "--max-concurrency caps open-loop runs; it clashes with --concurrency",
    ),
    (
        ["--rate", "5", "--slo", "ttft<300ms"],
        "--slo: invalid SLO 'ttft<300ms': expected METRIC:pNN<=VALUE, e.g. ttft:p99<=300ms",
    ),
    (
        ["--rate", "5", "--slo", "bogus:p99<=1s"],
        "--slo: invalid SLO 'bogus:p99<=1s': metric must be one of ttft, time_to_first_answer_token, tpot, itl, e2e, stall, tbt_deadline",
    ),
    (["--rate", "5", "--duration", "5parsecs"], "invalid --duration '5parsecs': unit must be one of ns, us, ms, s, m"),
    (
        ["--rate", "5", "--extra-body", "{bad"],
        "--extra-body is not valid JSON (column 2): Expecting property name enclosed in double quotes",
    ),
    (["--rate", "5", "--extra-body", "[1]"], "--extra-body must be a JSON object"),
    (["--rate", "5", "--header", "NoColon"], "--header 'NoColon'...: expected 'Name: value' (the value is not shown)"),
    (["--rate", "5", "--burstiness", "2"], "--burstiness needs --arrival gamma"),
    (["--rate", "0"], "--rate must be > 0"),
]


@pytest.mark.parametrize("args,message", USAGE, ids=[m.split(":")[0][:40] for _, m in USAGE])
def test_usage_error(args: list[str], message: str, tmp_path: Path) -> None:
    out = tmp_path / "out"
    r = CliRunner().invoke(main, ["run", *NOWHERE, *args, "--out", str(out)])
    assert r.exit_code == 2, r.output
    assert isinstance(r.exception, SystemExit)
    errors = [ln for ln in r.output.splitlines() if ln.startswith("Error:")]
    assert errors == [f"Error: {message}"]
    assert "Traceback" not in r.output
    assert not out.exists()  # nothing ran


def test_usage_error_exit_code_in_a_real_process(tmp_path: Path) -> None:
    p = cli_run("run", *NOWHERE, "--rate", "5", "--concurrency", "2", out=tmp_path / "out")
    assert p.returncode == 2
    assert p.stdout == ""
    assert p.stderr.splitlines()[-1] == "Error: --rate (open loop) and --concurrency (closed loop) clash: give one"
    assert "Traceback" not in p.stderr


# --------------------------------------------------------------------------- unreachable


def test_unreachable_endpoint_exits_3(tmp_path: Path) -> None:
    port = free_port()
    p = cli_run(
        "run",
        "--endpoint",
        f"http://127.0.0.1:{port}",
        "--rate",
        "5",
        "--requests",
        "3",
        out=tmp_path / "out",
        timeout=30,
    )
    assert p.returncode == 3, p.stderr
    assert "Traceback" not in p.stderr
    flat = " ".join(p.stderr.split())
    assert flat.startswith(
        f"error: cannot reach http://127.0.0.1:{port}/v1/completions: Cannot connect to host 127.0.0.1:{port}"
    )
    assert not (tmp_path / "out").exists()


def test_unreachable_endpoint_error_is_one_line(tmp_path: Path) -> None:
    port = free_port()
    p = cli_run(
        "run",
        "--endpoint",
        f"http://127.0.0.1:{port}",
        "--rate",
        "5",
        "--requests",
        "3",
        out=tmp_path / "out",
        timeout=30,
    )
    assert p.returncode == 3
    assert p.stderr.splitlines() == [
        f"error: cannot reach http://127.0.0.1:{port}/v1/completions: Cannot connect to host "
        f"127.0.0.1:{port} ssl:default [Connect call failed ('127.0.0.1', {port})]"
    ]


# --------------------------------------------------------------------------- runs


def test_open_loop_run_writes_documented_files(tmp_path: Path) -> None:
    out = tmp_path / "out"
    p = cli_run("run", "--rate", "20", "--requests", "30", "--output-tokens", "4", out=out)
    assert p.returncode in (0, 1), p.stderr
    assert "Traceback" not in p.stderr
    res, lines = load(out)
    assert p.returncode == expected_rc(res)
    assert res["schema_version"] == RESULT_SCHEMA_VERSION  # loadgen.core.contract (version 1 until issue 29)
    assert DOCUMENTED_KEYS <= set(res)
    assert "slo" not in res
    assert res["interrupted"] is False
    assert res["counts"] == {
        "requests": 30,
        "completed": 30,
        "failed": 0,
        "zero_output": 0,
        "unsent": 0,
        "warmup": 0,
        "errors_by_kind": {},
    }
    assert res["tokens"]["output"] == 30 * 4
    assert res["tokens"]["input"] == 30 * 128
    assert res["config"]["embedded_simulated_endpoint"] is True
    assert set(res["latency_ms"]) == LATENCY_KEYS
    lat = res["latency_ms"]
    for name in LATENCY_KEYS:
        assert SUMMARY_KEYS <= set(lat[name]), name
    assert {k: lat[k]["count"] for k in LATENCY_KEYS} == {
        "ttft": 30,
        "time_to_first_answer_token": 30,
        "tpot": 30,
        "e2e": 30,
        "schedule_lag": 30,
        "error_e2e": 0,
        "itl": 30 * 3,
        "inter_chunk": 30 * 3,
    }
    assert lat["ttft"]["p50"] >= 50.0  # the sim's fixed 50 ms prefill
    v = res["validity"]
    assert {"valid", "limited_by", "checks"} <= set(v)
    assert {c["name"] for c in v["checks"]} >= {"schedule_lag_p99", "client_cpu", "min_requests", "min_duration"}
    assert len(lines) == 30
    assert sorted(ln["index"] for ln in lines) == list(range(30))
    assert all(ln["phase"] == "measure" and ln["status"] == "ok" and ln["output_tokens"] == 4 for ln in lines)
    hlog = (out / "histograms.hlog").read_text().splitlines()
    assert hlog[0] == "#[Histogram log format version 1.3]"
    tags = {ln.split(",", 1)[0] for ln in hlog if ln.startswith("Tag=")}
    assert tags == {
        "Tag=ttft",
        "Tag=time_to_first_answer_token",
        "Tag=itl",
        "Tag=inter_chunk",
        "Tag=tpot",
        "Tag=e2e",
        "Tag=schedule_lag",
    }


def test_every_request_failed_exits_6(tmp_path: Path) -> None:
    """A run whose measured requests all failed is no measurement: exit 6, one line on stderr."""
    out = tmp_path / "out"
    p = cli_run(
        "run", "--rate", "20", "--requests", "10", "--output-tokens", "4", "--sim-args", "--fault-500 1.0", out=out
    )
    assert "Traceback" not in p.stderr
    assert p.returncode == 6, (p.returncode, p.stderr)
    res, _ = load(out)
    assert res["counts"]["completed"] == 0 and res["counts"]["errors_by_kind"] == {"http_error": 10}
    msg = [ln for ln in p.stderr.splitlines() if "error:" in ln]
    assert msg == ["error: all 10 measured requests failed (http_error 10): nothing was measured"], p.stderr


def test_closed_loop_run(tmp_path: Path) -> None:
    out = tmp_path / "out"
    p = cli_run("run", "--concurrency", "4", "--requests", "20", "--output-tokens", "4", out=out)
    assert p.returncode in (0, 1), p.stderr
    res, lines = load(out)
    assert p.returncode == expected_rc(res)
    assert res["counts"]["requests"] == 20 and res["counts"]["completed"] == 20
    assert res["counts"]["unsent"] == 0
    assert sorted(ln["index"] for ln in lines) == list(range(20))
    assert "schedule_lag_p99" not in {c["name"] for c in res["validity"]["checks"]}  # closed loop
    # never more than 4 in flight, and 4 at the start
    ev = sorted(
        [(ln["scheduled_s"], 1) for ln in lines] + [(ln["scheduled_s"] + ln["e2e_ms"] / 1e3, -1) for ln in lines]
    )
    level, peak = 0, 0
    for _, d in ev:
        level += d
        peak = max(peak, level)
    assert peak == 4
    assert sum(1 for ln in lines if ln["scheduled_s"] < 0.01) == 4


def test_warmup_requests_are_excluded(tmp_path: Path) -> None:
    out = tmp_path / "out"
    p = cli_run("run", "--rate", "20", "--warmup", "5", "--requests", "20", "--output-tokens", "4", out=out)
    assert p.returncode in (0, 1), p.stderr
    res, lines = load(out)
    assert res["counts"]["requests"] == 20
    assert res["counts"]["warmup"] == 5
    assert res["latency_ms"]["ttft"]["count"] == 20
    assert len(lines) == 25
    assert sorted(ln["index"] for ln in lines if ln["phase"] == "warmup") == list(range(5))
    assert sorted(ln["index"] for ln in lines if ln["phase"] == "measure") == list(range(5, 25))


@pytest.mark.timing
@pytest.mark.parametrize("slo,met", [("ttft:p99<=1ms", False), ("ttft:p99<=10s", True)])
def test_slo_verdict(slo: str, met: bool, tmp_path: Path) -> None:
    out = tmp_path / "out"
    p = cli_run("run", "--rate", "20", "--requests", "10", "--output-tokens", "4", "--slo", slo, out=out)
    res, _ = load(out)
    assert res["slo"]["met"] is met
    (t,) = res["slo"]["targets"]
    assert (t["metric"], t["percentile"], t["met"], t["denominator"]) == ("ttft", 99.0, met, 10)
    assert t["threshold_ms"] == (1.0 if not met else 10_000.0)
    assert t["exceedances"] == (10 if not met else 0)
    assert t["value_ms"] >= 50.0 and t["value_ms"] == pytest.approx(res["latency_ms"]["ttft"]["p99"])
    assert res["slo"]["conforming_requests"] == (0 if not met else 10)
    if not met:
        assert p.returncode == 1
    else:
        assert p.returncode == expected_rc(res)


# --------------------------------------------------------------------------- embedded sim lifecycle


def test_embedded_sim_started_once_and_stopped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import loadgen.sim.launch as launch

    real = launch.subprocess.Popen
    sims: list[subprocess.Popen[bytes]] = []

    class Spy(real):  # type: ignore[misc, valid-type]  # the Popen class read at run time
        def __init__(self, cmd: Any, *a: Any, **k: Any) -> None:
            super().__init__(cmd, *a, **k)
            if "loadgen.sim" in list(cmd):
                sims.append(self)

    monkeypatch.setattr(launch.subprocess, "Popen", Spy)
    try:
        r = CliRunner().invoke(
            main, ["run", "--rate", "20", "--requests", "3", "--output-tokens", "2", "--out", str(tmp_path / "out")]
        )
        leaked = [s for s in sims if s.poll() is None]
    finally:
        asyncio.set_event_loop_policy(None)  # the CLI installed uvloop's policy
        for s in sims:  # children this test started: stop any left running
            if s.poll() is None:
                os.killpg(s.pid, signal.SIGTERM)
                s.wait(timeout=10)
    assert r.exit_code in (0, 1), r.output
    assert len(sims) == 1
    assert leaked == []
