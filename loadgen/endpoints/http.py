"""One HTTP request, sent and read: what the HTTP endpoints (OpenAI-compatible, Anthropic,
Triton's ``generate_stream``) share.

* :func:`classify_exception`: a transport exception -> an error kind.
* :func:`note_response`, :func:`fail`, :func:`fill_http_error` / :func:`record_http_error`
  (a non-2xx answer -> ``rate_limited``, ``filtered`` or ``http_error``): filling the record.
* :func:`settle` (a cleanly ended response -> ``ok``, ``buffered`` or ``filtered``) and
  :func:`drain_after_end` (the rest of a finished stream, read for a bounded time).
* :func:`http_attempt`: one POST, its headers awaited at most the header timeout
  (:mod:`loadgen.endpoints.header_wait`), its answer read by the endpoint's reader; never raises.
* :class:`GatedPayload`: a body whose bytes go out only when the runner opens its gate, and
  never on a kept-alive connection the server has closed meanwhile (sent again on a fresh one).
* :func:`send_with_attempts`: the client's own rate cap (:class:`~loadgen.endpoints.quota.ClientRateCap`,
  ``--max-rpm``/``--max-tpm``) before each attempt, and opt-in retries after a 429
  (``--retry-429``), every attempt kept on the record.
* :class:`HTTPSendMixin`: ``send`` built from the above, for endpoints that set a few attributes.
"""

from __future__ import annotations

import asyncio
import errno
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

import aiohttp
import orjson

from loadgen.core.clock import deadline_after, now_ns, sleep_until
from loadgen.core.errors import ConnectTimeout, HeaderTimeout, ProtocolError
from loadgen.core.metrics import stream_buffered
from loadgen.core.types import RequestRecord, RequestSpec
from loadgen.endpoints.base import EndpointBase
from loadgen.endpoints.header_wait import HeaderDeadline
from loadgen.endpoints.lean_http import LIBRARY as LEAN_LIBRARY
from loadgen.endpoints.lean_http import LeanSender
from loadgen.endpoints.pool import connect_error_text, current_record, fresh_connection, open_session, peer_closed
from loadgen.endpoints.quota import (
    ClientRateCap,
    Headers,
    parse_ratelimit_headers,
    request_token_cost,
    retry_after_from_headers,
)
from loadgen.endpoints.reads import IdleTimeout, SelfReading, read_2xx

if TYPE_CHECKING:
    from aiohttp.abc import AbstractStreamWriter

_CLIENT_LIMIT_ERRNOS = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.EADDRNOTAVAIL}


def _errno_of(exc: BaseException) -> int | None:
    seen = 0
    e: BaseException | None = exc
    while e is not None and seen < 8:
        if isinstance(e, OSError) and e.errno is not None:
            return e.errno
        os_error = getattr(e, "os_error", None)
        if isinstance(os_error, OSError) and os_error.errno is not None:
            return os_error.errno
        e = e.__cause__ or e.__context__
        seen += 1
    return None


def _malformed_http(exc: BaseException) -> bool:
    """The server's bytes are not valid HTTP: aiohttp's parser rejected the status line or a
    header (it raises ``ClientResponseError`` with status 400; no other path of a request
    raises it here, redirects are not followed) or a ``Content-Encoding`` it cannot decode.
    A server bug, not a failed connection: the ``protocol`` kind."""
    if isinstance(exc, aiohttp.ClientResponseError):
        return True
    return isinstance(exc, aiohttp.ClientPayloadError) and isinstance(
        exc.__cause__, aiohttp.http_exceptions.ContentEncodingError
    )


def classify_exception(exc: BaseException, *, response_started: bool) -> str:
    """Map a transport exception to an error kind from ``loadgen.core.types.ERROR_KINDS``.

    ``response_started``: the response headers had arrived (errors after that are
    an ``incomplete_stream``, before that a ``connect`` failure). A response that is
    not valid HTTP is ``protocol`` either way; no headers within the header timeout is
    ``header_timeout`` (:class:`~loadgen.core.errors.HeaderTimeout`).
    """
    if isinstance(exc, HeaderTimeout):
        return "header_timeout"
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError)):
        return "timeout"
    if _errno_of(exc) in _CLIENT_LIMIT_ERRNOS:
        return "client_limit"
    if _malformed_http(exc):
        return "protocol"
    if response_started:
        return "incomplete_stream"
    if isinstance(exc, aiohttp.ClientConnectorError | aiohttp.ServerDisconnectedError):
        return "connect"
    if isinstance(exc, aiohttp.ClientOSError | ConnectionError | OSError):
        return "connect"
    if isinstance(exc, aiohttp.ClientPayloadError):
        return "incomplete_stream"
    return "connect"


