"""The client session: a connection pool with timing hooks, and the network baseline.

* :func:`open_session`: an aiohttp session whose trace hooks stamp on each
  :class:`~loadgen.core.types.RequestRecord` when its headers went out, whether its
  connection was new or reused, and a new connection's DNS, TCP connect and TLS
  times (:class:`TimedConnector` splits TCP from TLS).
* :data:`current_record`: the record being sent by this task (set by the endpoint
  around each request, read by :class:`TimedConnector`).
* :func:`network_baseline`: where the endpoint is and how far (resolve + bare connects).
"""

from __future__ import annotations

import asyncio
import contextvars
import socket
import ssl
from collections.abc import Awaitable, Callable
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import aiohttp

from loadgen.core.clock import now_ns
from loadgen.core.types import RequestRecord

if TYPE_CHECKING:
    from aiohttp.client_proto import ResponseHandler
    from aiohttp.client_reqrep import ConnectionKey
    from aiohttp.connector import Connection
    from aiohttp.tracing import Trace

current_record: contextvars.ContextVar[RequestRecord | None] = contextvars.ContextVar(
    "loadgen_current_record", default=None
)
"""The record of the request this task is sending (read by :class:`TimedConnector`)."""


def _first_attempt(rec: RequestRecord | None) -> bool:
    return isinstance(rec, RequestRecord) and not rec.attempts


fresh_connection: contextvars.ContextVar[bool] = contextvars.ContextVar("loadgen_fresh_connection", default=False)
"""Set by the endpoint around a request that must not take a pooled connection (a prepared
request sent again after the server closed its pooled one): :class:`TimedConnector` opens a new one."""

_tls_stalled: contextvars.ContextVar[str | None] = contextvars.ContextVar("loadgen_tls_stalled", default=None)
"""Set by :class:`TimedConnector` when this task's TCP connection was made but its TLS handshake
did not finish (read once by :func:`connect_error_text`)."""


class TimedConnector(aiohttp.TCPConnector):
    """A TCPConnector that splits a new connection's set-up into TCP connect and TLS.

    The protocol factory is called by the event loop once the socket is connected
    and before the TLS handshake starts; ``create_connection`` returns once the
    handshake is done. Both moments land on the record being sent (a context
    variable set by the endpoint around each request). A task that sets
    :data:`fresh_connection` never gets a pooled connection. A connection that ends
    (timed out or cancelled) between the two is a TLS handshake that did not finish:
    noted for :func:`connect_error_text`, which names that phase in the error.
    """

    async def _get(self, key: ConnectionKey, traces: list[Trace]) -> Connection | None:
        """A pooled connection, unless this task asked for a fresh one (:data:`fresh_connection`)."""
        if fresh_connection.get():
            return None
        return await super()._get(key, traces)

    async def _wrap_create_connection(self, *args: Any, **kwargs: Any) -> tuple[asyncio.Transport, ResponseHandler]:
        rec = current_record.get()
        if not args:
            return await super()._wrap_create_connection(*args, **kwargs)
        factory = args[0]
        mark: list[int] = []

        def timed_factory() -> ResponseHandler:
            mark.append(now_ns())
            return factory()

        _tls_stalled.set(None)
        t0 = now_ns()
        try:
            result = await super()._wrap_create_connection(timed_factory, *args[1:], **kwargs)
        except (TimeoutError, asyncio.CancelledError):
            if mark and kwargs.get("ssl"):
                _tls_stalled.set(_tls_note(kwargs))
            raise
        t2 = now_ns()
        if _first_attempt(rec):
            t1 = mark[-1] if mark else t2
            assert rec is not None
            rec.tcp_connect_ns = t1 - t0
            rec.tls_ns = (t2 - t1) if kwargs.get("ssl") else None
        return result


def _tls_note(kwargs: dict[str, Any]) -> str:
    req, timeout = kwargs.get("req"), kwargs.get("timeout")
    url = getattr(req, "url", None)
    where = f"{url.host}:{url.port}" if url is not None else "the server"
    limit = getattr(timeout, "sock_connect", None)
    within = f" within {limit:g} s" if isinstance(limit, int | float) else ""
    return f"TLS handshake with {where} did not finish{within}"


def peer_closed(transport: asyncio.BaseTransport | None) -> bool:
    """Whether the server already closed (or spoke on) an idle kept-alive connection whose
    close the event loop has not processed yet: a non-blocking ``MSG_PEEK`` of one byte on its
    socket (one system call; nothing is consumed). End of stream, a reset, or bytes the server
    sent unprompted (a 408, a TLS close_notify) all mean the connection is going away."""
    sock = transport.get_extra_info("socket") if transport is not None else None
    if sock is None:
        return False
    peek = socket.socket(sock.family, sock.type, sock.proto, sock.fileno())  # the same descriptor: no dup
    try:
        peek.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
        return True  # b"" (end of stream) or unprompted bytes
    except BlockingIOError:
        return False
    except OSError:
        return True  # reset
    finally:
        peek.detach()  # never closes the descriptor, which the transport owns


def connect_error_text(exc: BaseException, *, kind: bool = True) -> str:
    """One line for a transport error: ``TLS handshake with HOST:PORT did not finish within
    N s`` when the connection timed out after its TCP connect, inside the TLS handshake (aiohttp
    says only "Connection timeout to host"); else the error's own message. ``kind``: for
    messages that carry no error kind of their own ("cannot reach URL: ..."): the TLS line is
    prefixed with ``timeout: `` and another error is its message alone; without ``kind`` (a
    request's ``error_detail``, next to its ``error_kind``) ``Type: message``."""
    if isinstance(exc, TimeoutError):
        note = _tls_stalled.get()
        if note is not None:
            _tls_stalled.set(None)
            return f"timeout: {note}" if kind else note
    if kind:
        return str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


