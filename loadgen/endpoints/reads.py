"""Reading an answer's body: bounded in size and in idle time.

Every body the client reads is bounded: a server (or anything in between) that sends a
1 GiB answer costs the request, never the client's memory.

* :func:`read_bounded`: a whole body, at most ``limit`` bytes, else :class:`BodyTooLarge`
  (a :class:`~loadgen.core.errors.ProtocolError`: the request's ``protocol`` error kind, as an SSE
  event over its limit is); the connection is dropped, never read to its end.
* :func:`idle_guard`: the idle (inter-chunk) timeout: no byte of the body for ``idle_s``
  after the headers or after the last read raises :class:`IdleTimeout` (the ``timeout`` kind).
  The wait for the headers is the header timeout's (:mod:`loadgen.endpoints.header_wait`).
* :func:`read_pushed`: a streamed body handed to a sans-IO reader as aiohttp's HTTP parser
  decodes it, inside the connection's ``data_received`` (the hot path of a streamed answer:
  no task wake-up, buffer and flow-control round per read).

The limits of reads beside the load (discovery, pre-flight) are here too.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Protocol, TypeVar

import aiohttp
import orjson

from loadgen.core.clock import now_ns
from loadgen.core.errors import ProtocolError
from loadgen.core.types import RequestRecord

if TYPE_CHECKING:
    from types import TracebackType

__all__ = [
    "DEFAULT_IDLE_TIMEOUT_S",
    "DEFAULT_MAX_BODY_BYTES",
    "MODELS_BODY_LIMIT",
    "SIDE_BODY_LIMIT",
    "BodyTooLarge",
    "IdleGuard",
    "IdleTimeout",
    "SelfReading",
    "error_body_line",
    "idle_guard",
    "read_bounded",
    "read_json_body",
    "read_pushed",
    "read_2xx",
]

R = TypeVar("R")  # a response of either HTTP client (aiohttp's ClientResponse, the lean LeanResponse)

DEFAULT_MAX_BODY_BYTES = 16 * 1024 * 1024
"""A whole (non-streamed) answer above this many bytes is a ``protocol`` error: the same 16 MiB
as the largest SSE event (``max_event_bytes``), which the endpoints pass for both."""

MODELS_BODY_LIMIT = 8 * 1024 * 1024
"""``GET /v1/models``: read at most this much (a catalogue of hundreds of models is ~1 MiB)."""

SIDE_BODY_LIMIT = 64 * 1024
"""``GET /version``, the pre-flight's answer, the network baseline's cheap request: at most this much."""

DEFAULT_IDLE_TIMEOUT_S = 120.0
"""No byte of an answer's body for this long ends the request as a ``timeout``: longer than the
idle limits of the proxies and load balancers commonly in front of servers (60 to 100 s), so a
stream that goes quiet this long would have been cut on its way anyway; far shorter than the
600 s total deadline that otherwise holds a stalled stream."""


class BodyTooLarge(ProtocolError):
    """An answer's body is larger than the client reads (the ``protocol`` error kind)."""

    def __init__(self, what: str, limit: int) -> None:
        super().__init__(f"{what} larger than {limit} bytes")
        self.limit = limit


class IdleTimeout(TimeoutError):
    """No byte of an answer's body for the idle timeout (the ``timeout`` error kind)."""

    def __init__(self, idle_s: float) -> None:
        super().__init__(f"no byte of the answer for {idle_s:g} s (idle timeout, --idle-timeout)")
        self.idle_s = idle_s


