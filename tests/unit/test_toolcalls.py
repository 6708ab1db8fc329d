"""Tool calls read from each API's replies and written back in each API's history form (issue 32 item 1),
and the recorded calls of the session traces (kv-cache-tester ``stop: tool_use``, TraceLab ``tools[]``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from loadgen.core.errors import InputFileError
from loadgen.core.redact import Redactor
from loadgen.core.types import RequestRecord, RequestSpec
from loadgen.endpoints.anthropic import AnthropicConfig, AnthropicEndpoint, AnthropicStreamParser
from loadgen.endpoints.openai_stream import apply_body
from loadgen.endpoints.toolcalls import add_openai_delta, anthropic_messages, read_tools_file
from loadgen.workload.session_model import RecordedCall, Session, SessionHistory, SessionPrompter, Turn
from loadgen.workload.session_sources import load_sessions, parse_session_source

SHARED = Path(__file__).resolve().parents[3] / "shared" / "traces" / "sessions"


def _rec() -> RequestRecord:
    return RequestRecord(index=0, phase="measure", scheduled_ns=0, sent_ns=0)


def test_openai_stream_pieces_join_by_index_and_a_whole_body_keeps_its_calls() -> None:
    calls = add_openai_delta(None, [{"index": 0, "id": "c1", "function": {"name": "f", "arguments": '{"a"'}}])
    calls = add_openai_delta(calls, [{"index": 1, "id": "c2", "function": {"name": "g", "arguments": ""}}])
    calls = add_openai_delta(calls, [{"index": 0, "function": {"arguments": ": 1}"}}, "junk"])
    assert calls == [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}},
        {"id": "c2", "type": "function", "function": {"name": "g", "arguments": ""}},
    ]
    rec = _rec()
    body = {"choices": [{"message": {"content": None, "tool_calls": [
        {"id": "x", "type": "function", "function": {"name": "h", "arguments": "{}"}}]}, "finish_reason": "tool_calls"}]}  # fmt: skip
    apply_body(rec, body, chat=True, redact=Redactor())
    assert rec.tool_calls == [{"id": "x", "type": "function", "function": {"name": "h", "arguments": "{}"}}]


def _sse(name: str, obj: Any) -> bytes:
    return f"event: {name}\ndata: {json.dumps(obj)}\n\n".encode()


def test_anthropic_tool_use_blocks_become_the_records_calls() -> None:
    rec = _rec()
    p = AnthropicStreamParser(rec, redact=Redactor())
    events = [
        ("message_start", {"type": "message_start", "message": {"usage": {"input_tokens": 9, "output_tokens": 1}}}),
        ("content_block_start", {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Let me look."}}),
        ("content_block_start", {"type": "content_block_start", "index": 1,
                                 "content_block": {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}}}),
        ("content_block_delta", {"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": '{"city": '}}),
        ("content_block_delta", {"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": '"Oslo"}'}}),
        ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 12}}),
        ("message_stop", {"type": "message_stop"}),
    ]  # fmt: skip
    for i, (name, obj) in enumerate(events):
        p.feed(_sse(name, obj), (i + 1) * 1_000_000)
    p.finish(10_000_000)
    assert rec.ok and rec.finish_reason == "tool_use" and rec.answer_text == "Let me look."
    assert rec.tool_calls == [{"id": "toolu_1", "type": "function",
                               "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}]  # fmt: skip


def test_anthropic_body_writes_the_history_as_tool_use_and_tool_result_blocks() -> None:
    history: list[dict[str, Any]] = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "t1", "type": "function", "function": {"name": "w", "arguments": '{"city": "Oslo"}'}},
            {"id": "t2", "type": "function", "function": {"name": "w", "arguments": '{"city": "Bergen"}'}}]},
        {"role": "tool", "tool_call_id": "t1", "content": "sunny"},
        {"role": "tool", "tool_call_id": "t2", "content": "rain"},
    ]  # fmt: skip
    ep = AnthropicEndpoint(AnthropicConfig(base_url="http://127.0.0.1:9", model="m", extra_body={
        "tools": [{"type": "function", "function": {"name": "w", "parameters": {"type": "object"}}}]}))  # fmt: skip
    body = ep.build_body(RequestSpec(index=0, prompt="", messages=tuple(history), requested_output_tokens=5))
    assert body["system"] == "be brief"
    assert body["messages"] == [
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": [
            {"type": "tool_use", "id": "t1", "name": "w", "input": {"city": "Oslo"}},
            {"type": "tool_use", "id": "t2", "name": "w", "input": {"city": "Bergen"}}]},
        {"role": "user", "content": [  # both results in the one next user turn, as the API wants
            {"type": "tool_result", "tool_use_id": "t1", "content": "sunny"},
            {"type": "tool_result", "tool_use_id": "t2", "content": "rain"}]},
    ]  # fmt: skip
    assert body["tools"] == [{"name": "w", "input_schema": {"type": "object"}}]
    assert anthropic_messages([{"role": "user", "content": "x"}]) == [{"role": "user", "content": "x"}]


def test_history_completions_flattening_and_recorded_result_sizes() -> None:
    s = Session("s", (Turn(output_tokens=4, new_tokens=5, calls=(RecordedCall("grep", 3, 10), RecordedCall("ls", 2, 30))),
                      Turn(output_tokens=4, new_tokens=40, role="tool")))  # fmt: skip
    h = SessionHistory(s, SessionPrompter(api="completions", salt_sessions=False))
    h.spec(0, 0)
    h.reply(0, "ok", None)  # should have called two tools: the recorded ones stand in
    spec = h.spec(1, 1)
    assert h.tool_calls_missing == 1
    results = [m for m in h.messages if m["role"] == "tool"]
    assert [len(m["content"].split()) for m in results] == [10, 30]  # the recorded sizes
    assert "grep({" in spec.prompt and "None" not in spec.prompt  # flattened for the completions API


@pytest.mark.skipif(not SHARED.exists(), reason="shared session traces not present")
def test_the_traces_recorded_tool_calls_are_read() -> None:
    weka, _ = load_sessions(
        parse_session_source(f"{SHARED / 'kvcache_tester_claude_code_sessions.jsonl'},max_sessions=3")
    )
    turns = [t for s in weka for t in s.turns]
    called = [k for s in weka for k, t in enumerate(s.turns) if t.calls]
    assert called and all(len(t.calls) == 1 for t in turns if t.calls)
    # every recorded tool result follows a reply that called a tool (the format records stop: tool_use)
    for s in weka:
        for k, t in enumerate(s.turns[1:], 1):
            if t.role == "tool" and not t.reset:
                assert s.turns[k - 1].calls, (s.session_id, k)
    lab, _ = load_sessions(parse_session_source(str(SHARED / "tracelab_example_round_trace.jsonl")))
    calls = [(k, t) for s in lab for k, t in enumerate(s.turns) if t.calls]
    assert calls and any(c.name != "tool" for _, t in calls for c in t.calls)  # TraceLab names its tools
    for s in lab:
        for k, t in enumerate(s.turns[:-1]):
            nxt = s.turns[k + 1]
            if t.calls and nxt.role == "tool" and all(c.result_tokens for c in t.calls):
                assert abs(sum(c.result_tokens or 0 for c in t.calls) - (nxt.new_tokens or 0)) <= len(t.calls)


def test_synthetic_tool_share_and_tools_file_errors(tmp_path: Path) -> None:
    sessions, _ = load_sessions(parse_session_source("synthetic,turns=6,tools=0.5"), 20)
    tool_turns = [(s, k) for s in sessions for k, t in enumerate(s.turns) if t.role == "tool"]
    assert tool_turns and all(s.turns[k - 1].calls and k > 0 for s, k in tool_turns)
    f = tmp_path / "tools.json"
    f.write_text(json.dumps([{"type": "function", "function": {"name": "w", "parameters": {"type": "object"}}}]))
    assert read_tools_file(str(f))[0]["function"]["name"] == "w"
    f.write_text(json.dumps([{"type": "function", "function": {"parameters": {}}}]))
    with pytest.raises(InputFileError, match=r"\[0\]\.function\.name"):
        read_tools_file(str(f))


def test_a_loadgen_file_records_its_calls_and_recorded_replies_replay_them(tmp_path: Path) -> None:
    f = tmp_path / "agent.jsonl"
    turns = [{"text": "weather?", "output_tokens": 4, "reply_text": "",
              "calls": [{"name": "get_weather", "arguments": '{"city": "Oslo"}', "id": "call_9", "result_tokens": 3}]},
             {"text": "sunny today here", "output_tokens": 4, "role": "tool"}]  # fmt: skip
    f.write_text(json.dumps({"session_id": "a", "turns": turns}) + "\n")
    (s,), _ = load_sessions(parse_session_source(f"{f},salt=off,replies=recorded"))
    h = SessionHistory(s, SessionPrompter(api="chat", salt_sessions=False, use_recorded_replies=True))
    h.spec(0, 0)
    h.reply(0, "the model's own words", None)  # recorded replies: the file's, with its call
    spec = h.spec(1, 1)
    assert spec.messages is not None and list(spec.messages[1:]) == [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_9", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}]},
        {"role": "tool", "tool_call_id": "call_9", "content": "sunny today here"},
    ]  # fmt: skip
    assert h.tool_calls_missing == 0  # a recorded reply is not the model's miss
    f.write_text(json.dumps({"session_id": "a", "turns": [{**turns[0], "calls": [{"arguments": "{}"}]}]}) + "\n")
    with pytest.raises(InputFileError, match=r"turns\[0\]\.calls\[0\]\.name"):
        load_sessions(parse_session_source(str(f)))
