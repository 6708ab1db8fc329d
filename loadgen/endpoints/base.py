"""What every HTTP endpoint shares: the Endpoint protocol, error classification,
quota headers, the client session with its timing hooks, and the send loop.

* :class:`Endpoint`: what the runner drives.
* :func:`classify_exception`: a transport exception -> an error kind.
* Quota headers, pure functions: :func:`parse_retry_after` (delta-seconds, an HTTP
  date read against the response's ``Date``, ``retry-after-ms`` first, Azure's
  ``-1`` as unknown), :func:`parse_go_duration` (``6m0s``, ``9ms``, ``1h2m3.5s``),
  :func:`parse_ratelimit_headers` (``x-ratelimit-*`` of OpenAI and Azure,
  ``anthropic-ratelimit-*``).
* :func:`open_session`: an aiohttp session whose trace hooks stamp on each
  :class:`~loadgen.types.RequestRecord` when its headers went out, whether its
  connection was new or reused, and a new connection's DNS, TCP connect and TLS
  times (:class:`TimedConnector` splits TCP from TLS).
* :func:`send_with_attempts`: the client's own rate cap (:class:`ClientRateCap`,
  ``--max-rpm``/``--max-tpm``) before each attempt, and opt-in retries after a 429
  (``--retry-429``), every attempt kept on the record.
"""

from __future__ import annotations

import asyncio
import contextvars
import datetime as dt
import email.utils
import errno
import re
import socket
import ssl
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol
from urllib.parse import urlsplit

import aiohttp
import orjson

from loadgen.clock import deadline_after, now_ns, sleep_until
from loadgen.types import RequestRecord, RequestSpec


class Endpoint(Protocol):
    """What the runner drives. ``send`` fills ``record`` and never raises
    (except ``asyncio.CancelledError``, which the runner turns into ``cancelled``)."""

    async def open(self) -> None: ...

    async def close(self) -> None: ...

    async def send(self, spec: RequestSpec, record: RequestRecord) -> None: ...

    def describe(self) -> dict[str, Any]:
        """Client settings and negotiated options for the result's conditions (no secrets)."""
        ...


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
    """Map a transport exception to an error kind from ``loadgen.types.ERROR_KINDS``.

    ``response_started``: the response headers had arrived (errors after that are
    an ``incomplete_stream``, before that a ``connect`` failure). A response that is
    not valid HTTP is ``protocol`` either way.
    """
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


# ------------------------------------------------------------------ quota headers


def _http_date_s(text: str) -> float | None:
    """Seconds since the epoch of an HTTP date (IMF-fixdate, RFC 850 or asctime; UTC)."""
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # asctime carries no zone: HTTP dates are GMT
        when = when.replace(tzinfo=dt.UTC)
    return when.timestamp()


def parse_retry_after(
    value: str | None, date_header: str | None = None, *, retry_after_ms: str | None = None
) -> float | None:
    """Seconds to wait, from ``Retry-After`` (and ``retry-after-ms``, which wins when valid).

    ``retry_after_ms`` (OpenAI and Azure send ``retry-after-ms``; Azure also
    ``x-ms-retry-after-ms``) is milliseconds. ``value`` is delta-seconds (decimals
    accepted) or an HTTP date, read against the response's ``Date`` header when
    present (the server's clock, so client clock skew does not matter), else
    against the local wall clock; a date in the past gives 0. Azure's ``-1``, any
    negative number and anything unparseable give None ("unknown").
    """
    if retry_after_ms:
        try:
            ms = float(retry_after_ms.strip())
        except ValueError:
            ms = -1.0
        if ms >= 0 and ms != float("inf"):
            return ms / 1000.0
    if not value:
        return None
    value = value.strip()
    try:
        s = float(value)
    except ValueError:
        pass
    else:
        return s if 0 <= s != float("inf") else None
    when = _http_date_s(value)
    if when is None:
        return None
    ref = _http_date_s(date_header) if date_header else None
    if ref is None:
        ref = time.time()
    return max(when - ref, 0.0)


def _get(headers: Mapping[str, str], name: str) -> str | None:
    v = headers.get(name)
    if v is None and not hasattr(headers, "getall"):  # a plain dict: match case-insensitively
        low = name.lower()
        for k, val in headers.items():
            if k.lower() == low:
                return val
    return v