class IdleGuard:
    """The idle timer of one body being read (``async with idle_guard(idle_s) as guard``):
    :meth:`touch` after each read. One timer per ``idle_s`` of reading, not one per read: a
    read only stores its time; the timer, when due, re-arms itself at the last read + ``idle_s``
    and cancels the reading task only when that time has passed (as :func:`asyncio.timeout`
    cancels it: the task's cancel is undone at the exit and :class:`IdleTimeout` raised)."""

    __slots__ = ("_expired", "_handle", "_idle_s", "last_ns", "_loop", "_task", "_cancelling")

    def __init__(self, idle_s: float | None) -> None:
        self._idle_s = idle_s
        self._expired = False
        self._handle: asyncio.TimerHandle | None = None
        self.last_ns = 0
        """The last read's monotonic time (ns); a reader that stamps its reads anyway stores the stamp."""
        self._cancelling = 0

    def touch(self) -> None:
        """A read arrived: the body may now stay quiet for ``idle_s`` again."""
        self.last_ns = now_ns()

    def _due(self) -> None:
        assert self._idle_s is not None
        left_ns = self.last_ns + round(self._idle_s * 1e9) - now_ns()
        if left_ns > 0:
            self._handle = self._loop.call_later(left_ns / 1e9, self._due)
            return
        self._handle = None
        self._expired = True
        self._task.cancel()

    async def __aenter__(self) -> IdleGuard:
        if self._idle_s is not None:
            task = asyncio.current_task()
            assert task is not None
            self._task, self._loop = task, asyncio.get_running_loop()
            self._cancelling = task.cancelling()
            self.last_ns = now_ns()
            self._handle = self._loop.call_later(self._idle_s, self._due)
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        if self._expired:
            self._expired = False
            if self._task.uncancel() <= self._cancelling and exc_type is asyncio.CancelledError:
                assert self._idle_s is not None
                raise IdleTimeout(self._idle_s) from None


class SelfReading(Protocol):
    """An answer that reads its own body (``--http-client lean``'s
    :class:`~loadgen.endpoints.lean_http.LeanResponse`): :func:`read_pushed`, :func:`read_bounded` and
    :func:`~loadgen.endpoints.http.drain_after_end` hand it their work, with the same contract."""

    async def push(self, on_read: Callable[[bytes, int], bool], idle_s: float | None) -> None: ...

    async def read_all(self, limit: int, idle_s: float | None, *, what: str = ...) -> bytes: ...

    async def drain(self, timeout_s: float) -> None: ...


def idle_guard(idle_s: float | None) -> IdleGuard:
    """Bound the quiet time of a body read inside ``async with``: :class:`IdleTimeout` when no
    :meth:`IdleGuard.touch` came for ``idle_s`` (None: no idle timeout). A cancel from elsewhere
    (an outer deadline, Ctrl-C) passes through unchanged."""
    return IdleGuard(idle_s)


async def read_bounded(
    resp: aiohttp.ClientResponse | SelfReading, limit: int, *, what: str = "response body", idle_s: float | None = None
) -> bytes:
    """The whole body of ``resp``, at most ``limit`` bytes (decoded: a compressed body is
    bounded by what it expands to). Past the limit (or a ``Content-Length`` over it) the
    connection is dropped and :class:`BodyTooLarge` raised; ``idle_s``: see :func:`idle_guard`.
    A lean answer (``--http-client lean``) reads itself: :meth:`SelfReading.read_all`, the same bounds."""
    if not isinstance(resp, aiohttp.ClientResponse):
        return await resp.read_all(limit, idle_s, what=what)
    length = resp.content_length
    if length is not None and length > limit:
        resp.close()
        raise BodyTooLarge(what, limit)
    buf = bytearray()
    async with idle_guard(idle_s) as guard:
        async for chunk in resp.content.iter_any():
            guard.touch()
            buf += chunk
            if len(buf) > limit:
                resp.close()
                raise BodyTooLarge(what, limit)
    return bytes(buf)


async def read_json_body(
    resp: aiohttp.ClientResponse | SelfReading, record: RequestRecord, limit: int, idle_s: float | None
) -> object:
    """A non-streamed answer's body (:func:`read_bounded`): ``record``'s end stamped once it is read, then
    decoded as JSON (:class:`ProtocolError` when it is not)."""
    raw = await read_bounded(resp, limit, idle_s=idle_s)
    record.end_ns = now_ns()
    record.streamed = False
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise ProtocolError("response body is not JSON") from None


