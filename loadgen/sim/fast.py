"""``loadgen sim --fast``: a lean SSE server whose ceiling is far above one client core.

The simulated endpoint (:mod:`loadgen.sim.server`: aiohttp, a discrete-event engine, faults)
tops out near 26k output tok/s on its core, so at 64+ streams a benchmark of the *client*
measured the simulator. This server keeps only what a client benchmark needs: an
``asyncio.Protocol`` with a minimal HTTP/1.1 reader (keep-alive, ``Content-Length`` bodies),
``/health``, ``/version``, ``/v1/models``, streamed and whole ``/v1/completions`` and
``/v1/chat/completions`` answers, and the same truth log as the simulated endpoint.

Timing: a request's first token is written ``ttft_ms`` after its arrival (stamped as its
bytes are read), then one token per ``itl_ms`` (0: as fast as the loop goes). One engine
task writes every due token of every stream in one pass, then sleeps until the next is due
(a continuous-batching server's decode step); each chunk is precomputed bytes (one table per
prompt length and output length) behind a per-request head, written in HTTP chunked framing.
The truth log stamps each token-bearing write just before it (CLOCK_MONOTONIC, shared with
the client's process), so timing errors are computed as against the simulated endpoint
(``scripts/bench_truth.truth_errors``). No faults, no batching model, no queueing: every
request is served at once (the server models an endpoint with unlimited slots).
"""

from __future__ import annotations

import asyncio
import time
from typing import IO, Any

import orjson

from loadgen.core.clock import now_ns
from loadgen.sim.protocol import DONE_EVENT, MAX_MODEL_LEN, WORDS, BadRequest, error_body, parse_request, sim_version

__all__ = ["FastServer"]

_HEAD_LIMIT = 64 * 1024
_BODY_LIMIT = 64 * 1024 * 1024
_TABLES_MAX = 64


def _chunked(payload: bytes) -> bytes:
    return b"%x\r\n%b\r\n" % (len(payload), payload)


class _Stream:
    """One streamed answer in flight: its head, its table of token chunks, its truth."""

    __slots__ = ("conn", "head", "table", "due_ns", "k", "itl_ns", "truth", "times")

    def __init__(self, conn: _Conn, head: bytes, table: list[bytes], due_ns: int, itl_ns: int, truth: dict[str, Any]):
        self.conn = conn
        self.head = head
        self.table = table
        self.due_ns = due_ns
        self.k = 0
        self.itl_ns = itl_ns
        self.truth = truth
        self.times: list[int] = []


