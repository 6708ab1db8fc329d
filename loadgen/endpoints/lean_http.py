"""``--http-client lean``: HTTP/1.1 over the event loop's own :class:`asyncio.Protocol`, no aiohttp on the hot path.

Measured (``scripts/bench_kernel_stamps``, docs/measurement.md): aiohttp's per-request objects (its
coroutines, header multidicts, trace hooks, timers, request and response objects) cost loadgen most of
its CPU per request and most of its TTFT/ITL error at 64+ streams. This client keeps what a load test
needs and nothing else:

* :class:`LeanConnection`: one TCP (or TLS, stdlib :mod:`ssl`) connection. Its ``data_received``
  feeds the sans-IO parser (:class:`~loadgen.endpoints.lean_parse.ResponseParser`) and hands each
  decoded body piece straight to the endpoint's reader ``on_read(piece, t_ns)`` (the callable
  :func:`~loadgen.endpoints.reads.read_pushed` hands pieces to), stamped with
  :func:`~loadgen.core.clock.now_ns` at the read: no task wake-up per read.
* :class:`LeanResponse`: what the endpoint's readers get in place of aiohttp's response (``status``,
  ``headers``; :meth:`~LeanResponse.push`, :meth:`~LeanResponse.read_all`, :meth:`~LeanResponse.drain`,
  which :mod:`loadgen.endpoints.reads` and :func:`~loadgen.endpoints.http.drain_after_end` call).
* :class:`LeanPool` (:mod:`loadgen.endpoints.lean_pool`): keep-alive connections up to the pool limit,
  the connect timeout, the record's connect timings.

Errors, as aiohttp's are classified (:func:`~loadgen.endpoints.http.classify_exception`)::

    ProtocolError            bytes that are not HTTP/1.1, a compressed body  -> protocol
    ConnectionResetError     closed before the head -> connect; after it -> incomplete_stream
    TimeoutError             connect timeout, total deadline, idle timeout   -> timeout
    OSError (errno EMFILE..) the client's own limit                          -> client_limit
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Protocol, cast

from loadgen.core.clock import now_ns
from loadgen.core.errors import ProtocolError
from loadgen.core.types import RequestRecord
from loadgen.endpoints.lean_parse import LeanHeaders, ResponseHead, ResponseParser
from loadgen.endpoints.reads import BodyTooLarge, IdleGuard, idle_guard

__all__ = ["LIBRARY", "LeanConnection", "LeanResponse", "LeanSender", "LeanShared"]

LIBRARY = "loadgen lean 1 (HTTP/1.1 on asyncio.Protocol, stdlib ssl)"
"""``conditions.endpoint.client.library`` with ``--http-client lean``."""

OnRead = Callable[[bytes, int], bool]
Gate = asyncio.Event | None


@dataclass(frozen=True)
class LeanShared:
    """What every request of one endpoint shares over its :class:`LeanPool` (set when the endpoint
    opens): its ``headers``, its total deadline ``timeout_s``, the wait for a streamed answer's head
    ``header_timeout_s``, the reader of a 2xx answer ``read_ok`` and the ``redact`` of error texts."""

    headers: Mapping[str, str]
    timeout_s: float
    header_timeout_s: float | None
    read_ok: Callable[[LeanResponse, RequestRecord], Awaitable[None]]
    redact: Callable[[str], str]


class LeanSender(Protocol):
    """What :class:`~loadgen.endpoints.http.HTTPSendMixin` sends the load through with ``--http-client lean``
    (:class:`~loadgen.endpoints.lean_pool.LeanPool`)."""

    async def send(self, record: RequestRecord, body: bytes, extra: Mapping[str, str] | None, gate: Gate) -> int: ...

    async def close(self) -> None: ...


class _Owner(Protocol):
    """Told when one of its idle connections closes (:meth:`~loadgen.endpoints.lean_pool.LeanPool.lost`)."""

    def lost(self, conn: LeanConnection) -> None: ...


def _discard(piece: bytes, t_ns: int) -> bool:
    return False


class LeanConnection(asyncio.Protocol):
    """One kept-alive HTTP/1.1 connection and the exchange on it (at most one at a time).

    Between exchanges it is idle: bytes the server sends then (a 408, a stray answer) or its close
    make it dead (:attr:`dead`), never reused. During one, :meth:`begin` arms a parser; body pieces
    go to :attr:`sink` when a reader has set one (stamped at the read, the idle guard's
    ``last_ns`` moved), else are kept with their stamps until one does (what came with the head)."""

    def __init__(self, pool: _Owner | None = None) -> None:
        self.pool = pool
        self.transport: asyncio.Transport | None = None
        self.dead = False
        self.reused = False
        self.parser: ResponseParser | None = None
        self.sink: OnRead | None = None
        self.guard: IdleGuard | None = None
        self.pending: list[tuple[bytes, int]] = []
        self.error: BaseException | None = None
        self.ended = False  # the body's framing said it ended (or a read-until-close body's connection closed)
        self.stopped = False  # the reader wants no more (its stream ended), or failed
        self.waiter: asyncio.Future[None] | None = None

    # --- asyncio.Protocol -------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # a stream transport (uvloop's is no subclass)

    def data_received(self, data: bytes) -> None:
        t = now_ns()
        p = self.parser
        if p is None or self.ended:  # idle: the server spoke out of turn; the connection is going away
            self.dead = True
            if self.transport is not None:
                self.transport.close()
            return
        try:
            body = p.feed(data)
        except ProtocolError as exc:
            self._fail(exc)
            return
        if body:
            sink = self.sink
            if sink is None:
                self.pending.append((body, t))
            elif not self.stopped:
                guard = self.guard
                if guard is not None:
                    guard.last_ns = t  # the read's stamp is the idle guard's too
                try:
                    if sink(body, t):
                        self.stopped = True
                        self._wake()
                except Exception as exc:  # the reader's own error (ProtocolError, Abandoned): raised in its task
                    self.stopped = True
                    self._fail(exc, close=False)
                    return
        if p.done:
            self.ended = True
            if p.extra:
                self.dead = True  # bytes past the answer's end: never reused
            self._wake()
        elif p.head is not None and self.waiter is not None and self.sink is None:
            self._wake()  # the head is in (await_head)

    def eof_received(self) -> bool | None:
        return None  # the transport closes; connection_lost says what it meant

    def connection_lost(self, exc: Exception | None) -> None:
        self.dead = True
        p = self.parser
        if p is not None and not self.ended and self.error is None:
            try:
                p.feed_eof()
            except ConnectionResetError as closed:
                if exc is not None:
                    closed.__cause__ = exc
                self._fail(closed, close=False)
                return
            self.ended = True
            self._wake()
        if self.pool is not None:
            self.pool.lost(self)

    # --- one exchange ------------------------------------------------------------------

    def begin(self) -> None:
        """A new exchange on this connection (its request about to be written)."""
        self.parser = ResponseParser()
        self.sink = None
        self.guard = None
        self.pending = []
        self.error = None
        self.ended = self.stopped = False

    def finish(self) -> bool:
        """The exchange is over; True when the connection may carry another (keep-alive, the body
        read to its end, nothing out of turn), else it is closed."""
        p = self.parser
        if p is None:  # no exchange began on it (its request failed or was cancelled before the write)
            return not self.dead and self.transport is not None and not self.transport.is_closing()
        ok = (
            self.ended and not self.dead and self.error is None
            and p.head is not None and p.head.keep_alive and self.transport is not None
            and not self.transport.is_closing()
        )  # fmt: skip
        self.parser = None
        self.sink = None
        self.guard = None
        self.pending = []
        if not ok:
            self.close()
        return ok

    def close(self) -> None:
        self.dead = True
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()

    def _wake(self) -> None:
        w = self.waiter
        if w is not None and not w.done():
            w.set_result(None)

    def _fail(self, exc: BaseException, *, close: bool = True) -> None:
        if self.error is None:
            self.error = exc
        w = self.waiter
        if w is not None and not w.done():
            w.set_exception(exc)
        if close:
            self.close()

    async def _wait(self) -> None:
        if self.error is not None:
            raise self.error
        w = self.waiter = asyncio.get_running_loop().create_future()
        try:
            await w
        finally:
            self.waiter = None

    async def await_head(self) -> ResponseHead:
        """The response's head once it is in. Raises the connection's error (see the module docstring)."""
        while True:
            p = self.parser
            assert p is not None, "begin() first"
            if p.head is not None:
                return p.head
            await self._wait()

    async def consume(self, sink: OnRead, guard: IdleGuard | None) -> None:
        """Hand the body to ``sink`` (what arrived already first, with its own stamps) until it
        returns True or the body ends. Raises the sink's or the connection's error."""
        self.guard = guard
        pending, self.pending = self.pending, []
        for piece, t in pending:
            if guard is not None:
                guard.last_ns = t
            try:
                if sink(piece, t):
                    self.stopped = True
                    self.sink = _discard
                    return
            except Exception:
                self.stopped = True
                self.sink = _discard
                raise
        self.sink = sink
        while not (self.stopped or self.ended):
            await self._wait()
        if self.error is not None and not self.ended:
            raise self.error


class LeanResponse:
    """The lean client's answer to one request, for the endpoint's readers (read by
    :mod:`loadgen.endpoints.reads` where aiohttp's ``ClientResponse`` would be)."""

    __slots__ = ("conn", "status", "reason", "headers", "content_length")

    def __init__(self, conn: LeanConnection, head: ResponseHead) -> None:
        self.conn = conn
        self.status = head.status
        self.reason = head.reason
        self.headers: LeanHeaders = head.headers
        self.content_length = head.content_length

    async def push(self, on_read: OnRead, idle_s: float | None) -> None:
        """:func:`~loadgen.endpoints.reads.read_pushed`: each decoded piece to ``on_read(piece, t_ns)``
        from the connection's ``data_received`` (``t_ns``: the read's time) until it returns True or
        the body ends; no byte for ``idle_s`` raises :class:`~loadgen.endpoints.reads.IdleTimeout`."""
        async with idle_guard(idle_s) as guard:
            await self.conn.consume(on_read, guard if idle_s is not None else None)

    async def read_all(self, limit: int, idle_s: float | None, *, what: str = "response body") -> bytes:
        """:func:`~loadgen.endpoints.reads.read_bounded`: the whole body, at most ``limit`` bytes, else
        :class:`~loadgen.endpoints.reads.BodyTooLarge` (the connection is then dropped)."""
        if self.content_length is not None and self.content_length > limit:
            self.conn.close()
            raise BodyTooLarge(what, limit)
        buf = bytearray()

        def take(piece: bytes, t_ns: int) -> bool:
            buf.extend(piece)
            if len(buf) > limit:
                raise BodyTooLarge(what, limit)
            return False

        try:
            await self.push(take, idle_s)
        except BodyTooLarge:
            self.conn.close()
            raise
        return bytes(buf)

    async def read_some(self, limit: int) -> bytes:
        """At most ``limit`` bytes of the body (an error answer's, for its record); never raises but
        ``CancelledError``: a failed read gives what came."""
        buf = bytearray()

        def take(piece: bytes, t_ns: int) -> bool:
            buf.extend(piece)
            return len(buf) >= limit

        try:
            await self.conn.consume(take, None)
        except (OSError, ProtocolError):
            pass
        return bytes(buf[:limit])

    async def drain(self, timeout_s: float) -> None:
        """:func:`~loadgen.endpoints.http.drain_after_end`: the rest of a body whose stream has ended,
        read (and dropped) for at most ``timeout_s``, so the connection can be reused; else it is closed."""
        conn = self.conn
        if conn.ended:
            return
        conn.stopped = False
        try:
            async with asyncio.timeout(timeout_s):
                await conn.consume(_discard, None)
        except (TimeoutError, OSError, ProtocolError):
            conn.close()