def retry_after_from_headers(headers: Mapping[str, str]) -> float | None:
    """:func:`parse_retry_after` over a response's headers (any capitalisation)."""
    ms = _get(headers, "retry-after-ms") or _get(headers, "x-ms-retry-after-ms")
    return parse_retry_after(_get(headers, "retry-after"), _get(headers, "date"), retry_after_ms=ms)


_GO_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_GO_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")


def parse_go_duration(text: str | None) -> float | None:
    """Seconds of a Go-style duration as OpenAI's ``x-ratelimit-reset-*`` headers send it.

    ``"6m0s"`` -> 360.0, ``"9ms"`` -> 0.009, ``"1h2m3.5s"`` -> 3723.5, ``"0s"`` -> 0.0;
    a bare number is seconds. Anything else (negative, empty, an unknown unit) is None.
    """
    if text is None:
        return None
    t = text.strip()
    if not t:
        return None
    try:
        v = float(t)
    except ValueError:
        pass
    else:
        return v if 0 <= v != float("inf") else None
    pos, total = 0, 0.0
    while pos < len(t):
        m = _GO_PART.match(t, pos)
        if m is None:
            return None
        total += float(m.group(1)) * _GO_UNITS[m.group(2)]
        pos = m.end()
    return total


def _reset_s(value: str, date_header: str | None) -> float | None:
    """A reset value: a Go duration, seconds, or an RFC 3339 time (Anthropic) read against Date."""
    d = parse_go_duration(value)
    if d is not None:
        return d
    try:
        when = dt.datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    ref = _http_date_s(date_header) if date_header else None
    if ref is None:
        ref = time.time()
    return max(when.timestamp() - ref, 0.0)


_OPENAI_RL = re.compile(r"^x-ratelimit-(limit|remaining|reset)-([a-z0-9-]+)$")
_ANTHROPIC_RL = re.compile(r"^anthropic-ratelimit-([a-z0-9-]+)-(limit|remaining|reset)$")


def parse_ratelimit_headers(headers: Mapping[str, str]) -> dict[str, float] | None:
    """The quota state a response reports, or None when it reports none.

    Reads ``x-ratelimit-{limit,remaining,reset}-{requests,tokens,...}`` (OpenAI,
    Azure OpenAI, many compatible hosts) and
    ``anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-{limit,remaining,reset}``.
    Keys: ``limit_<what>``, ``remaining_<what>`` (numbers) and ``reset_<what>_s``
    (seconds until the quota refills: Go durations such as ``6m0s``, or an RFC 3339
    time read against the response's ``Date``), ``<what>`` with ``-`` as ``_``.
    Unparseable values are left out.
    """
    date = _get(headers, "date")
    out: dict[str, float] = {}
    for name, value in headers.items():
        low = name.lower()
        if not low.startswith(("x-ratelimit-", "anthropic-ratelimit-")):
            continue
        m = _OPENAI_RL.match(low)
        if m:
            kind, what = m.group(1), m.group(2)
        else:
            m = _ANTHROPIC_RL.match(low)
            if not m:
                continue
            what, kind = m.group(1), m.group(2)
        what = what.replace("-", "_")
        if kind == "reset":
            v = _reset_s(value, date)
            if v is not None:
                out[f"reset_{what}_s"] = v
            continue
        try:
            n = float(value.strip())
        except ValueError:
            continue
        if n != n or n in (float("inf"), float("-inf")):
            continue
        out[f"{kind}_{what}"] = int(n) if n.is_integer() else n
    return dict(sorted(out.items())) or None


# ------------------------------------------------------------------ the session

_current_record: contextvars.ContextVar[RequestRecord | None] = contextvars.ContextVar(
    "loadgen_current_record", default=None
)
"""The record of the request this task is sending (read by :class:`TimedConnector`)."""


def _first_attempt(rec: Any) -> bool:
    return isinstance(rec, RequestRecord) and not rec.attempts


