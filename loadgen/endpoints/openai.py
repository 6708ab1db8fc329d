"""OpenAI-compatible completions and chat endpoints (vLLM, SGLang, TGI, managed platforms).

Streaming requests ask for ``stream_options.include_usage`` and, where the server
accepts it (vLLM), ``continuous_usage_stats`` so each chunk's token count is
known. Output lengths are forced with ``max_tokens`` plus ``ignore_eos`` /
``min_tokens`` where accepted. A pre-flight request finds which optional fields
the endpoint accepts (strict platforms answer 400 to unknown fields).

Client settings are chosen on purpose and reported by :meth:`OpenAIEndpoint.describe`:
a connection pool sized for the load (never the library's default cap of 100),
a connect timeout and a total per-request deadline, no retries unless asked for
(``retry_429``), no redirects (credentials are never forwarded to another origin).

The same class speaks to Azure OpenAI (``api-key`` header, deployment URL; its
content-filter chunks carry no token) and OpenAI itself; :mod:`loadgen.endpoints.providers`
builds the right configuration. The rules that turn one stream event into facts on
the record live in :func:`apply_stream_event`, shared with ``loadgen.locust``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any, Literal
from urllib.parse import unquote, urlsplit, urlunsplit

import aiohttp
import orjson

from loadgen.clock import now_ns
from loadgen.endpoints.http import ERROR_BODY_LIMIT, HTTPSendMixin, drain_after_end, fail, settle
from loadgen.endpoints.pool import connect_error_text, network_baseline, side_timeout
from loadgen.endpoints.quota import ClientRateCap
from loadgen.errors import ConfigError, EndpointUnreachable, ProtocolError
from loadgen.redact import Redactor, redact_headers, split_url_secrets
from loadgen.sse import SSEDecoder
from loadgen.types import RequestRecord, RequestSpec, TokenEvent

OPTIONAL_FIELDS = ("continuous_usage_stats", "include_usage", "ignore_eos", "min_tokens")
__all__ = ["ERROR_BODY_LIMIT", "OpenAIConfig", "OpenAIEndpoint", "OpenAIStreamParser", "apply_stream_event"]


@dataclass
class OpenAIConfig:
    """How to talk to an OpenAI-compatible server.

    ``base_url`` may be ``http://host:port``, ``.../v1`` or the full
    ``.../v1/completions`` URL. ``timeout_s`` is the total per-request deadline;
    ``pool_limit`` the maximum number of open connections.
    """

    base_url: str
    api: Literal["completions", "chat"] = "completions"
    model: str | None = None
    stream: bool = True
    headers: dict[str, str] = field(default_factory=dict)
    api_key: str | None = None
    extra_body: dict[str, Any] = field(default_factory=dict)
    timeout_s: float = 600.0
    connect_timeout_s: float = 10.0
    pool_limit: int = 4096
    verify_tls: bool = True
    request_id_prefix: str | None = None
    preflight: bool = True
    discover: bool = True  # read /v1/models and /version in open()
    accepted: dict[str, bool] | None = None  # optional fields known to be accepted (skips re-probing)
    max_event_bytes: int = 16 * 1024 * 1024
    # --- providers, quotas, network (see loadgen.endpoints.providers) ---
    provider: str = "openai-compatible"
    api_key_header: str | None = None  # send the key raw in this header (Azure: api-key), not as Bearer
    max_tokens_field: str = "max_tokens"  # OpenAI chat: max_completion_tokens
    ca_file: str | None = None  # extra trusted CA bundle (private or self-signed certificates)
    connection_reuse: str = "keep-alive"  # or "none": a new connection per request
    network_baseline: bool = False  # resolve + a few TCP connects + a cheap request in open()
    retry_429: int = 0  # retries of a 429 after its advised wait (0: never retried)
    retry_429_max_wait_s: float = 60.0  # a 429 advising a longer wait is not retried
    max_rpm: float | None = None  # the client's own cap on requests per minute
    max_tpm: float | None = None  # ... and on tokens (prompt + max_tokens) per minute


def _split_base(url: str) -> tuple[str, str]:
    """Return (root_url_with_v1_prefix, explicit_path_or_empty)."""
    parts = urlsplit(url)
    path = parts.path.rstrip("/")
    explicit = ""
    for suffix in ("/chat/completions", "/completions"):
        if path.endswith(suffix):
            explicit = path
            path = path[: -len(suffix)]
            break
    if not path.endswith("/v1") and not explicit:
        path = path + "/v1"
    root = urlunsplit((parts.scheme, parts.netloc, path, "", ""))
    return root, explicit


class OpenAIEndpoint(HTTPSendMixin):
    """An OpenAI-compatible streaming endpoint over aiohttp.

    Use as ``await ep.open()`` (creates the session, runs the pre-flight),
    ``await ep.send(spec, record)`` per request, ``await ep.close()``.

    Raises :class:`EndpointUnreachable` from ``open`` when the server cannot be
    reached at all.
    """

    def __init__(self, config: OpenAIConfig, redactor: Redactor | None = None) -> None:
        self.config = config
        clean_url, url_secrets = split_url_secrets(config.base_url)
        self.redactor = redactor or Redactor()
        for s in url_secrets:
            self.redactor.add(s)
        self.redactor.add(config.api_key)
        for k, v in config.headers.items():
            if k.lower() in ("authorization", "cookie", "x-api-key", "api-key") or "key" in k.lower():
                self.redactor.add(v)
                if " " in v:
                    self.redactor.add(v.split(" ", 1)[1])
        # userinfo never goes into a request URL: aiohttp refuses it next to an
        # Authorization header; without one it becomes an explicit Basic header below
        parts = urlsplit(config.base_url)
        base_url = urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))
        self._root, explicit = _split_base(base_url)
        self._clean_root, _ = _split_base(clean_url)
        if explicit:
            self._url = urlunsplit(urlsplit(base_url)._replace(path=explicit, query=urlsplit(base_url).query))
        else:
            q = urlsplit(base_url).query
            path = "/chat/completions" if config.api == "chat" else "/completions"
            self._url = self._root + path + (("?" + q) if q else "")
        self.url_for_record = split_url_secrets(self._url)[0]
        self._session: aiohttp.ClientSession | None = None
        self.accepted: dict[str, bool] = (
            dict(config.accepted) if config.accepted else {k: True for k in OPTIONAL_FIELDS}
        )
        self.served_models: list[str] = []
        self.server_version: str | None = None
        self.max_model_len: int | None = None
        self.preflight_done = False
        self._headers = {"Content-Type": "application/json"}
        self._headers.update(config.headers)
        if config.api_key:
            if config.api_key_header:
                self._headers.setdefault(config.api_key_header, config.api_key)
            else:
                self._headers.setdefault("Authorization", f"Bearer {config.api_key}")
        self.cap = ClientRateCap(config.max_rpm, config.max_tpm) if (config.max_rpm or config.max_tpm) else None
        self.network: dict[str, Any] | None = None
        if "@" in parts.netloc and not any(k.lower() == "authorization" for k in self._headers):
            basic = aiohttp.BasicAuth(unquote(parts.username or ""), unquote(parts.password or "")).encode()
            self._headers["Authorization"] = basic
            self.redactor.add(basic.split(" ", 1)[1])

    # --- lifecycle -----------------------------------------------------------------

    async def open(self) -> None:
        cfg = self.config
        self._session = self._open_session()
        if cfg.network_baseline:
            self.network = await network_baseline(self._url)
            self.network["cheap_request_ms"] = await self._timed_gets(self._root + "/models")
        if cfg.discover or cfg.model is None:
            await self._discover()
        if cfg.preflight:
            await self._preflight()

    async def _timed_gets(self, url: str, n: int = 2) -> list[float | None]:
        """Milliseconds of ``n`` GETs of ``url`` (the first may open the connection); None on failure."""
        assert self._session is not None
        out: list[float | None] = []
        for _ in range(n):
            t0 = now_ns()
            try:
                async with self._session.get(
                    url,
                    headers=self._headers,
                    allow_redirects=False,
                    timeout=side_timeout(self.config.connect_timeout_s, self.config.connect_timeout_s + 5),
                ) as resp:
                    await resp.read()
                out.append((now_ns() - t0) / 1e6)
            except (TimeoutError, aiohttp.ClientError, OSError):
                out.append(None)
        return out

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def describe(self) -> dict[str, Any]:
        cfg = self.config
        out: dict[str, Any] = {
            "kind": "openai",
            "provider": cfg.provider,
            "api": cfg.api,
            "url": self.url_for_record,
            "model": cfg.model,
            "served_models": self.served_models,
            "server_version": self.server_version,
            "max_model_len": self.max_model_len,
            "stream": cfg.stream,
            "header_names": sorted(redact_headers(cfg.headers)),
            "client": self._client_settings(),
            "preflight": self.preflight_done,
            "accepted_fields": dict(self.accepted),
        }
        if cfg.ca_file:
            out["client"]["ca_file"] = cfg.ca_file
        if self.network is not None:
            out["network"] = self.network
        return out

    def worker_config(self, workers: int) -> OpenAIConfig:
        """This opened endpoint's config for each of ``workers`` processes: no pre-flight and no
        discovery again (the fields found accepted are carried), no network baseline, and the
        client's cap shared (each worker enforces its part)."""
        cfg = self.config
        return replace(
            cfg,
            preflight=False,
            discover=False,
            accepted=dict(self.accepted),
            network_baseline=False,
            max_rpm=cfg.max_rpm / workers if cfg.max_rpm else None,
            max_tpm=cfg.max_tpm / workers if cfg.max_tpm else None,
        )

    # --- discovery and pre-flight --------------------------------------------------

    async def _get_json(self, path: str) -> Any:
        assert self._session is not None
        async with self._session.get(
            self._root + path if path.startswith("/models") else _origin(self._root) + path,
            headers=self._headers,
            allow_redirects=False,
            timeout=side_timeout(self.config.connect_timeout_s, self.config.connect_timeout_s + 5),
        ) as resp:
            if resp.status != 200:
                if path == "/models" and self.config.model is None:
                    self._refused(f"GET {self._root}/models", resp.status, await resp.content.read(ERROR_BODY_LIMIT))
                return None
            try:
                return await resp.json(content_type=None)
            except Exception:
                return None

    async def _discover(self) -> None:
        """Read /v1/models (served model, max length) and /version where exposed."""
        try:
            models = await self._get_json("/models")
        except (TimeoutError, aiohttp.ClientConnectorError, aiohttp.ClientOSError, OSError) as exc:
            raise EndpointUnreachable(
                f"cannot reach {self.url_for_record}: {self.redactor(connect_error_text(exc))}"
            ) from None
        if isinstance(models, dict):
            for m in models.get("data") or []:
                if isinstance(m, dict) and m.get("id"):
                    self.served_models.append(str(m["id"]))
                    if self.max_model_len is None and isinstance(m.get("max_model_len"), int):
                        self.max_model_len = m["max_model_len"]
        if self.config.model is None:
            if not self.served_models:
                raise EndpointUnreachable(f"{self.url_for_record}: no model given (--model) and /v1/models lists none")
            self.config.model = self.served_models[0]
        try:
            ver = await self._get_json("/version")
            if isinstance(ver, dict) and ver.get("version"):
                self.server_version = str(ver["version"])
        except Exception:
            pass

    async def _preflight(self) -> None:
        """Send short requests to learn which optional fields the endpoint accepts.

        Tries everything; on HTTP 400/422 drops fields in order (continuous usage,
        then ignore_eos, then min_tokens, then include_usage) until accepted. Any other
        4xx but 429 (wrong model name, no such path, bad key), or a 400/422 that remains
        with every optional field dropped, raises :class:`ConfigError` naming the status
        and the server's message: no load is sent to an endpoint that refuses it.
        """
        drop_order = ["continuous_usage_stats", "ignore_eos", "min_tokens", "include_usage"]
        spec = RequestSpec(index=-1, prompt="Hello", requested_output_tokens=2)
        for _ in range(len(drop_order) + 1):
            body = self.build_body(spec)
            status, text = await self._probe(body)
            if status is None or status < 400 or status == 429 or status >= 500:
                break
            if status not in (400, 422):
                self._refused(f"POST {self.url_for_record}", status, text)
            for name in drop_order:
                if self.accepted[name]:
                    self.accepted[name] = False
                    break
            else:
                self._refused(f"POST {self.url_for_record}", status, text)
        self.preflight_done = True

    def _refused(self, what: str, status: int, body: bytes) -> None:
        """A 4xx (not 429) before any load: raise :class:`ConfigError` with the server's own words."""
        if not 400 <= status < 500 or status == 429:
            return
        raise ConfigError(
            f"{split_url_secrets(what)[0]} answered HTTP {status} before any load: "
            f"{_refusal_text(body, self.redactor)} (check --endpoint, --api and --model)"
        )

    async def _probe(self, body: dict[str, Any]) -> tuple[int | None, bytes]:
        assert self._session is not None
        try:
            async with self._session.post(
                self._url,
                data=orjson.dumps(body),
                headers=self._headers,
                allow_redirects=False,
                timeout=side_timeout(self.config.connect_timeout_s, min(self.config.timeout_s, 60.0)),
            ) as resp:
                text = await resp.content.read(ERROR_BODY_LIMIT)
                await resp.read()
                return resp.status, text
        except (aiohttp.ClientConnectorError, OSError) as exc:
            raise EndpointUnreachable(
                f"cannot reach {self.url_for_record}: {self.redactor(connect_error_text(exc))}"
            ) from None
        except (TimeoutError, aiohttp.ClientError):
            return None, b""

    # --- requests ------------------------------------------------------------------

    def build_body(self, spec: RequestSpec) -> dict[str, Any]:
        cfg = self.config
        body: dict[str, Any] = {"model": cfg.model}
        if cfg.api == "chat":
            body["messages"] = list(spec.messages) if spec.messages else [{"role": "user", "content": spec.prompt}]
        elif spec.prompt_token_ids is not None:
            body["prompt"] = list(spec.prompt_token_ids)  # exact input length by construction
        else:
            body["prompt"] = spec.prompt
        if spec.requested_output_tokens is not None:
            body[cfg.max_tokens_field] = spec.requested_output_tokens
            if self.accepted["ignore_eos"]:
                body["ignore_eos"] = True
            if self.accepted["min_tokens"]:
                body["min_tokens"] = spec.requested_output_tokens
        if cfg.stream:
            body["stream"] = True
            opts: dict[str, Any] = {}
            if self.accepted["include_usage"]:
                opts["include_usage"] = True
            if self.accepted["continuous_usage_stats"]:
                opts["continuous_usage_stats"] = True
            if opts:
                body["stream_options"] = opts
        body.update(cfg.extra_body)
        return body

    async def _read_body(self, resp: aiohttp.ClientResponse, record: RequestRecord) -> None:
        raw = await resp.read()
        record.end_ns = now_ns()
        record.streamed = False
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError:
            raise ProtocolError("response body is not JSON") from None
        if not isinstance(obj, dict):
            raise ProtocolError("response body is not a JSON object")
        if obj.get("error"):
            _fail(record, "stream_error", _error_text(obj["error"], self.redactor))
            return
        choices = obj.get("choices") or []
        if not isinstance(choices, list):
            raise ProtocolError("choices is not a list")
        text = ""
        if choices and isinstance(choices[0], dict):
            c = choices[0]
            if self.config.api == "chat":
                msg = c.get("message") or {}
                if not isinstance(msg, dict):
                    raise ProtocolError("choices[0].message is not an object")
                text = (_text_field(msg, "reasoning_content") or _text_field(msg, "reasoning")) + _text_field(
                    msg, "content"
                )
            else:
                text = _text_field(c, "text")
            record.finish_reason = c.get("finish_reason")
        record.body_text = text
        _take_usage(record, obj.get("usage"))
        settle(record, streamed=False)

    async def _read_stream(self, resp: aiohttp.ClientResponse, record: RequestRecord) -> None:
        parser = OpenAIStreamParser(
            record, chat=self.config.api == "chat", redact=self.redactor, max_event_bytes=self.config.max_event_bytes
        )
        async for chunk in resp.content.iter_any():
            if parser.feed(chunk, now_ns()):
                break
        parser.finish(now_ns())
        if parser.done:
            await drain_after_end(resp)  # a body left open after [DONE] costs the connection, not the request


