"""Each dialect's stream, byte for byte, through its sans-IO parser at exact arrival times.

The bytes are those the fakes in ``tests/fixtures/fake_platforms.py`` serve (Azure's
content-filter chunks, OpenAI's usage chunk, Anthropic's event sequence); each write
is fed as one read stamped with its script time in integer ns, so TTFT, TPOT, output
tokens and status are checked exactly.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadgen.core.errors import ProtocolError
from loadgen.core.metrics import compute
from loadgen.core.redact import Redactor
from loadgen.core.types import RequestRecord
from loadgen.endpoints.anthropic import AnthropicStreamParser
from loadgen.endpoints.openai import OpenAIStreamParser
from tests.fixtures.fake_platforms import (
    anthropic_error_event,
    anthropic_writes,
    azure_chat_writes,
    openai_chat_writes,
)

MS = 1_000_000


def _rec() -> RequestRecord:
    return RequestRecord(index=0, phase="measure", scheduled_ns=0, sent_ns=0)


def feed(parser, writes, *, one_read: bool = False) -> None:
    """Feed each write as one read at its script time (ns); ``one_read``: all at the last time."""
    if one_read:
        data = b"".join(w[1].encode() for w in writes)
        parser.feed(data, round(writes[-1][0] * 1e9))
        parser.finish(round(writes[-1][0] * 1e9))
        return
    last = 0
    for t_s, text in writes:
        last = round(t_s * 1e9)
        if parser.feed(text.encode(), last):
            break
    parser.finish(last)


def azure_writes():
    return azure_chat_writes(
        ["Hel", "lo", " wor", "ld"],
        [0.200, 0.250, 0.300, 0.350],
        filter_at_s=0.050,
        role_at_s=0.060,
        finish_at_s=0.360,
        offsets_at_s=0.400,
        usage={"completion_tokens": 4, "prompt_tokens": 12, "total_tokens": 16},
    )


def test_azure_content_filter_chunks_carry_no_token_and_do_not_stamp_ttft() -> None:
    rec = _rec()
    p = OpenAIStreamParser(rec, chat=True, redact=Redactor())
    feed(p, azure_writes())
    assert rec.status == "ok" and rec.error_kind is None
    assert [e.text for e in rec.events] == ["Hel", "lo", " wor", "ld"]
    assert rec.finish_reason == "stop" and rec.completion_tokens == 4 and rec.prompt_tokens == 12
    assert rec.end_ns == 400 * MS and not rec.buffered
    m = compute(rec)
    assert m.ttft_ns == 200 * MS  # not the prompt-filter chunk at 50 ms, nor the role chunk at 60 ms
    assert m.tpot_ns == 50 * MS and m.output_tokens == 4 and not m.output_tokens_estimated
    assert m.e2e_ns == 400 * MS
    assert m.itl_ns == [50 * MS] * 3


def test_azure_without_usage_counts_from_text() -> None:
    rec = _rec()
    w = azure_chat_writes(["abcd", "efgh"], [0.1, 0.2], filter_at_s=0.01)
    feed(OpenAIStreamParser(rec, chat=True, redact=Redactor()), w)
    m = compute(rec)
    assert rec.ok and m.ttft_ns == 100 * MS and m.output_tokens == 2 and m.output_tokens_estimated


def test_openai_usage_reasoning_and_cached_tokens() -> None:
    rec = _rec()
    w = openai_chat_writes(
        ["A", "B", "C"],
        [0.30, 0.32, 0.34],
        reasoning=[(0.10, "think")],
        usage={
            "prompt_tokens": 100,
            "completion_tokens": 9,
            "total_tokens": 109,
            "prompt_tokens_details": {"cached_tokens": 64, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 6, "audio_tokens": 0},
        },
    )
    feed(OpenAIStreamParser(rec, chat=True, redact=Redactor()), w)
    m = compute(rec)
    assert rec.ok and rec.completion_tokens == 9 and rec.reasoning_tokens == 6 and rec.cached_prompt_tokens == 64
    assert m.ttft_ns == 100 * MS and m.time_to_first_answer_token_ns == 300 * MS
    assert m.tpot_ns == (340 - 100) * MS / 8


def anthropic_basic():
    return anthropic_writes(
        [("text", [(0.150, "Hello"), (0.190, " there"), (0.230, ", friend")])],
        start_at_s=0.080,
        ping_at_s=0.100,
        input_tokens=25,
        cache_read=10,
        output_deltas=[(0.240, 5)],
        stop_at_s=0.250,
    )


def test_anthropic_event_sequence_exact() -> None:
    rec = _rec()
    p = AnthropicStreamParser(rec, redact=Redactor())
    feed(p, anthropic_basic())
    assert rec.status == "ok" and rec.finish_reason == "end_turn"
    assert [e.text for e in rec.events] == ["Hello", " there", ", friend"]
    assert rec.completion_tokens == 5 and rec.prompt_tokens == 35 and rec.cached_prompt_tokens == 10
    m = compute(rec)
    assert m.ttft_ns == 150 * MS  # message_start, content_block_start and ping carry no token
    assert m.tpot_ns == (230 - 150) * MS / 4 and m.output_tokens == 5
    assert m.e2e_ns == 250 * MS


def test_anthropic_message_delta_usage_is_cumulative_never_summed() -> None:
    rec = _rec()
    w = anthropic_writes([("text", [(0.1, "a"), (0.2, "b")])], output_deltas=[(0.21, 3), (0.22, 7)])
    feed(AnthropicStreamParser(rec, redact=Redactor()), w)
    assert rec.ok and rec.completion_tokens == 7  # the last value, not 1 + 3 + 7


def test_anthropic_thinking_deltas_are_tokens_not_answer() -> None:
    rec = _rec()
    w = anthropic_writes(
        [("thinking", [(0.05, "Let me"), (0.07, " think")]), ("text", [(0.20, "Yes"), (0.22, ".")])],
        output_deltas=[(0.23, 12)],
    )
    feed(AnthropicStreamParser(rec, redact=Redactor()), w)
    m = compute(rec)
    assert rec.ok and [e.answer for e in rec.events] == [False, False, True, True]
    assert m.ttft_ns == 50 * MS and m.time_to_first_answer_token_ns == 200 * MS
    assert m.output_tokens == 12 and m.tpot_ns == (220 - 50) * MS / 11


def test_anthropic_without_message_stop_is_incomplete() -> None:
    rec = _rec()
    w = anthropic_writes([("text", [(0.1, "a"), (0.2, "b")])], output_deltas=[(0.21, 2)], stop=False)
    feed(AnthropicStreamParser(rec, redact=Redactor()), w)
    assert rec.status == "error" and rec.error_kind == "incomplete_stream" and rec.end_ns == 210 * MS
    m = compute(rec)
    assert m.ttft_ns is None and m.error_e2e_ns == 210 * MS


def test_anthropic_error_event_is_stream_error() -> None:
    rec = _rec()
    w = anthropic_writes([("text", [(0.1, "a")])], stop=False)
    w.append(anthropic_error_event(0.3, message="Overloaded sk-ant-SECRET-123456"))
    feed(AnthropicStreamParser(rec, redact=Redactor(["sk-ant-SECRET-123456"])), w)
    assert rec.status == "error" and rec.error_kind == "stream_error" and rec.end_ns == 300 * MS
    assert rec.error_detail == "overloaded_error: Overloaded ***"


def test_anthropic_malformed_json_is_protocol_error() -> None:
    p = AnthropicStreamParser(_rec(), redact=Redactor())
    with pytest.raises(ProtocolError):
        p.feed(b"event: content_block_delta\ndata: {nope\n\n", 1)


@pytest.mark.parametrize("dialect", ["azure", "anthropic"])
def test_buffered_stream_has_no_tpot_or_itl(dialect: str) -> None:
    rec = _rec()
    if dialect == "azure":
        p: OpenAIStreamParser | AnthropicStreamParser = OpenAIStreamParser(rec, chat=True, redact=Redactor())
        w = azure_writes()
    else:
        p = AnthropicStreamParser(rec, redact=Redactor())
        w = anthropic_basic()
    feed(p, w, one_read=True)
    assert rec.ok and rec.buffered
    m = compute(rec)
    assert m.ttft_ns == m.e2e_ns == round(w[-1][0] * 1e9)
    assert m.tpot_ns is None and m.itl_ns == [] and m.inter_chunk_ns == []
    assert m.output_tokens > 1


def test_one_token_in_one_read_is_not_buffered_two_are() -> None:
    # one token has no TPOT to protect; two tokens in one read would give TPOT 0 (it used to)
    for tokens, buffered in ((["only"], False), (["a", "b"], True)):
        rec = _rec()
        w = openai_chat_writes(
            tokens,
            [0.1 * (i + 1) for i in range(len(tokens))],
            usage={"prompt_tokens": 1, "completion_tokens": len(tokens), "total_tokens": 3},
        )
        feed(OpenAIStreamParser(rec, chat=True, redact=Redactor()), w, one_read=True)
        assert rec.ok and rec.buffered is buffered
        assert compute(rec).tpot_ns is None


def feed_two_reads(parser, writes, t1_s: float, gap_s: float) -> int:
    """Feed the writes as two reads: the first half at ``t1_s``, the rest ``gap_s`` later (a
    proxy that flushes twice). Returns the second read's time (ns)."""
    half = len(writes) // 2
    t1 = round(t1_s * 1e9)
    t2 = t1 + round(gap_s * 1e9)
    parser.feed(b"".join(w[1].encode() for w in writes[:half]), t1)
    parser.feed(b"".join(w[1].encode() for w in writes[half:]), t2)
    parser.finish(t2)
    return t2


