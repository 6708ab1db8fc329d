"""Protocol faults from public bug reports, through ``loadgen run`` against local fakes (127.0.0.1).

* Azure ``finish_reason: "content_filter"`` is the ``filtered`` outcome (counted, shown, never
  conforming), and Azure's quota headers ``-1`` / reset ``0`` are unknown, not numbers.
* An Anthropic stream left open after ``message_stop`` ends at ``message_stop`` (no timeout).
* A TLS handshake that never finishes is one line naming the TLS phase.
* A stream delivered in two reads a few ms apart is ``buffered``: no TPOT, a warning.

Exact values from the same bytes are in tests/unit/test_provider_parsers.py and
tests/unit/test_provider_ratelimit.py; these check what the user types.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from loadgen.core.clock import now_ns
from loadgen.core.types import RequestRecord, RequestSpec
from loadgen.endpoints.providers import make_endpoint
from tests.fixtures.cli_proc import cli_run
from tests.fixtures.fake_platforms import PlatformServer, anthropic_writes, azure_chat_writes, openai_chat_writes


def test_run_azure_content_filter_is_filtered_and_minus_one_quota_is_unknown(tmp_path: Path) -> None:
    n = 4
    scripts = []
    for i in range(n):
        w = azure_chat_writes(
            ["a", "b", "c"],
            [0.01, 0.02, 0.03],
            usage={"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13},
            finish_reason="content_filter" if i % 2 else "stop",
        )
        headers = {
            "x-ratelimit-limit-tokens": "-1",  # Azure where it keeps no token quota
            "x-ratelimit-remaining-tokens": "-1",
            "x-ratelimit-reset-tokens": "0",
            "x-ratelimit-remaining-requests": str(100 - i),
        }
        scripts.append({"writes": w, "headers": headers})
    out = tmp_path / "out"
    with PlatformServer(scripts) as srv:
        p = cli_run(
            "run", "--provider", "azure", "--endpoint", srv.url, "--deployment", "d", "--api-key-env", "AZ_TEST_KEY",
            "--rate", "20", "--arrival", "constant", "--requests", str(n), "--no-preflight",
            "--input-tokens", "10", "--output-tokens", "3", "--slo", "ttft:p99<=5s",
            out=out, env={"AZ_TEST_KEY": "azure-test-key-0123456789"},
        )  # fmt: skip
    assert "Traceback" not in p.stderr, p.stderr
    res = json.loads((out / "result.json").read_text())
    c = res["counts"]
    assert c["completed"] == 2 and c["failed"] == 2 and c["errors_by_kind"] == {"filtered": 2}
    assert "filtered=2" in p.stdout
    assert res["slo"]["conforming_requests"] == 2 and res["tokens"]["output"] == 6
    lines = [json.loads(ln) for ln in (out / "requests.jsonl").read_text().splitlines()]
    assert sorted(ln.get("error_kind") or "ok" for ln in lines) == ["filtered", "filtered", "ok", "ok"]
    series = res["rate_limit"]["series"]
    assert sorted(series["remaining_requests"]) == [97, 98, 99, 100]
    assert not {"limit_tokens", "remaining_tokens", "reset_tokens_s"} & set(series)


@pytest.mark.timing
def test_run_anthropic_stream_left_open_after_message_stop_ends_there(tmp_path: Path) -> None:
    # message_stop at 30 ms, then the body stays open for 20 s; the request deadline is 8 s
    w = anthropic_writes([("text", [(0.01, "Hi"), (0.02, " there")])], input_tokens=20, output_deltas=[(0.03, 2)])
    scripts = [{"writes": w, "then": "hold", "hold_until": 20.0} for _ in range(3)]
    out = tmp_path / "out"
    with PlatformServer(scripts, models=["claude-test"]) as srv:
        t0 = time.monotonic()
        p = cli_run(
            "run", "--provider", "anthropic", "--endpoint", srv.url, "--model", "claude-test", "--rate", "20",
            "--requests", "3", "--output-tokens", "2", "--timeout", "8s", out=out,
        )  # fmt: skip
        wall_s = time.monotonic() - t0
    assert "Traceback" not in p.stderr, p.stderr
    res = json.loads((out / "result.json").read_text())
    assert res["counts"]["completed"] == 3 and res["counts"]["failed"] == 0, res["counts"]
    assert res["latency_ms"]["e2e"]["max"] < 1000  # ends at message_stop (~30 ms), not at a deadline
    assert wall_s < 8 + 20  # nothing waited for the 8 s deadline; generous for a busy machine


class HangingTCPServer:
    """Accepts TCP connections on 127.0.0.1 and never answers (the TLS ClientHello goes unread)."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.accepted: list[socket.socket] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def _serve(self) -> None:
        for _ in range(100_000):  # bounded: 0.2 s per idle turn
            if self._stop.is_set():
                return
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            self.accepted.append(conn)

    def __enter__(self) -> HangingTCPServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)
        for c in self.accepted:
            c.close()
        self.sock.close()


