"""A sans-IO HTTP/1.1 response parser: bytes in, the head and the decoded body out.

The parser of ``--http-client lean`` (:mod:`loadgen.endpoints.lean_http`): fed whatever a read
brought (:meth:`ResponseParser.feed`, any split of the bytes gives the same result), it returns
the decoded body bytes of that read (chunked transfer coding, ``Content-Length`` or read until
close) and sets :attr:`ResponseParser.head` once the status line and headers are in. No I/O and
no clock here: the connection stamps each read and hands the piece on.

In scope: one response at a time on a client connection, informational (1xx) heads skipped,
chunk extensions and trailers skipped, ``Connection: close`` and HTTP/1.0 answers not kept.
Out of scope: compressed bodies (the client asks for ``identity``; any other ``Content-Encoding``
is a :class:`~loadgen.core.errors.ProtocolError`), upgrades, pipelining.
"""

from __future__ import annotations

import re

from loadgen.core.errors import ProtocolError

__all__ = ["MAX_HEAD_BYTES", "MAX_LINE_BYTES", "LeanHeaders", "ResponseHead", "ResponseParser"]

MAX_HEAD_BYTES = 64 * 1024
"""A status line and headers longer than this is a ``protocol`` error."""

MAX_LINE_BYTES = 8190
"""A status or header line longer than this is a ``protocol`` error (aiohttp's default limit, the same answer)."""

_MAX_CHUNK_LINE = 4096
"""A chunk-size line (with its extensions) longer than this is a ``protocol`` error."""

_STATUS = re.compile(rb"HTTP/1\.([01]) (\d{3})(?: ([^\r\n]*))?")

_HEAD, _LENGTH, _CHUNK_SIZE, _CHUNK_DATA, _CHUNK_CRLF, _TRAILER, _CLOSE, _DONE = range(8)


class LeanHeaders(dict[str, str]):
    """Response headers by lower-cased name; ``get`` and ``[]`` take any capitalisation. A
    repeated header's values are joined with ``", "`` (RFC 9110 5.3)."""

    __slots__ = ()

    def __getitem__(self, name: str) -> str:
        return dict.__getitem__(self, name.lower())

    def get(self, name: str, default: str | None = None) -> str | None:  # type: ignore[override]  # str keys only
        return dict.get(self, name.lower(), default)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and dict.__contains__(self, name.lower())


class ResponseHead:
    """A response's status line and headers, and how its body is framed."""

    __slots__ = ("status", "reason", "headers", "keep_alive", "content_length", "chunked")

    def __init__(self, status: int, reason: str, headers: LeanHeaders, keep_alive: bool) -> None:
        self.status = status
        self.reason = reason
        self.headers = headers
        self.keep_alive = keep_alive
        coding = (headers.get("transfer-encoding") or "").strip().lower()
        if coding not in ("", "chunked", "identity"):
            raise ProtocolError(f"Transfer-Encoding {coding[:30]}: the lean client reads chunked only")
        self.chunked = coding == "chunked"
        length = headers.get("content-length")
        if length is not None and self.chunked:  # RFC 9112 6.3: read two ways, "ought to be handled as an error"
            raise ProtocolError("Content-Length with Transfer-Encoding: chunked")
        self.content_length: int | None = None
        if length is not None and not self.chunked:
            values = {v.strip() for v in length.split(",")}
            if len(values) != 1 or not next(iter(values)).isdigit():
                raise ProtocolError(f"malformed Content-Length: {length[:40]!r}")
            self.content_length = int(next(iter(values)))


def parse_head(raw: bytes) -> ResponseHead:
    """The :class:`ResponseHead` of ``raw`` (status line and header lines, without the blank line).
    Raises :class:`ProtocolError` on a malformed status line or header line."""
    lines = raw.split(b"\r\n")
    if max(map(len, lines)) > MAX_LINE_BYTES:
        raise ProtocolError(f"an HTTP head line longer than {MAX_LINE_BYTES} bytes")
    m = _STATUS.fullmatch(lines[0])
    if m is None:
        raise ProtocolError(f"malformed HTTP status line: {lines[0][:60]!r}")
    headers = LeanHeaders()
    for line in lines[1:]:
        if line[:1] in (b" ", b"\t"):
            raise ProtocolError("obsolete header line folding")
        name, colon, value = line.partition(b":")
        if not colon or not name or name != name.strip():
            raise ProtocolError(f"malformed HTTP header line: {line[:60]!r}")
        key = name.decode("latin-1").lower()
        text = value.strip().decode("latin-1")
        old = dict.get(headers, key)
        dict.__setitem__(headers, key, text if old is None else f"{old}, {text}")
    http10 = m.group(1) == b"0"
    conn = (headers.get("connection") or "").lower()
    keep = ("keep-alive" in conn) if http10 else ("close" not in conn)
    return ResponseHead(int(m.group(2)), (m.group(3) or b"").decode("latin-1"), headers, keep)