async def read_2xx(
    read_ok: Callable[[R, RequestRecord], Awaitable[None]],
    resp: R,
    record: RequestRecord,
    status: int,
    ctype: str | None,
) -> None:
    """A 2xx answer ``resp`` read by ``read_ok``, for either HTTP client: a 2xx other than 200 is kept
    in ``http_status`` (201, 202, 204...); an ``incomplete_stream`` with no event whose answer was not
    an event stream (``ctype``, its Content-Type) says in its detail why no event came (the server or
    a proxy ignored streaming)."""
    if status != 200:
        record.http_status = status
    await read_ok(resp, record)
    ctype = ctype or "none"
    if record.error_kind == "incomplete_stream" and not record.events and "event-stream" not in ctype:
        record.error_detail = (
            f"{record.error_detail}: HTTP {status} with Content-Type {ctype[:60]}, not an event "
            "stream (the server or a proxy ignored streaming; --no-stream measures whole responses)"
        )


def error_body_line(body: bytes) -> str:
    """The words of an error body on one line: its JSON ``error.message``/``message``/``detail``, else
    its text (an HTML page's tags dropped); empty for an empty body."""
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
    return " ".join(text.split())


def _push_supported(version: str) -> bool:
    """Whether :func:`read_pushed` may swap the reader's class on this aiohttp: only on the
    versions it was tested with (3.9 to 3.14), whose ``StreamReader`` has the ``feed_data``,
    ``feed_eof``, ``set_exception`` and ``_buffer`` it relies on; any other reads with ``iter_any``."""
    try:
        major, minor = (int(x) for x in version.split(".")[:2])
    except ValueError:
        return False
    reader = aiohttp.StreamReader
    needed = ("feed_data", "feed_eof", "set_exception", "end_http_chunk_receiving", "read_nowait")
    return (3, 9) <= (major, minor) <= (3, 14) and all(hasattr(reader, a) for a in needed)


PUSH_READS = _push_supported(aiohttp.__version__)
"""True where :func:`read_pushed` hands pieces over from ``data_received``; else it reads with ``iter_any``."""

_SINKS: dict[int, _Sink] = {}
"""The reader of each body being pushed, by ``id`` of its :class:`aiohttp.StreamReader` (whose
``__slots__`` leave no room for it); an entry lives only while :func:`read_pushed` awaits."""


class _Sink:
    """Where :class:`_PushReader` hands a body's bytes: the sans-IO reader, the idle guard, the
    future the reading task awaits (its result: the stream ended; its exception: the reader's or
    the connection's error)."""

    __slots__ = ("on_read", "guard", "done")

    def __init__(self, on_read: Callable[[bytes, int], bool], guard: IdleGuard, done: asyncio.Future[None]) -> None:
        self.on_read = on_read
        self.guard = guard
        self.done = done

    def push(self, data: bytes) -> bool:
        """One decoded piece of the body, stamped now; True once no more is wanted (the future is then done)."""
        t = self.guard.last_ns = now_ns()  # the stamp is the read's time for the idle guard too
        try:
            end = self.on_read(data, t)
        except Exception as exc:  # the reader's own error (ProtocolError): raised in the reading task
            if not self.done.done():
                self.done.set_exception(exc)
            return True
        if end and not self.done.done():
            self.done.set_result(None)
        return end

    def close(self, exc: BaseException | None) -> None:
        if not self.done.done():
            if exc is None:
                self.done.set_result(None)
            else:
                self.done.set_exception(exc)


def _unpush(reader: aiohttp.StreamReader) -> None:
    """A :class:`_PushReader` back to a plain reader (its sink wants no more)."""
    reader.__class__ = aiohttp.StreamReader