def apply_stream_event(record: RequestRecord, data: str, t_ns: int, *, chat: bool, redact: Redactor) -> str | None:
    """Apply one SSE event's ``data`` (arrived at ``t_ns``) to ``record``.

    Returns ``"done"`` at ``[DONE]``, ``"failed"`` on an in-band error object (the
    record is then a ``stream_error`` ending at ``t_ns``), else None. A token-bearing
    event (see :mod:`loadgen.metrics`) appends a :class:`TokenEvent`; usage is kept
    (cumulative: the last value wins); ``finish_reason`` is kept. Chunks with an empty
    ``choices`` (Azure's ``prompt_filter_results``, usage-only chunks), chunks without
    a ``delta`` (Azure's ``content_filter_results``/``content_filter_offsets``) and
    role-only deltas carry no token. Raises :class:`ProtocolError` on malformed JSON.
    """
    if data == "[DONE]":
        return "done"
    if not data.strip():
        return None
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError:
        raise ProtocolError(f"malformed JSON in event: {redact(data)[:80]!r}") from None
    if not isinstance(obj, dict):
        raise ProtocolError("event data is not a JSON object")
    err = obj.get("error")
    if err:
        record.end_ns = t_ns
        _fail(record, "stream_error", _error_text(err, redact))
        return "failed"
    usage = obj.get("usage")
    cont = None
    if usage:
        _take_usage(record, usage)
        cont = record.completion_tokens
    choices = obj.get("choices")
    if not choices:
        return None
    if not isinstance(choices, list):
        raise ProtocolError("choices is not a list")
    c = choices[0]
    if not isinstance(c, dict):
        raise ProtocolError("choices[0] is not an object")
    if chat:
        delta = c.get("delta") or {}
        if not isinstance(delta, dict):
            raise ProtocolError("choices[0].delta is not an object")
        content = _text_field(delta, "content")
        other = _text_field(delta, "reasoning_content") or _text_field(delta, "reasoning")
        tools = delta.get("tool_calls")
        if tools:
            other += _tool_text(tools)
        if content or other or tools:
            record.events.append(TokenEvent(t_ns, other + content, bool(content), cont))
    else:
        text = _text_field(c, "text")
        if text:
            record.events.append(TokenEvent(t_ns, text, True, cont))
    fr = c.get("finish_reason")
    if fr:
        record.finish_reason = fr
    return None


