"""Property tests for loadgen.core.sse.SSEDecoder (WHATWG event-stream parsing)."""

from __future__ import annotations

import tracemalloc

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loadgen.core.errors import ProtocolError
from loadgen.core.sse import SSEDecoder, SSEEvent

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# --------------------------------------------------------------------------- a stream model

# Text of a field value: anything but line breaks, with multi-byte UTF-8 favoured.
VALUE = st.text(
    alphabet=st.one_of(
        st.sampled_from('ab :{}"é€😀\u2028\u0085\x00'),
        st.characters(blacklist_categories=["Cs"], blacklist_characters="\r\n"),
    ),
    max_size=12,
)
NAME = st.text(alphabet=st.sampled_from("abcxyz_-é"), max_size=6)

# A line of an event block: ("data", v) | ("event", v) | ("comment", v) | ("id", v) | ("retry", v) | ("other", v)
LINE = st.one_of(
    st.tuples(st.just("data"), VALUE),
    st.tuples(st.just("event"), NAME),
    st.tuples(st.just("comment"), VALUE),
    st.tuples(st.just("id"), st.text(alphabet="0123456789abc", max_size=4)),
    st.tuples(st.just("retry"), st.text(alphabet="0123456789", min_size=1, max_size=4)),
    st.tuples(st.just("other"), VALUE),
)
BLOCK = st.lists(LINE, min_size=0, max_size=5)  # an empty block is a bare blank line (keep-alive)
BLOCKS = st.lists(BLOCK, min_size=0, max_size=6)


def render_line(kind: str, value: str, nospace: bool) -> str:
    if kind == "comment":
        return ":" + value
    if kind == "other":
        return "x-field: " + value
    sep = ":" if nospace and not value.startswith(" ") else ": "
    return kind + sep + value


def lines_of(blocks: list[list[tuple[str, str]]], nospace: bool = False) -> list[str]:
    """The stream's lines; each block ends with an empty line (the event terminator)."""
    out: list[str] = []
    for block in blocks:
        out.extend(render_line(k, v, nospace) for k, v in block)
        out.append("")
    return out


def expected_events(blocks: list[list[tuple[str, str]]]) -> list[tuple[str, str]]:
    """(data, event) per dispatched event, straight from the spec's rules."""
    out = []
    for block in blocks:
        data = [v for k, v in block if k == "data"]
        names = [v for k, v in block if k == "event"]
        if data:
            out.append(("\n".join(data), (names[-1] if names else "") or "message"))
    return out


def join(lines: list[str], eols: list[str]) -> str:
    return "".join(line + eol for line, eol in zip(lines, eols))


def decode(chunks: list[bytes], max_event_bytes: int | None = None) -> list[SSEEvent]:
    dec = SSEDecoder() if max_event_bytes is None else SSEDecoder(max_event_bytes)
    out: list[SSEEvent] = []
    for c in chunks:
        out.extend(dec.feed(c))
    out.extend(dec.close())
    assert not dec.pending
    return out


def pairs(events: list[SSEEvent]) -> list[tuple[str, str]]:
    return [(e.data, e.event) for e in events]


def split_at(data: bytes, cuts: list[int]) -> list[bytes]:
    cuts = sorted({c for c in cuts if 0 < c < len(data)})
    bounds = [0, *cuts, len(data)]
    return [data[a:b] for a, b in zip(bounds, bounds[1:])]


@st.composite
def mixed_eols(draw: st.DrawFn, lines: list[str]) -> list[str]:
    """A line ending per line; a CR is never followed by an LF that ends an empty line
    (CR + LF would be one CRLF, merging two line ends)."""
    eols: list[str] = []
    for line in lines:
        choices = ["\n", "\r\n", "\r"]
        if line == "" and eols and eols[-1] == "\r":
            choices = ["\r\n", "\r"]
        eols.append(draw(st.sampled_from(choices)))
    return eols


# --------------------------------------------------------------------------- properties


