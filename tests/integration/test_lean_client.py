"""``--http-client lean`` (loadgen.endpoints.lean_http / lean_pool) against hand-written servers on 127.0.0.1:
each answer's bytes scripted, the request record checked (outcome, error kind, connection facts)."""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from loadgen.core.clock import SendGate, now_ns
from loadgen.core.types import RequestRecord, RequestSpec
from loadgen.endpoints.openai import OpenAIConfig, OpenAIEndpoint
from loadgen.endpoints.providers import make_endpoint
from tests.fixtures.cli_proc import cli_run
from tests.fixtures.fake_platforms import PlatformServer, openai_chat_writes, self_signed_cert
from tests.fixtures.raw_http import RawHTTPServer, chunk, read_request

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter, int], Awaitable[None]]
HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


def event(text: str) -> bytes:
    return b"data: " + orjson.dumps({"choices": [{"text": text, "finish_reason": None}]}) + b"\n\n"


STREAM = HEAD + chunk(event("a")) + chunk(event("b")) + chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n"


class Scripted(RawHTTPServer):
    """Each request on each connection answered by ``handler(reader, writer, n)`` (n: the request's number)."""

    def __init__(self, handler: Handler) -> None:
        super().__init__()
        self.handler = handler
        self.requests = 0
        self.connections = 0
        self.seen: list[dict[str, str]] = []

    async def handle_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        while True:
            req = await read_request(reader)
            if req is None:
                return
            self.seen.append(req.headers)
            self.requests += 1
            await self.handler(reader, writer, self.requests)


def endpoint(url: str, **kw: Any) -> OpenAIEndpoint:
    cfg = OpenAIConfig(base_url=url, model="m", discover=False, preflight=False, http_client="lean",
                       request_id_prefix="t", **kw)  # fmt: skip
    return OpenAIEndpoint(cfg)


async def exchange(handler: Handler, n: int = 1, **kw: Any) -> tuple[list[RequestRecord], Scripted]:
    recs = []
    async with Scripted(handler) as srv:
        ep = endpoint(srv.url, **kw)
        await ep.open()
        try:
            for i in range(n):
                rec = RequestRecord(index=i, scheduled_ns=0, phase="measure")
                await ep.send(RequestSpec(index=i, prompt="hi", requested_output_tokens=2), rec)
                recs.append(rec)
        finally:
            await ep.close()
    return recs, srv


