"""The front door: a misconfigured endpoint is named before any load; a pasted full path works.

Real subprocesses of ``loadgen run|sweep`` against the shared simulated endpoint and a
plain HTTP server that is not OpenAI-compatible (404 for everything), both on 127.0.0.1.
"""

from __future__ import annotations

import json
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.cli_proc import cli_run

SWEEP_SHORT = ["--slo", "ttft:p90<=2s", "--probe-duration", "2s", "--input-tokens", "16", "--output-tokens", "8"]


def error_line(p: subprocess.CompletedProcess[str]) -> str:
    """The one ``Error:`` line of a usage error (exit 2), with no traceback."""
    assert "Traceback" not in p.stderr, p.stderr
    lines = [ln for ln in p.stderr.splitlines() if ln.startswith("Error:")]
    assert len(lines) == 1, p.stderr
    return lines[0]


class _NotOpenAI(BaseHTTPRequestHandler):
    """A web server that is not OpenAI-compatible: 404 with an HTML page for every path."""

    seen: list[str] = []

    def _answer(self) -> None:
        n = int(self.headers.get("Content-Length") or 0)
        if n:
            self.rfile.read(n)
        self.seen.append(f"{self.command} {self.path}")
        body = b"<html><body><h1>Not Found</h1><p>no such page here</p></body></html>"
        self.send_response(404)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def not_openai() -> Iterator[tuple[str, list[str]]]:
    seen: list[str] = []
    handler = type("Handler", (_NotOpenAI,), {"seen": seen})
    srv = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    t = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}", seen
    finally:
        srv.shutdown()
        srv.server_close()
        t.join(timeout=10)


def test_run_wrong_model_is_named_before_any_load(sim_url: str, tmp_path: Path) -> None:
    out = tmp_path / "run"
    p = cli_run("run", "--endpoint", sim_url, "--model", "no-such-model", "--rate", "20", "--requests", "20",
                out=out)  # fmt: skip
    assert p.returncode == 2, p.stdout + p.stderr
    line = error_line(p)
    assert "HTTP 404" in line and "The model `no-such-model` does not exist" in line, line
    assert not (out / "requests.jsonl").exists() and not (out / "result.json").exists()


def test_sweep_wrong_model_stops_before_calibration(sim_url: str, tmp_path: Path) -> None:
    out = tmp_path / "sweep"
    p = cli_run("sweep", "--endpoint", sim_url, "--model", "no-such-model", *SWEEP_SHORT, out=out)
    assert p.returncode == 2, p.stdout + p.stderr
    line = error_line(p)
    assert "HTTP 404" in line and "does not exist" in line, line
    assert "no rate met" not in p.stdout + p.stderr
    assert not out.exists() or not any(out.iterdir()), sorted(x.name for x in out.iterdir())  # no probe, no sweep.json


def test_run_not_openai_compatible_without_model(not_openai: tuple[str, list[str]], tmp_path: Path) -> None:
    url, seen = not_openai
    p = cli_run("run", "--endpoint", url, "--rate", "20", "--requests", "20", out=tmp_path / "run")
    assert p.returncode == 2, p.stdout + p.stderr  # was exit 3, "/v1/models lists none"
    line = error_line(p)
    assert "GET" in line and "/v1/models" in line and "HTTP 404" in line and "Not Found" in line, line
    assert "<" not in line and not any(s.startswith("POST") for s in seen), seen


def test_sweep_not_openai_compatible_with_model(not_openai: tuple[str, list[str]], tmp_path: Path) -> None:
    url, seen = not_openai
    out = tmp_path / "sweep"
    p = cli_run("sweep", "--endpoint", url, "--model", "m", *SWEEP_SHORT, out=out)
    assert p.returncode == 2, p.stdout + p.stderr
    line = error_line(p)
    assert "POST" in line and "/v1/completions" in line and "HTTP 404" in line, line
    assert [s for s in seen if s.startswith("POST")] == ["POST /v1/completions"], seen  # the pre-flight only
    assert not out.exists() or not any(out.iterdir())


@pytest.mark.timing
def test_full_path_endpoint_picks_the_api(sim_url: str, tmp_path: Path) -> None:
    out = tmp_path / "run"
    p = cli_run("run", "--endpoint", sim_url + "/v1/chat/completions", "--rate", "20", "--requests", "10",
                "--input-tokens", "16", "--output-tokens", "8", out=out)  # fmt: skip
    assert p.returncode == 0, p.stdout + p.stderr  # was exit 6: every request an http_error
    said = [ln for ln in p.stderr.splitlines() if "/v1/chat/completions" in ln]
    assert len(said) == 1 and "--api chat" in said[0], p.stderr
    res = json.loads((out / "result.json").read_text())
    assert res["counts"]["completed"] == 10 and res["counts"]["failed"] == 0, res["counts"]
    assert res["conditions"]["endpoint"]["api"] == "chat"
    assert res["conditions"]["endpoint"]["url"].endswith("/v1/chat/completions")


def test_full_path_endpoint_clashing_api_is_a_usage_error(tmp_path: Path) -> None:
    p = cli_run("run", "--endpoint", "http://127.0.0.1:9/v1/completions", "--api", "chat", "--rate", "5",
                "--requests", "5", out=tmp_path / "run")  # fmt: skip
    assert p.returncode == 2 and "clashes with --api chat" in error_line(p), p.stderr
