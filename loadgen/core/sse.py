"""Sans-IO Server-Sent Events decoder: bytes in, events out.

Follows the WHATWG HTML "server-sent events" parsing rules
(https://html.spec.whatwg.org/multipage/server-sent-events.html#event-stream-interpretation):
lines end in CRLF, LF or CR; a line starting with ``:`` is a comment; fields
``data``, ``event``, ``id``, ``retry``; an event is dispatched at a blank line and
only if it has data (so comments, keep-alives and id/retry-only blocks produce
no event). Any split of the byte stream into ``feed`` calls yields the same
events, including UTF-8 characters and CRLF pairs split across reads.

The decoder does no I/O and reads no clock: the caller stamps the events that a
``feed`` call returns with the arrival time of that read, which is the arrival
of each event's terminating blank line.
"""

from __future__ import annotations

import codecs
from dataclasses import dataclass

from loadgen.core.errors import ProtocolError

DEFAULT_MAX_EVENT_BYTES = 16 * 1024 * 1024
"""An event (or a line) larger than this many characters aborts the stream with a protocol error."""


@dataclass(frozen=True, slots=True)
class SSEEvent:
    """One dispatched event: ``data`` lines joined with ``\\n``; ``event`` defaults to "message"."""

    data: str
    event: str = "message"
    id: str | None = None
    retry_ms: int | None = None


class SSEDecoder:
    """Incremental SSE decoder.

    ``feed(chunk: bytes) -> list[SSEEvent]`` returns the events completed by this
    chunk. Raises :class:`ProtocolError` on invalid UTF-8 or when one event grows
    past ``max_event_bytes`` (memory stays bounded whatever the server sends).
    """

    __slots__ = (
        "_dec", "_parts", "_plen", "_data", "_event", "_id", "_retry", "_skip_lf", "_max", "_size", "_start",
    )  # fmt: skip

    def __init__(self, max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES) -> None:
        self._dec = codecs.getincrementaldecoder("utf-8")("strict")
        self._parts: list[str] = []  # the unfinished last line, in a few pieces (see feed)
        self._plen = 0
        self._data: list[str] = []
        self._event = ""
        self._id: str | None = None
        self._retry: int | None = None
        self._skip_lf = False
        self._max = max_event_bytes
        self._size = 0
        self._start = True

    @property
    def max_event_bytes(self) -> int:
        return self._max

    def clean(self) -> bool:
        """True when nothing is buffered (no partial line, event or UTF-8 character, no CR pending):
        a chunk of whole events then decodes alone, as :meth:`feed` would decode it."""
        return not (self._parts or self._data or self._event or self._skip_lf) and not self._dec.getstate()[0]

    @property
    def at_start(self) -> bool:
        """True until the stream's first text (a BOM there is dropped; see :meth:`started`)."""
        return self._start

    def started(self) -> None:
        """The stream has begun (its events were taken whole by the caller): a later BOM is data."""
        self._start = False

    @property
    def pending(self) -> bool:
        """True when bytes of an unfinished event are buffered (at EOF: an incomplete event)."""
        return bool(self._parts or self._data or self._event)

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        try:
            text = self._dec.decode(chunk)
        except UnicodeDecodeError as exc:
            raise ProtocolError(f"invalid UTF-8 in event stream: {exc.reason}") from None
        if self._start and text:
            self._start = False
            if text[0] == "\ufeff":  # one leading byte-order mark is dropped, as the spec says
                text = text[1:]
        if not text:
            return []
        if self._skip_lf:
            self._skip_lf = False
            if text[0] == "\n":
                text = text[1:]
        if "\r" in text:  # only the new text can hold a CR: what is buffered was normalized on arrival
            if text[-1] == "\r":
                self._skip_lf = True
            text = text.replace("\r\n", "\n").replace("\r", "\n")
        if "\n" not in text:
            # A long line grows piece by piece; what is buffered is not scanned again, and pieces
            # are merged like a binary counter (log n pieces, each character copied log n times),
            # so a huge line costs n log n time and about twice its size in memory, however split.
            if text:
                parts = self._parts
                parts.append(text)
                while len(parts) > 1 and len(parts[-1]) >= len(parts[-2]):
                    tail = parts.pop()
                    parts[-1] += tail
                self._plen += len(text)
            self._check_size(self._plen)
            return []
        buf = "".join(self._parts) + text if self._parts else text
        lines = buf.split("\n")
        last = lines.pop()
        self._parts = [last] if last else []
        self._plen = len(last)
        self._check_size(self._plen)
        events: list[SSEEvent] = []
        for line in lines:
            if not line:
                if self._data:
                    events.append(SSEEvent("\n".join(self._data), self._event or "message", self._id, self._retry))
                self._data = []
                self._event = ""
                self._retry = None
                self._size = 0
                continue
            if line[0] == ":":
                continue
            name, sep, value = line.partition(":")
            if sep and value[:1] == " ":
                value = value[1:]
            if name == "data":
                self._data.append(value)
                self._size += len(value)
                if self._size > self._max:
                    raise ProtocolError(f"event larger than {self._max} bytes")
            elif name == "event":
                self._event = value
            elif name == "id":
                if "\0" not in value:
                    self._id = value
            elif name == "retry":
                if value.isdigit():
                    self._retry = int(value)
            # any other field name is ignored, as the spec says
        return events

    def _check_size(self, n: int) -> None:
        if n + self._size > self._max:
            raise ProtocolError(f"event larger than {self._max} bytes")

    def close(self) -> list[SSEEvent]:
        """Signal EOF. Per the spec an unterminated event is discarded: check ``pending`` first."""
        try:
            tail = self._dec.decode(b"", final=True)
        except UnicodeDecodeError as exc:
            raise ProtocolError(f"truncated UTF-8 at end of stream: {exc.reason}") from None
        if tail:
            self._parts.append(tail)
            self._plen += len(tail)
        return []