class FastServer:
    """The lean SSE server (see the module docstring); ``start``/``stop`` as :class:`SimServer`."""

    @classmethod
    def from_options(cls, kw: dict[str, Any]) -> FastServer:
        """From the ``sim`` command's options (the ones it honours; the others are ignored)."""
        return cls(
            ttft_ms=kw["ttft_ms"], itl_ms=kw["itl_ms"], model_name=kw["model_name"], truth_log=kw["truth_log"],
            default_max_tokens=kw["default_max_tokens"],
        )  # fmt: skip

    def __init__(
        self, *, ttft_ms: float, itl_ms: float, model_name: str = "sim-model", truth_log: str | None = None,
        default_max_tokens: int = 128,
    ) -> None:  # fmt: skip
        self.ttft_ns = round(ttft_ms * 1e6)
        self.itl_ns = round(itl_ms * 1e6)
        self.model_name = model_name
        self.default_max_tokens = default_max_tokens
        self.truth_log_path = truth_log
        self._truth_fh: IO[bytes] | None = None
        self._streams: list[_Stream] = []
        self._timer: asyncio.Handle | None = None
        self._timer_at = 0
        self._server: asyncio.AbstractServer | None = None
        self._tables: dict[tuple[bool, int, int, bool], list[bytes]] = {}
        self._seq = 0
        self.conns: set[_Conn] = set()

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> int:
        loop = asyncio.get_running_loop()
        if self.truth_log_path:
            self._truth_fh = open(self.truth_log_path, "ab")
        self._server = await loop.create_server(lambda: _Conn(self), host, port, backlog=4096)
        return int(self._server.sockets[0].getsockname()[1])

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            for c in list(self.conns):
                c.transport.abort()
            self._server = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._streams = []
        if self._truth_fh is not None:
            self._truth_fh.close()
            self._truth_fh = None

    # -- requests ---------------------------------------------------------------

    def handle(
        self, conn: _Conn, method: bytes, path: bytes, headers: dict[bytes, bytes], body: bytes, arrival_ns: int
    ) -> None:
        if method == b"GET":
            if path == b"/health":
                conn.respond(200, b"", b"text/plain")
            elif path == b"/version":
                conn.respond(200, orjson.dumps({"version": f"loadgen-sim {sim_version()} (fast)"}))
            elif path == b"/v1/models":
                data = [
                    {"id": n, "object": "model", "max_model_len": MAX_MODEL_LEN} for n in self.model_name.split(",")
                ]
                conn.respond(200, orjson.dumps({"object": "list", "data": data}))
            else:
                conn.respond(404, error_body("not found", "not_found_error"))
            return
        api = {b"/v1/completions": "completions", b"/v1/chat/completions": "chat"}.get(path)
        if method != b"POST" or api is None:
            conn.respond(404, error_body("not found", "not_found_error"))
            return
        self._seq += 1
        rid = headers.get(b"x-request-id")
        truth: dict[str, Any] = {
            "request_id": rid.decode("latin-1") if rid is not None else None, "seq": self._seq, "api": api,
            "stream": None, "arrival_ns": arrival_ns, "first_token_ns": None, "end_ns": None,
            "prompt_tokens": None, "cached_tokens": None, "output_tokens": 0, "max_tokens": None, "status": None,
        }  # fmt: skip
        try:
            p = parse_request(body, api, model_name=self.model_name, strict=False,
                              default_max_tokens=self.default_max_tokens)  # fmt: skip
        except BadRequest as bad:
            conn.respond(bad.status, error_body(bad.message, bad.type, bad.param, bad.code))
            truth["status"] = f"rejected:{bad.status}"
            truth["end_ns"] = now_ns()
            self._write_truth(truth, [])
            return
        truth.update(stream=p.stream, prompt_tokens=p.prompt_tokens, max_tokens=p.max_tokens)
        chat = api == "chat"
        if not p.stream:
            asyncio.get_running_loop().call_at(
                asyncio.get_running_loop().time() + (self.ttft_ns + self.itl_ns * (p.max_tokens - 1)) / 1e9,
                self._unary, conn, chat, p.prompt_tokens, p.max_tokens, truth,
            )  # fmt: skip
            return
        rid_s = ("chatcmpl-" if chat else "cmpl-") + str(self._seq)
        head = b'data: {"id":"%b","object":"%b","created":%d,"model":%b,"choices":' % (
            rid_s.encode(), b"chat.completion.chunk" if chat else b"text_completion", int(time.time()),
            orjson.dumps(self.model_name),
        )  # fmt: skip
        table = self._table(chat, p.prompt_tokens, p.max_tokens, p.continuous_usage)
        conn.begin_stream()
        if chat:
            role = b'[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]'
            conn.transport.write(_chunked(head + role + (b"}\n\n")))
        s = _Stream(conn, head, table, arrival_ns + self.ttft_ns, self.itl_ns, truth)
        s.truth["_usage"] = p.include_usage
        conn.stream = s
        self._streams.append(s)
        self._arm(s.due_ns)

    def _table(self, chat: bool, prompt: int, out: int, continuous: bool) -> list[bytes]:
        key = (chat, prompt, out, continuous)
        t = self._tables.get(key)
        if t is None:
            if len(self._tables) >= _TABLES_MAX:
                self._tables.clear()
            t = []
            for i in range(out):
                word = orjson.dumps(WORDS[i % len(WORDS)])
                fr = b'"length"' if i == out - 1 else b"null"
                field = b'"delta":{"content":%b}' % word if chat else b'"text":%b' % word
                tail = b'[{"index":0,%b,"logprobs":null,"finish_reason":%b}]' % (field, fr)
                if continuous:
                    tail += b',"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}' % (
                        prompt,
                        i + 1,
                        prompt + i + 1,
                    )
                t.append(tail + b"}\n\n")
            self._tables[key] = t
        return t

    def _unary(self, conn: _Conn, chat: bool, prompt: int, out: int, truth: dict[str, Any]) -> None:
        if conn.transport.is_closing():
            return
        text = "".join(WORDS[i % len(WORDS)] for i in range(out))
        choice: dict[str, Any] = {"index": 0, "logprobs": None, "finish_reason": "length"}
        choice.update({"message": {"role": "assistant", "content": text}} if chat else {"text": text})
        body = {
            "id": ("chatcmpl-" if chat else "cmpl-") + str(truth["seq"]), "object": "chat.completion" if chat else "text_completion",
            "created": int(time.time()), "model": self.model_name, "choices": [choice],
            "usage": {"prompt_tokens": prompt, "completion_tokens": out, "total_tokens": prompt + out},
        }  # fmt: skip
        t = now_ns()
        conn.respond(200, orjson.dumps(body))
        truth.update(first_token_ns=t, end_ns=t, output_tokens=out, status="ok")
        self._write_truth(truth, [[t, out]])

    # -- the engine -----------------------------------------------------------------

    def _arm(self, due_ns: int) -> None:
        """Run the engine's next pass at ``due_ns`` (monotonic), unless one is armed sooner."""
        if self._timer is not None:
            if self._timer_at <= due_ns:
                return
            self._timer.cancel()
        self._timer_at = due_ns
        delay = (due_ns - now_ns()) / 1e9
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(delay, self._step) if delay > 0 else loop.call_soon(self._step)

    def _step(self) -> None:
        """One decode step: every due token of every stream written, then the next step armed."""
        self._timer = None
        streams = self._streams
        mono = time.monotonic_ns
        now = mono()
        nxt = -1
        done: list[_Stream] = []
        for s in streams:
            if s.due_ns > now:
                if nxt < 0 or s.due_ns < nxt:
                    nxt = s.due_ns
                continue
            tr = s.conn.transport
            if tr.is_closing():
                s.truth["status"] = "client_closed"
                done.append(s)
                continue
            k = s.k
            t = mono()  # stamped just before the write: the earliest the client can see it
            tr.write(_chunked(s.head + s.table[k]))
            s.times.append(t)
            k += 1
            s.k = k
            if k == len(s.table):
                done.append(s)
            else:
                s.due_ns += s.itl_ns
                if nxt < 0 or s.due_ns < nxt:
                    nxt = s.due_ns
        if done:
            gone = set(map(id, done))
            self._streams = [s for s in streams if id(s) not in gone]
            for s in done:
                self._finish(s)
        if nxt >= 0:
            self._arm(nxt)

    def _finish(self, s: _Stream) -> None:
        truth = s.truth
        conn = s.conn
        conn.stream = None
        usage = truth.pop("_usage")
        if truth["status"] is None:
            tail = b""
            if usage:
                p, n = truth["prompt_tokens"], s.k
                tail = _chunked(
                    s.head
                    + b'[],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}}\n\n' % (p, n, p + n)
                )
            conn.transport.write(tail + _chunked(DONE_EVENT) + b"0\r\n\r\n")
            truth["status"] = "ok"
            conn.end_stream()
        truth["end_ns"] = now_ns()
        truth["output_tokens"] = s.k
        if s.times:
            truth["first_token_ns"] = s.times[0]
        self._write_truth(truth, [[t, 1] for t in s.times])

    def _write_truth(self, truth: dict[str, Any], chunks: list[list[int]]) -> None:
        fh = self._truth_fh
        if fh is None:
            return
        truth["chunks"] = chunks
        fh.write(orjson.dumps(truth) + b"\n")
        fh.flush()


