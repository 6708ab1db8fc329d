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
the record live in :func:`apply_stream_event` (:mod:`loadgen.endpoints.openai_stream`, with the
stream parser and the whole-body reader), shared with ``loadgen.locust``. Every body read is
bounded (:mod:`loadgen.endpoints.reads`); discovery and the pre-flight go through
:func:`~loadgen.endpoints.side.side_request`, whose failure line names the phase it stopped in.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Literal
from urllib.parse import unquote, urlsplit, urlunsplit

import aiohttp
import orjson

from loadgen.core.clock import now_ns
from loadgen.core.errors import ConfigError, EndpointUnreachable
from loadgen.core.redact import Redactor, redact_headers, split_url_secrets
from loadgen.core.types import RequestRecord, RequestSpec
from loadgen.endpoints.header_wait import DEFAULT_HEADER_TIMEOUT_S
from loadgen.endpoints.http import ERROR_BODY_LIMIT, HTTPSendMixin, drain_after_end
from loadgen.endpoints.lean_http import LeanResponse, LeanShared
from loadgen.endpoints.lean_pool import LeanPool
from loadgen.endpoints.openai_stream import OpenAIStreamParser, _error_text, apply_body, apply_stream_event
from loadgen.endpoints.pool import network_baseline
from loadgen.endpoints.quota import ClientRateCap
from loadgen.endpoints.reads import (
    DEFAULT_IDLE_TIMEOUT_S,
    MODELS_BODY_LIMIT,
    SIDE_BODY_LIMIT,
    error_body_line,
    read_json_body,
    read_pushed,
)
from loadgen.endpoints.responses_stream import ResponsesStreamParser, apply_responses_body, responses_body
from loadgen.endpoints.side import SideAnswer, SideFailure, side_request

OPTIONAL_FIELDS = ("continuous_usage_stats", "include_usage", "ignore_eos", "min_tokens")
PROBE_IMAGE = (
    "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAgAAAAICAIAAABLbSncAAAA00lEQVR4AQHIADf/API28iTfq22J5JW6gSPXOsDNGOwI"
    "9qTnJADSb6zSrrDa8qlyzT+gL9RPSHB43kUfX2wAJG3uRTNR5NPKOspBTEbBaCr60aQCLLKMAGIC8xUyHQ4HNTKX3S485sCknH/WmsLDiQBImUrROk"
    "xpVArV4nOodtbJRRm5HyQtnk0ALgzaHwxwGHQLghb6gY5QIl21IGKlaTJnAFUlZOeEpBU07P2TgJL3JkPzFhMFMeYXwABFl+APTd7IR3b8jH/HeTV8"
    "TabvHdeXEfu7X10/2nfr+wAAAABJRU5ErkJggg=="
)  # an 8x8 PNG: the pre-flight's image with --images
__all__ = ["ERROR_BODY_LIMIT", "OpenAIConfig", "OpenAIEndpoint", "OpenAIStreamParser", "apply_stream_event"]


@dataclass
class OpenAIConfig:
    """How to talk to an OpenAI-compatible server.

    ``base_url`` may be ``http://host:port``, ``.../v1`` or the full
    ``.../v1/completions`` URL. ``timeout_s`` is the total per-request deadline;
    ``pool_limit`` the maximum number of open connections.
    """

    base_url: str
    api: Literal["completions", "chat", "responses"] = "completions"
    model: str | None = None
    stream: bool = True
    headers: dict[str, str] = field(default_factory=dict, repr=False)  # may hold a credential: never in a repr
    api_key: str | None = field(default=None, repr=False)  # never in a repr (a log, an error, a Ray message)
    extra_body: dict[str, Any] = field(default_factory=dict, repr=False)  # may hold a credential field
    timeout_s: float = 600.0
    connect_timeout_s: float = 10.0
    pool_limit: int = 4096
    verify_tls: bool = True
    request_id_prefix: str | None = None
    session_header: str | None = None  # --session-header: this header carries a session turn's session id
    preflight: bool = True
    discover: bool = True  # read /v1/models and /version in open()
    accepted: dict[str, bool] | None = None  # optional fields known to be accepted (skips re-probing)
    max_event_bytes: int = 16 * 1024 * 1024  # also the largest whole (--no-stream) body read
    idle_timeout_s: float | None = DEFAULT_IDLE_TIMEOUT_S  # no byte of a body this long: timeout (None: off)
    header_timeout_s: float | None = DEFAULT_HEADER_TIMEOUT_S  # streamed: no headers this long: header_timeout
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
    mix_models: tuple[str, ...] = ()  # --model a=0.7,b=0.3: every model of the mix, checked against /v1/models
    probe_image: bool = False  # --images: the pre-flight carries an image (a text-only model refuses before load)
    http_client: str = "auto"  # --http-client: lean (auto) sends the load's requests over loadgen.endpoints.lean_pool


