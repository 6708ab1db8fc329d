"""Anthropic Messages API endpoint (``POST /v1/messages``, streaming).

Requests carry ``x-api-key`` and ``anthropic-version`` headers; ``max_tokens`` is
required by the API (the workload's output length, else ``default_max_tokens``).
The API has no way to force an output length (no ``ignore_eos``): the result's
length check says when the model stopped early.

The stream (https://docs.anthropic.com/en/api/messages-streaming) is named SSE
events: ``message_start`` (input usage), then per content block
``content_block_start`` / ``content_block_delta`` / ``content_block_stop``,
``message_delta`` (stop reason and *cumulative* usage: the last value is the
total, never a sum), ``message_stop`` (the only clean end), with ``ping`` and
``error`` events anywhere. Token-bearing deltas: ``text_delta`` (answer),
``thinking_delta`` (reasoning) and ``input_json_delta`` (tool input); a
``signature_delta`` carries none. A stream that ends without ``message_stop`` is an
``incomplete_stream``; an ``error`` event is a ``stream_error``. Unknown event
types are ignored, as the API's versioning policy asks.

Client settings are those of :mod:`loadgen.endpoints.http` (pool, timeouts, timing
hooks, no redirects, the client's rate cap, opt-in 429 retries).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import aiohttp
import orjson

from loadgen.core.clock import now_ns
from loadgen.core.errors import EndpointUnreachable, ProtocolError
from loadgen.core.redact import Redactor, redact_headers, split_url_secrets
from loadgen.core.types import RequestRecord, RequestSpec, TokenEvent
from loadgen.endpoints.header_wait import DEFAULT_HEADER_TIMEOUT_S
from loadgen.endpoints.http import HTTPSendMixin, drain_after_end, fail, settle
from loadgen.endpoints.pool import network_baseline
from loadgen.endpoints.quota import ClientRateCap
from loadgen.endpoints.reads import DEFAULT_IDLE_TIMEOUT_S, MODELS_BODY_LIMIT, idle_guard, read_json_body
from loadgen.endpoints.side import SideFailure, side_request
from loadgen.endpoints.stream_reader import StreamReader
from loadgen.endpoints.toolcalls import (
    add_anthropic_input,
    anthropic_messages,
    anthropic_tools,
    start_anthropic_call,
)

ANTHROPIC_VERSION = "2023-06-01"
DEFAULT_BASE_URL = "https://api.anthropic.com"

__all__ = ["ANTHROPIC_VERSION", "AnthropicConfig", "AnthropicEndpoint", "AnthropicStreamParser", "messages_url"]


@dataclass
class AnthropicConfig:
    """How to talk to the Messages API. ``base_url``: ``https://host``, ``.../v1`` or ``.../v1/messages``."""

    base_url: str = DEFAULT_BASE_URL
    model: str | None = None
    stream: bool = True
    headers: dict[str, str] = field(default_factory=dict, repr=False)  # may hold a credential: never in a repr
    api_key: str | None = field(default=None, repr=False)  # never in a repr (a log, an error, a Ray message)
    anthropic_version: str = ANTHROPIC_VERSION
    extra_body: dict[str, Any] = field(default_factory=dict, repr=False)  # may hold a credential field
    default_max_tokens: int = 1024
    timeout_s: float = 600.0
    connect_timeout_s: float = 10.0
    pool_limit: int = 4096
    verify_tls: bool = True
    request_id_prefix: str | None = None
    discover: bool = True  # GET /v1/models in open(): reachability, and the model when none is given
    max_event_bytes: int = 16 * 1024 * 1024  # also the largest whole (non-streamed) body read
    idle_timeout_s: float | None = DEFAULT_IDLE_TIMEOUT_S  # no byte of a body this long: timeout (None: off)
    header_timeout_s: float | None = DEFAULT_HEADER_TIMEOUT_S  # streamed: no headers this long: header_timeout
    ca_file: str | None = None
    connection_reuse: str = "keep-alive"
    network_baseline: bool = False
    retry_429: int = 0
    retry_429_max_wait_s: float = 60.0
    max_rpm: float | None = None
    max_tpm: float | None = None


def messages_url(base_url: str) -> tuple[str, str]:
    """``(root_with_v1, messages_url)`` for a base URL in any of the accepted forms."""
    parts = urlsplit(base_url)
    path = parts.path.rstrip("/")
    if path.endswith("/messages"):
        path = path[: -len("/messages")]
    if not path.endswith("/v1"):
        path += "/v1"
    root = urlunsplit((parts.scheme, parts.netloc, path, "", ""))
    return root, root + "/messages" + (f"?{parts.query}" if parts.query else "")