FILTERED_FINISH_REASONS = {
    "content_filter": "finish_reason content_filter",  # OpenAI, Azure OpenAI (and OpenAI-compatible hosts)
    "refusal": "stop_reason refusal",  # Anthropic: a streaming classifier stopped the answer
}
"""Finish reasons that mean a provider's content filter ended the output: the request is ``filtered``."""


def settle(record: RequestRecord, *, streamed: bool = True) -> None:
    """The outcome of a response that ended cleanly: ``ok``, or the ``filtered`` error kind
    when its finish reason says a content filter cut it (:data:`FILTERED_FINISH_REASONS`).

    A filtered request is not a success: it never enters the success latencies or goodput and
    is counted under its kind (``errors_by_kind.filtered``); its end stays where the stream
    ended. A streamed ``ok`` record is marked ``buffered`` when its tokens came in one burst
    (:func:`loadgen.core.metrics.stream_buffered`)."""
    why = FILTERED_FINISH_REASONS.get(record.finish_reason or "")
    if why is not None:
        fail(record, "filtered", f"{why}: the provider's content filter stopped the output")
        return
    if streamed:
        record.buffered = stream_buffered(record)
        record.buffered_judged = True  # metrics.compute's rule for a streamed record: it need not run again
    record.status = "ok"


DRAIN_AFTER_END_S = 1.0
"""After a stream's clean end, what follows (the chunked terminator) is read this long, then the
connection is dropped."""


async def drain_after_end(resp: aiohttp.ClientResponse | SelfReading) -> None:
    """Read the rest of a body whose stream has already ended, so the connection can be reused,
    but never longer than :data:`DRAIN_AFTER_END_S`: a server that keeps the body open after
    the stream's end (``[DONE]``, ``message_stop``, an error event) costs its connection, not the
    request, whose outcome and end are already on its record."""
    if not isinstance(resp, aiohttp.ClientResponse):  # --http-client lean
        await resp.drain(DRAIN_AFTER_END_S)
        return
    try:
        async with asyncio.timeout(DRAIN_AFTER_END_S):
            async for _ in resp.content.iter_any():
                pass
    except (TimeoutError, aiohttp.ClientError, OSError):
        resp.close()


class GatedPayload(aiohttp.BytesPayload):
    """A request body written only once ``gate`` (an :class:`asyncio.Event`) is set: the request is prepared ahead (pool
    connection, headers built and buffered) and its bytes go out when the gate opens.

    aiohttp buffers the headers and writes them with the body's first chunk, so nothing reaches
    the socket before the gate opens (see :meth:`HTTPSendMixin.send`). ``wrote`` says whether a
    byte may have reached it: false while the gate is shut, and false when the connection was
    already closing as the gate opened (aiohttp then refuses to write)."""

    def __init__(
        self, value: bytes, gate: asyncio.Event, record: RequestRecord | None = None, **kwargs: object
    ) -> None:
        super().__init__(value, **kwargs)
        self._gate = gate
        self._record = record
        self.wrote = False

    def _opened(self, writer: AbstractStreamWriter) -> None:
        """At the gate: write only on a live connection. A pooled connection the server has
        closed, even when the loop has not seen its FIN yet (:func:`peer_closed`), gets no byte:
        the request fails before it is sent and is prepared again on a fresh connection."""
        transport = getattr(writer, "transport", None)
        if transport is None or transport.is_closing():
            return  # aiohttp refuses to write
        if self._record is not None and self._record.connection_reused and peer_closed(transport):
            raise aiohttp.ClientConnectionResetError("the server closed this kept-alive connection before the send")
        self.wrote = True  # no await between this check and the write: nothing can close it between

    async def write(self, writer: AbstractStreamWriter) -> None:
        await self._gate.wait()
        self._opened(writer)
        await super().write(writer)

    async def write_with_length(self, writer: AbstractStreamWriter, content_length: int | None) -> None:
        await self._gate.wait()
        self._opened(writer)
        await super().write_with_length(writer, content_length)


def note_response(resp: aiohttp.ClientResponse, record: RequestRecord) -> None:
    """Stamp the arrival of the response headers and keep its quota headers."""
    record.response_headers_ns = now_ns()
    rl = parse_ratelimit_headers(resp.headers)
    if rl is not None:
        record.ratelimit = rl