def _split_base(url: str) -> tuple[str, str]:
    """Return (root_url_with_v1_prefix, explicit_path_or_empty)."""
    parts = urlsplit(url)
    path = parts.path.rstrip("/")
    explicit = ""
    for suffix in ("/chat/completions", "/completions", "/responses"):
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
            path = {"chat": "/chat/completions", "responses": "/responses"}.get(config.api, "/completions")
            self._url = self._root + path + (("?" + q) if q else "")
        self.url_for_record = split_url_secrets(self._url)[0]
        self._session: aiohttp.ClientSession | None = None
        self.accepted: dict[str, bool] = (
            dict(config.accepted) if config.accepted else {k: config.api != "responses" for k in OPTIONAL_FIELDS}
        )  # (the Responses API has none of them: its usage comes at the end, its length is max_output_tokens)
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
        self._session = self._open_session()  # discovery, the pre-flight and (by default) the load
        if cfg.http_client in ("lean", "auto"):
            read_ok = self._read_stream if cfg.stream else self._read_body
            shared = LeanShared(self._headers, cfg.timeout_s, self._header_timeout_s(), read_ok, self.redactor)
            self._lean = LeanPool(self._url, shared=shared, limit=cfg.pool_limit, connect_timeout_s=cfg.connect_timeout_s,
                                  verify_tls=cfg.verify_tls, ca_file=cfg.ca_file,
                                  connection_reuse=cfg.connection_reuse)  # fmt: skip
            self._lean.request_bytes(self._headers, None, b"")  # a header HTTP cannot carry: ConfigError now
        elif cfg.http_client != "aiohttp":
            raise ConfigError(f"--http-client {cfg.http_client!r}: expected auto, aiohttp or lean")
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
                await self._side("GET", url, limit=SIDE_BODY_LIMIT)
                out.append((now_ns() - t0) / 1e6)
            except SideFailure:
                out.append(None)
        return out

    async def _side(self, method: str, url: str, *, limit: int, data: bytes | None = None,
                    total_s: float | None = None) -> SideAnswer:  # fmt: skip
        """A request beside the load (see :func:`side_request`): by default within the connect
        timeout + 5 s, never more than the total deadline (``timeout_s``)."""
        assert self._session is not None
        cfg = self.config
        return await side_request(
            self._session, method, url, headers=self._headers, data=data, connect_s=cfg.connect_timeout_s,
            total_s=total_s or min(cfg.connect_timeout_s + 5.0, cfg.timeout_s), limit=limit,
        )  # fmt: skip

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
        """The JSON of a discovery GET (``/models`` under the API root, else at the origin); None
        when it is not a 200, not JSON or too large. Raises :class:`SideFailure`."""
        url = self._root + path if path.startswith("/models") else _origin(self._root) + path
        ans = await self._side("GET", url, limit=MODELS_BODY_LIMIT if path == "/models" else SIDE_BODY_LIMIT)
        if ans.status != 200:
            if path == "/models" and self.config.model is None:
                self._refused(f"GET {self._root}/models", ans.status, ans.body[:ERROR_BODY_LIMIT])
            return None
        if not ans.complete:
            return None  # larger than any listing we read: ignored
        try:
            return orjson.loads(ans.body)
        except orjson.JSONDecodeError:
            return None

    async def _discover(self) -> None:
        """Read /v1/models (served model, max length) and /version where exposed."""
        try:
            models = await self._get_json("/models")
        except SideFailure as exc:
            raise EndpointUnreachable(f"cannot reach {self.url_for_record}: {self.redactor(str(exc))}") from None
        if isinstance(models, dict):
            for m in models.get("data") or []:
                if isinstance(m, dict) and m.get("id"):
                    self.served_models.append(str(m["id"]))
                    if self.max_model_len is None and isinstance(m.get("max_model_len"), int):
                        self.max_model_len = m["max_model_len"]
        missing = [m for m in self.config.mix_models if self.served_models and m not in self.served_models]
        if missing:
            raise ConfigError(
                f"--model: {', '.join(missing)} not served by {self.url_for_record} (it lists "
                f"{', '.join(self.served_models[:8])}): no load sent"
            )
        if self.config.model is None:
            if not self.served_models:
                raise EndpointUnreachable(f"{self.url_for_record}: no model given (--model) and /v1/models lists none")
            self.config.model = self.served_models[0]
        try:
            ver = await self._get_json("/version")
            if isinstance(ver, dict) and ver.get("version"):
                self.server_version = self.redactor(str(ver["version"]))[:200]
        except SideFailure:
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
        msgs = None
        if self.config.probe_image:  # --images: a model that takes no image says so now, not on every request
            msgs = ({"role": "user", "content": [{"type": "text", "text": "Hello"},
                                                 {"type": "image_url", "image_url": {"url": PROBE_IMAGE}}]},)  # fmt: skip
        spec = RequestSpec(index=-1, prompt="Hello", requested_output_tokens=2, messages=msgs)
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
        """The pre-flight request: its status and the first bytes of its answer (read to
        :data:`SIDE_BODY_LIMIT` at most). Raises :class:`EndpointUnreachable` when no answer came
        (the line names the phase it stopped in and the time waited)."""
        try:
            ans = await self._side("POST", self._url, data=orjson.dumps(body), limit=SIDE_BODY_LIMIT,
                                   total_s=min(self.config.timeout_s, 60.0))  # fmt: skip
        except SideFailure as exc:
            raise EndpointUnreachable(
                f"cannot reach {self.url_for_record}: pre-flight request {self.redactor(str(exc))}"
            ) from None
        return ans.status, ans.body[:ERROR_BODY_LIMIT]

    # --- requests ------------------------------------------------------------------

    def build_body(self, spec: RequestSpec) -> dict[str, Any]:
        cfg = self.config
        if cfg.api == "responses":  # loadgen.endpoints.responses_stream
            return responses_body(spec.model or cfg.model, spec.prompt, spec.messages, spec.requested_output_tokens,
                                  stream=cfg.stream, extra=cfg.extra_body)  # fmt: skip
        body: dict[str, Any] = {"model": spec.model or cfg.model}  # (spec.model: --model a=0.7,b=0.3)
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

    async def _read_body(self, resp: aiohttp.ClientResponse | LeanResponse, record: RequestRecord) -> None:
        obj = await read_json_body(resp, record, self.config.max_event_bytes, self.config.idle_timeout_s)
        if self.config.api == "responses":
            apply_responses_body(record, obj, redact=self.redactor)
            return
        apply_body(record, obj, chat=self.config.api == "chat", redact=self.redactor)

    async def _read_stream(self, resp: aiohttp.ClientResponse | LeanResponse, record: RequestRecord) -> None:
        parser: OpenAIStreamParser | ResponsesStreamParser
        if self.config.api == "responses":
            parser = ResponsesStreamParser(record, redact=self.redactor, max_event_bytes=self.config.max_event_bytes)
        else:
            parser = OpenAIStreamParser(
                record,
                chat=self.config.api == "chat",
                redact=self.redactor,
                max_event_bytes=self.config.max_event_bytes,
            )
        feed = parser.feed
        if record.abandon_after_tokens is not None:  # --abandon SHARE,Ntok: its user walks away at that many tokens

            def feed(chunk: bytes, t_ns: int) -> bool:
                if parser.feed(chunk, t_ns):
                    return True
                record.check_abandon(t_ns)
                return False

        await read_pushed(resp, feed, self.config.idle_timeout_s)
        parser.finish(now_ns())
        if parser.done:
            await drain_after_end(resp)  # a body left open after [DONE] costs the connection, not the request


def _origin(url: str) -> str:
    p = urlsplit(url)
    return urlunsplit((p.scheme, p.netloc, "", "", ""))


def _refusal_text(body: bytes, redact: Redactor) -> str:
    """One line of a refusal's body (:func:`error_body_line`), redacted."""
    line = error_body_line(body)
    return _error_text(line, redact) if line else "(empty body)"
