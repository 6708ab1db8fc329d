"""Tool calls round-trip in a session (issue 32 item 1), against a scripted server that checks the exact
message list of every turn.

A 4-turn agent session (loadgen's session file): the user asks; the server answers with a tool call
(streamed in pieces: id and name, then the arguments in two fragments); the next turn is the tool's
result; then a user turn whose reply calls two tools at once, answered by two results. The server fails
any turn whose messages are not what the chat API wants: the assistant message keeps its ``tool_calls``
(content null), each result is a ``tool`` message with its call's ``tool_call_id``. Before, the call was
flattened into the assistant text (``get_weather{"city":"Oslo"}``) and the result sent as a ``user``
message with no id. The same session against a server that never calls a tool counts the two missing
calls and still sends the recorded structure.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.fixtures.cli_proc import cli_run
from tests.fixtures.recording_server import RecordingServer, http, sse

HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
TURNS: list[dict[str, Any]] = [
    {"text": "What is the weather in Oslo and Bergen?", "output_tokens": 8},
    {"text": "sunny 21 degrees", "output_tokens": 8, "role": "tool", "delay_s": 0.01},
    {"text": "And tomorrow, both cities?", "output_tokens": 8, "delay_s": 0.01},
    {"text": "rain 12 degrees cloudy 14 degrees", "output_tokens": 8, "role": "tool", "delay_s": 0.01},
]
CALLS = {  # the server's calls, by turn
    0: [("call_a", "get_weather", '{"city": "Oslo"}')],
    2: [("call_b", "get_forecast", '{"city": "Oslo"}'), ("call_c", "get_forecast", '{"city": "Bergen"}')],
}


def _tool_stream(calls: list[tuple[str, str, str]]) -> bytes:
    out = HEAD + sse({"choices": [{"index": 0, "delta": {"role": "assistant", "content": None}}]})
    for i, (cid, name, args) in enumerate(calls):
        out += sse({"choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": i, "id": cid, "type": "function", "function": {"name": name, "arguments": ""}}]}}]})  # fmt: skip
        for part in (args[: len(args) // 2], args[len(args) // 2 :]):
            out += sse(
                {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": i, "function": {"arguments": part}}]}}]}
            )
    out += sse({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})
    return out + b"data: [DONE]\n\n"


def _text_stream(text: str) -> bytes:
    out = HEAD
    for w in text.split(" "):
        out += sse({"choices": [{"index": 0, "delta": {"content": w + " "}}]})
    out += sse({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    return out + b"data: [DONE]\n\n"


def _expected(turn: int, calls: dict[int, list[tuple[str, str, str]]], replies: dict[int, str]) -> list[dict[str, Any]]:
    """The messages turn ``turn`` must send: the history with its tool calls, then its own message(s)."""
    msgs: list[dict[str, Any]] = []
    for k in range(turn + 1):
        t = TURNS[k]
        if t.get("role") == "tool":
            ids = [c[0] for c in calls[k - 1]]
            words = t["text"].split()
            for j, cid in enumerate(ids):
                part = " ".join(words[j * len(words) // len(ids) : (j + 1) * len(words) // len(ids)])
                msgs.append({"role": "tool", "tool_call_id": cid, "content": part})
        else:
            msgs.append({"role": "user", "content": t["text"]})
        if k == turn:
            break
        if k in calls:
            msgs.append({"role": "assistant", "content": None, "tool_calls": [
                {"id": cid, "type": "function", "function": {"name": n, "arguments": a}} for cid, n, a in calls[k]]})  # fmt: skip
        else:
            msgs.append({"role": "assistant", "content": replies[k]})
    return msgs


def _session_file(tmp_path: Path) -> Path:
    f = tmp_path / "agent.jsonl"
    f.write_text(json.dumps({"session_id": "agent-1", "turns": TURNS}) + "\n")
    return f


def test_a_tool_using_session_sends_the_exact_message_list_on_every_turn(tmp_path: Path) -> None:
    replies = {1: "It is sunny in Oslo. ", 3: "Rain in Oslo, clouds in Bergen. "}
    wrong: list[tuple[int, Any]] = []

    def respond(n: int, req: dict[str, Any]) -> bytes:
        got = json.loads(req["body"])["messages"]
        want = _expected(n, CALLS, replies)
        if got != want:
            wrong.append((n, got))
            return http("400 Bad Request", b'{"error": {"message": "messages do not follow the tool-call protocol"}}')
        return _tool_stream(CALLS[n]) if n in CALLS else _text_stream(replies[n].strip())

    out = tmp_path / "run"
    with RecordingServer(respond) as srv:
        p = cli_run("run", "--endpoint", srv.url, "--api", "chat", "--sessions", f"{_session_file(tmp_path)},salt=off",
                    "--rate", "1", "--requests", "1", "--no-preflight", "--quiet", out=out)  # fmt: skip
    assert p.returncode in (0, 1), p.stdout[-3000:] + p.stderr[-3000:]
    assert wrong == [], json.dumps(wrong, indent=1)[:3000]
    recs = [json.loads(x) for x in (out / "requests.jsonl").read_text().splitlines()]
    assert len(recs) == 4 and all(r["status"] == "ok" for r in recs), recs
    tc = json.loads((out / "result.json").read_text())["sessions"]["tool_calls"]
    assert tc == {"replies_with_calls": 2, "missing": 0, "unexpected": 0}, tc


def test_replies_that_should_call_a_tool_and_do_not_are_counted_and_the_structure_kept(tmp_path: Path) -> None:
    seen: list[list[dict[str, Any]]] = []

    def respond(n: int, req: dict[str, Any]) -> bytes:
        seen.append(json.loads(req["body"])["messages"])
        return _text_stream("no tools here")

    out = tmp_path / "run"
    with RecordingServer(respond) as srv:
        p = cli_run("run", "--endpoint", srv.url, "--api", "chat", "--sessions", f"{_session_file(tmp_path)},salt=off",
                    "--rate", "1", "--requests", "1", "--no-preflight", "--quiet", out=out)  # fmt: skip
    assert p.returncode in (0, 1), p.stdout[-3000:] + p.stderr[-3000:]
    tc = json.loads((out / "result.json").read_text())["sessions"]["tool_calls"]
    assert tc == {"replies_with_calls": 0, "missing": 2, "unexpected": 0}, tc
    last = seen[3]
    # the recorded call stood in: an assistant message with one call, answered by one tool message by its id
    assistant = [m for m in last if m["role"] == "assistant"]
    assert assistant[0]["tool_calls"][0]["id"] == last[2]["tool_call_id"] and last[2]["role"] == "tool"
    assert assistant[0]["content"] == "no tools here "  # the actual text stays, beside the stand-in call
    assert [m["role"] for m in last] == ["user", "assistant", "tool", "assistant", "user", "assistant", "tool"]
