"""Pushed stream reads (``loadgen.endpoints.reads.read_pushed``) against real 127.0.0.1 servers.

The same streamed body, cut into reads at many different byte offsets, gives the same record
through ``read_pushed`` as through aiohttp's ``iter_any`` loop it replaces; a reader's own error
and a connection reset mid-body surface in the reading task, and the response's reader is
left a plain ``aiohttp.StreamReader``. Then ``loadgen sim --fast`` (the lean benchmark server)
against ``loadgen run``: every request answered, the truth log holding one line per request.
"""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path

import aiohttp
import pytest

from loadgen.core.clock import now_ns
from loadgen.core.errors import ProtocolError
from loadgen.core.redact import Redactor
from loadgen.core.types import RequestRecord
from loadgen.endpoints.openai_stream import OpenAIStreamParser
from loadgen.endpoints.reads import read_pushed
from loadgen.sim.launch import SimProcess
from tests.fixtures.cli_proc import cli_run
from tests.fixtures.raw_http import RawHTTPServer, chunk, read_request, reset

TOKENS = 40


def _events(bad_at: int | None = None) -> bytes:
    out = []
    for k in range(1, TOKENS + 1):
        fr = '"length"' if k == TOKENS else "null"
        text = "\\u00e9t\\u00e9" if k % 7 == 0 else f" w{k}"
        data = (
            f'{{"id":"c","object":"text_completion","choices":[{{"index":0,"text":"{text}","finish_reason":{fr}}}],'
            f'"usage":{{"prompt_tokens":3,"completion_tokens":{k},"total_tokens":{k + 3}}}}}'
        )
        if k == bad_at:
            data = '{"choices": ['
        out.append(f"data: {data}\n\n")
        if k == 5:
            out.append(": a comment\n\n")  # not the common event: the decoder's path, then back
    out.append('data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":40,"total_tokens":43}}\n\n')
    out.append("data: [DONE]\n\n")
    return "".join(out).encode()


class _Cutter(RawHTTPServer):
    """Answers every request with the same chunked SSE body cut into pieces at seeded random
    offsets (a chunk may hold part of an event, or several), a pause between writes; ``reset_after``:
    RST after that many bytes of the body."""

    def __init__(self, body: bytes, seed: int, reset_after: int | None = None) -> None:
        super().__init__()
        self.body = body
        self.seed = seed
        self.reset_after = reset_after

    async def handle_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        rng = random.Random(self.seed)
        while await read_request(reader) is not None:
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
            i = 0
            while i < len(self.body):
                j = min(len(self.body), i + rng.randint(1, 300))
                if self.reset_after is not None and j >= self.reset_after:
                    writer.write(chunk(self.body[i : self.reset_after]))
                    await writer.drain()
                    await asyncio.sleep(0.01)
                    reset(writer)
                    return
                writer.write(chunk(self.body[i:j]))
                if rng.random() < 0.3:
                    await writer.drain()
                    await asyncio.sleep(0.001)
                i = j
            writer.write(b"0\r\n\r\n")
            await writer.drain()


def _facts(rec: RequestRecord) -> tuple[object, ...]:
    return (
        [(e.text, e.answer, e.usage_completion_tokens) for e in rec.events],
        rec.completion_tokens, rec.prompt_tokens, rec.finish_reason, rec.status, rec.error_kind,
    )  # fmt: skip


async def _read(url: str, pushed: bool) -> tuple[RequestRecord, OpenAIStreamParser, str]:
    rec = RequestRecord(index=0, phase="measure", scheduled_ns=now_ns())
    p = OpenAIStreamParser(rec, chat=False, redact=Redactor([]))
    async with aiohttp.ClientSession() as s:
        async with s.post(url + "/v1/completions", data=b"{}") as resp:
            try:
                if pushed:
                    await read_pushed(resp, p.feed, 5.0)
                else:
                    async for piece in resp.content.iter_any():
                        if p.feed(piece, now_ns()):
                            break
            finally:
                kind = type(resp.content).__name__
            p.finish(now_ns())
    return rec, p, kind


@pytest.mark.parametrize("seed", range(6))
def test_pushed_reads_give_the_records_iter_any_gives(seed: int) -> None:
    async def main() -> None:
        async with _Cutter(_events(), seed) as srv:
            a, pa, _ = await _read(srv.url, pushed=False)
            b, pb, kind = await _read(srv.url, pushed=True)
        assert _facts(b) == _facts(a)
        assert b.status == "ok" and len(b.events) == TOKENS and pb.done
        assert kind == "StreamReader"  # left as it was found
        assert all(x.t_ns <= y.t_ns for x, y in zip(b.events, b.events[1:]))

    asyncio.run(asyncio.wait_for(main(), 30))


def test_reader_error_and_reset_surface_in_the_task() -> None:
    async def main() -> None:
        async with _Cutter(_events(bad_at=20), 1) as srv:
            with pytest.raises(ProtocolError, match="malformed JSON"):
                await _read(srv.url, pushed=True)
        body = _events()
        async with _Cutter(body, 2, reset_after=len(body) // 2) as srv:
            with pytest.raises((aiohttp.ClientPayloadError, aiohttp.ClientConnectionError)):
                await _read(srv.url, pushed=True)

    asyncio.run(asyncio.wait_for(main(), 30))


def test_fast_server_serves_loadgen_run_with_a_truth_log(tmp_path: Path) -> None:
    truth = tmp_path / "truth.jsonl"
    with SimProcess(["--fast", "--ttft-ms", "5", "--itl-ms", "1", "--truth-log", str(truth)]) as sim:
        p = cli_run(
            "run", "--endpoint", sim.url or "", "--concurrency", "4",
            "--requests", "24", "--output-tokens", "16", "--out", str(tmp_path / "run"), "--quiet", timeout=120,
        )  # fmt: skip
    assert p.returncode in (0, 1), p.stderr[-2000:]
    rows = [json.loads(x) for x in (tmp_path / "run" / "requests.jsonl").read_text().splitlines() if x.strip()]
    assert rows and all(r["status"] == "ok" and r["output_tokens"] == 16 for r in rows)
    lines = [json.loads(x) for x in truth.read_text().splitlines()]
    by_id = {t["request_id"]: t for t in lines if t["request_id"]}
    assert len(by_id) == len(rows)
    for t in by_id.values():
        assert t["status"] == "ok" and t["output_tokens"] == 16 and len(t["chunks"]) == 16
        assert t["first_token_ns"] >= t["arrival_ns"] + 5_000_000  # the TTFT is honoured
        assert [c[0] for c in t["chunks"]] == sorted(c[0] for c in t["chunks"])


def test_push_reads_only_on_the_aiohttp_versions_tested() -> None:
    """The reader-class swap relies on aiohttp internals: any version outside 3.9-3.14 reads with ``iter_any``."""
    from loadgen.endpoints.reads import _push_supported

    assert _push_supported("3.14.5") and _push_supported("3.9.0")
    assert not _push_supported("3.8.6") and not _push_supported("3.15.0") and not _push_supported("4.0.0a1")
    assert not _push_supported("dev")
