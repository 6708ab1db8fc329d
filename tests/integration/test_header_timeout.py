"""A server that accepts and never answers must not hold a run (issue 34, item 4: ``--header-timeout``).

The server here is a real TCP server on 127.0.0.1, started by the test in a thread of its own:
it accepts every connection and reads every request, and never writes a byte to a POST (a GET,
Triton's discovery, gets its JSON). Before ``--header-timeout`` each request waited the 600 s
total ``--timeout`` for headers (a 20 s run took 613 s). Now a request with no response headers
within the header timeout ends as ``header_timeout``: sent, failed by the server, never the
client's limit. Every endpoint kind over HTTP (OpenAI chat, Anthropic, Azure OpenAI, Triton
``generate_stream``) and the Locust client; Triton gRPC in ``tests/unit/test_triton_grpc.py``.

The server stops itself after :data:`SERVER_LIFETIME_S` whatever the test does, and at teardown.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from loadgen.core.clock import now_ns
from loadgen.core.types import RequestRecord, RequestSpec
from loadgen.endpoints.anthropic import AnthropicConfig, AnthropicEndpoint
from loadgen.endpoints.openai import OpenAIConfig, OpenAIEndpoint
from loadgen.endpoints.providers import make_endpoint
from loadgen.endpoints.triton import TritonConfig, TritonEndpoint
from tests.fixtures.cli_proc import REPO, cli_env, cli_run

pytestmark = pytest.mark.timeout(120)

SERVER_LIFETIME_S = 60.0
"""The hung server closes itself after this long, even if a test never stops it."""

EXIT_ALL_FAILED = 6  # loadgen.cli: every measured request failed (the server's failures)


class HungServer:
    """Accepts, reads, never answers a POST; answers a GET with ``{"name": "m"}`` (Triton's
    ``/v2`` and model config) and closes. ``posts``: POST request heads received."""

    def __init__(self) -> None:
        self.posts = 0
        self.port = 0
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            if head.startswith(b"GET"):
                body = b'{"name": "m"}'
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
                             b"Content-Length: %d\r\n\r\n%s" % (len(body), body))  # fmt: skip
                await writer.drain()
                return
            self.posts += 1
            while await reader.read(65536):  # read whatever comes, answer nothing, until the client leaves
                pass
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        finally:
            writer.close()

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        async with server:
            try:
                await asyncio.wait_for(self._stop.wait(), SERVER_LIFETIME_S)
            except TimeoutError:
                pass

    def __enter__(self) -> HungServer:
        self._thread.start()
        assert self._ready.wait(10.0), "the hung server did not start"
        return self

    def __exit__(self, *exc: object) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10.0)


@pytest.fixture
def hung() -> Iterator[HungServer]:
    with HungServer() as srv:
        yield srv


def _requests(out: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (out / "requests.jsonl").read_text().splitlines() if x.strip()]


@pytest.mark.timing
@pytest.mark.parametrize("via", ["flag", "config_file"])
def test_run_against_a_server_that_never_answers_ends_at_the_header_timeout(
    hung: HungServer, tmp_path: Path, via: str
) -> None:
    """``loadgen run --header-timeout 1s`` (as a flag, and from a ``--config`` file): both requests
    end as ``header_timeout`` about 1 s after their send, the run ends in seconds (not the 600 s
    ``--timeout``), exits as a run whose every request failed at the server, and the verdict does
    not blame the client."""
    args = ["--endpoint", hung.url, "--api", "chat", "--model", "m", "--rate", "2", "--requests", "2",
            "--no-preflight"]  # fmt: skip
    if via == "flag":
        args += ["--header-timeout", "1s"]
    else:
        cfg = tmp_path / "run.toml"
        cfg.write_text('header-timeout = "1s"\n')
        args += ["--config", str(cfg)]
    out = tmp_path / "out"
    t = time.monotonic()
    p = cli_run("run", *args, out=out, timeout=90)
    wall = time.monotonic() - t
    assert p.returncode == EXIT_ALL_FAILED, (p.returncode, p.stderr[-3000:])
    assert "header_timeout 2" in p.stderr, p.stderr[-3000:]
    assert wall < 30.0, wall  # a hang bound (seconds here; 600 s before): not a speed measurement
    assert hung.posts == 2  # both reached the server: sent, and not answered
    res = json.loads((out / "result.json").read_text())
    c = res["counts"]
    assert c["requests"] == 2 and c["failed"] == 2 and c["completed"] == 0 and c["unsent"] == 0, c
    assert c["errors_by_kind"] == {"header_timeout": 2}, c
    v = res["validity"]
    assert v["limited_by"] != "client" and v["valid"] is True, v
    assert "server_failed" in v  # the server's errors, stated as such
    assert res["conditions"]["endpoint"]["client"]["header_timeout_s"] == 1.0
    for ln in _requests(out):
        assert ln["error_kind"] == "header_timeout", ln
        assert "no response headers within 1 s" in ln["error_detail"], ln
        assert ln["sent_s"] is not None, ln  # sent: a failure at the server, never "unsent"
        assert 1000.0 <= ln["error_e2e_ms"] < 30_000.0, ln


def _spec(i: int = 0) -> RequestSpec:
    return RequestSpec(index=i, prompt="hello", requested_output_tokens=4)


async def _send_one(ep: Any, gate_after_s: float | None = None) -> RequestRecord:
    """Open ``ep``, send one request (prepared ahead of a gate opened ``gate_after_s`` later when
    given), close; bounded at 30 s whatever happens."""
    await ep.open()
    try:
        ahead_ns = round((gate_after_s or 0.0) * 1e9)
        rec = RequestRecord(index=0, phase="measure", scheduled_ns=now_ns() + ahead_ns)
        if gate_after_s is None:
            await asyncio.wait_for(ep.send(_spec(), rec), 30.0)
            return rec
        gate = asyncio.Event()
        asyncio.get_running_loop().call_later(gate_after_s, gate.set)
        await asyncio.wait_for(ep.send(_spec(), rec, gate), 30.0)
        return rec
    finally:
        await ep.close()


def _endpoint(kind: str, url: str, header_s: float, timeout_s: float = 30.0) -> Any:
    if kind == "openai-chat":
        return OpenAIEndpoint(OpenAIConfig(base_url=url, api="chat", model="m", preflight=False, discover=False,
                                           timeout_s=timeout_s, header_timeout_s=header_s))  # fmt: skip
    if kind == "anthropic":
        return AnthropicEndpoint(AnthropicConfig(base_url=url, model="m", discover=False, timeout_s=timeout_s,
                                                 header_timeout_s=header_s))  # fmt: skip
    if kind == "azure":
        return make_endpoint("azure", base_url=url, api="chat", model="m", deployment="d", preflight=False,
                             discover=False, timeout_s=timeout_s, header_timeout_s=header_s)  # fmt: skip
    assert kind == "triton-http"
    return TritonEndpoint(TritonConfig(url=url, protocol="http", model="m", timeout_s=timeout_s,
                                       header_timeout_s=header_s))  # fmt: skip


@pytest.mark.parametrize("kind", ["openai-chat", "anthropic", "azure", "triton-http"])
def test_every_http_endpoint_kind_ends_a_silent_request_as_header_timeout(hung: HungServer, kind: str) -> None:
    ep = _endpoint(kind, hung.url, 0.5)
    rec = asyncio.run(_send_one(ep))
    assert rec.status == "error" and rec.error_kind == "header_timeout", (rec.error_kind, rec.error_detail)
    assert "no response headers within 0.5 s" in (rec.error_detail or "")
    assert rec.sent_ns is not None and rec.response_headers_ns is None
    assert rec.end_ns is not None and rec.end_ns - rec.sent_ns >= 0.45e9
    assert hung.posts == 1
    client = ep.describe()["client"]
    assert client["header_timeout_s"] == 0.5


def test_a_prepared_request_waits_from_its_scheduled_time(hung: HungServer) -> None:
    """A request prepared 0.4 s ahead of its gate (open loop, pooled connection): its header wait
    counts from the scheduled time, as its total deadline does, never from the preparation."""
    ep = _endpoint("openai-chat", hung.url, 0.5)
    assert ep.accepts_send_gate()
    rec = asyncio.run(_send_one(ep, gate_after_s=0.4))
    assert rec.error_kind == "header_timeout", (rec.error_kind, rec.error_detail)
    assert rec.end_ns is not None and rec.end_ns - rec.scheduled_ns >= 0.5e9


def test_the_total_deadline_wins_when_it_is_shorter(hung: HungServer) -> None:
    """A header timeout not shorter than ``--timeout`` never fires: the request is a ``timeout``."""
    ep = _endpoint("openai-chat", hung.url, 5.0, timeout_s=0.5)
    rec = asyncio.run(_send_one(ep))
    assert rec.error_kind == "timeout", (rec.error_kind, rec.error_detail)


LOCUST_CHILD = r"""
import json, sys
import locust  # noqa: F401 - the standard library patched by gevent, as under Locust
from loadgen.core.clock import now_ns
from loadgen.locust.client import GeventClient, client_settings
from loadgen.core.types import RequestRecord, RequestSpec