def fail(record: RequestRecord, kind: str, detail: str) -> None:
    """Mark ``record`` failed with ``kind``; its end is now unless already stamped."""
    record.status = "error"
    record.error_kind = kind
    record.error_detail = detail
    if record.end_ns is None:
        record.end_ns = now_ns()


ERROR_BODY_LIMIT = 4096
"""Bytes of an error response's body read for the record's ``error_detail``."""


def fill_http_error(
    record: RequestRecord,
    status: int,
    headers: Headers,
    body: bytes,
    redact: Callable[[str], str],
    *,
    error_field: str | None = None,
) -> None:
    """Fill ``record`` from a non-2xx answer whose body (its first :data:`ERROR_BODY_LIMIT`
    bytes) has been read: ``rate_limited`` (429, its Retry-After kept, see
    :func:`~loadgen.endpoints.quota.retry_after_from_headers`), ``filtered`` (a 400 whose body
    says a content filter refused the prompt, as Azure OpenAI answers) or ``http_error``; the
    first 300 characters of the body, secrets scrubbed first. Its end is now.

    ``error_field``: when the body is a JSON object with this key set (Triton: ``"error"``),
    its value is the message instead of the whole body. Sans-IO: any HTTP client's answer
    (aiohttp's here, ``http.client``'s in the Locust client) goes through this one function.
    """
    record.http_status = status
    record.end_ns = now_ns()
    text = body.decode("utf-8", "replace").strip().replace("\n", " ")
    obj: object = None
    if error_field is not None or status == 400:
        try:
            obj = orjson.loads(body)
        except orjson.JSONDecodeError:
            obj = None
    if error_field is not None and isinstance(obj, dict) and obj.get(error_field):
        text = str(obj[error_field])
    text = redact(text)[:300]
    if status == 429:
        record.retry_after_s = retry_after_from_headers(headers)
        record.error_kind = "rate_limited"
    elif status == 400 and _prompt_filtered(obj):
        record.error_kind = "filtered"
    else:
        record.error_kind = "http_error"
    record.status = "error"
    record.error_detail = redact(f"HTTP {status}: {text}")


def _prompt_filtered(obj: object) -> bool:
    """An HTTP 400 body that says a content filter refused the prompt (Azure OpenAI:
    ``{"error": {"code": "content_filter", "innererror": {"code": "ResponsibleAIPolicyViolation"}}}``)."""
    err = obj.get("error") if isinstance(obj, dict) else None
    if not isinstance(err, dict):
        return False
    inner = err.get("innererror")
    return err.get("code") == "content_filter" or (
        isinstance(inner, dict) and inner.get("code") == "ResponsibleAIPolicyViolation"
    )


async def record_http_error(
    resp: aiohttp.ClientResponse,
    record: RequestRecord,
    redact: Callable[[str], str],
    *,
    error_field: str | None = None,
) -> None:
    """Read a non-2xx aiohttp response's body and fill ``record`` (see :func:`fill_http_error`)."""
    try:
        body = await resp.content.read(ERROR_BODY_LIMIT)
    except Exception:
        body = b""
    fill_http_error(record, resp.status, resp.headers, body, redact, error_field=error_field)


def fail_attempt(
    record: RequestRecord, exc: Exception, *, response_started: bool, redact: Callable[[str], str]
) -> None:
    """An attempt's exception as the record's named error, for both HTTP clients: a
    :class:`~loadgen.core.errors.ProtocolError` is ``protocol``; any other is classified
    (:func:`classify_exception`), unless the answer is already complete and ok (the deadline hit
    its slow close)."""
    if isinstance(exc, ProtocolError):
        fail(record, "protocol", redact(str(exc)))
    elif record.status != "ok":
        kind = classify_exception(exc, response_started=response_started)
        whole = isinstance(exc, IdleTimeout | HeaderTimeout | ConnectTimeout)  # their message is the whole line
        text = str(exc) if whole else connect_error_text(exc, kind=False)
        fail(record, kind, redact(text))


