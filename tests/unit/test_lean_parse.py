"""The lean client's sans-IO HTTP/1.1 response parser (loadgen.endpoints.lean_parse): any split
of a response's bytes decodes to the same head and body; malformed bytes are a ProtocolError."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loadgen.core.errors import ProtocolError
from loadgen.endpoints.lean_parse import ResponseParser

EVENTS = [b'data: {"choices":[{"text":"a"}]}\n\n', b'data: {"choices":[{"text":"bc"}]}\n\n', b"data: [DONE]\n\n"]
HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\nX-Dup: 1\r\nx-dup: 2\r\n\r\n"
)
CHUNKED = HEAD + b"".join(b"%x;ext=1\r\n%s\r\n" % (len(e), e) for e in EVENTS) + b"0\r\nTrailer: x\r\n\r\n"
BODY = b"".join(EVENTS)


def run(pieces: list[bytes]) -> tuple[ResponseParser, bytes]:
    p = ResponseParser()
    out = b"".join(p.feed(x) for x in pieces)
    return p, out


def test_chunked_split_at_every_byte_boundary() -> None:
    for i in range(len(CHUNKED) + 1):
        p, out = run([CHUNKED[:i], CHUNKED[i:]])
        assert out == BODY, i
        assert p.done and p.extra == b""
        assert p.head is not None and p.head.status == 200 and p.head.keep_alive
        assert p.head.headers["x-dup"] == "1, 2" and p.head.headers.get("CONTENT-TYPE") == "text/event-stream"


def test_chunked_byte_by_byte_and_pairs() -> None:
    p, out = run([CHUNKED[i : i + 1] for i in range(len(CHUNKED))])
    assert out == BODY and p.done
    for i in range(1, len(CHUNKED)):
        for j in range(i, len(CHUNKED) + 1, 7):
            p, out = run([CHUNKED[:i], CHUNKED[i:j], CHUNKED[j:]])
            assert out == BODY and p.done, (i, j)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cuts=st.lists(st.integers(min_value=0, max_value=len(CHUNKED)), max_size=12))
def test_chunked_any_split(cuts: list[int]) -> None:
    bounds = [0, *sorted(cuts), len(CHUNKED)]
    p, out = run([CHUNKED[a:b] for a, b in zip(bounds, bounds[1:])])
    assert out == BODY and p.done


def test_content_length_and_what_follows() -> None:
    raw = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhelloEXTRA"
    for i in range(len(raw) + 1):
        p, out = run([raw[:i], raw[i:]])
        assert out == b"hello" and p.done and p.extra == b"EXTRA", i


def test_content_length_zero_and_204_have_no_body() -> None:
    p, out = run([b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"])
    assert out == b"" and p.done
    p, out = run([b"HTTP/1.1 204 No Content\r\n\r\n"])
    assert out == b"" and p.done and p.head is not None and p.head.status == 204


def test_headers_across_reads_and_informational_head_skipped() -> None:
    raw = b"HTTP/1.1 103 Early Hints\r\nLink: x\r\n\r\nHTTP/1.1 429 Too Many\r\nRetry-After: 3\r\nContent-Length: 2\r\n\r\nno"
    for i in range(len(raw) + 1):
        p, out = run([raw[:i], raw[i:]])
        assert p.head is not None and p.head.status == 429 and p.head.headers["retry-after"] == "3"
        assert out == b"no" and p.done


def test_read_until_close() -> None:
    p, out = run([b"HTTP/1.1 200 OK\r\n\r\nab", b"cd"])
    assert out == b"abcd" and not p.done
    p.feed_eof()
    assert p.done and p.head is not None and not p.head.keep_alive


def test_connection_close_and_http10_are_not_kept() -> None:
    p, _ = run([b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"])
    assert p.head is not None and not p.head.keep_alive
    p, _ = run([b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n"])
    assert p.head is not None and not p.head.keep_alive


@pytest.mark.parametrize(
    "raw",
    [
        b"HTTP/2 200 OK\r\n\r\n",
        b"garbage\r\n\r\n",
        b"HTTP/1.1 2000 OK\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 1, 2\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabXY",
        b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: 3\r\n\r\nabc",
        b"HTTP/1.1 101 Switching Protocols\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
        # as aiohttp answers them: a message that reads two ways (RFC 9112 6.3), a header line over 8190 bytes
        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nX-Long: " + b"a" * 8190 + b"\r\nContent-Length: 0\r\n\r\n",
    ],
)
def test_malformed_is_a_protocol_error(raw: bytes) -> None:
    with pytest.raises(ProtocolError):
        run([raw])


def test_head_too_large() -> None:
    with pytest.raises(ProtocolError):
        run([b"HTTP/1.1 200 OK\r\n" + b"X: " + b"a" * 70_000])


@pytest.mark.parametrize(
    ("raw", "where"),
    [
        (b"", "before the response head"),
        (b"HTTP/1.1 200 OK\r\nContent-Le", "before the response head"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", "before the body's end"),
        (CHUNKED[: len(CHUNKED) - 8], "before the body's end"),
    ],
)
def test_closed_mid_response(raw: bytes, where: str) -> None:
    p, _ = run([raw])
    with pytest.raises(ConnectionResetError, match=where):
        p.feed_eof()