def answer(raw: bytes, *, close: bool = False) -> Handler:
    async def h(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        writer.write(raw)
        await writer.drain()
        if close:
            writer.close()

    return h


def test_stream_ok_and_kept_alive() -> None:
    recs, srv = asyncio.run(exchange(answer(STREAM), n=3))
    assert [r.status for r in recs] == ["ok"] * 3
    assert [len(r.events) for r in recs] == [2, 2, 2]
    assert srv.connections == 1 and [r.connection_reused for r in recs] == [False, True, True]
    first = recs[0]
    assert first.sent_ns is not None and first.response_headers_ns is not None
    assert first.tcp_connect_ns is not None and first.tls_ns is None and first.dns_ns is not None
    assert srv.seen[0]["accept-encoding"] == "identity" and srv.seen[1]["x-request-id"] == "t-1"


def test_no_stream_content_length() -> None:
    body = orjson.dumps({"choices": [{"text": "hello", "finish_reason": "length"}], "usage": {"completion_tokens": 2}})
    raw = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    recs, _ = asyncio.run(exchange(answer(raw), stream=False))
    assert recs[0].status == "ok" and recs[0].body_text == "hello" and recs[0].completion_tokens == 2


def test_body_over_the_limit_is_protocol() -> None:
    raw = b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n" + b"x" * 100
    recs, _ = asyncio.run(exchange(answer(raw), stream=False, max_event_bytes=50))
    assert recs[0].error_kind == "protocol"


def test_malformed_status_line_is_protocol() -> None:
    recs, _ = asyncio.run(exchange(answer(b"HTTP/1.1 OK fine\r\n\r\n")))
    assert recs[0].error_kind == "protocol" and "status line" in (recs[0].error_detail or "")


def test_closed_mid_body_is_incomplete_stream() -> None:
    recs, _ = asyncio.run(exchange(answer(HEAD + chunk(event("a")), close=True)))
    assert recs[0].error_kind == "incomplete_stream" and len(recs[0].events) == 1


def test_closed_before_the_head_is_connect() -> None:
    recs, _ = asyncio.run(exchange(answer(b"", close=True)))
    assert recs[0].error_kind == "connect"


def test_429_is_rate_limited_with_its_wait() -> None:
    raw = b"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 7\r\nContent-Length: 4\r\n\r\nslow"
    recs, _ = asyncio.run(exchange(answer(raw)))
    r = recs[0]
    assert r.error_kind == "rate_limited" and r.http_status == 429 and r.retry_after_s == 7.0
    assert r.error_detail == "HTTP 429: slow"


def test_redirect_is_not_followed() -> None:
    raw = b"HTTP/1.1 307 Temporary Redirect\r\nLocation: http://example.invalid/\r\nContent-Length: 0\r\n\r\n"
    recs, srv = asyncio.run(exchange(answer(raw)))
    assert recs[0].error_kind == "http_error" and recs[0].http_status == 307 and srv.requests == 1


def test_header_timeout() -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await asyncio.sleep(5)

    recs, _ = asyncio.run(exchange(silent, header_timeout_s=0.2))
    assert recs[0].error_kind == "header_timeout"


def test_idle_timeout() -> None:
    async def stall(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        writer.write(HEAD + chunk(event("a")))
        await asyncio.sleep(5)

    recs, _ = asyncio.run(exchange(stall, idle_timeout_s=0.2))
    assert recs[0].error_kind == "timeout" and "idle" in (recs[0].error_detail or "")


def test_refused_connection_is_connect() -> None:
    async def go() -> RequestRecord:
        srv = Scripted(answer(STREAM))
        port = await srv.listen()
        await srv.stop()  # nothing listens there now
        ep = endpoint(f"http://127.0.0.1:{port}")
        await ep.open()
        rec = RequestRecord(index=0, scheduled_ns=0, phase="measure")
        try:
            await ep.send(RequestSpec(index=0, prompt="hi", requested_output_tokens=2), rec)
        finally:
            await ep.close()
        return rec

    assert asyncio.run(go()).error_kind == "connect"


def test_gate_on_a_connection_the_server_closed_goes_again_fresh(
    gate_type: type[asyncio.Event] = asyncio.Event,
) -> None:
    """The keep-alive close race: the server closes the idle connection while the next request waits
    for its gate; no byte of it is written there, it goes on a fresh connection (never a connect failure)."""

    async def once_then_close(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        writer.write(STREAM)
        await writer.drain()
        if n == 1:
            writer.close()

    async def go() -> tuple[RequestRecord, RequestRecord, Scripted, int]:
        async with Scripted(once_then_close) as srv:
            ep = endpoint(srv.url)
            await ep.open()
            try:
                first = RequestRecord(index=0, scheduled_ns=0, phase="measure")
                await ep.send(RequestSpec(index=0, prompt="hi", requested_output_tokens=2), first)
                gate = gate_type()
                second = RequestRecord(index=1, scheduled_ns=0, phase="measure")
                task = asyncio.create_task(
                    ep.send(RequestSpec(index=1, prompt="hi", requested_output_tokens=2), second, gate=gate)
                )
                await asyncio.sleep(0.2)  # prepared on the kept-alive connection, which the server closes
                gate.set()
                await task
                resends = ep.describe()["client"]["stale_connection_resends"]
            finally:
                await ep.close()
        return first, second, srv, resends

    first, second, srv, resends = asyncio.run(go())
    assert first.status == "ok" and second.status == "ok", second.error_detail
    assert srv.requests == 2 and srv.connections == 2 and second.connection_reused is False
    assert resends in (0, 1)  # 0: the loop saw the close before the gate; 1: the peek at the gate did


def test_gate_on_a_connection_the_server_closed_goes_again_fresh_send_gate() -> None:
    """The same with the dispatcher's :class:`SendGate`: the write at the gate's opening finds the
    connection closed, writes nothing there, and the request goes on a fresh one."""
    test_gate_on_a_connection_the_server_closed_goes_again_fresh(SendGate)


def test_a_prepared_request_is_written_in_the_step_that_opens_its_send_gate() -> None:
    """With a :class:`SendGate`, the lean client writes a prepared request's bytes inside
    ``gate.set()`` (the dispatcher's own step): ``sent_ns`` is stamped before ``set`` returns,
    not when the request's task next runs; the answer is read as usual."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        writer.write(STREAM)
        await writer.drain()

    async def go() -> tuple[RequestRecord, int, int | None, Scripted]:
        async with Scripted(answer) as srv:
            ep = endpoint(srv.url)
            await ep.open()
            try:
                rec = RequestRecord(index=0, scheduled_ns=0, phase="measure")
                gate = SendGate()
                task = asyncio.create_task(
                    ep.send(RequestSpec(index=0, prompt="hi", requested_output_tokens=2), rec, gate=gate)
                )
                for _ in range(200):  # bounded: until the request waits at its gate with a connection
                    await asyncio.sleep(0.01)
                    if gate.on_open is not None:
                        break
                assert gate.on_open is not None and rec.sent_ns is None
                t = now_ns()
                gate.set()
                sent_at_set = rec.sent_ns  # no await between: written by set() itself
                await task
            finally:
                await ep.close()
        return rec, t, sent_at_set, srv

    rec, t, sent_at_set, srv = asyncio.run(go())
    assert sent_at_set is not None and sent_at_set >= t
    assert rec.status == "ok" and rec.sent_ns == sent_at_set and srv.requests == 1, rec.error_detail


def test_cli_run_lean_counts_equal_aiohttp(tmp_path: Path) -> None:
    """``loadgen run --http-client lean`` against the embedded simulated endpoint: the same counts and tokens
    as the aiohttp run of the same load, and the library named on the result."""
    got = {}
    for client in ("aiohttp", "lean"):
        out = tmp_path / client
        p = cli_run("run", "--http-client", client, "--requests", "40", "--concurrency", "4", "--input-tokens", "16",
                    "--output-tokens", "8", "--warmup", "0s", "--sim-args", "--fast --ttft-ms 20 --itl-ms 2",
                    out=out)  # fmt: skip
        assert p.returncode in (0, 1), p.stderr[-2000:]  # 1: a verdict on the client's timing (not asserted here)
        res = json.loads((out / "result.json").read_text(encoding="utf-8"))
        got[client] = (res["counts"], res["tokens"]["output"], res["conditions"]["endpoint"]["client"]["library"])
    assert got["lean"][:2] == got["aiohttp"][:2]
    assert got["lean"][0]["completed"] == 40 and got["lean"][1] == 40 * 8
    assert got["lean"][2].startswith("loadgen lean") and got["aiohttp"][2].startswith("aiohttp")


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl CLI")
def test_tls_through_the_standard_library(tmp_path: Path) -> None:
    """Over TLS (a self-signed certificate trusted through ``ca_file``): the first request pays TCP and TLS,
    the next reuse the connection; without the CA the certificate is refused (``connect``)."""
    cert, _key = certs = self_signed_cert(tmp_path)
    writes = openai_chat_writes(["x", "y"], [0.005, 0.005], usage={"prompt_tokens": 3, "completion_tokens": 2,
                                                                   "total_tokens": 5})  # fmt: skip

    async def go(ca: str | None, n: int) -> list[RequestRecord]:
        async with PlatformServer([{"writes": writes} for _ in range(n)], tls=certs) as srv:
            ep = make_endpoint("openai-compatible", base_url=srv.url, api="chat", model="m", preflight=False,
                               discover=False, ca_file=ca, http_client="lean")  # fmt: skip
            await ep.open()
            recs = []
            try:
                for i in range(n):
                    rec = RequestRecord(i, "measure", now_ns())
                    await ep.send(RequestSpec(i, "hi", requested_output_tokens=2), rec)
                    recs.append(rec)
            finally:
                await ep.close()
        return recs

    recs = asyncio.run(go(str(cert), 3))
    assert [r.status for r in recs] == ["ok"] * 3, recs[0].error_detail
    first = recs[0]
    assert first.tls_ns is not None and first.tls_ns > 0 and first.tcp_connect_ns is not None
    assert [r.connection_reused for r in recs] == [False, True, True] and recs[1].tls_ns is None
    refused = asyncio.run(go(None, 1))[0]
    assert refused.error_kind == "connect" and "certificate" in (refused.error_detail or "").lower()


def test_pool_limit_queues_the_next_request() -> None:
    """``pool_limit=1``: a second request in flight waits for the one connection (``pool_queued``), then reuses it."""

    async def go() -> tuple[list[RequestRecord], Scripted]:
        async with Scripted(answer(STREAM)) as srv:
            ep = endpoint(srv.url, pool_limit=1)
            await ep.open()
            recs = [RequestRecord(index=i, scheduled_ns=0, phase="measure") for i in range(3)]
            try:
                await asyncio.gather(
                    *(
                        ep.send(RequestSpec(index=i, prompt="hi", requested_output_tokens=2), r)
                        for i, r in enumerate(recs)
                    )
                )
            finally:
                await ep.close()
        return recs, srv

    recs, srv = asyncio.run(go())
    assert [r.status for r in recs] == ["ok"] * 3 and srv.connections == 1
    assert [r.pool_queued for r in recs] == [False, True, True]
    assert [r.connection_reused for r in recs] == [False, True, True]


@pytest.mark.parametrize(
    ("args", "what"),
    [
        (["--provider", "anthropic", "--api", "chat"], "--provider anthropic"),
        (["--api", "triton-http"], "--api triton"),
    ],
)
def test_cli_refuses_lean_beside_other_endpoints(args: list[str], what: str, tmp_path: Path) -> None:
    """``--http-client lean`` is the OpenAI-compatible endpoint's: another endpoint gets one usage line, no load."""
    p = cli_run("run", "--http-client", "lean", "--endpoint", "http://127.0.0.1:9", "--model", "m", "--rate", "1",
                "--requests", "1", *args, out=tmp_path / "out")  # fmt: skip
    assert p.returncode == 2 and "--http-client lean: OpenAI-compatible endpoints only" in p.stderr, p.stderr
    assert what in p.stderr and not (tmp_path / "out" / "result.json").exists()
