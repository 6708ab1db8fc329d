"""The OpenAI Responses API (``--api responses``, loadgen.endpoints.responses_stream): body, stream, whole body."""

from __future__ import annotations

import json

import pytest

from loadgen.core.errors import ProtocolError
from loadgen.core.metrics import compute
from loadgen.core.redact import Redactor
from loadgen.core.types import RequestRecord
from loadgen.endpoints.responses_stream import (
    ResponsesStreamParser,
    apply_responses_body,
    responses_body,
    responses_input,
)

MS = 1_000_000


def _ev(obj: dict) -> bytes:
    return f"event: {obj['type']}\ndata: {json.dumps(obj)}\n\n".encode()


def _rec() -> RequestRecord:
    return RequestRecord(index=0, phase="measure", scheduled_ns=0, sent_ns=0)


def test_body_carries_the_history_as_items_and_flat_tools() -> None:
    history = (
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Oslo"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "rain"},
        {"role": "user", "content": "and tomorrow?"},
    )  # fmt: skip
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
    body = responses_body("m", "", history, 32, stream=True, extra={"tools": tools, "temperature": 0})
    assert body["max_output_tokens"] == 32 and body["stream"] is True and "max_tokens" not in body
    assert body["input"][2] == {"type": "function_call", "call_id": "call_1", "name": "get_weather",
                                "arguments": '{"city":"Oslo"}'}  # fmt: skip
    assert body["input"][3] == {"type": "function_call_output", "call_id": "call_1", "output": "rain"}
    assert body["tools"] == [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}]
    assert responses_input([{"role": "user", "content": "hi"}]) == [{"role": "user", "content": "hi"}]
    assert responses_body("m", "hello", None, None, stream=False, extra={})["input"] == [
        {"role": "user", "content": "hello"}
    ]


def test_stream_text_reasoning_and_usage() -> None:
    rec = _rec()
    p = ResponsesStreamParser(rec, redact=Redactor())
    assert not p.feed(_ev({"type": "response.created", "response": {"status": "in_progress"}}), 1 * MS)
    assert not p.feed(_ev({"type": "response.reasoning_summary_text.delta", "item_id": "r", "delta": "think"}), 10 * MS)
    for i, t in enumerate(("Hel", "lo", " you")):
        assert not p.feed(_ev({"type": "response.output_text.delta", "item_id": "m", "delta": t}), (20 + 5 * i) * MS)
    done = {"type": "response.completed", "response": {"status": "completed", "usage": {
        "input_tokens": 12, "output_tokens": 4, "output_tokens_details": {"reasoning_tokens": 1},
        "input_tokens_details": {"cached_tokens": 8}}}}  # fmt: skip
    assert p.feed(_ev(done), 40 * MS)
    p.finish(41 * MS)
    assert rec.ok and rec.finish_reason == "stop" and rec.end_ns == 40 * MS
    assert (rec.completion_tokens, rec.prompt_tokens, rec.reasoning_tokens, rec.cached_prompt_tokens) == (4, 12, 1, 8)
    assert rec.answer_text == "Hello you" and rec.text == "thinkHello you"
    m = compute(rec)
    assert m.ttft_ns == 10 * MS and m.time_to_first_answer_token_ns == 20 * MS and m.output_tokens == 4


def test_stream_function_call_in_the_chat_form() -> None:
    rec = _rec()
    p = ResponsesStreamParser(rec, redact=Redactor())
    item = {"type": "function_call", "id": "fc_1", "call_id": "call_9", "name": "get_weather", "arguments": ""}
    chunks = [
        _ev({"type": "response.output_item.added", "output_index": 0, "item": item}),
        _ev({"type": "response.function_call_arguments.delta", "item_id": "fc_1", "delta": '{"city":'}),
        _ev({"type": "response.function_call_arguments.delta", "item_id": "fc_1", "delta": '"Oslo"}'}),
        _ev({"type": "response.output_item.done", "item": {**item, "arguments": '{"city":"Oslo"}'}}),
        _ev({"type": "response.completed", "response": {"usage": {"input_tokens": 5, "output_tokens": 6}}}),
    ]
    for i, c in enumerate(chunks):
        p.feed(c, (10 + i) * MS)
    p.finish(20 * MS)
    assert rec.ok and rec.finish_reason == "tool_calls"
    assert rec.tool_calls == [
        {"id": "call_9", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Oslo"}'}}
    ]
    assert len(rec.events) == 2 and not any(e.answer for e in rec.events)  # tool-call tokens, not answer


def test_stream_ends_incomplete_failed_or_cut() -> None:
    rec = _rec()
    p = ResponsesStreamParser(rec, redact=Redactor())
    p.feed(_ev({"type": "response.output_text.delta", "delta": "x"}), MS)
    p.feed(_ev({"type": "response.incomplete", "response": {"incomplete_details": {"reason": "max_output_tokens"},
                                                           "usage": {"output_tokens": 1}}}), 2 * MS)  # fmt: skip
    p.finish(3 * MS)
    assert rec.ok and rec.finish_reason == "length"
    rec = _rec()
    p = ResponsesStreamParser(rec, redact=Redactor())
    assert p.feed(_ev({"type": "response.failed", "response": {"error": {"message": "overloaded sk-secret"}}}), MS)
    assert rec.error_kind == "stream_error" and "overloaded" in (rec.error_detail or "")
    rec = _rec()
    p = ResponsesStreamParser(rec, redact=Redactor())
    p.feed(_ev({"type": "response.output_text.delta", "delta": "x"}), MS)
    p.finish(2 * MS)  # EOF before response.completed
    assert rec.error_kind == "incomplete_stream"
    with pytest.raises(ProtocolError):
        ResponsesStreamParser(_rec(), redact=Redactor()).feed(b"data: {not json\n\n", MS)


def test_whole_body() -> None:
    rec = _rec()
    apply_responses_body(rec, {"status": "completed", "output": [
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "hm "}]},
        {"type": "message", "content": [{"type": "output_text", "text": "Hi there"}]},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"}],
        "usage": {"input_tokens": 3, "output_tokens": 5}}, redact=Redactor())  # fmt: skip
    assert rec.ok and rec.body_text == "hm Hi there" and rec.completion_tokens == 5
    assert rec.tool_calls is not None and rec.tool_calls[0]["id"] == "c1" and rec.finish_reason == "tool_calls"