class SidePhase:
    """Where a request beside the load (discovery, pre-flight) is, for its error line: passed as
    its ``trace_request_ctx``; ``"connect"`` (TCP, then TLS) until the hooks of this module see
    its request written (``"headers"``: waiting for the answer's head); the reader then moves it
    to ``"first byte"`` and ``"body"``."""

    __slots__ = ("phase",)

    def __init__(self) -> None:
        self.phase = "connect"


def _stamp_start(attr: str) -> Callable[[aiohttp.ClientSession, SimpleNamespace, Any], Awaitable[None]]:
    """A trace callback that stamps the trace context's ``attr`` with the time it fires (a phase's start)."""

    async def stamp(session: aiohttp.ClientSession, ctx: SimpleNamespace, params: Any) -> None:
        setattr(ctx, attr, now_ns())

    return stamp


async def _on_headers_sent(
    session: aiohttp.ClientSession, ctx: SimpleNamespace, params: aiohttp.TraceRequestHeadersSentParams
) -> None:
    rec = ctx.trace_request_ctx
    if isinstance(rec, RequestRecord):
        if rec.sent_ns is None:
            rec.sent_ns = now_ns()
    elif isinstance(rec, SidePhase):
        rec.phase = "headers"


async def _on_chunk_sent(
    session: aiohttp.ClientSession, ctx: SimpleNamespace, params: aiohttp.TraceRequestChunkSentParams
) -> None:
    """``sent_ns`` is when the request's bytes are handed to the socket: aiohttp buffers the
    headers (``_on_headers_sent`` stamps that, the time for a request without a body) and
    writes them with the body's first chunk from a task of its own, which in a burst runs
    only after every other ready task; the first chunk's time is the true send."""
    rec = ctx.trace_request_ctx
    if isinstance(rec, RequestRecord) and not getattr(ctx, "body_started", False):
        ctx.body_started = True
        rec.sent_ns = now_ns()


_on_conn_start = _stamp_start("conn_start_ns")


def _stamp_end(
    attr: str, fill: Callable[[RequestRecord, int, int], None], *, first_only: bool = True
) -> Callable[[aiohttp.ClientSession, SimpleNamespace, Any], Awaitable[None]]:
    """A trace callback for a phase's end: ``fill(record, start_ns, end_ns)`` once the phase's start
    is stamped (``attr``, :func:`_stamp_start`) and the context is a request's record (its first
    attempt only, unless not ``first_only``)."""

    async def stamp(session: aiohttp.ClientSession, ctx: SimpleNamespace, params: Any) -> None:
        rec = ctx.trace_request_ctx
        start = getattr(ctx, attr, None)
        if start is not None and (_first_attempt(rec) if first_only else isinstance(rec, RequestRecord)):
            fill(rec, start, now_ns())

    return stamp


def _connected(rec: RequestRecord, start: int, end: int) -> None:
    rec.connect_ns = end - start
    rec.connect_late_ns = max(0, end - max(start, rec.scheduled_ns))
    rec.connection_reused = False


def _dequeued(rec: RequestRecord, start: int, end: int) -> None:
    """The wait for a pooled connection (all ``pool_limit`` held by requests in flight at the server)
    is the client's own cap, like ``--max-concurrency``: added to ``throttle_ns``, not to its lag."""
    rec.throttle_ns += max(0, end - max(start, rec.scheduled_ns))


def _resolved(rec: RequestRecord, start: int, end: int) -> None:
    rec.dns_ns = end - start


_on_conn_end = _stamp_end("conn_start_ns", _connected)
_on_queued_end = _stamp_end("queued_start_ns", _dequeued, first_only=False)
_on_dns_end = _stamp_end("dns_start_ns", _resolved)


async def _on_reuse(
    session: aiohttp.ClientSession, ctx: SimpleNamespace, params: aiohttp.TraceConnectionReuseconnParams
) -> None:
    rec = ctx.trace_request_ctx
    if _first_attempt(rec):
        rec.connection_reused = True


async def _on_queued(
    session: aiohttp.ClientSession, ctx: SimpleNamespace, params: aiohttp.TraceConnectionQueuedStartParams
) -> None:
    rec = ctx.trace_request_ctx
    if isinstance(rec, RequestRecord):
        rec.pool_queued = True
        ctx.queued_start_ns = now_ns()


_on_dns_start = _stamp_start("dns_start_ns")


async def _on_dns_hit(
    session: aiohttp.ClientSession, ctx: SimpleNamespace, params: aiohttp.TraceDnsCacheHitParams
) -> None:
    rec = ctx.trace_request_ctx
    if _first_attempt(rec) and rec.dns_ns is None:
        rec.dns_ns = 0


def side_timeout(connect_s: float, total_s: float) -> aiohttp.ClientTimeout:
    """The timeout of a request made beside the load (discovery, pre-flight): ``total_s`` in all,
    and the session's connect timeout (a per-request ``ClientTimeout`` replaces the session's
    whole, so without it a stalled TCP or TLS set-up would run to ``total_s``)."""
    return aiohttp.ClientTimeout(total=total_s, connect=connect_s, sock_connect=connect_s)


CONNECTION_REUSE = ("keep-alive", "none")


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
    trace.on_connection_queued_end.append(_on_queued_end)
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