class _PushReader(aiohttp.StreamReader):
    """An :class:`aiohttp.StreamReader` whose decoded body goes to its :class:`_Sink` as it is
    fed (the response's ``content`` becomes one for the length of :func:`read_pushed`, by
    ``__class__``: the parser keeps its reference to the instance). Once the sink wants no more
    (the stream ended, the reader failed, the reading task was cancelled) it is a plain reader
    again, at once: what follows is buffered as a plain reader buffers it.

    A read costs one Python call here (:meth:`feed_data`, :meth:`_Sink.push` inlined; no sink
    lookup for the end of an HTTP chunk: while pushing nothing is buffered, so aiohttp's
    ``end_http_chunk_receiving``, which marks chunk boundaries in the buffer for ``iter_chunks``,
    has nothing to mark)."""

    __slots__ = ()

    def feed_data(self, data: bytes, size: int = 0) -> bool:
        sink = _SINKS[id(self)]  # present for as long as the class is this one
        done = sink.done
        if done.done():  # the reading task was cancelled meanwhile: a plain reader from here
            _unpush(self)
            return self.feed_data(data, size)
        if data:
            t = sink.guard.last_ns = now_ns()  # the stamp is the read's time for the idle guard too
            try:
                if not sink.on_read(data, t):
                    return False
                done.set_result(None)
            except Exception as exc:  # the reader's own error (ProtocolError): raised in the reading task
                done.set_exception(exc)
            _unpush(self)
        return False

    def end_http_chunk_receiving(self) -> None:
        pass  # nothing buffered while pushing: no chunk boundary to mark (docstring)

    def feed_eof(self) -> None:
        _unpush(self)
        aiohttp.StreamReader.feed_eof(self)
        _SINKS[id(self)].close(None)

    def set_exception(self, exc: BaseException, *cause: BaseException) -> None:
        _unpush(self)
        aiohttp.StreamReader.set_exception(self, exc, *cause)
        _SINKS[id(self)].close(exc)


async def read_pushed(
    resp: aiohttp.ClientResponse | SelfReading, on_read: Callable[[bytes, int], bool], idle_s: float | None
) -> None:
    """Read a streamed body into ``on_read(piece, t_ns)`` (True: the stream has ended) until it
    says so or the body ends; ``idle_s``: see :func:`idle_guard`.

    Each piece is handed over as aiohttp's parser decodes it, from the connection's
    ``data_received``, stamped then (``t_ns``: the monotonic time of the read that brought it;
    pieces of one read are stamped microseconds apart), so a read costs no task wake-up and no
    buffer round: the loop's per-read work is the parser's and ``on_read``'s. What was already
    buffered when it starts is handed over first. An error of ``on_read`` or of the connection
    (a broken chunked body, a reset) is raised here as :meth:`StreamReader.readany` would raise
    it; a cancel (the request's deadline, the idle timeout) leaves the reader as it found it.
    A body already at its end, or a reader of another kind (decompressing, empty), is read with
    ``iter_any`` instead, the same calls. A lean answer (``--http-client lean``) pushes from its own
    ``data_received``: :meth:`SelfReading.push`, the same contract."""
    if not isinstance(resp, aiohttp.ClientResponse):
        await resp.push(on_read, idle_s)
        return
    content = resp.content
    if not PUSH_READS or type(content) is not aiohttp.StreamReader:
        async with idle_guard(idle_s) as guard:
            async for chunk in content.iter_any():
                guard.touch()
                if on_read(chunk, now_ns()):
                    return
        return
    done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    async with idle_guard(idle_s) as guard:
        sink = _Sink(on_read, guard, done)
        exc = content.exception()
        if exc is not None:
            raise exc
        if content._buffer:  # what came with the headers (or before this task ran)
            data = content.read_nowait()
            if data and sink.push(data):
                await done  # the reader's own error, if it failed
                return
        if content.is_eof():
            return
        key = id(content)
        _SINKS[key] = sink
        content.__class__ = _PushReader
        try:
            await done
        finally:
            content.__class__ = aiohttp.StreamReader
            del _SINKS[key]