async def http_attempt(
    session: aiohttp.ClientSession,
    url: str,
    payload: bytes | aiohttp.BytesPayload,
    headers: Mapping[str, str],
    record: RequestRecord,
    *,
    timeout_s: float,
    redact: Callable[[str], str],
    read_ok: Callable[[aiohttp.ClientResponse, RequestRecord], Awaitable[None]],
    header_timeout_s: float | None = None,
    ahead_s: float = 0.0,
) -> None:
    """POST ``payload`` and fill ``record``; never raises except ``asyncio.CancelledError``.

    ``header_timeout_s``: no response headers within it ends the request as ``header_timeout``
    (:class:`~loadgen.endpoints.header_wait.HeaderDeadline`; ``ahead_s``: a prepared request's time
    to its scheduled send, which ``timeout_s`` already includes).

    ``read_ok`` reads a 2xx response (stream or body, bounded in size and idle time: see
    :mod:`loadgen.endpoints.reads`); other statuses go to
    :func:`record_http_error`. Redirects are never followed (credentials never
    reach another origin). Transport errors are classified by
    :func:`classify_exception`; a :class:`~loadgen.core.errors.ProtocolError` is ``protocol``.
    """
    response_started = False
    t_call = now_ns()
    token = current_record.set(record)
    try:
        async with (
            deadline_after(timeout_s),  # never ends before timeout_s (uvloop's timers can fire early)
            HeaderDeadline(header_timeout_s, total_s=timeout_s - ahead_s, ahead_s=ahead_s) as header_wait,
        ):
            async with session.post(
                url, data=payload, headers=headers, allow_redirects=False, trace_request_ctx=record
            ) as resp:
                header_wait.arrived()
                response_started = True
                note_response(resp, record)
                if record.sent_ns is None:
                    record.sent_ns = t_call
                if not 200 <= resp.status < 300:
                    await record_http_error(resp, record, redact)
                    return
                await read_2xx(read_ok, resp, record, resp.status, resp.headers.get("Content-Type"))
    except Exception as exc:  # transport errors become data, never escape (a cancel is not an Exception)
        fail_attempt(record, exc, response_started=response_started, redact=redact)
    finally:
        current_record.reset(token)
    if record.sent_ns is None and record.error_kind not in ("connect", "client_limit"):
        record.sent_ns = t_call


_ATTEMPT_RESET = (
    ("status", "error"),
    ("error_kind", None),
    ("error_detail", None),
    ("http_status", None),
    ("end_ns", None),
    ("retry_after_s", None),
    ("ratelimit", None),
    ("response_headers_ns", None),
    ("finish_reason", None),
)

DEFAULT_RETRY_WAIT_S = 1.0
"""Wait before retrying a 429 that advised none (doubled at each further attempt)."""


async def send_with_attempts(
    attempt: Callable[[RequestSpec, RequestRecord], Awaitable[None]],
    spec: RequestSpec,
    record: RequestRecord,
    *,
    retry_429: int = 0,
    retry_max_wait_s: float = 60.0,
    cap: ClientRateCap | None = None,
) -> None:
    """Send ``spec`` with ``attempt``, under the client cap, retrying 429s when asked.

    Before every attempt the cap (if any) is waited out; the wait adds to
    ``record.throttle_ns``. A 429 is retried only with ``retry_429 > 0``: after the
    advised wait (``retry_after_s``; else 1 s, doubled per attempt), never when
    the advised wait is longer than ``retry_max_wait_s``. Each earlier attempt is
    kept in ``record.attempts`` (``sent_ns``, ``response_headers_ns``, ``end_ns``,
    ``http_status``, ``retry_after_s``, ``ratelimit``, ``waited_ns``, and
    ``next_sent_ns``: when the following attempt went out); the record
    keeps its scheduled time, so the waiting counts in every latency.
    """
    n = 0
    while True:
        if cap is not None:
            wait = cap.reserve(request_token_cost(spec), now_ns())
            if wait > 0:
                t = now_ns()
                await sleep_until(t + wait)  # not before the cap allows it
                record.throttle_ns += now_ns() - t
        sent_before = record.sent_ns
        if record.attempts:
            record.sent_ns = None  # the hook stamps this attempt's send; restored below
        await attempt(spec, record)
        if record.attempts:
            this_sent, record.sent_ns = record.sent_ns, sent_before
        else:
            this_sent = record.sent_ns
        if record.attempts:
            record.attempts[-1]["next_sent_ns"] = this_sent  # when the attempt after it went out
        if record.error_kind != "rate_limited" or n >= retry_429:
            return
        ra = record.retry_after_s
        wait_s = ra if ra is not None else DEFAULT_RETRY_WAIT_S * (2**n)
        if wait_s > retry_max_wait_s:
            return
        if record.attempts is None:
            record.attempts = []
        record.attempts.append(
            {
                "sent_ns": this_sent,
                "response_headers_ns": record.response_headers_ns,
                "end_ns": record.end_ns,
                "http_status": record.http_status,
                "retry_after_s": ra,
                "ratelimit": record.ratelimit,
                "waited_ns": round(wait_s * 1e9),
            }
        )
        end = record.end_ns or now_ns()
        for name, value in _ATTEMPT_RESET:
            setattr(record, name, value)
        record.events.clear()
        await sleep_until(end + round(wait_s * 1e9))  # never before the advised wait is over
        n += 1