class AnthropicStreamParser(StreamReader):
    """Sans-IO reader of a Messages API stream into a record: bytes and arrival times in.

    ``feed(chunk, t_ns)`` takes one read and returns True once ``message_stop`` or an
    ``error`` event arrived; ``finish(t_ns)`` at the end of the body. Usage: input
    tokens from ``message_start`` (``input_tokens`` + cache reads + cache writes;
    cache reads also as ``cached_prompt_tokens``); output tokens = the last
    ``message_delta`` ``usage.output_tokens``. The request ends at ``message_stop`` (a
    server that keeps the body open after it costs its connection, not the request);
    ``stop_reason: "refusal"`` makes it ``filtered``; tokens that came in one burst mark it
    ``buffered`` (both by :func:`loadgen.endpoints.http.settle`).
    """

    __slots__ = ()
    END_EVENT = "message_stop"

    def feed(self, chunk: bytes, t_ns: int) -> bool:
        for ev in self.dec.feed(chunk):
            if self._event(ev.event, ev.data, t_ns):
                break
        return self.done or self.failed

    def _event(self, name: str, data: str, t_ns: int) -> bool:
        rec = self.record
        try:
            obj = orjson.loads(data)
        except orjson.JSONDecodeError:
            raise ProtocolError(f"malformed JSON in {name} event: {self.redact(data)[:80]!r}") from None
        if not isinstance(obj, dict):
            raise ProtocolError(f"{name} event data is not a JSON object")
        kind = obj.get("type") or name
        if kind == "content_block_delta":
            delta = obj.get("delta")
            if not isinstance(delta, dict):
                raise ProtocolError("content_block_delta without a delta object")
            dt = delta.get("type")
            if dt == "text_delta":
                text, answer = delta.get("text") or "", True
            elif dt == "thinking_delta":
                text, answer = delta.get("thinking") or "", False
            elif dt == "input_json_delta":
                text, answer = delta.get("partial_json") or "", False
                if isinstance(text, str):
                    add_anthropic_input(rec.tool_calls, text)
            else:  # signature_delta, citations_delta, ...: no generated token
                text, answer = "", False
            if text:
                rec.events.append(TokenEvent(t_ns, text, answer))
        elif kind == "content_block_start":
            block = obj.get("content_block") or {}
            if isinstance(block, dict):
                if block.get("type") == "tool_use":
                    rec.tool_calls = start_anthropic_call(rec.tool_calls, block)
                text = block.get("text") or block.get("thinking") or ""
                if isinstance(text, str) and text:
                    rec.events.append(TokenEvent(t_ns, text, block.get("type") == "text"))
        elif kind == "message_start":
            msg = obj.get("message") or {}
            if isinstance(msg, dict):
                self._input_usage(msg.get("usage"))
        elif kind == "message_delta":
            delta = obj.get("delta") or {}
            if isinstance(delta, dict) and delta.get("stop_reason"):
                rec.finish_reason = str(delta["stop_reason"])
            usage = obj.get("usage")
            if isinstance(usage, dict):
                out = usage.get("output_tokens")
                if isinstance(out, int):
                    rec.completion_tokens = out  # cumulative: the last value is the total
                if isinstance(usage.get("input_tokens"), int):
                    self._input_usage(usage)
        elif kind == "message_stop":
            self.done = True
            rec.end_ns = t_ns
            return True
        elif kind == "error":
            err = obj.get("error") or obj
            rec.end_ns = t_ns
            fail(rec, "stream_error", _error_text(err, self.redact))
            self.failed = True
            return True
        # ping, content_block_stop and event types added later carry nothing we count
        return False

    def _input_usage(self, usage: object) -> None:
        if not isinstance(usage, dict):
            return
        base = usage.get("input_tokens")
        if not isinstance(base, int):
            return
        read = usage.get("cache_read_input_tokens")
        write = usage.get("cache_creation_input_tokens")
        read = read if isinstance(read, int) else 0
        write = write if isinstance(write, int) else 0
        self.record.prompt_tokens = base + read + write
        if read or "cache_read_input_tokens" in usage:
            self.record.cached_prompt_tokens = read


def _error_text(err: object, redact: Redactor) -> str:
    if isinstance(err, dict):
        msg = err.get("message") or err.get("type") or err
        kind = err.get("type")
        text = f"{kind}: {msg}" if kind and kind != msg else str(msg)
        return redact(text)[:300]
    return redact(str(err))[:300]