class OpenAIStreamParser:
    """Sans-IO reader of an OpenAI-style SSE stream into a record: bytes and arrival times in.

    ``feed(chunk, t_ns)`` takes one read (stamped with its arrival) and returns True
    once the stream has ended (``[DONE]``) or failed in-band; ``finish(t_ns)`` is
    called at the end of the body. A clean end is ``[DONE]``, or EOF after a
    ``finish_reason`` with no partial event pending; anything else is an
    ``incomplete_stream``. A clean end with ``finish_reason: "content_filter"`` is the
    ``filtered`` error kind; a stream whose tokens came in one burst (a buffering proxy,
    see :func:`loadgen.metrics.is_buffered`) is marked ``buffered``: its TPOT and ITL
    are not measurable (both by :func:`~loadgen.endpoints.http.settle`).
    """

    __slots__ = ("record", "chat", "redact", "dec", "done", "failed")

    def __init__(
        self, record: RequestRecord, *, chat: bool, redact: Redactor, max_event_bytes: int = 16 * 1024 * 1024
    ) -> None:
        self.record = record
        self.chat = chat
        self.redact = redact
        self.dec = SSEDecoder(max_event_bytes)
        self.done = False
        self.failed = False

    def feed(self, chunk: bytes, t_ns: int) -> bool:
        rec = self.record
        for ev in self.dec.feed(chunk):
            r = apply_stream_event(rec, ev.data, t_ns, chat=self.chat, redact=self.redact)
            if r == "done":
                self.done = True
                rec.end_ns = t_ns
                break
            if r == "failed":
                self.failed = True
                break
        return self.done or self.failed

    def finish(self, t_ns: int) -> None:
        rec = self.record
        if self.failed:
            return
        if not self.done:
            self.dec.close()
            rec.end_ns = t_ns
            if rec.finish_reason is None or self.dec.pending:
                _fail(rec, "incomplete_stream", "stream closed before [DONE] or finish_reason")
                return
        settle(rec)