@pytest.fixture
def hanging_tls() -> Iterator[HangingTCPServer]:
    with HangingTCPServer() as srv:
        yield srv


def test_run_tls_handshake_that_never_finishes_is_one_line_naming_tls(
    hanging_tls: HangingTCPServer, tmp_path: Path
) -> None:
    port = hanging_tls.port
    p = cli_run(
        "run", "--endpoint", f"https://127.0.0.1:{port}", "--model", "m", "--rate", "5", "--requests", "2",
        "--connect-timeout", "1s", out=tmp_path / "out",
    )  # fmt: skip
    assert p.returncode == 3, p.stdout + p.stderr
    assert "Traceback" not in p.stderr
    line = f"timeout: TLS handshake with 127.0.0.1:{port} did not finish within 1 s"
    assert line in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert hanging_tls.accepted  # the TCP connect was made: it is the handshake that hung


def test_request_whose_tls_handshake_never_finishes_is_a_timeout_naming_tls(hanging_tls: HangingTCPServer) -> None:
    async def go() -> RequestRecord:
        ep = make_endpoint(
            "openai-compatible",
            base_url=f"https://127.0.0.1:{hanging_tls.port}",
            model="m",
            preflight=False,
            discover=False,
            connect_timeout_s=0.5,
        )
        await ep.open()
        try:
            rec = RequestRecord(0, "measure", now_ns())
            await ep.send(RequestSpec(0, "hi", requested_output_tokens=2), rec)
            return rec
        finally:
            await ep.close()

    rec = asyncio.run(go())
    assert rec.error_kind == "timeout"
    assert rec.error_detail == f"TLS handshake with 127.0.0.1:{hanging_tls.port} did not finish within 0.5 s"


@pytest.mark.timing
def test_run_stream_in_two_reads_a_few_ms_apart_is_buffered(tmp_path: Path) -> None:
    # 8 tokens: the first 4 chunks written at 200 ms, the rest 3 ms later (a proxy flushing twice)
    n = 4
    toks = [f"w{i}" for i in range(8)]
    w = openai_chat_writes(toks, [0.2] * 4 + [0.203] * 4, usage={"prompt_tokens": 8, "completion_tokens": 8,
                                                                   "total_tokens": 16})  # fmt: skip
    out = tmp_path / "out"
    with PlatformServer([{"writes": w} for _ in range(n)]) as srv:
        p = cli_run(
            "run", "--endpoint", srv.url, "--api", "chat", "--model", "scripted", "--rate", "20",
            "--arrival", "constant", "--requests", str(n), "--no-preflight", "--output-tokens", "8", out=out,
        )  # fmt: skip
    assert "Traceback" not in p.stderr, p.stderr
    res = json.loads((out / "result.json").read_text())
    assert res["counts"]["completed"] == n and res["counts"]["buffered"] == n
    assert not res["latency_ms"]["tpot"].get("count")
    warn = {ch["name"]: ch for ch in res["validity"]["checks"]}["streaming_not_buffered"]
    assert warn["ok"] is False
    assert "streaming_not_buffered" in p.stdout