class AnthropicEndpoint(HTTPSendMixin):
    """The Messages API over aiohttp: ``await open()``, ``await send(spec, record)``, ``await close()``.

    Raises :class:`EndpointUnreachable` from ``open`` when the server cannot be reached.
    """

    def __init__(self, config: AnthropicConfig, redactor: Redactor | None = None) -> None:
        self.config = config
        self.redactor = redactor or Redactor()
        clean, secrets = split_url_secrets(config.base_url)
        for s in secrets:
            self.redactor.add(s)
        self.redactor.add(config.api_key)
        for k, v in config.headers.items():
            if "key" in k.lower() or k.lower() in ("authorization", "cookie"):
                self.redactor.add(v)
                if " " in v:
                    self.redactor.add(v.split(" ", 1)[1])
        parts = urlsplit(config.base_url)
        base = urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))
        self._root, self._url = messages_url(base)
        self.url_for_record = split_url_secrets(messages_url(clean)[1])[0]
        self._headers = {"Content-Type": "application/json", "anthropic-version": config.anthropic_version}
        self._headers.update(config.headers)
        if config.api_key:
            self._headers.setdefault("x-api-key", config.api_key)
        self._session: aiohttp.ClientSession | None = None
        self.served_models: list[str] = []
        self.cap = ClientRateCap(config.max_rpm, config.max_tpm) if (config.max_rpm or config.max_tpm) else None
        self.network: dict[str, Any] | None = None

    async def open(self) -> None:
        cfg = self.config
        self._session = self._open_session()
        if cfg.network_baseline:
            self.network = await network_baseline(self._url)
        if cfg.discover or cfg.model is None:
            await self._discover()

    async def _discover(self) -> None:
        """GET /v1/models: proves the endpoint answers, and names the model when none was given."""
        assert self._session is not None
        cfg = self.config
        t0 = now_ns()
        try:
            ans = await side_request(
                self._session, "GET", self._root + "/models", headers=self._headers, connect_s=cfg.connect_timeout_s,
                total_s=min(cfg.connect_timeout_s + 5.0, cfg.timeout_s), limit=MODELS_BODY_LIMIT,
            )  # fmt: skip
        except SideFailure as exc:
            raise EndpointUnreachable(f"cannot reach {self.url_for_record}: {self.redactor(str(exc))}") from None
        if self.network is not None:
            self.network["cheap_request_ms"] = [(now_ns() - t0) / 1e6]
        if ans.status == 200 and ans.complete:
            try:
                obj = orjson.loads(ans.body)
            except orjson.JSONDecodeError:
                obj = None
            if isinstance(obj, dict):
                for m in obj.get("data") or []:
                    if isinstance(m, dict) and m.get("id"):
                        self.served_models.append(str(m["id"]))
        if self.config.model is None:
            if not self.served_models:
                raise EndpointUnreachable(f"{self.url_for_record}: no model given (--model) and /v1/models lists none")
            self.config.model = self.served_models[0]

    def describe(self) -> dict[str, Any]:
        cfg = self.config
        out: dict[str, Any] = {
            "kind": "anthropic",
            "provider": "anthropic",
            "api": "messages",
            "url": self.url_for_record,
            "model": cfg.model,
            "served_models": self.served_models,
            "anthropic_version": cfg.anthropic_version,
            "stream": cfg.stream,
            "header_names": sorted(redact_headers(cfg.headers)),
            "output_length_forced": False,
            "client": self._client_settings(),
        }
        if self.network is not None:
            out["network"] = self.network
        return out

    def build_body(self, spec: RequestSpec) -> dict[str, Any]:
        """The Messages API body: system messages go to ``system``, the rest to ``messages``."""
        cfg = self.config
        body: dict[str, Any] = {
            "model": spec.model or cfg.model,
            "max_tokens": spec.requested_output_tokens or cfg.default_max_tokens,
        }
        if spec.messages:
            system = [str(m.get("content") or "") for m in spec.messages if m.get("role") == "system"]
            # a session's tool calls and results as tool_use / tool_result blocks (loadgen.endpoints.toolcalls)
            body["messages"] = anthropic_messages([m for m in spec.messages if m.get("role") != "system"])
            if system:
                body["system"] = "\n\n".join(system)
        else:
            body["messages"] = [{"role": "user", "content": spec.prompt}]
        if cfg.stream:
            body["stream"] = True
        body.update(cfg.extra_body)
        if isinstance(body.get("tools"), list):  # --tools is written in the OpenAI form
            body["tools"] = anthropic_tools(body["tools"])
        return body

    async def _read_stream(self, resp: aiohttp.ClientResponse, record: RequestRecord) -> None:
        parser = AnthropicStreamParser(record, redact=self.redactor, max_event_bytes=self.config.max_event_bytes)
        async with idle_guard(self.config.idle_timeout_s) as guard:
            async for chunk in resp.content.iter_any():
                guard.touch()
                t = now_ns()
                if parser.feed(chunk, t):
                    break
                record.check_abandon(t)  # --abandon SHARE,Ntok
        parser.finish(now_ns())  # the request ends at message_stop, whatever the server does next
        if parser.done:
            await drain_after_end(resp)  # a body left open after message_stop costs the connection only

    async def _read_body(self, resp: aiohttp.ClientResponse, record: RequestRecord) -> None:
        obj = await read_json_body(resp, record, self.config.max_event_bytes, self.config.idle_timeout_s)
        if not isinstance(obj, dict):
            raise ProtocolError("response body is not a JSON object")
        if obj.get("type") == "error" or obj.get("error"):
            fail(record, "stream_error", _error_text(obj.get("error") or obj, self.redactor))
            return
        parts = []
        for block in obj.get("content") or []:
            if isinstance(block, dict):
                parts.append(str(block.get("thinking") or "") + str(block.get("text") or ""))
                if block.get("type") == "tool_use":
                    record.tool_calls = start_anthropic_call(record.tool_calls, block)
        record.body_text = "".join(parts)
        record.finish_reason = obj.get("stop_reason")
        usage = obj.get("usage")
        if isinstance(usage, dict):
            if isinstance(usage.get("output_tokens"), int):
                record.completion_tokens = usage["output_tokens"]
            AnthropicStreamParser(record, redact=self.redactor)._input_usage(usage)
        settle(record, streamed=False)
