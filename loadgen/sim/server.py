"""The simulated OpenAI-compatible endpoint: an aiohttp server driven by :class:`BatchModel`.

One engine task sleeps until the model's next iteration end (an absolute
deadline on ``time.perf_counter_ns``, i.e. CLOCK_MONOTONIC, the clock the client
stamps its events with in another process), calls :meth:`BatchModel.advance`
and hands each token to its request's queue; request handlers turn tokens into
SSE writes exactly as vLLM formats them.

Token counting (no tokenizer; see ``--tokenizer`` below): a completion prompt costs one token per
whitespace-separated word (a list of token ids costs its length); a chat
request costs the words of all message contents joined, plus 4 tokens per
message for a notional chat template. Output token ``i`` is the word
``WORDS[i % len(WORDS)]`` (each begins with a space), so a real tokenizer also
counts about one token per word. With ``--tokenizer PATH`` (a Hugging Face
tokenizer, :func:`loadgen.workload.tokenizer.load_tokenizer`) a string prompt
costs ``count_prompt`` (special tokens included) and chat messages their
templated count, ``count_chat``.

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
     "output_tokens": tokens actually written, "max_tokens": tokens requested,
     "status": "ok" | "fault:<kind>" | "client_gone" | "cancelled" | "rejected:<http status>"
               | "server_error"}

``<kind>`` is one of :data:`FAULT_KINDS`. All ``*_ns`` are perf_counter_ns.
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
from typing import IO, Any

import orjson
from aiohttp import web
from aiohttp.web_protocol import RequestHandler
from aiohttp.web_server import Server

from loadgen.clock import now_ns, sleep_until
from loadgen.sim.model import BatchModel, SimParams, TokenEmission

__all__ = [
    "FAULT_KINDS",
    "WORDS",
    "FaultConfig",
    "SimServer",
    "count_chat_tokens",
    "count_prompt_tokens",
    "sim_version",
]

WORDS: tuple[str, ...] = (
    " the", " model", " is", " a", " fast", " token", " of", " text",
    " and", " it", " runs", " on", " time", " with", " some", " data",
)  # fmt: skip
"""Output vocabulary: token ``i`` of a response is ``WORDS[i % len(WORDS)]``."""

FAULT_KINDS: tuple[str, ...] = ("429", "500", "drop", "stall", "malformed", "inband_error")
"""Fault kinds, in the order they are drawn; a request gets at most the first that hits."""

CHAT_TEMPLATE_TOKENS_PER_MESSAGE = 4
"""Notional chat-template overhead added per message to the prompt token count."""

MAX_MODEL_LEN = 4096
"""Context length advertised by ``/v1/models``."""

_COMMON_FIELDS = frozenset(
    {"model", "max_tokens", "stream", "stream_options", "temperature", "top_p", "seed", "n", "user"}
)
_STRICT_FIELDS = {
    "completions": _COMMON_FIELDS | {"prompt"},
    "chat": _COMMON_FIELDS | {"messages", "max_completion_tokens"},
}
_STRICT_STREAM_OPTIONS = frozenset({"include_usage"})
_MALFORMED_EVENT = b'data: {"choices": [ \n\n'
_DONE_EVENT = b"data: [DONE]\n\n"


def sim_version() -> str:
    """The loadgen version, or ``0.1.0`` when it cannot be found."""
    try:
        from importlib.metadata import version

        return version("loadgen")
    except Exception:
        pass
    try:
        import loadgen

        return str(loadgen.__version__)  # type: ignore[attr-defined]
    except Exception:
        return "0.1.0"


def count_prompt_tokens(prompt: Any, tokenizer: Any = None) -> int:
    """Prompt tokens of a completions ``prompt``: words of a string, length of a token-id list.

    With ``tokenizer`` (``--tokenizer``) a string costs ``tokenizer.count_prompt``
    (special tokens included). Raises ValueError for anything else (batched
    prompts are not supported).
    """
    if isinstance(prompt, str):
        return tokenizer.count_prompt(prompt) if tokenizer is not None else len(prompt.split())
    if isinstance(prompt, list) and prompt:
        if all(isinstance(x, int) and not isinstance(x, bool) for x in prompt):
            return len(prompt)
        if len(prompt) == 1:
            return count_prompt_tokens(prompt[0], tokenizer)
    raise ValueError("prompt must be a string or a non-empty list of token ids")


def count_chat_tokens(messages: Any, tokenizer: Any = None) -> int:
    """Prompt tokens of chat ``messages``: words of all contents joined, plus 4 per message.

    With ``tokenizer`` (``--tokenizer``): the templated count,
    ``tokenizer.count_chat(messages)``. Raises ValueError when ``messages`` is not
    a non-empty list of message objects.
    """
    if not isinstance(messages, list) or not messages:
        raise ValueError("messages must be a non-empty list")
    texts: list[str] = []
    for m in messages:
        if not isinstance(m, dict):
            raise ValueError("each message must be an object")
        content = m.get("content")
        if content is None:
            continue
        if isinstance(content, str):
            texts.append(content)
        elif isinstance(content, list):
            for part in content:
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    texts.append(part["text"])
        else:
            raise ValueError("message content must be a string, a list of parts or null")
    if tokenizer is not None:
        if not all(isinstance(m.get("role"), str) for m in messages):
            raise ValueError("each message needs a string role")
        try:
            return int(tokenizer.count_chat(messages))
        except ValueError:
            raise
        except Exception as exc:  # e.g. no chat template: a bad request, not a server bug
            raise ValueError(str(exc)) from None
    return len(" ".join(texts).split()) + CHAT_TEMPLATE_TOKENS_PER_MESSAGE * len(messages)


@dataclass(frozen=True, slots=True)
class FaultConfig:
    """Fault injection: each ``p_*`` is a per-request probability in [0, 1].

    ``stall_ms`` is the mid-stream pause of a stall fault; ``slow_ms`` is extra
    latency added to every request before its first byte (not a probability).
    """

    p_429: float = 0.0
    p_500: float = 0.0
    p_drop: float = 0.0
    p_stall: float = 0.0
    p_malformed: float = 0.0
    p_inband_error: float = 0.0
    stall_ms: float = 1000.0
    slow_ms: float = 0.0

    def __post_init__(self) -> None:
        for kind in FAULT_KINDS:
            p = getattr(self, f"p_{kind}")
            if not 0.0 <= p <= 1.0:
                raise ValueError(f"fault probability for {kind} must be in [0, 1], got {p}")
        if not self.stall_ms >= 0.0 or not self.slow_ms >= 0.0:
            raise ValueError("stall_ms and slow_ms must be >= 0")

    def probabilities(self) -> tuple[float, ...]:
        """Probabilities in :data:`FAULT_KINDS` order."""
        return tuple(getattr(self, f"p_{kind}") for kind in FAULT_KINDS)


class _BadRequest(Exception):
    """A request the server rejects; becomes an OpenAI-style error response."""

    def __init__(
        self, status: int, message: str, *, param: str | None = None,
        type_: str = "invalid_request_error", code: str | None = None,
    ) -> None:  # fmt: skip
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.type = type_
        self.code = code


@dataclass(slots=True)
class _Parsed:
    """The fields of a request body the simulator acts on."""

    stream: bool
    prompt_tokens: int
    max_tokens: int
    include_usage: bool
    continuous_usage: bool


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
    output_tokens: int = 0
    max_tokens: int | None = None
    status: str | None = None  # set when the request ends

    def add_chunk(self, chunks: list[list[int]], t_ns: int, n_tokens: int) -> None:
        chunks.append([t_ns, n_tokens])
        self.output_tokens += n_tokens
        if self.first_token_ns is None:
            self.first_token_ns = t_ns


def _error_body(message: str, type_: str, param: str | None = None, code: Any = None) -> bytes:
    return orjson.dumps({"error": {"message": message, "type": type_, "param": param, "code": code}})


def _sse(obj: Any) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"


ARRIVAL_KEY = web.RequestKey("loadgen_arrival_ns", int) if hasattr(web, "RequestKey") else "loadgen_arrival_ns"


class _ArrivalStampingHandler(RequestHandler):
    """aiohttp's connection protocol, stamping each request when its headers are read.

    The truth log's ``arrival_ns`` must be when the request reached the server, not when
    the event loop got round to its handler: in a burst, handlers run one after another,
    each parsing its body, and a later request's handler can start milliseconds after its
    bytes arrived. ``data_received`` runs as the loop reads the socket, before any handler;
    each request parsed in that read gets that read's time (keyed by its body stream, which
    the handler sees as ``request.content``; picked up by :func:`_arrival_middleware`).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.arrivals: dict[int, int] = {}

    def data_received(self, data: bytes) -> None:
        t = now_ns()
        queued = self._messages  # aiohttp's parsed-but-not-yet-handled requests
        before = len(queued)
        super().data_received(data)
        for i in range(before, len(queued)):
            self.arrivals[id(queued[i][1])] = t  # keyed by the body stream: request.content