TOKENS_8 = ["w0", "w1", "w2", "w3", "w4", "w5", "w6", "w7"]


@pytest.mark.parametrize("dialect", ["openai", "anthropic"])
def test_two_reads_a_few_ms_apart_are_buffered(dialect: str) -> None:
    # 8 tokens generated over 350 ms reach the client in two reads 3 ms apart: TPOT would read
    # 3/7 ms (it did: only one read was "buffered")
    rec = _rec()
    times = [0.2 + 0.05 * i for i in range(8)]
    if dialect == "openai":
        p: OpenAIStreamParser | AnthropicStreamParser = OpenAIStreamParser(rec, chat=True, redact=Redactor())
        w = openai_chat_writes(TOKENS_8, times, usage={"prompt_tokens": 1, "completion_tokens": 8, "total_tokens": 9})
    else:
        p = AnthropicStreamParser(rec, redact=Redactor())
        w = anthropic_writes([("text", list(zip(times, TOKENS_8)))], output_deltas=[(0.6, 8)], stop_at_s=0.6)
    t2 = feed_two_reads(p, w, 0.2, 0.003)
    assert rec.ok and rec.buffered
    assert len({e.t_ns for e in rec.events}) == 2
    m = compute(rec)
    assert m.tpot_ns is None and m.itl_ns == [] and m.output_tokens == 8
    assert m.ttft_ns == 200 * MS and m.e2e_ns == t2