@SETTINGS
@given(blocks=BLOCKS, eol=st.sampled_from(["\n", "\r\n", "\r"]), nospace=st.booleans(), data=st.data())
def test_any_rechunking_gives_the_same_events(blocks, eol, nospace, data) -> None:
    raw = join(lines_of(blocks, nospace), [eol] * len(lines_of(blocks, nospace))).encode("utf-8")
    whole = decode([raw])
    cuts = data.draw(st.lists(st.integers(0, max(len(raw), 1)), max_size=20), label="cuts")
    assert pairs(decode(split_at(raw, cuts))) == pairs(whole)
    # byte by byte: every split inside a UTF-8 sequence and between CR and LF
    assert pairs(decode([raw[i : i + 1] for i in range(len(raw))])) == pairs(whole)
    assert pairs(whole) == expected_events(blocks)


@SETTINGS
@given(blocks=BLOCKS, data=st.data())
def test_lf_crlf_cr_and_mixed_line_endings_agree(blocks, data) -> None:
    lines = lines_of(blocks)
    want = expected_events(blocks)
    for eol in ("\n", "\r\n", "\r"):
        assert pairs(decode([join(lines, [eol] * len(lines)).encode()])) == want, repr(eol)
    eols = data.draw(mixed_eols(lines), label="eols")
    raw = join(lines, eols).encode()
    cuts = data.draw(st.lists(st.integers(0, max(len(raw), 1)), max_size=10), label="cuts")
    assert pairs(decode(split_at(raw, cuts))) == want


@SETTINGS
@given(blocks=BLOCKS, eol=st.sampled_from(["\n", "\r\n", "\r"]), cut=st.integers(0, 10_000))
def test_events_are_returned_by_the_feed_that_completes_them(blocks, eol, cut) -> None:
    """The caller stamps a feed's events with that read's arrival: an event must come out
    of the feed holding its terminating blank line, never earlier or later."""
    lines = lines_of(blocks)
    text = join(lines, [eol] * len(lines))
    raw = text.encode()
    cut = cut % (len(raw) + 1)
    dec = SSEDecoder()
    first = dec.feed(raw[:cut])
    second = dec.feed(raw[cut:])
    # events completed within the first part = events of the longest block-prefix inside it
    n_first = 0
    pos = 0
    for i, block in enumerate(blocks):
        pos += len(join(lines_of([block]), [eol] * (len(block) + 1)).encode())
        # complete at the first byte of the blank line's end (a CR ends a line by itself;
        # the LF of a CRLF split off by the cut is skipped when it comes)
        if pos - (len(eol) - 1) <= cut:
            n_first = len(expected_events(blocks[: i + 1]))
    assert len(first) == n_first
    assert pairs(first + second) == expected_events(blocks)


def test_every_single_split_of_a_crlf_stream() -> None:
    text = (
        ": keep-alive\r\n\r\nid: 7\r\n\r\nretry: 1000\r\n\r\n"
        'event: delta\r\ndata: {"t":"é€😀"}\r\ndata:  two\r\n\r\n'
        "data: [DONE]\r\n\r\n"
    )
    raw = text.encode()
    want = [('{"t":"é€😀"}\n two', "delta"), ("[DONE]", "message")]
    assert pairs(decode([raw])) == want
    for i in range(len(raw) + 1):
        for j in range(i, len(raw) + 1, 7):
            assert pairs(decode([raw[:i], raw[i:j], raw[j:]])) == want, (i, j)


# --------------------------------------------------------------------------- examples


@pytest.mark.parametrize(
    "text",
    [
        ": comment\n\n",
        ":\n\n",
        "\n\n\n",
        "id: 42\n\n",
        "retry: 3000\n\n",
        "id: 1\nretry: 10\n: c\n\n",
        "event: ping\n\n",
        "x-unknown: field\n\n",
    ],
)
def test_blocks_without_data_produce_no_event(text: str) -> None:
    for eol in ("\n", "\r\n", "\r"):
        assert decode([text.replace("\n", eol).encode()]) == []