def _origin(url: str) -> str:
    p = urlsplit(url)
    return urlunsplit((p.scheme, p.netloc, "", "", ""))


_fail = fail


MAX_USAGE_TOKENS = 1 << 22
"""A reported token count above this (4 Mi) is not believed: a protocol error."""


def _count(usage: dict[str, Any], name: str) -> int | None:
    """An integer token count of ``usage`` (anything else is ignored, as before); a negative or
    absurd one is a ProtocolError: per-token metrics allocate one slot per reported token."""
    v = usage.get(name)
    if not isinstance(v, int) or isinstance(v, bool):
        return None
    if not 0 <= v <= MAX_USAGE_TOKENS:
        raise ProtocolError(f"usage.{name} is not a plausible token count: {v}")
    return v


def _text_field(obj: dict[str, Any], name: str) -> str:
    """A text field of a choice or delta: "" when absent or null; ProtocolError when not a string."""
    v = obj.get(name)
    if v is None:
        return ""
    if not isinstance(v, str):
        raise ProtocolError(f"{name} is not a string: {type(v).__name__}")
    return v


def _take_usage(record: RequestRecord, usage: Any) -> None:
    if not isinstance(usage, dict):
        return
    ct = _count(usage, "completion_tokens")
    if ct is not None:
        record.completion_tokens = ct
    pt = usage.get("prompt_tokens")
    if isinstance(pt, int):
        record.prompt_tokens = pt
    det = usage.get("completion_tokens_details")
    if isinstance(det, dict) and isinstance(det.get("reasoning_tokens"), int):
        record.reasoning_tokens = det["reasoning_tokens"]
    pdet = usage.get("prompt_tokens_details")
    if isinstance(pdet, dict) and isinstance(pdet.get("cached_tokens"), int):
        record.cached_prompt_tokens = pdet["cached_tokens"]


def _error_text(err: Any, redact: Redactor) -> str:
    """The error's message, secrets scrubbed *before* it is cut to 300 characters."""
    if isinstance(err, dict):
        return redact(str(err.get("message") or err.get("type") or err))[:300]
    return redact(str(err))[:300]


def _refusal_text(body: bytes, redact: Redactor) -> str:
    """One line of a refusal's body: its JSON ``error.message``/``message``/``detail``, else its first text line."""
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError:
        obj = None
    if isinstance(obj, dict):
        err = obj.get("error")
        if isinstance(err, dict):
            text = str(err.get("message") or err)
        else:
            text = str(err or obj.get("message") or obj.get("detail") or obj)
    else:
        text = re.sub(r"<[^>]*>", " ", body.decode("utf-8", "replace"))  # an HTML error page's words
    line = " ".join(text.split())
    return _error_text(line, redact) if line else "(empty body)"


def _tool_text(tools: Any) -> str:
    out = []
    if isinstance(tools, list):
        for t in tools:
            if isinstance(t, dict):
                fn = t.get("function") or {}
                out.append(str(fn.get("name") or "") + str(fn.get("arguments") or ""))
    return "".join(out) or " "