STALE_RESENDS_MAX = 2
"""How many times a prepared request is prepared again on a fresh connection after the server
closed its pooled one before any byte of it was written (each is a new connection: bounded anyway)."""

STALE_RESET = (
    *_ATTEMPT_RESET,
    ("sent_ns", None),
    ("connect_ns", 0),
    ("connect_late_ns", 0),
    ("connection_reused", None),
    ("pool_queued", False),
    ("dns_ns", None),
    ("tcp_connect_ns", None),
    ("tls_ns", None),
)


def closed_before_send(record: RequestRecord) -> bool:
    """A prepared request's pooled (kept-alive) connection ended before an answer began: the
    keep-alive close race (the server closed it as idle while the request waited for its gate).
    Sent again only when no byte of it was written (``GatedPayload.wrote``): never a retry."""
    return record.error_kind == "connect" and record.connection_reused is True and record.http_status is None


class HTTPSendMixin(EndpointBase):
    """``send`` and one HTTP attempt, shared by the HTTP endpoints (OpenAI-compatible, Anthropic).

    The class using it provides ``config`` (``timeout_s``, ``stream``, ``retry_429``,
    ``retry_429_max_wait_s``, ``request_id_prefix``, ``header_timeout_s``), ``cap`` (a :class:`ClientRateCap` or
    None), ``redactor``, ``_session``, ``_url``, ``_headers``, ``build_body(spec)`` and the
    readers ``_read_stream`` / ``_read_body``.
    """

    _session: aiohttp.ClientSession | None
    _lean: LeanSender | None = None  # --http-client lean: the load's requests go through it

    async def close(self) -> None:
        """Close the HTTP session and its pooled connections; a second call does nothing."""
        if self._lean is not None:
            await self._lean.close()
            self._lean = None
        if self._session is not None:
            await self._session.close()
            self._session = None

    def accepts_send_gate(self) -> bool:
        """Whether ``send(..., gate=)`` may prepare a request ahead of its scheduled time: with
        pooled connections only (``connection_reuse="none"`` means every request pays its
        connect inside its latency), no client rate cap and no 429 retries (both wait first)."""
        self_: Any = self
        cfg = self_.config
        return cfg.connection_reuse == "keep-alive" and self_.cap is None and not cfg.retry_429

    async def send(self, spec: RequestSpec, record: RequestRecord, gate: asyncio.Event | None = None) -> None:
        """Send one request and fill ``record`` (see :class:`RequestRecord`). Never raises
        except ``asyncio.CancelledError``.

        ``gate`` (open loop, see :meth:`accepts_send_gate`): the request is prepared now and
        its bytes are written when the gate is set (the runner opens it at the scheduled
        time). A prepared request whose pooled connection the server closed before the gate
        (the keep-alive close race: no byte of it was written, see :class:`GatedPayload`) is
        prepared again on a fresh connection (:func:`closed_before_send`, at most
        :data:`STALE_RESENDS_MAX` times) and sent at the gate, or at once when the gate is already
        open: a late send is schedule lag, never a ``connect`` failure. Under the client's rate
        cap when one is set; a 429 is retried only with ``retry_429`` (see :func:`send_with_attempts`)."""
        self_: Any = self
        assert self_._session is not None, "open() first"
        cfg = self_.config
        if self_.cap is None and not cfg.retry_429:
            await self._attempt(spec, record, gate)
            return
        if gate is not None:
            await gate.wait()
        await send_with_attempts(
            self._attempt,
            spec,
            record,
            retry_429=cfg.retry_429,
            retry_max_wait_s=cfg.retry_429_max_wait_s,
            cap=self_.cap,
        )

    def _open_session(self) -> aiohttp.ClientSession:
        """The HTTP session for ``config`` (see :func:`open_session`); call inside the loop."""
        cfg = self.config  # type: ignore[attr-defined]  # every endpoint using the mixin has a config
        return open_session(
            pool_limit=cfg.pool_limit,
            connect_timeout_s=cfg.connect_timeout_s,
            verify_tls=cfg.verify_tls,
            ca_file=cfg.ca_file,
            connection_reuse=cfg.connection_reuse,
        )

    def _header_timeout_s(self) -> float | None:
        """The header timeout applied (``config.header_timeout_s``): streamed requests only (a whole
        answer's headers come with its last byte: ``timeout_s`` bounds it)."""
        cfg: Any = self.config  # type: ignore[attr-defined]  # every endpoint using the mixin has a config
        return getattr(cfg, "header_timeout_s", None) if cfg.stream else None

    def _client_settings(self) -> dict[str, Any]:
        """The HTTP client's settings as recorded in ``conditions.endpoint.client``."""
        self_: Any = self
        cfg = self_.config
        lean = getattr(cfg, "http_client", "aiohttp") in ("lean", "auto")  # --http-client (OpenAI-compatible only)
        return {
            "library": LEAN_LIBRARY if lean else f"aiohttp {aiohttp.__version__}",
            "pool_limit": cfg.pool_limit,
            "connect_timeout_s": cfg.connect_timeout_s,
            "request_timeout_s": cfg.timeout_s,
            "idle_timeout_s": getattr(cfg, "idle_timeout_s", None),  # no byte of a body this long: timeout
            "header_timeout_s": self._header_timeout_s(),  # no response headers this long: header_timeout
            "retries": cfg.retry_429,  # only of 429s, only when asked (--retry-429)
            "redirects": "not followed",
            "verify_tls": cfg.verify_tls,
            "connection_reuse": cfg.connection_reuse,
            "http_version": "1.1",
            "retry_429": cfg.retry_429,
            "retry_429_max_wait_s": cfg.retry_429_max_wait_s,
            "rate_cap": self_.cap.describe() if self_.cap else None,
            # prepared requests sent again on a fresh connection: the server closed their pooled
            # one before any byte was written (the keep-alive close race; this process's count)
            "stale_connection_resends": getattr(self_, "stale_resends", 0),
        }

    async def _attempt(self, spec: RequestSpec, record: RequestRecord, gate: asyncio.Event | None = None) -> None:
        """One HTTP exchange for ``spec`` (see :meth:`send`)."""
        self_: Any = self
        assert self_._session is not None, "open() first"
        cfg = self_.config
        headers = self_._headers
        extra: dict[str, str] = {}
        if cfg.request_id_prefix is not None:
            extra["x-request-id"] = f"{cfg.request_id_prefix}-{spec.index}"
        session_header = getattr(cfg, "session_header", None)
        if session_header and spec.session_id is not None:  # session affinity for routers (--session-header)
            extra[session_header] = spec.session_id
        body = orjson.dumps(self_.build_body(spec))
        if self._lean is not None:  # --http-client lean (loadgen.endpoints.lean_pool)
            self_.stale_resends = getattr(self_, "stale_resends", 0) + await self._lean.send(record, body, extra, gate)
            return
        read_ok = self_._read_stream if cfg.stream else self_._read_body
        header_s = self._header_timeout_s()
        if extra:
            headers = {**headers, **extra}
        if gate is None:
            await http_attempt(self_._session, self_._url, body, headers, record, timeout_s=cfg.timeout_s,
                               redact=self_.redactor, read_ok=read_ok, header_timeout_s=header_s)  # fmt: skip
            return
        for n in range(STALE_RESENDS_MAX + 1):
            payload = GatedPayload(body, gate, record, content_type="application/json")
            # prepared ahead: the total deadline runs from the scheduled time
            ahead_s = max(record.scheduled_ns - now_ns(), 0) / 1e9
            token = fresh_connection.set(n > 0)
            try:
                await http_attempt(self_._session, self_._url, payload, headers, record,
                                   timeout_s=cfg.timeout_s + ahead_s, redact=self_.redactor, read_ok=read_ok,
                                   header_timeout_s=header_s, ahead_s=ahead_s)  # fmt: skip
            finally:
                fresh_connection.reset(token)
            if payload.wrote or not closed_before_send(record) or n == STALE_RESENDS_MAX:
                break
            self_.stale_resends = getattr(self_, "stale_resends", 0) + 1
            for name, value in STALE_RESET:
                setattr(record, name, value)
        if n:
            record.connect_late_ns = 0  # the pool's dead connection is the client's delay: schedule lag