class ResponseParser:
    """One response's bytes, any split: :meth:`feed` a read, get its decoded body bytes.

    After a feed, :attr:`head` is set once the head is complete; :attr:`done` once the body has
    ended (its framing says so; a read-until-close body ends at :meth:`feed_eof`). Bytes after
    the body's end are :attr:`extra` (a server that speaks out of turn: the connection is not
    kept). ``head_only`` (the answer to a ``HEAD``, or a status without a body: 1xx, 204, 304)
    follows from the status. Raises :class:`ProtocolError` on bytes that are not HTTP/1.1.
    """

    __slots__ = ("head", "done", "extra", "_state", "_buf", "_left")

    def __init__(self) -> None:
        self.head: ResponseHead | None = None
        self.done = False
        self.extra = b""
        self._state = _HEAD
        self._buf = b""
        self._left = 0

    def feed(self, data: bytes) -> bytes:
        """The body bytes decoded from ``data`` (b"" when none); see the class docstring."""
        if self._buf:
            data = self._buf + data
            self._buf = b""
        state = self._state
        if state == _CHUNK_DATA and len(data) < self._left:  # the hot path: inside a chunk
            self._left -= len(data)
            return data
        if state == _LENGTH or state == _CLOSE:
            return self._plain(data)
        out: list[bytes] = []
        pos = 0
        n = len(data)
        while pos < n or state == _DONE:
            if state == _CHUNK_SIZE:  # the hot path: whole chunks, many to a read (one SSE event each)
                pos = self._whole_chunks(data, pos, out)
                if pos >= n:
                    break
            if state == _CHUNK_DATA:
                take = min(self._left, n - pos)
                out.append(data[pos : pos + take])
                pos += take
                self._left -= take
                if self._left:
                    break
                state = _CHUNK_CRLF
            elif state == _CHUNK_CRLF:
                if n - pos < 2:
                    if data[pos:] not in (b"", b"\r"):
                        raise ProtocolError("chunk data not followed by CRLF")
                    self._buf = data[pos:]
                    break
                if data[pos : pos + 2] != b"\r\n":
                    raise ProtocolError("chunk data not followed by CRLF")
                pos += 2
                state = _CHUNK_SIZE
            elif state == _CHUNK_SIZE or state == _TRAILER:
                end = data.find(b"\r\n", pos)
                if end < 0:
                    if n - pos > _MAX_CHUNK_LINE:
                        raise ProtocolError("chunk size line too long")
                    self._buf = data[pos:]
                    break
                line = data[pos:end]
                pos = end + 2
                if state == _TRAILER:
                    if not line:
                        state = _DONE
                    continue
                size = line.split(b";", 1)[0].strip()
                try:
                    self._left = int(size, 16)
                except ValueError:
                    raise ProtocolError(f"malformed chunk size: {line[:40]!r}") from None
                if self._left < 0 or not size or size[:1] in (b"+", b"-"):
                    raise ProtocolError(f"malformed chunk size: {line[:40]!r}")
                state = _CHUNK_DATA if self._left else _TRAILER
            elif state == _HEAD:
                end = data.find(b"\r\n\r\n", pos)
                if end < 0:
                    if n - pos > MAX_HEAD_BYTES:
                        raise ProtocolError(f"response head larger than {MAX_HEAD_BYTES} bytes")
                    self._buf = data[pos:]
                    break
                head = parse_head(data[pos:end])
                pos = end + 4
                if 100 <= head.status < 200:
                    if head.status == 101:
                        raise ProtocolError("HTTP 101: the server switched protocols")
                    continue  # an informational answer (103 Early Hints): the real one follows
                self.head = head
                state = self._body_state(head)
                if state == _LENGTH or state == _CLOSE:
                    self._state = state
                    out.append(self._plain(data[pos:]))
                    return b"".join(out)
            elif state == _DONE:
                self.done = True
                if pos < n:
                    self.extra += data[pos:]
                break
            else:  # pragma: no cover - every state is handled above
                raise AssertionError(state)
        self._state = state
        return b"".join(out) if len(out) != 1 else out[0]

    @staticmethod
    def _whole_chunks(data: bytes, pos: int, out: list[bytes]) -> int:
        """Take the whole chunks (size line without extensions, data, CRLF) at ``pos`` of ``data`` into
        ``out``; return where the first chunk that is not whole (or the last chunk) begins."""
        find = data.find
        n = len(data)
        while True:
            end = find(b"\r\n", pos)
            if end < 0:
                return pos
            line = data[pos:end]
            if not line.isalnum():
                return pos  # an extension, or malformed: the general path says which
            try:
                size = int(line, 16)
            except ValueError:
                return pos
            start = end + 2
            stop = start + size
            if size == 0 or stop + 2 > n or data[stop : stop + 2] != b"\r\n":
                return pos
            out.append(data[start:stop])
            pos = stop + 2

    def _body_state(self, head: ResponseHead) -> int:
        if head.status in (204, 304):
            return _DONE
        enc = (head.headers.get("content-encoding") or "identity").strip().lower()
        if enc != "identity":
            raise ProtocolError(f"Content-Encoding {enc[:30]}: the lean client asked for identity and reads no other")
        if head.chunked:
            return _CHUNK_SIZE
        if head.content_length is not None:
            self._left = head.content_length
            return _LENGTH if self._left else _DONE
        head.keep_alive = False  # its end is the connection's
        return _CLOSE

    def _plain(self, data: bytes) -> bytes:
        """A ``Content-Length`` or read-until-close body's bytes of ``data``."""
        if self._state == _CLOSE:
            return data
        if len(data) < self._left:
            self._left -= len(data)
            return data
        body, self.extra = data[: self._left], self.extra + data[self._left :]
        self._left = 0
        self._state = _DONE
        self.done = True
        return body

    def feed_eof(self) -> None:
        """The connection closed: a read-until-close body ends here; any other unfinished
        response raises :class:`ConnectionError` (the caller's ``incomplete_stream`` or ``connect``)."""
        if self._state == _CLOSE:
            self._state = _DONE
            self.done = True
            return
        if not self.done:
            where = "before the response head" if self.head is None else "before the body's end"
            raise ConnectionResetError(f"the server closed the connection {where}")
