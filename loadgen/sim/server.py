"""The simulated OpenAI-compatible endpoint: an aiohttp server driven by :class:`BatchModel`.

One engine task sleeps until the model's next iteration end (an absolute
deadline on ``time.perf_counter_ns``, i.e. CLOCK_MONOTONIC, the clock the client
stamps its events with in another process), calls :meth:`BatchModel.advance`
and hands each token to its request's queue; request handlers turn tokens into
SSE writes exactly as vLLM formats them.

Request parsing, token counting and the arrival stamp are in :mod:`loadgen.sim.protocol`,
fault kinds and their draw in :mod:`loadgen.sim.faults`.

Ground truth: with a truth log, every request (ok, faulted, rejected or
abandoned) ends as one JSON line, written and flushed when it ends::

    {"request_id": x-request-id header or null, "seq": arrival order (0-based),
     "api": "completions" | "chat", "stream": bool,
     "arrival_ns": when the request reached the server process: the read in which its
                   headers completed (served by :meth:`SimServer.start`; mounted elsewhere,
                   handler entry), before handler dispatch and body parsing,
     "first_token_ns": when the first token-bearing write was issued, or null,
     "chunks": [[t_ns, n_tokens], ...] one per token-bearing write, t just before the
               write was handed to the socket (the earliest the client can see it),
     "end_ns": after the final write,
     "prompt_tokens": counted prompt tokens (null if the body was unusable),
     "cached_tokens": prompt tokens served from the prefix cache (``--prefix-cache-blocks``;
                      null when the cache is off or the body was unusable),
     "output_tokens": tokens actually written, "max_tokens": tokens requested,
     "status": "ok" | "fault:<kind>" | "client_gone" | "cancelled" | "rejected:<http status>"
               | "server_error"}

With a prefix cache (:mod:`loadgen.sim.prefix_cache`) a request's prefill costs its uncached
tokens only (``prompt_tokens - cached_tokens`` go to the model), and the usage block carries
``prompt_tokens_details.cached_tokens`` as vLLM's does with ``--enable-prompt-tokens-details``.
``POST /reset_prefix_cache`` empties it (as vLLM's dev endpoint). ``GET /metrics`` serves vLLM's
counters in Prometheus text: ``vllm:prompt_tokens_total``, ``vllm:generation_tokens_total``,
``vllm:request_success_total`` and, with the cache, ``vllm:prefix_cache_queries_total`` /
``vllm:prefix_cache_hits_total`` (prompt tokens looked up / found, as vLLM's), so
:class:`loadgen.serve.ServerObserver` reads the hit rate from /metrics deltas.

``<kind>`` is one of :data:`loadgen.sim.faults.FAULT_KINDS`. All ``*_ns`` are perf_counter_ns.
``cancelled`` means the server was stopping; ``rejected`` a validation error
(strict mode, bad JSON, unknown model); ``server_error`` a bug in the simulator. Request headers are never logged.
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any

import orjson
from aiohttp import web
from aiohttp.web_server import Server

from loadgen.core.clock import now_ns, sleep_until
from loadgen.sim.faults import FaultConfig, draw_fault
from loadgen.sim.fifo import new_model
from loadgen.sim.model import SimParams, TokenEmission
from loadgen.sim.prefix_cache import PrefixCache
from loadgen.sim.protocol import (
    ARRIVAL_KEY,
    DONE_EVENT,
    MALFORMED_EVENT,
    MAX_MODEL_LEN,
    WORDS,
    ArrivalStampingServer,
    BadRequest,
    Parsed,
    arrival_middleware,
    dumps_str,
    error_body,
    parse_request,
    reply_units,
    sim_version,
    sse_event,
)

if TYPE_CHECKING:
    from loadgen.workload.tokenizer import Tokenizer

__all__ = ["SimServer"]


@dataclass(slots=True)
class _Truth:
    """One truth-log line under construction."""

    request_id: str | None
    seq: int
    api: str
    arrival_ns: int
    stream: bool = False
    first_token_ns: int | None = None
    end_ns: int | None = None
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    output_tokens: int = 0
    max_tokens: int | None = None
    status: str | None = None  # set when the request ends
    model: str | None = None  # the model it named (--model-name a,b)

    def add_chunk(self, chunks: list[list[int]], t_ns: int, n_tokens: int) -> None:
        chunks.append([t_ns, n_tokens])
        self.output_tokens += n_tokens
        if self.first_token_ns is None:
            self.first_token_ns = t_ns


class SimServer:
    """The simulated endpoint: model, engine task, HTTP handlers and truth log.

    Use :meth:`build_app` to mount it in an aiohttp application (the engine and
    the truth log live in the app's cleanup context), or :meth:`start` /
    :meth:`stop` to serve it directly.
    """

    def __init__(
        self,
        params: SimParams | None = None,
        *,
        model_name: str = "sim-model",
        strict: bool = False,
        faults: FaultConfig | None = None,
        truth_log: str | None = None,
        seed: int = 0,
        tokenizer: Tokenizer | None = None,
        prefix_cache: PrefixCache | None = None,
    ) -> None:
        self.params = params if params is not None else SimParams()
        self.tokenizer = tokenizer  # a loadgen.workload.tokenizer.Tokenizer, or None: count words
        self.model_name = model_name
        self.strict = strict
        self.faults = faults if faults is not None else FaultConfig()
        self.truth_log_path = truth_log
        self.model = new_model(self.params)  # the batch, or FIFO servers (--fifo)
        self.prefix_cache = prefix_cache  # None: no prefix caching (the default)
        self.prompt_tokens_total = 0  # /metrics counters (vLLM's names)
        self.generation_tokens_total = 0
        self.requests_ok_total = 0
        self._rng = random.Random(seed)
        self._fault_ps = self.faults.probabilities()
        self._any_fault = any(p > 0.0 for p in self._fault_ps)
        self._seq = 0
        self._queues: dict[int, asyncio.Queue[TokenEmission]] = {}
        self._wake: asyncio.Future[None] | None = None
        self._truth_fh: IO[bytes] | None = None
        self._runner: web.AppRunner | None = None
        self.port: int | None = None

    # -- lifecycle ------------------------------------------------------------

    def build_app(self) -> web.Application:
        """An aiohttp application serving the OpenAI-compatible routes."""
        app = web.Application(client_max_size=64 * 1024 * 1024, middlewares=[arrival_middleware])
        app.router.add_post("/v1/completions", self._completions)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/health", self._health)
        app.router.add_get("/version", self._version)
        app.router.add_post("/reset_prefix_cache", self._reset_prefix_cache)
        app.router.add_get("/metrics", self._metrics)
        app.cleanup_ctx.append(self._lifespan)
        return app

    async def start(self, host: str = "127.0.0.1", port: int = 0, *, shutdown_timeout_s: float = 2.0) -> int:
        """Serve on ``host:port`` (0 picks a free port); return the bound port."""
        # handler_cancellation: a request whose client went away is cancelled at once, wherever it waits (in the
        # queue before its prefill too), as vLLM aborts one: a sweep's early-stopped probe must not leave its
        # requests queued in front of the next probe's (they held the simulator 4.5 s a request)
        runner = web.AppRunner(
            self.build_app(), access_log=None, shutdown_timeout=shutdown_timeout_s, handler_cancellation=True
        )
        await runner.setup()
        if type(runner.server) is Server:  # else (another aiohttp) arrival falls back to handler entry
            runner.server.__class__ = ArrivalStampingServer  # arrivals stamped as the socket is read
        site = web.TCPSite(runner, host, port, backlog=4096)
        await site.start()
        self._runner = runner
        server = site._server
        assert server is not None
        self.port = int(server.sockets[0].getsockname()[1])  # type: ignore[attr-defined]  # aiohttp types _server as AbstractServer; it is an asyncio Server
        return self.port

    async def stop(self) -> None:
        """Stop serving; in-flight requests get ``shutdown_timeout_s`` to finish."""
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()

    async def _lifespan(self, app: web.Application) -> AsyncIterator[None]:
        if self.truth_log_path:
            self._truth_fh = open(self.truth_log_path, "ab")
        engine = asyncio.get_running_loop().create_task(self._engine(), name="loadgen-sim-engine")
        try:
            yield
        finally:
            engine.cancel()
            try:
                await engine
            except asyncio.CancelledError:
                pass
            if self._truth_fh is not None:
                self._truth_fh.close()
                self._truth_fh = None

    # -- engine ---------------------------------------------------------------

    def _kick(self) -> None:
        """Wake the engine (a new arrival may have started an iteration)."""
        fut = self._wake
        if fut is not None and not fut.done():
            fut.set_result(None)

    async def _engine(self) -> None:
        loop = asyncio.get_running_loop()
        model = self.model
        queues = self._queues
        while True:
            for em in model.advance(now_ns()):
                q = queues.get(em.req_id)  # type: ignore[call-overload]  # req_id is the int the server submitted
                if q is not None:
                    q.put_nowait(em)
            deadline_ns = model.next_event_ns()
            fut: asyncio.Future[None] = loop.create_future()
            self._wake = fut
            handle = None
            if deadline_ns is not None:
                delay_ns = deadline_ns - now_ns()
                if delay_ns <= 0:
                    self._wake = None
                    continue
                handle = loop.call_later(delay_ns / 1e9, _resolve, fut)
            try:
                await fut
            finally:
                self._wake = None
                if handle is not None:
                    handle.cancel()

    # -- simple routes --------------------------------------------------------

    async def _health(self, request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def _version(self, request: web.Request) -> web.Response:
        return web.json_response({"version": f"loadgen-sim {sim_version()}"}, dumps=dumps_str)

    async def _models(self, request: web.Request) -> web.Response:
        body = {
            "object": "list",
            "data": [{"id": n, "object": "model", "max_model_len": MAX_MODEL_LEN} for n in self.model_name.split(",")],
        }
        return web.json_response(body, dumps=dumps_str)

    async def _metrics(self, request: web.Request) -> web.Response:
        label = '{model_name="' + self.model_name + '"}'
        counters = [
            ("vllm:prompt_tokens_total", self.prompt_tokens_total),
            ("vllm:generation_tokens_total", self.generation_tokens_total),
            ("vllm:request_success_total", self.requests_ok_total),
        ]
        if self.prefix_cache is not None:
            counters += [
                ("vllm:prefix_cache_queries_total", self.prefix_cache.queried_tokens),
                ("vllm:prefix_cache_hits_total", self.prefix_cache.hits_tokens),
            ]
        lines = []
        for name, v in counters:
            lines += [f"# TYPE {name} counter", f"{name}{label} {float(v)}"]
        return web.Response(text="\n".join(lines) + "\n", content_type="text/plain")

    async def _reset_prefix_cache(self, request: web.Request) -> web.Response:
        if self.prefix_cache is not None:
            self.prefix_cache.reset()
        return web.Response(status=200)

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, "completions")

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, "chat")

    # -- generation -----------------------------------------------------------

    def _parse(self, raw: bytes, api: str) -> Parsed:
        """Validate a request body; raise :class:`BadRequest` when it is unusable."""
        return parse_request(
            raw, api, model_name=self.model_name, strict=self.strict,
            default_max_tokens=self.params.default_max_tokens, tokenizer=self.tokenizer,
            units=self.prefix_cache is not None,
        )  # fmt: skip

    def _draw_fault(self) -> str | None:
        """Draw this request's fault (one uniform per kind, always, for reproducibility)."""
        if not self._any_fault:
            return None
        return draw_fault(self._rng, self._fault_ps)

    def _write_truth(self, truth: _Truth, chunks: list[list[int]]) -> None:
        fh = self._truth_fh
        if fh is None:
            return
        line = {
            "request_id": truth.request_id,
            "seq": truth.seq,
            "api": truth.api,
            "stream": truth.stream,
            "arrival_ns": truth.arrival_ns,
            "first_token_ns": truth.first_token_ns,
            "chunks": chunks,
            "end_ns": truth.end_ns,
            "prompt_tokens": truth.prompt_tokens,
            "cached_tokens": truth.cached_tokens,
            "output_tokens": truth.output_tokens,
            "max_tokens": truth.max_tokens,
            "status": truth.status,
            "model": truth.model,
        }
        fh.write(orjson.dumps(line) + b"\n")
        fh.flush()

    async def _send_error(
        self, request: web.Request, status: int, body: bytes, headers: dict[str, str] | None = None
    ) -> web.Response:
        resp = web.Response(status=status, body=body, content_type="application/json", headers=headers)
        await resp.prepare(request)
        await resp.write_eof()
        return resp

    async def _generate(self, request: web.Request, api: str) -> web.StreamResponse:
        arrival_ns = request.get(ARRIVAL_KEY) or now_ns()
        raw = await request.read()
        seq = self._seq
        self._seq += 1
        fault = self._draw_fault()
        truth = _Truth(request.headers.get("x-request-id"), seq, api, arrival_ns)
        chunks: list[list[int]] = []
        try:
            try:
                parsed = self._parse(raw, api)
            except BadRequest as bad:
                truth.status = f"rejected:{bad.status}"
                resp = await self._send_error(
                    request, bad.status, error_body(bad.message, bad.type, bad.param, bad.code)
                )
                truth.end_ns = now_ns()
                return resp
            truth.stream = parsed.stream
            truth.prompt_tokens = parsed.prompt_tokens
            truth.max_tokens = parsed.max_tokens
            truth.model = parsed.model
            if self.faults.slow_ms > 0:
                await sleep_until(now_ns() + round(self.faults.slow_ms * 1e6))  # never short (uvloop)
            if fault == "429":
                truth.status = "fault:429"
                resp = await self._send_error(
                    request, 429,
                    error_body("Rate limit reached (simulated)", "rate_limit_error", None, "rate_limit_exceeded"),
                    {"Retry-After": "1"},
                )  # fmt: skip
                truth.end_ns = now_ns()
                return resp
            if fault == "500":
                truth.status = "fault:500"
                resp = await self._send_error(
                    request, 500, error_body("Internal server error (simulated)", "server_error", None, 500)
                )
                truth.end_ns = now_ns()
                return resp
            cache = self.prefix_cache
            cached = 0
            if cache is not None:
                truth.cached_tokens = 0
                if parsed.units is not None:
                    cached = truth.cached_tokens = cache.lookup(parsed.units)
                    cache.insert(parsed.units)
            queue: asyncio.Queue[TokenEmission] = asyncio.Queue()
            self._queues[seq] = queue
            self.model.arrive(now_ns(), seq, parsed.prompt_tokens - cached, parsed.max_tokens)  # cached: no prefill
            self._kick()
            if parsed.stream:
                done = await self._stream(request, api, parsed, fault, queue, truth, chunks)
            else:
                done = await self._unary(request, api, parsed, fault, queue, truth, chunks)
            if cache is not None and parsed.units is not None and truth.status == "ok":
                full = reply_units(parsed.units, api, truth.output_tokens, self.tokenizer)
                if full is not None:
                    cache.insert(full)  # the decoded blocks too: the next turn's history starts with them
            return done
        except asyncio.CancelledError:
            # the server stopping, or (handler cancellation) the client gone while the request waited
            if truth.status is None:  # keep a fault already recorded (a dropped connection cancels its handler)
                truth.status = "cancelled" if self._runner is None else "client_gone"
            raise
        except ConnectionError:
            # The client went away mid-response; nothing more can be sent.
            if truth.status is None:  # keep a fault already recorded
                truth.status = "client_gone"
            return web.Response(status=499)
        finally:
            self._queues.pop(seq, None)
            self.model.cancel(seq)
            if truth.end_ns is None:
                truth.end_ns = now_ns()
            if truth.status is None:  # an unexpected exception (a bug): aiohttp answers 500
                truth.status = "server_error"
            if truth.status == "ok":  # the /metrics counters
                self.prompt_tokens_total += truth.prompt_tokens or 0
                self.generation_tokens_total += truth.output_tokens
                self.requests_ok_total += 1
            self._write_truth(truth, chunks)

    async def _stream(
        self, request: web.Request, api: str, parsed: Parsed, fault: str | None,
        queue: asyncio.Queue[TokenEmission], truth: _Truth, chunks: list[list[int]],
    ) -> web.StreamResponse:  # fmt: skip
        chat = api == "chat"
        rid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        created = int(time.time())
        obj = "chat.completion.chunk" if chat else "text_completion"
        head = {"id": rid, "object": obj, "created": created, "model": parsed.model or self.model_name.split(",")[0]}
        prompt_tokens = parsed.prompt_tokens
        continuous = parsed.continuous_usage

        def usage(n: int) -> dict[str, Any]:
            u: dict[str, Any] = {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": n,
                "total_tokens": prompt_tokens + n,
            }
            if truth.cached_tokens is not None:
                u["prompt_tokens_details"] = {"cached_tokens": truth.cached_tokens}
            return u

        resp = web.StreamResponse(
            status=200, headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await resp.prepare(request)
        if chat:
            first = {
                **head,
                "choices": [
                    {"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}
                ],
            }
            if continuous:
                first["usage"] = usage(0)
            await resp.write(sse_event(first))

        out = parsed.max_tokens
        k = self.params.tokens_per_chunk
        fault_at = out // 2
        delivered = 0
        pending = 0
        while delivered < out:
            em = await queue.get()
            pending += 1
            if pending < k and not em.finished:
                continue
            last = em.finished
            if fault is not None and (delivered >= fault_at or last):
                kind, fault = fault, None
                truth.status = f"fault:{kind}"
                if kind == "drop":
                    self.model.cancel(truth.seq)
                    transport = request.transport
                    if transport is not None:
                        transport.abort()
                    truth.end_ns = now_ns()
                    return resp
                if kind == "stall":
                    await sleep_until(now_ns() + round(self.faults.stall_ms * 1e6))
                elif kind == "malformed":
                    await resp.write(MALFORMED_EVENT)
                elif kind == "inband_error":
                    self.model.cancel(truth.seq)
                    err = {"error": {"message": "Internal error during generation (simulated)",
                                     "type": "server_error", "code": 500}}  # fmt: skip
                    await resp.write(sse_event(err))
                    await resp.write_eof()
                    truth.end_ns = now_ns()
                    return resp
            text = "".join(WORDS[i % len(WORDS)] for i in range(delivered, delivered + pending))
            delivered += pending
            n, pending = pending, 0
            finish = "length" if last else None
            if chat:
                choice = {"index": 0, "delta": {"content": text}, "logprobs": None, "finish_reason": finish}
            else:
                choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}
            chunk: dict[str, Any] = {**head, "choices": [choice]}
            if continuous:
                chunk["usage"] = usage(delivered)
            t_write = now_ns()  # stamped before the write: the earliest the client can see it
            await resp.write(sse_event(chunk))
            truth.add_chunk(chunks, t_write, n)
        if parsed.include_usage:
            await resp.write(sse_event({**head, "choices": [], "usage": usage(delivered)}))
        await resp.write(DONE_EVENT)
        await resp.write_eof()
        truth.end_ns = now_ns()
        if truth.status is None:
            truth.status = "ok"
        return resp

    async def _unary(
        self, request: web.Request, api: str, parsed: Parsed, fault: str | None,
        queue: asyncio.Queue[TokenEmission], truth: _Truth, chunks: list[list[int]],
    ) -> web.StreamResponse:  # fmt: skip
        out = parsed.max_tokens
        fault_at = out // 2
        got = 0
        while got < out:
            await queue.get()
            got += 1
            if fault == "drop" and got >= max(fault_at, 1):
                truth.status = "fault:drop"
                self.model.cancel(truth.seq)
                if request.transport is not None:
                    request.transport.abort()
                truth.end_ns = now_ns()
                return web.Response(status=200)
        chat = api == "chat"
        text = "".join(WORDS[i % len(WORDS)] for i in range(out))
        p = parsed.prompt_tokens
        usage: dict[str, Any] = {"prompt_tokens": p, "completion_tokens": out, "total_tokens": p + out}
        if truth.cached_tokens is not None:
            usage["prompt_tokens_details"] = {"cached_tokens": truth.cached_tokens}
        rid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        head = {"id": rid, "object": "chat.completion" if chat else "text_completion",
                "created": int(time.time()), "model": parsed.model or self.model_name.split(",")[0]}  # fmt: skip
        if chat:
            choice = {"index": 0, "message": {"role": "assistant", "content": text},
                      "logprobs": None, "finish_reason": "length"}  # fmt: skip
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": "length"}
        body = orjson.dumps({**head, "choices": [choice], "usage": usage})
        token_bearing = True
        if fault is not None:
            truth.status = f"fault:{fault}"
            if fault == "stall":
                await sleep_until(now_ns() + round(self.faults.stall_ms * 1e6))
            elif fault == "malformed":
                body = b'{"choices": ['
                token_bearing = False
            elif fault == "inband_error":
                body = orjson.dumps({"error": {"message": "Internal error during generation (simulated)",
                                               "type": "server_error", "code": 500}})  # fmt: skip
                token_bearing = False
        resp = web.Response(status=200, body=body, content_type="application/json")
        await resp.prepare(request)
        await resp.write_eof()
        t = now_ns()
        if token_bearing:
            truth.add_chunk(chunks, t, out)
        truth.end_ns = t
        if truth.status is None:
            truth.status = "ok"
        return resp


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)