class TimedConnector(aiohttp.TCPConnector):
    """A TCPConnector that splits a new connection's set-up into TCP connect and TLS.

    The protocol factory is called by the event loop once the socket is connected
    and before the TLS handshake starts; ``create_connection`` returns once the
    handshake is done. Both moments land on the record being sent (a context
    variable set by the endpoint around each request).
    """

    async def _wrap_create_connection(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        rec = _current_record.get()
        if not args or not _first_attempt(rec):
            return await super()._wrap_create_connection(*args, **kwargs)
        factory = args[0]
        mark: list[int] = []

        def timed_factory() -> Any:
            mark.append(now_ns())
            return factory()

        t0 = now_ns()
        result = await super()._wrap_create_connection(timed_factory, *args[1:], **kwargs)
        t2 = now_ns()
        t1 = mark[-1] if mark else t2
        assert rec is not None
        rec.tcp_connect_ns = t1 - t0
        rec.tls_ns = (t2 - t1) if kwargs.get("ssl") else None
        return result


class GatedPayload(aiohttp.BytesPayload):
    """A request body written only once ``gate`` (an :class:`asyncio.Event`) is set: the request is prepared ahead (pool
    connection, headers built and buffered) and its bytes go out when the gate opens.

    aiohttp buffers the headers and writes them with the body's first chunk, so nothing reaches
    the socket before the gate opens (see :meth:`HTTPSendMixin.send`)."""

    def __init__(self, value: bytes, gate: asyncio.Event, **kwargs: Any) -> None:
        super().__init__(value, **kwargs)
        self._gate = gate

    async def write(self, writer: Any) -> None:
        await self._gate.wait()
        await super().write(writer)

    async def write_with_length(self, writer: Any, content_length: int | None) -> None:
        await self._gate.wait()
        await super().write_with_length(writer, content_length)


async def _on_headers_sent(session: Any, ctx: Any, params: Any) -> None:
    rec = ctx.trace_request_ctx
    if isinstance(rec, RequestRecord) and rec.sent_ns is None:
        rec.sent_ns = now_ns()


async def _on_chunk_sent(session: Any, ctx: Any, params: Any) -> None:
    """``sent_ns`` is when the request's bytes are handed to the socket: aiohttp buffers the
    headers (``_on_headers_sent`` stamps that, the time for a request without a body) and
    writes them with the body's first chunk from a task of its own, which in a burst runs
    only after every other ready task; the first chunk's time is the true send."""
    rec = ctx.trace_request_ctx
    if isinstance(rec, RequestRecord) and not getattr(ctx, "body_started", False):
        ctx.body_started = True
        rec.sent_ns = now_ns()


async def _on_conn_start(session: Any, ctx: Any, params: Any) -> None:
    ctx.conn_start_ns = now_ns()


async def _on_conn_end(session: Any, ctx: Any, params: Any) -> None:
    rec = ctx.trace_request_ctx
    start = getattr(ctx, "conn_start_ns", None)
    if _first_attempt(rec) and start is not None:
        end = now_ns()
        rec.connect_ns = end - start
        rec.connect_late_ns = max(0, end - max(start, rec.scheduled_ns))
        rec.connection_reused = False


async def _on_reuse(session: Any, ctx: Any, params: Any) -> None:
    rec = ctx.trace_request_ctx
    if _first_attempt(rec):
        rec.connection_reused = True


async def _on_queued(session: Any, ctx: Any, params: Any) -> None:
    rec = ctx.trace_request_ctx
    if isinstance(rec, RequestRecord):
        rec.pool_queued = True


async def _on_dns_start(session: Any, ctx: Any, params: Any) -> None:
    ctx.dns_start_ns = now_ns()


async def _on_dns_end(session: Any, ctx: Any, params: Any) -> None:
    rec = ctx.trace_request_ctx
    start = getattr(ctx, "dns_start_ns", None)
    if _first_attempt(rec) and start is not None:
        rec.dns_ns = now_ns() - start


async def _on_dns_hit(session: Any, ctx: Any, params: Any) -> None:
    rec = ctx.trace_request_ctx
    if _first_attempt(rec) and rec.dns_ns is None:
        rec.dns_ns = 0


CONNECTION_REUSE = ("keep-alive", "none")

BUFFERED_MIN_TOKEN_EVENTS = 3
"""A stream is ``buffered`` when at least this many token events all arrived in one read.

A buffering proxy hands over the whole stream at once. Two events in one read are as
likely a client that stalled for one inter-token gap (a busy loop coalesces them in
the socket buffer) as a proxy, so it takes three or more; a client stall long enough
to swallow a whole longer stream also fails the run's event-loop-lag check."""


def is_buffered(token_events: int, token_reads: int) -> bool:
    """True when ``token_events`` (>= :data:`BUFFERED_MIN_TOKEN_EVENTS`) all came in one read."""
    return token_events >= BUFFERED_MIN_TOKEN_EVENTS and token_reads == 1


def open_session(
    *,
    pool_limit: int,
    connect_timeout_s: float,
    verify_tls: bool = True,
    ca_file: str | None = None,
    connection_reuse: str = "keep-alive",
) -> aiohttp.ClientSession:
    """An aiohttp session set for load testing (call inside the running loop).

    A pool of ``pool_limit`` connections (never the library's cap of 100), a connect
    timeout and no total timeout (the endpoint sets a per-request deadline), the
    timing hooks of this module, and ``connection_reuse`` ``"keep-alive"`` (pooled
    connections) or ``"none"`` (a new connection for every request, closed after
    it: every request pays DNS, TCP and TLS). ``ca_file`` adds a trusted CA bundle
    (a private or self-signed certificate); ``verify_tls=False`` trusts anything.
    """
    if connection_reuse not in CONNECTION_REUSE:
        raise ValueError(f"connection_reuse must be one of {CONNECTION_REUSE}")
    trace = aiohttp.TraceConfig()
    trace.on_request_headers_sent.append(_on_headers_sent)
    trace.on_request_chunk_sent.append(_on_chunk_sent)
    trace.on_connection_create_start.append(_on_conn_start)
    trace.on_connection_create_end.append(_on_conn_end)
    trace.on_connection_reuseconn.append(_on_reuse)
    trace.on_connection_queued_start.append(_on_queued)
    trace.on_dns_resolvehost_start.append(_on_dns_start)
    trace.on_dns_resolvehost_end.append(_on_dns_end)
    trace.on_dns_cache_hit.append(_on_dns_hit)
    ssl_ctx: ssl.SSLContext | bool
    if not verify_tls:
        ssl_ctx = False
    elif ca_file:
        ssl_ctx = ssl.create_default_context(cafile=ca_file)
    else:
        ssl_ctx = True
    connector = TimedConnector(
        limit=pool_limit,
        limit_per_host=0,
        ssl=ssl_ctx,
        ttl_dns_cache=300,
        enable_cleanup_closed=False,
        force_close=connection_reuse == "none",
    )
    return aiohttp.ClientSession(
        connector=connector,
        timeout=aiohttp.ClientTimeout(total=None, connect=connect_timeout_s, sock_connect=connect_timeout_s),
        trace_configs=[trace],
        auto_decompress=True,
        skip_auto_headers=("User-Agent",),
        headers={"User-Agent": "loadgen"},
    )


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


async def record_http_error(resp: aiohttp.ClientResponse, record: RequestRecord, redact: Callable[[str], str]) -> None:
    """Fill ``record`` from a non-2xx response: ``rate_limited`` (429, its Retry-After kept)
    or ``http_error``; the first 300 characters of the body, secrets scrubbed first."""
    record.http_status = resp.status
    try:
        body = await resp.content.read(ERROR_BODY_LIMIT)
    except Exception:
        body = b""
    record.end_ns = now_ns()
    text = redact(body.decode("utf-8", "replace").strip().replace("\n", " "))[:300]
    if resp.status == 429:
        record.retry_after_s = retry_after_from_headers(resp.headers)
        record.error_kind = "rate_limited"
    else:
        record.error_kind = "http_error"
    record.status = "error"
    record.error_detail = redact(f"HTTP {resp.status}: {text}")


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
) -> None:
    """POST ``payload`` and fill ``record``; never raises except ``asyncio.CancelledError``.

    ``read_ok`` reads a 2xx response (stream or body); other statuses go to
    :func:`record_http_error`. Redirects are never followed (credentials never
    reach another origin). Transport errors are classified by
    :func:`classify_exception`; a :class:`~loadgen.errors.ProtocolError` is ``protocol``.
    """
    from loadgen.errors import ProtocolError

    response_started = False
    t_call = now_ns()
    token = _current_record.set(record)
    try:
        async with deadline_after(timeout_s):  # never ends before timeout_s (uvloop's timers can fire early)
            async with session.post(
                url, data=payload, headers=headers, allow_redirects=False, trace_request_ctx=record
            ) as resp:
                response_started = True
                note_response(resp, record)
                if record.sent_ns is None:
                    record.sent_ns = t_call
                if not 200 <= resp.status < 300:
                    await record_http_error(resp, record, redact)
                    return
                if resp.status != 200:
                    record.http_status = resp.status  # a 2xx other than 200 is kept (201, 202, 204...)
                await read_ok(resp, record)
                if record.error_kind == "incomplete_stream" and not record.events:
                    ctype = resp.headers.get("Content-Type") or "none"
                    if "event-stream" not in ctype:  # say why no event came: the server did not stream
                        record.error_detail = (
                            f"{record.error_detail}: HTTP {resp.status} with Content-Type {ctype[:60]}, not an event "
                            "stream (the server or a proxy ignored streaming; --no-stream measures whole responses)"
                        )
    except asyncio.CancelledError:
        raise
    except ProtocolError as exc:
        fail(record, "protocol", redact(str(exc)))
    except Exception as exc:  # transport errors become data, never escape
        if record.status != "ok":  # a complete response stays ok (e.g. the deadline hit its slow close)
            kind = classify_exception(exc, response_started=response_started)
            detail = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            fail(record, kind, redact(detail))
    finally:
        _current_record.reset(token)
    if record.sent_ns is None and record.error_kind not in ("connect", "client_limit"):
        record.sent_ns = t_call