class _ArrivalStampingServer(Server):
    """aiohttp's protocol factory, building :class:`_ArrivalStampingHandler` connections."""

    def __call__(self) -> RequestHandler:
        return _ArrivalStampingHandler(self, loop=self._loop, **self._kwargs)


@web.middleware
async def _arrival_middleware(request: web.Request, handler: Any) -> web.StreamResponse:
    """Move the connection's arrival stamp for this request onto the request (or stamp now)."""
    proto = request.protocol
    stamps = getattr(proto, "arrivals", None)
    t = stamps.pop(id(request.content), None) if stamps is not None else None
    request[ARRIVAL_KEY] = t if t is not None else now_ns()
    return await handler(request)


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
        tokenizer: Any = None,
    ) -> None:
        self.params = params if params is not None else SimParams()
        self.tokenizer = tokenizer  # a loadgen.workload.tokenizer.Tokenizer, or None: count words
        self.model_name = model_name
        self.strict = strict
        self.faults = faults if faults is not None else FaultConfig()
        self.truth_log_path = truth_log
        self.model = BatchModel(self.params)
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
        app = web.Application(client_max_size=64 * 1024 * 1024, middlewares=[_arrival_middleware])
        app.router.add_post("/v1/completions", self._completions)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/health", self._health)
        app.router.add_get("/version", self._version)
        app.cleanup_ctx.append(self._lifespan)
        return app

    async def start(self, host: str = "127.0.0.1", port: int = 0, *, shutdown_timeout_s: float = 2.0) -> int:
        """Serve on ``host:port`` (0 picks a free port); return the bound port."""
        runner = web.AppRunner(self.build_app(), access_log=None, shutdown_timeout=shutdown_timeout_s)
        await runner.setup()
        if type(runner.server) is Server:  # else (another aiohttp) arrival falls back to handler entry
            runner.server.__class__ = _ArrivalStampingServer  # arrivals stamped as the socket is read
        site = web.TCPSite(runner, host, port, backlog=4096)
        await site.start()
        self._runner = runner
        server = site._server
        assert server is not None
        self.port = int(server.sockets[0].getsockname()[1])  # type: ignore[union-attr]
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
                q = queues.get(em.req_id)  # type: ignore[call-overload]
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
        return web.json_response({"version": f"loadgen-sim {sim_version()}"}, dumps=_dumps_str)

    async def _models(self, request: web.Request) -> web.Response:
        body = {
            "object": "list",
            "data": [{"id": self.model_name, "object": "model", "max_model_len": MAX_MODEL_LEN}],
        }
        return web.json_response(body, dumps=_dumps_str)

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, "completions")

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, "chat")

    # -- generation -----------------------------------------------------------

    def _parse(self, raw: bytes, api: str) -> _Parsed:
        """Validate a request body; raise :class:`_BadRequest` when it is unusable."""
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise _BadRequest(400, f"request body is not valid JSON: {exc}") from None
        if not isinstance(body, dict):
            raise _BadRequest(400, "request body must be a JSON object")
        if self.strict:
            for key in body:
                if key not in _STRICT_FIELDS[api]:
                    raise _BadRequest(400, f"Unrecognized request argument supplied: {key}", param=key)
        model = body.get("model")
        if model is not None and model != self.model_name:
            raise _BadRequest(
                404, f"The model `{model}` does not exist.", param="model", code="model_not_found"
            )
        n = body.get("n")
        if n is not None and n != 1:
            raise _BadRequest(400, "only n=1 is supported", param="n")
        stream = body.get("stream")
        if stream is None:
            stream = False
        if not isinstance(stream, bool):
            raise _BadRequest(400, "stream must be a boolean", param="stream")
        opts = body.get("stream_options")
        include_usage = continuous = False
        if opts is not None:
            if not isinstance(opts, dict):
                raise _BadRequest(400, "stream_options must be an object", param="stream_options")
            if not stream:
                raise _BadRequest(
                    400, "Stream options can only be defined when `stream=True`.", param="stream_options"
                )
            if self.strict:
                for key in opts:
                    if key not in _STRICT_STREAM_OPTIONS:
                        raise _BadRequest(
                            400, f"Unrecognized request argument supplied: stream_options.{key}",
                            param=f"stream_options.{key}",
                        )  # fmt: skip
            include_usage = bool(opts.get("include_usage"))
            # As vLLM: continuous usage stats only together with include_usage.
            continuous = include_usage and bool(opts.get("continuous_usage_stats"))
        max_tokens = body.get("max_tokens")
        if api == "chat" and body.get("max_completion_tokens") is not None:
            max_tokens = body["max_completion_tokens"]
        if max_tokens is None:
            max_tokens = self.params.default_max_tokens
        if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
            raise _BadRequest(400, "max_tokens must be an integer >= 1", param="max_tokens")
        try:
            if api == "chat":
                if "messages" not in body:
                    raise _BadRequest(400, "messages is required", param="messages")
                prompt_tokens = count_chat_tokens(body["messages"], self.tokenizer)
            else:
                if "prompt" not in body:
                    raise _BadRequest(400, "prompt is required", param="prompt")
                prompt_tokens = count_prompt_tokens(body["prompt"], self.tokenizer)
        except ValueError as exc:
            raise _BadRequest(400, str(exc), param="messages" if api == "chat" else "prompt") from None
        return _Parsed(stream, prompt_tokens, max_tokens, include_usage, continuous)

    def _draw_fault(self) -> str | None:
        """Draw this request's fault (one uniform per kind, always, for reproducibility)."""
        if not self._any_fault:
            return None
        hit = None
        for kind, p in zip(FAULT_KINDS, self._fault_ps):
            u = self._rng.random()
            if hit is None and u < p:
                hit = kind
        return hit

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
            "output_tokens": truth.output_tokens,
            "max_tokens": truth.max_tokens,
            "status": truth.status,
        }
        fh.write(orjson.dumps(line) + b"\n")
        fh.flush()

    async def _send_error(self, request: web.Request, status: int, body: bytes, headers: dict[str, str] | None = None) -> web.Response:
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
            except _BadRequest as bad:
                truth.status = f"rejected:{bad.status}"
                resp = await self._send_error(request, bad.status, _error_body(bad.message, bad.type, bad.param, bad.code))
                truth.end_ns = now_ns()
                return resp
            truth.stream = parsed.stream
            truth.prompt_tokens = parsed.prompt_tokens
            truth.max_tokens = parsed.max_tokens
            if self.faults.slow_ms > 0:
                await sleep_until(now_ns() + round(self.faults.slow_ms * 1e6))  # never short (uvloop)
            if fault == "429":
                truth.status = "fault:429"
                resp = await self._send_error(
                    request, 429,
                    _error_body("Rate limit reached (simulated)", "rate_limit_error", None, "rate_limit_exceeded"),
                    {"Retry-After": "1"},
                )  # fmt: skip
                truth.end_ns = now_ns()
                return resp
            if fault == "500":
                truth.status = "fault:500"
                resp = await self._send_error(
                    request, 500, _error_body("Internal server error (simulated)", "server_error", None, 500)
                )
                truth.end_ns = now_ns()
                return resp
            queue: asyncio.Queue[TokenEmission] = asyncio.Queue()
            self._queues[seq] = queue
            self.model.arrive(now_ns(), seq, parsed.prompt_tokens, parsed.max_tokens)
            self._kick()
            if parsed.stream:
                return await self._stream(request, api, parsed, fault, queue, truth, chunks)
            return await self._unary(request, api, parsed, fault, queue, truth, chunks)
        except asyncio.CancelledError:
            truth.status = "cancelled"
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
            self._write_truth(truth, chunks)

    async def _stream(
        self, request: web.Request, api: str, parsed: _Parsed, fault: str | None,
        queue: asyncio.Queue[TokenEmission], truth: _Truth, chunks: list[list[int]],
    ) -> web.StreamResponse:  # fmt: skip
        chat = api == "chat"
        rid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        created = int(time.time())
        obj = "chat.completion.chunk" if chat else "text_completion"
        head = {"id": rid, "object": obj, "created": created, "model": self.model_name}
        prompt_tokens = parsed.prompt_tokens
        continuous = parsed.continuous_usage

        def usage(n: int) -> dict[str, int]:
            return {"prompt_tokens": prompt_tokens, "completion_tokens": n, "total_tokens": prompt_tokens + n}

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
            await resp.write(_sse(first))

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
                    await resp.write(_MALFORMED_EVENT)
                elif kind == "inband_error":
                    self.model.cancel(truth.seq)
                    err = {"error": {"message": "Internal error during generation (simulated)",
                                     "type": "server_error", "code": 500}}  # fmt: skip
                    await resp.write(_sse(err))
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
            await resp.write(_sse(chunk))
            truth.add_chunk(chunks, t_write, n)
        if parsed.include_usage:
            await resp.write(_sse({**head, "choices": [], "usage": usage(delivered)}))
        await resp.write(_DONE_EVENT)
        await resp.write_eof()
        truth.end_ns = now_ns()
        if truth.status is None:
            truth.status = "ok"
        return resp

    async def _unary(
        self, request: web.Request, api: str, parsed: _Parsed, fault: str | None,
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
        usage = {"prompt_tokens": p, "completion_tokens": out, "total_tokens": p + out}
        rid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        head = {"id": rid, "object": "chat.completion" if chat else "text_completion",
                "created": int(time.time()), "model": self.model_name}  # fmt: skip
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


def _dumps_str(obj: Any) -> str:
    return orjson.dumps(obj).decode()
