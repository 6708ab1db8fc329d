"""The lean client's connection pool and one request over it (``--http-client lean``).

* :class:`LeanPool`: keep-alive connections to one origin, at most ``pool_limit`` open (a request
  past it waits, ``pool_queued``, the wait added to ``throttle_ns`` as aiohttp's hook adds it); the
  connect timeout; TLS through the standard library (``verify_tls`` / ``ca_file`` as
  :func:`~loadgen.endpoints.pool.open_session` sets them); a new connection's DNS, TCP connect and
  TLS times on the record (``dns_ns``, ``tcp_connect_ns``, ``tls_ns``, ``connect_ns``,
  ``connect_late_ns``, ``connection_reused``), as :mod:`loadgen.endpoints.pool`'s hooks stamp them.
* :func:`lean_attempt`: one POST, the lean twin of :func:`~loadgen.endpoints.http.http_attempt`
  (the same header, idle and total deadlines, the same error kinds, non-2xx through
  :func:`~loadgen.endpoints.http.fill_http_error`, redirects never followed); with a gate its bytes
  are written only when the gate opens, and never on a kept-alive connection the server has closed
  meanwhile (:func:`~loadgen.endpoints.pool.peer_closed`).
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections import deque
from collections.abc import Mapping
from urllib.parse import urlsplit

from loadgen.core.clock import SendGate, deadline_after, now_ns
from loadgen.core.errors import ConfigError, ConnectTimeout
from loadgen.core.types import RequestRecord
from loadgen.endpoints.header_wait import HeaderDeadline
from loadgen.endpoints.http import (
    ERROR_BODY_LIMIT,
    STALE_RESENDS_MAX,
    STALE_RESET,
    closed_before_send,
    fail,
    fail_attempt,
    fill_http_error,
)
from loadgen.endpoints.lean_http import Gate, LeanConnection, LeanResponse, LeanShared
from loadgen.endpoints.pool import peer_closed
from loadgen.endpoints.quota import parse_ratelimit_headers
from loadgen.endpoints.reads import read_2xx

__all__ = ["DNS_TTL_S", "LeanPool", "lean_attempt"]

DNS_TTL_S = 300.0
"""A resolved host's addresses are kept this long (aiohttp's ``ttl_dns_cache`` as loadgen sets it)."""


def _tls_context(verify_tls: bool, ca_file: str | None) -> ssl.SSLContext:
    """The client's TLS context: the system's trust store (plus ``ca_file``), or no verification."""
    if not verify_tls:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        return ctx
    return ssl.create_default_context(cafile=ca_file) if ca_file else ssl.create_default_context()


def _header_lines(headers: Mapping[str, str]) -> str:
    out = []
    for k, v in headers.items():
        if any(c in k for c in "\r\n:") or "\r" in v or "\n" in v:
            raise ConfigError(f"header {k[:40]!r}: a line break or colon where HTTP allows none")
        out.append(f"{k}: {v}\r\n")
    return "".join(out)


class LeanPool:
    """Keep-alive HTTP/1.1 connections to ``url``'s origin, at most ``limit`` open (see the module docstring).

    ``connection_reuse="none"``: every request gets a new connection, closed after it. Use inside
    the running loop; :meth:`close` closes every connection."""

    def __init__(
        self,
        url: str,
        *,
        shared: LeanShared,
        limit: int,
        connect_timeout_s: float,
        verify_tls: bool = True,
        ca_file: str | None = None,
        connection_reuse: str = "keep-alive",
    ) -> None:
        p = urlsplit(url)
        if p.scheme not in ("http", "https") or not p.hostname:
            raise ConfigError(f"--http-client lean: {p.scheme}:// URLs are not supported (http or https only)")
        self.host = p.hostname
        self.port = p.port or (443 if p.scheme == "https" else 80)
        self.ssl = _tls_context(verify_tls, ca_file) if p.scheme == "https" else None
        self.target = (p.path or "/") + (f"?{p.query}" if p.query else "")
        default_port = (p.scheme == "https" and self.port == 443) or (p.scheme == "http" and self.port == 80)
        host = f"[{self.host}]" if ":" in self.host else self.host
        self.authority = host if default_port else f"{host}:{self.port}"
        self.limit = limit
        self.connect_timeout_s = connect_timeout_s
        self.shared = shared
        self.keep_alive = connection_reuse == "keep-alive"
        self.idle: list[LeanConnection] = []
        self.open = 0  # connections open or opening, idle or in use
        self.waiters: deque[asyncio.Future[None]] = deque()
        self._addrs: list[tuple[int, tuple[str, int]]] = []
        self._addrs_until = 0
        self._prefixes: dict[int, tuple[Mapping[str, str], bytes]] = {}
        self.closed = False

    # --- the request's bytes ---------------------------------------------------------

    def request_bytes(self, headers: Mapping[str, str], extra: Mapping[str, str] | None, body: bytes) -> bytes:
        """``POST`` of ``body`` with ``headers`` (its head built once per headers mapping and kept),
        ``extra`` (per request: ``x-request-id``, a session header) and ``Content-Length``, in UTF-8 (as
        aiohttp writes them); the client asks for an uncompressed answer (``Accept-Encoding: identity``)
        unless ``headers`` ask otherwise. Raises :class:`ConfigError` on a line break in a header."""
        key = id(headers)
        kept = self._prefixes.get(key)
        if kept is None or kept[0] is not headers:
            names = {k.lower() for k in headers}
            base = {"User-Agent": "loadgen"} if "user-agent" not in names else {}
            prefix = (
                f"POST {self.target} HTTP/1.1\r\nHost: {self.authority}\r\n{_header_lines(base)}"
                f"{_header_lines(headers)}"
                + ("" if "accept-encoding" in names else "Accept-Encoding: identity\r\n")
                + ("" if self.keep_alive else "Connection: close\r\n")
            ).encode()
            kept = self._prefixes[key] = (headers, prefix)  # the mapping is held: its id is not reused
        tail = (_header_lines(extra) if extra else "") + f"Content-Length: {len(body)}\r\n\r\n"
        return kept[1] + tail.encode() + body

    # --- connections -----------------------------------------------------------------

    async def acquire(self, record: RequestRecord, *, fresh: bool = False) -> LeanConnection:
        """A connection for ``record``'s request: a kept-alive one unless ``fresh``, else a new one
        once the pool has room (waiting for it is ``pool_queued``). Raises ``TimeoutError`` (connect
        timeout), ``OSError`` (refused, unreachable, the client's own limits)."""
        first = not record.attempts
        queued_ns: int | None = None
        start = now_ns()
        while True:
            while self.idle and not fresh:
                conn = self.idle.pop()
                if conn.dead or conn.transport is None or conn.transport.is_closing():
                    self._drop(conn)
                    continue
                self._queued_end(record, queued_ns)
                conn.reused = True
                if first:
                    record.connection_reused = True
                return conn
            if fresh and self.open >= self.limit and self.idle:
                self._drop(self.idle.pop(0))  # the oldest idle one makes room for the fresh one
            if self.open < self.limit:
                break
            if queued_ns is None:
                queued_ns = now_ns()
                record.pool_queued = True
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self.waiters.append(fut)
            try:
                await fut
            except asyncio.CancelledError:
                if fut.done() and not fut.cancelled():
                    self._wake_one()  # pass on the room this task was given
                else:
                    self.waiters.remove(fut)
                raise
        self._queued_end(record, queued_ns)
        self.open += 1
        try:
            conn = await self._connect(record, start if queued_ns is None else now_ns())
        except BaseException:
            self.open -= 1
            self._wake_one()
            raise
        return conn

    def _queued_end(self, record: RequestRecord, queued_ns: int | None) -> None:
        if queued_ns is not None:
            end = now_ns()
            record.throttle_ns += max(0, end - max(queued_ns, record.scheduled_ns))

    async def _resolve(self, record: RequestRecord) -> list[tuple[int, tuple[str, int]]]:
        if self._addrs and now_ns() < self._addrs_until:
            if not record.attempts and record.dns_ns is None:
                record.dns_ns = 0
            return self._addrs
        loop = asyncio.get_running_loop()
        t0 = now_ns()
        try:
            infos = await loop.getaddrinfo(self.host, self.port, type=socket.SOCK_STREAM)
        except socket.gaierror as exc:  # the name in the error line, as aiohttp's says it
            raise socket.gaierror(exc.errno, f"cannot resolve {self.host}:{self.port} ({exc.strerror})") from None
        if not record.attempts:
            record.dns_ns = now_ns() - t0
        addrs: list[tuple[int, tuple[str, int]]] = []
        for family, _, _, _, sockaddr in infos:
            entry = (int(family), (str(sockaddr[0]), int(sockaddr[1])))
            if entry not in addrs:
                addrs.append(entry)
        if not addrs:
            raise OSError(f"{self.host}: no address")
        self._addrs, self._addrs_until = addrs, now_ns() + int(DNS_TTL_S * 1e9)
        return addrs

    async def _connect(self, record: RequestRecord, start: int) -> LeanConnection:
        """A new connection within the connect timeout; its DNS, TCP and TLS times on the record."""
        loop = asyncio.get_running_loop()
        mark: list[int] = []

        def factory() -> LeanConnection:
            mark.append(now_ns())  # the TCP connect is done; the TLS handshake (if any) starts now
            return LeanConnection(self)

        t0 = start
        try:
            async with asyncio.timeout(self.connect_timeout_s):
                addrs = await self._resolve(record)
                t0 = now_ns()
                last: OSError | None = None
                for _family, addr in addrs:
                    mark.clear()
                    try:
                        _, conn = await loop.create_connection(
                            factory, addr[0], addr[1], ssl=self.ssl, server_hostname=self.host if self.ssl else None
                        )
                        break
                    except OSError as exc:
                        last = exc
                else:
                    assert last is not None
                    raise last
        except TimeoutError:
            where = f"{self.host}:{self.port}"
            if mark and self.ssl is not None:
                raise ConnectTimeout(
                    f"TLS handshake with {where} did not finish within {self.connect_timeout_s:g} s"
                ) from None
            raise ConnectTimeout(f"connection to {where} timed out ({self.connect_timeout_s:g} s)") from None
        end = now_ns()
        if not record.attempts:
            t1 = mark[-1] if mark else end
            record.tcp_connect_ns = t1 - t0
            record.tls_ns = (end - t1) if self.ssl is not None else None
            record.connect_ns = end - start
            record.connect_late_ns = max(0, end - max(start, record.scheduled_ns))
            record.connection_reused = False
        return conn

    def release(self, conn: LeanConnection) -> None:
        """The exchange on ``conn`` is over: kept for the next request when it can carry one (and
        keep-alive is on), else closed; a waiting request is woken either way."""
        if conn.finish() and self.keep_alive and not self.closed:
            self.idle.append(conn)
        else:
            conn.close()
            self.open -= 1
        self._wake_one()

    def lost(self, conn: LeanConnection) -> None:
        """An idle connection closed (by the server): it leaves the pool at once."""
        if conn in self.idle:
            self.idle.remove(conn)
            self.open -= 1
            self._wake_one()

    def _drop(self, conn: LeanConnection) -> None:
        conn.pool = None  # its connection_lost does not count it again
        conn.close()
        self.open -= 1

    def _wake_one(self) -> None:
        while self.waiters:
            fut = self.waiters.popleft()
            if not fut.done():
                fut.set_result(None)
                return

    async def send(self, record: RequestRecord, body: bytes, extra: Mapping[str, str] | None, gate: Gate) -> int:
        """One request of :meth:`request_bytes` over this pool (what
        :class:`~loadgen.endpoints.http.HTTPSendMixin` calls), with its keep-alive rule: a request
        whose kept-alive connection the server closed before any byte of it was written
        (:func:`~loadgen.endpoints.http.closed_before_send`) goes again on a fresh connection, at most
        :data:`~loadgen.endpoints.http.STALE_RESENDS_MAX` times (never a retry: nothing was sent), at
        the gate or at once when it is open. Returns how many times it went again. A header value HTTP
        cannot carry (a line break) fails the request as ``protocol``; never raises."""
        try:
            data = self.request_bytes(self.shared.headers, extra, body)
        except ConfigError as exc:
            fail(record, "protocol", str(exc))
            return 0
        n = 0
        for n in range(STALE_RESENDS_MAX + 1):
            ahead_s = max(record.scheduled_ns - now_ns(), 0) / 1e9 if gate is not None else 0.0
            wrote = await lean_attempt(self, data, record, ahead_s=ahead_s, gate=gate, fresh=n > 0)
            if wrote or not closed_before_send(record) or n == STALE_RESENDS_MAX:
                break
            for name, value in STALE_RESET:
                setattr(record, name, value)
        if n:
            record.connect_late_ns = 0  # the pool's dead connection is the client's delay: schedule lag
        return n

    async def close(self) -> None:
        """Close every idle connection (those in use are closed by their requests' end); waits
        for their transports to finish closing."""
        self.closed = True
        conns, self.idle = self.idle, []
        for c in conns:
            c.pool = None
            c.close()
            self.open -= 1
        if conns:
            await asyncio.sleep(0)  # the transports' connection_lost (uvloop, asyncio) run now


def _write(conn: LeanConnection, data: bytes, record: RequestRecord) -> bool:
    """Write the request ``data`` on ``conn`` now and stamp ``sent_ns``, unless the connection is gone
    (the server closed a kept-alive one before the send: False, the request can go again on a fresh one)."""
    transport = conn.transport
    if conn.dead or transport is None or transport.is_closing() or (conn.reused and peer_closed(transport)):
        return False
    conn.begin()
    transport.write(data)  # no await since the check: nothing can close it between
    record.sent_ns = now_ns()
    return True


def _write_at_gate(conn: LeanConnection, data: bytes, record: RequestRecord, out: list[bool]) -> None:
    """:func:`_write` from the gate's opener (:class:`~loadgen.core.clock.SendGate`), its answer in ``out``;
    never raises into the opener (a failed write: False, as a connection found closed)."""
    try:
        out.append(_write(conn, data, record))
    except Exception:  # the opener is the dispatcher: nothing of one request may stop it
        out.append(False)


async def lean_attempt(
    pool: LeanPool, data: bytes, record: RequestRecord, *, ahead_s: float = 0.0, gate: Gate = None, fresh: bool = False
) -> bool:
    """Send the request ``data`` (:meth:`LeanPool.request_bytes`) and fill ``record``; never raises
    but ``asyncio.CancelledError``. Returns whether a byte of it was written (False: the
    kept-alive connection was found closed at the gate, the request can go again on a fresh one).

    As :func:`~loadgen.endpoints.http.http_attempt`, with the pool's :class:`~loadgen.endpoints.lean_http.LeanShared`:
    its ``timeout_s`` the total deadline (plus a prepared request's ``ahead_s``), ``header_timeout_s``
    the wait for the head, ``read_ok`` reads a 2xx answer, other statuses are
    :func:`~loadgen.endpoints.http.fill_http_error`'s; ``sent_ns`` is when the bytes were handed to the socket."""
    shared = pool.shared
    timeout_s, header_timeout_s, read_ok, redact = (
        shared.timeout_s + ahead_s,
        shared.header_timeout_s,
        shared.read_ok,
        shared.redact,
    )
    response_started = False
    wrote = False
    t_call = now_ns()
    conn: LeanConnection | None = None
    try:
        async with (
            deadline_after(timeout_s),
            HeaderDeadline(header_timeout_s, total_s=timeout_s - ahead_s, ahead_s=ahead_s) as header_wait,
        ):
            conn = await pool.acquire(record, fresh=fresh)
            at_gate: list[bool] = []  # whether the write at the gate opening found the connection alive
            if gate is not None and not gate.is_set():
                if isinstance(gate, SendGate):  # written the moment the gate opens (SendGate.on_open)
                    gate.on_open = lambda c=conn: _write_at_gate(c, data, record, at_gate)
                try:
                    await gate.wait()
                finally:
                    if isinstance(gate, SendGate):
                        gate.on_open = None
            if not (at_gate[0] if at_gate else _write(conn, data, record)):
                raise ConnectionResetError("the server closed this kept-alive connection before the send")
            wrote = True
            head = await conn.await_head()
            header_wait.arrived()
            response_started = True
            resp = LeanResponse(conn, head)
            record.response_headers_ns = now_ns()
            rl = parse_ratelimit_headers(head.headers)
            if rl is not None:
                record.ratelimit = rl
            if not 200 <= head.status < 300:
                body = await resp.read_some(ERROR_BODY_LIMIT)
                fill_http_error(record, head.status, head.headers, body, redact)
                return wrote
            await read_2xx(read_ok, resp, record, head.status, head.headers.get("content-type"))
    except Exception as exc:  # transport errors become data, never escape (a cancel is not an Exception)
        fail_attempt(record, exc, response_started=response_started, redact=redact)
    finally:
        if conn is not None:
            pool.release(conn)
    if record.sent_ns is None and record.error_kind not in ("connect", "client_limit"):
        record.sent_ns = t_call
    return wrote