async def network_baseline(url: str, *, connects: int = 3, timeout_s: float = 5.0) -> dict[str, Any]:
    """Where the endpoint is and how far: its resolved addresses and a few bare TCP connects.

    Returns ``{"host", "port", "resolved_addresses", "dns_ms", "tcp_connect_ms": [...],
    "tcp_connect_ms_min"}``; on failure an ``"error"`` key says why (never raises).
    Every connect is closed at once without sending a byte.
    """
    p = urlsplit(url)
    host = p.hostname or ""
    port = p.port or (443 if p.scheme == "https" else 80)
    out: dict[str, Any] = {"host": host, "port": port}
    loop = asyncio.get_running_loop()
    try:
        t0 = now_ns()
        infos = await asyncio.wait_for(loop.getaddrinfo(host, port, type=socket.SOCK_STREAM), timeout_s)
        out["dns_ms"] = (now_ns() - t0) / 1e6
        addrs: list[str] = []
        for info in infos:
            a = str(info[4][0])
            if a not in addrs:
                addrs.append(a)
        out["resolved_addresses"] = addrs
        times = []
        for _ in range(connects):
            t0 = now_ns()
            _, writer = await asyncio.wait_for(asyncio.open_connection(addrs[0], port), timeout_s)
            times.append((now_ns() - t0) / 1e6)
            writer.transport.abort()
        out["tcp_connect_ms"] = times
        out["tcp_connect_ms_min"] = min(times) if times else None
    except (TimeoutError, OSError, IndexError) as exc:
        out["error"] = type(exc).__name__
    return out