@pytest.mark.parametrize("dialect", ["openai", "anthropic"])
@pytest.mark.parametrize("ttft_s", [0.01, 0.5])
def test_fast_short_honest_stream_is_not_buffered(dialect: str, ttft_s: float) -> None:
    # 8 tokens 1 ms apart, each in its own read, after a short or a long TTFT: TPOT exactly 1 ms
    rec = _rec()
    times = [ttft_s + 0.001 * i for i in range(8)]
    if dialect == "openai":
        p: OpenAIStreamParser | AnthropicStreamParser = OpenAIStreamParser(rec, chat=True, redact=Redactor())
        w = openai_chat_writes(TOKENS_8, times, usage={"prompt_tokens": 1, "completion_tokens": 8, "total_tokens": 9})
    else:
        p = AnthropicStreamParser(rec, redact=Redactor())
        w = anthropic_writes([("text", list(zip(times, TOKENS_8)))], output_deltas=[(times[-1], 8)])
    feed(p, w)
    assert rec.ok and not rec.buffered
    m = compute(rec)
    assert m.tpot_ns == pytest.approx(1 * MS) and m.ttft_ns == round(ttft_s * 1e9)


# ------------------------------------------------------------------ content filter: its own outcome


def test_azure_content_filter_finish_is_filtered_not_ok() -> None:
    rec = _rec()
    w = azure_chat_writes(
        ["Hel", "lo"],
        [0.2, 0.25],
        filter_at_s=0.05,
        offsets_at_s=0.3,
        usage={"completion_tokens": 2, "prompt_tokens": 12, "total_tokens": 14},
        finish_reason="content_filter",
    )
    feed(OpenAIStreamParser(rec, chat=True, redact=Redactor()), w)
    assert rec.status == "error" and not rec.ok and rec.error_kind == "filtered"
    assert rec.finish_reason == "content_filter" and rec.end_ns == 300 * MS
    assert rec.error_detail == "finish_reason content_filter: the provider's content filter stopped the output"
    m = compute(rec)
    assert m.ttft_ns is None and m.e2e_ns is None and m.tpot_ns is None and m.error_e2e_ns == 300 * MS


def test_anthropic_refusal_is_filtered() -> None:
    rec = _rec()
    w = anthropic_writes([("text", [(0.1, "I"), (0.2, " can")])], output_deltas=[(0.21, 2)], stop_reason="refusal")
    feed(AnthropicStreamParser(rec, redact=Redactor()), w)
    assert rec.error_kind == "filtered"
    assert rec.error_detail is not None and rec.error_detail.startswith("stop_reason refusal")


def _split(data: bytes, cuts: list[int]) -> list[bytes]:
    pts = sorted({c % (len(data) + 1) for c in cuts})
    out, prev = [], 0
    for c in pts + [len(data)]:
        out.append(data[prev:c])
        prev = c
    return [p for p in out if p]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=100_000), max_size=12))
def test_any_rechunking_gives_the_same_facts(cuts: list[int]) -> None:
    for make, writes in (
        (lambda r: OpenAIStreamParser(r, chat=True, redact=Redactor()), azure_writes()),
        (lambda r: AnthropicStreamParser(r, redact=Redactor()), anthropic_basic()),
    ):
        data = b"".join(w[1].encode() for w in writes)
        rec = _rec()
        p = make(rec)
        for i, piece in enumerate(_split(data, cuts)):
            if p.feed(piece, i + 1):
                break
        p.finish(10_000)
        assert rec.ok
        assert "".join(e.text for e in rec.events) in ("Hello world", "Hello there, friend")
        assert rec.completion_tokens in (4, 5)