cfg = dict(endpoint_url=sys.argv[1], api="chat", model="m", headers={}, api_key_env=None, extra_body={},
           timeout_s=30.0, connect_timeout_s=5.0, header_timeout_s=0.5, pool_limit=4, verify_tls=True,
           accepted={"continuous_usage_stats": False, "include_usage": False, "ignore_eos": False,
                     "min_tokens": False})
client = GeventClient(cfg, "r")
rec = RequestRecord(index=0, phase="measure", scheduled_ns=now_ns())
client.send(client.prepare(RequestSpec(index=0, prompt="x")), rec)
print(json.dumps({"kind": rec.error_kind, "detail": rec.error_detail, "took_s": (now_ns() - rec.sent_ns) / 1e9,
                  "settings": client_settings(cfg)}))
"""


@pytest.mark.skipif(importlib.util.find_spec("locust") is None, reason="Locust not installed")
def test_locust_client_ends_a_silent_request_as_header_timeout(hung: HungServer) -> None:
    """``loadgen locust``'s gevent client, with the header timeout its command resolves."""
    p = subprocess.run([sys.executable, "-c", LOCUST_CHILD, hung.url], cwd=REPO, env=cli_env(),
                       capture_output=True, text=True, timeout=60)  # fmt: skip
    assert p.returncode == 0, p.stderr[-3000:]
    got = json.loads(p.stdout.strip().splitlines()[-1])
    assert got["kind"] == "header_timeout", got
    assert "no response headers within 0.5 s" in got["detail"] and 0.45 <= got["took_s"] < 20.0, got
    assert got["settings"]["header_timeout_s"] == 0.5
    assert hung.posts == 1