# ------------------------------------------------------------------ rate cap and retries


class ClientRateCap:
    """The client's own cap on requests and tokens per minute (``--max-rpm``, ``--max-tpm``).

    A generic cell-rate algorithm per dimension: each request of cost c (1 for
    requests, its prompt plus ``max_tokens`` for tokens, as providers reserve them)
    moves that dimension's theoretical arrival time on by ``c * 60 s / limit``; a
    request may go once every dimension's theoretical time is within ``burst_s`` of
    now. :meth:`reserve` takes the slot and returns the wait, so concurrent callers
    queue in call order. Pure (the caller passes the clock).
    """

    def __init__(self, max_rpm: float | None = None, max_tpm: float | None = None, burst_s: float = 1.0) -> None:
        for name, v in (("max_rpm", max_rpm), ("max_tpm", max_tpm)):
            if v is not None and not v > 0:
                raise ValueError(f"{name} must be > 0")
        self.max_rpm = max_rpm
        self.max_tpm = max_tpm
        self.burst_ns = int(burst_s * 1e9)
        self._tat = [0, 0]  # theoretical arrival time per dimension (ns)
        self._first = True

    def reserve(self, tokens: int, now: int) -> int:
        """Reserve a slot for a request of ``tokens`` at ``now`` (ns); returns ns to wait first."""
        if self._first:
            self._tat = [now, now]
            self._first = False
        start = now
        costs = []
        for i, (limit, cost) in enumerate(((self.max_rpm, 1), (self.max_tpm, max(tokens, 0)))):
            if limit is None:
                costs.append(0)
                continue
            costs.append(round(cost * 60e9 / limit))
            start = max(start, self._tat[i] - self.burst_ns)
        for i, c in enumerate(costs):
            if c:
                self._tat[i] = max(self._tat[i], start) + c
        return start - now

    def describe(self) -> dict[str, Any]:
        return {"max_rpm": self.max_rpm, "max_tpm": self.max_tpm, "burst_s": self.burst_ns / 1e9}


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