class _Conn(asyncio.Protocol):
    """One connection: reads requests one after another (no pipelining while one streams)."""

    def __init__(self, server: FastServer) -> None:
        self.server = server
        self.buf = b""
        self.arrival_ns = 0
        self.stream: _Stream | None = None
        self.busy = False
        self.transport: asyncio.Transport = None  # type: ignore[assignment]  # set in connection_made
        self.keep_alive = True

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # a stream transport
        self.server.conns.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.server.conns.discard(self)

    def data_received(self, data: bytes) -> None:
        if not self.buf:
            self.arrival_ns = now_ns()  # the request's first bytes read: its arrival
        self.buf += data
        self._parse()

    def _parse(self) -> None:
        while not self.busy and self.buf:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                if len(self.buf) > _HEAD_LIMIT:
                    self.transport.abort()
                return
            lines = self.buf[:end].split(b"\r\n")
            try:
                method, path, _version = lines[0].split(b" ", 2)
            except ValueError:
                self.transport.abort()
                return
            headers = {}
            for line in lines[1:]:
                name, _, value = line.partition(b":")
                headers[name.strip().lower()] = value.strip()
            n = int(headers.get(b"content-length", b"0") or 0)
            if n > _BODY_LIMIT or b"chunked" in headers.get(b"transfer-encoding", b""):
                self.respond(413, error_body("request body too large or chunked", "invalid_request_error"))
                self.transport.close()
                return
            if len(self.buf) < end + 4 + n:
                return
            body = self.buf[end + 4 : end + 4 + n]
            self.buf = self.buf[end + 4 + n :]
            self.keep_alive = headers.get(b"connection", b"").lower() != b"close"
            self.busy = True
            arrival, self.arrival_ns = self.arrival_ns, now_ns()
            self.server.handle(self, method, path.split(b"?", 1)[0], headers, body, arrival)

    def respond(self, status: int, body: bytes, ctype: bytes = b"application/json") -> None:
        reason = {200: b"OK", 400: b"Bad Request", 404: b"Not Found", 413: b"Payload Too Large"}.get(status, b"Error")
        self.transport.write(
            b"HTTP/1.1 %d %b\r\nContent-Type: %b\r\nContent-Length: %d\r\n%b\r\n%b"
            % (status, reason, ctype, len(body), b"" if self.keep_alive else b"Connection: close\r\n", body)
        )
        self._next()

    def begin_stream(self) -> None:
        self.transport.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"
        )

    def end_stream(self) -> None:
        self._next()

    def _next(self) -> None:
        self.busy = False
        if not self.keep_alive:
            self.transport.close()
            return
        if self.buf:
            self._parse()