def test_multiline_data_and_event_names() -> None:
    evs = decode([b"event: a\ndata: 1\ndata:2\ndata\n\ndata: x\n\n"])
    assert pairs(evs) == [("1\n2\n", "a"), ("x", "message")]
    # the event name does not carry over to the next event
    evs = decode([b"event: a\n\ndata: y\n\n"])
    assert pairs(evs) == [("y", "message")]
    # only one leading space is stripped
    assert pairs(decode([b"data:   x  \n\n"])) == [("  x  ", "message")]


def test_id_and_retry_fields_are_kept_on_events() -> None:
    evs = decode([b"id: 5\nretry: 250\ndata: a\n\n"])
    assert evs == [SSEEvent("a", "message", "5", 250)]


def test_unterminated_event_at_eof_sets_pending() -> None:
    for tail in (b"data: partial", b"data: partial\n", b"data: partial\r\n", b"event: x\n", b"data: a\r"):
        dec = SSEDecoder()
        assert dec.feed(b"data: done\n\n") != []
        assert not dec.pending
        assert dec.feed(tail) == []
        assert dec.pending, tail
        assert dec.close() == []  # discarded at EOF, per the spec


def test_clean_end_is_not_pending() -> None:
    for text in (b"data: a\n\n", b"data: a\r\n\r\n", b"data: a\r\r", b"", b": c\n"):
        dec = SSEDecoder()
        dec.feed(text)
        dec.close()
        assert not dec.pending, text


@pytest.mark.parametrize(
    "chunks",
    [
        [b"data: \xff\n\n"],
        [b"data: \xc3\x28\n\n"],
        [b"data: \xe2\x82", b"x\n\n"],  # a broken sequence across reads
        [b"data: \xed\xa0\x80\n\n"],  # an encoded surrogate
        [b"data: \xc0\xaf\n\n"],  # overlong
    ],
)
def test_invalid_utf8_raises_protocol_error(chunks: list[bytes]) -> None:
    dec = SSEDecoder()
    with pytest.raises(ProtocolError):
        for c in chunks:
            dec.feed(c)


def test_truncated_utf8_at_eof_raises_protocol_error() -> None:
    dec = SSEDecoder()
    dec.feed(b"data: \xe2\x82")
    with pytest.raises(ProtocolError):
        dec.close()


def test_utf8_split_inside_a_character_is_fine() -> None:
    raw = "data: 😀é\n\n".encode()
    for i in range(len(raw) + 1):
        assert pairs(decode([raw[:i], raw[i:]])) == [("😀é", "message")]


@pytest.mark.timing
def test_huge_line_raises_with_memory_bounded() -> None:
    """A 1 MiB line, max_event_bytes=64 KiB, fed in 4 KiB pieces: the decoder gives up
    within one piece of the limit, never buffering the whole line."""
    limit = 64 * 1024
    piece = b"a" * 4096
    dec = SSEDecoder(max_event_bytes=limit)
    fed = 0
    tracemalloc.start()
    try:
        with pytest.raises(ProtocolError):
            dec.feed(b"data: ")
            for _ in range(256):  # 1 MiB
                dec.feed(piece)
                fed += len(piece)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert fed <= limit + len(piece)
    assert peak < 8 * limit, peak


def test_huge_multiline_event_raises() -> None:
    limit = 64 * 1024
    dec = SSEDecoder(max_event_bytes=limit)
    line = b"data: " + b"b" * 1000 + b"\n"
    fed = 0
    with pytest.raises(ProtocolError):
        for _ in range(1024):  # ~1 MiB of data lines in one event, no blank line
            dec.feed(line)
            fed += len(line)
    assert fed <= limit + 2 * len(line)


def test_many_small_events_are_not_limited_together() -> None:
    dec = SSEDecoder(max_event_bytes=1024)
    n = 0
    for _ in range(200):
        n += len(dec.feed(b"data: " + b"c" * 500 + b"\n\n"))
    assert n == 200


def test_leading_bom_is_ignored() -> None:
    raw = "\ufeffdata: x\n\n".encode()
    assert pairs(decode([raw])) == [("x", "message")]
    assert pairs(decode([raw[:1], raw[1:2], raw[2:]])) == [("x", "message")]