def request_token_cost(spec: RequestSpec) -> int:
    """Tokens a provider reserves for a request: its prompt plus its ``max_tokens``."""
    inp = spec.requested_input_tokens
    if inp is None:
        inp = -(-len(spec.prompt) // 4) if spec.prompt else 0
    return inp + (spec.requested_output_tokens or 0)


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


class HTTPSendMixin:
    """``send`` and one HTTP attempt, shared by the HTTP endpoints (OpenAI-compatible, Anthropic).

    The class using it provides ``config`` (``timeout_s``, ``stream``, ``retry_429``,
    ``retry_429_max_wait_s``, ``request_id_prefix``), ``cap`` (a :class:`ClientRateCap` or
    None), ``redactor``, ``_session``, ``_url``, ``_headers``, ``build_body(spec)`` and the
    readers ``_read_stream`` / ``_read_body``.
    """

    @property
    def accepts_send_gate(self) -> bool:
        """Whether ``send(..., gate=)`` may prepare a request ahead of its scheduled time: with
        pooled connections only (``connection_reuse="none"`` means every request pays its
        connect inside its latency), no client rate cap and no 429 retries (both wait first)."""
        self_: Any = self
        cfg = self_.config
        return cfg.connection_reuse == "keep-alive" and self_.cap is None and not cfg.retry_429

    async def send(self, spec: Any, record: Any, gate: asyncio.Event | None = None) -> None:
        """Send one request and fill ``record`` (see :class:`RequestRecord`). Never raises
        except ``asyncio.CancelledError``.

        ``gate`` (open loop, see :attr:`accepts_send_gate`): the request is prepared now and
        its bytes are written when the gate is set (the runner opens it at the scheduled
        time). Under the client's rate cap when one is set; a 429 is retried only with
        ``retry_429`` (see :func:`send_with_attempts`)."""
        self_: Any = self
        assert self_._session is not None, "open() first"
        cfg = self_.config
        if self_.cap is None and not cfg.retry_429:
            await self._attempt(spec, record, gate)
            return
        if gate is not None:
            await gate.wait()
        await send_with_attempts(
            self._attempt, spec, record, retry_429=cfg.retry_429, retry_max_wait_s=cfg.retry_429_max_wait_s, cap=self_.cap
        )

    def _open_session(self) -> aiohttp.ClientSession:
        """The HTTP session for ``config`` (see :func:`open_session`); call inside the loop."""
        cfg = self.config  # type: ignore[attr-defined]
        return open_session(
            pool_limit=cfg.pool_limit,
            connect_timeout_s=cfg.connect_timeout_s,
            verify_tls=cfg.verify_tls,
            ca_file=cfg.ca_file,
            connection_reuse=cfg.connection_reuse,
        )

    def _client_settings(self) -> dict[str, Any]:
        """The HTTP client's settings as recorded in ``conditions.endpoint.client``."""
        self_: Any = self
        cfg = self_.config
        return {
            "library": f"aiohttp {aiohttp.__version__}",
            "pool_limit": cfg.pool_limit,
            "connect_timeout_s": cfg.connect_timeout_s,
            "request_timeout_s": cfg.timeout_s,
            "retries": cfg.retry_429,  # only of 429s, only when asked (--retry-429)
            "redirects": "not followed",
            "verify_tls": cfg.verify_tls,
            "connection_reuse": cfg.connection_reuse,
            "http_version": "1.1",
            "retry_429": cfg.retry_429,
            "retry_429_max_wait_s": cfg.retry_429_max_wait_s,
            "rate_cap": self_.cap.describe() if self_.cap else None,
        }

    async def _attempt(self, spec: Any, record: Any, gate: asyncio.Event | None = None) -> None:
        """One HTTP exchange for ``spec`` (see :meth:`send`)."""
        self_: Any = self
        assert self_._session is not None, "open() first"
        cfg = self_.config
        headers = self_._headers
        if cfg.request_id_prefix is not None:
            headers = dict(headers)
            headers["x-request-id"] = f"{cfg.request_id_prefix}-{spec.index}"
        body = orjson.dumps(self_.build_body(spec))
        timeout_s = cfg.timeout_s
        if gate is not None:  # prepared ahead: the total deadline runs from the scheduled time
            timeout_s += max(record.scheduled_ns - now_ns(), 0) / 1e9
        await http_attempt(
            self_._session,
            self_._url,
            body if gate is None else GatedPayload(body, gate, content_type="application/json"),
            headers,
            record,
            timeout_s=timeout_s,
            redact=self_.redactor,
            read_ok=self_._read_stream if cfg.stream else self_._read_body,
        )
