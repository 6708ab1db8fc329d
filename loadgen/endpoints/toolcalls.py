"""Tool calls as the APIs carry them: a reply's calls read into a record, a history's calls written back.

A record keeps a reply's tool calls in the OpenAI chat form, whatever the API
(:attr:`loadgen.core.types.RequestRecord.tool_calls`): ``{"id", "type": "function", "function": {"name",
"arguments"}}`` with ``arguments`` the JSON text the model wrote. A session history carries them back in
that form (an assistant message with ``tool_calls``, each result a ``tool`` message with its
``tool_call_id``: https://platform.openai.com/docs/guides/function-calling); the Anthropic endpoint writes
the same history as ``tool_use`` / ``tool_result`` content blocks (:func:`anthropic_messages`,
https://docs.anthropic.com/en/docs/build-with-claude/tool-use) and a ``--tools`` list in its own form
(:func:`anthropic_tools`).

Streamed OpenAI calls come in pieces (``delta.tool_calls[i]``: ``index``, the ``id`` and the function's
``name`` on the first piece, ``arguments`` in fragments): :func:`add_openai_delta` joins them by ``index``.
Streamed Anthropic calls: a ``content_block_start`` of type ``tool_use`` (``id``, ``name``), then
``input_json_delta`` fragments of its input (:func:`start_anthropic_call`, :func:`add_anthropic_input`).
"""

from __future__ import annotations

from typing import Any

import orjson

__all__ = [
    "add_anthropic_input",
    "add_openai_delta",
    "anthropic_messages",
    "anthropic_tools",
    "make_call",
    "openai_message_calls",
    "read_tools_file",
    "start_anthropic_call",
]

MAX_CALLS = 128
"""The most tool calls one reply keeps (a server that streams endless calls cannot grow a record without bound)."""


def _call(call_id: object, name: object, arguments: object) -> dict[str, Any]:
    return {
        "id": call_id if isinstance(call_id, str) else "",
        "type": "function",
        "function": {
            "name": name if isinstance(name, str) else "",
            "arguments": arguments if isinstance(arguments, str) else "",
        },
    }


def make_call(call_id: object, name: object, arguments: object) -> dict[str, Any]:
    """One tool call in the record's chat form (strings kept, anything else empty)."""
    return _call(call_id, name, arguments)


def _dict(v: object) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def add_openai_delta(calls: list[dict[str, Any]] | None, items: object) -> list[dict[str, Any]] | None:
    """``calls`` with one stream chunk's ``delta.tool_calls`` pieces joined in (by their ``index``)."""
    if not isinstance(items, list):
        return calls
    out = calls if calls is not None else []
    for pos, item in enumerate(items):
        if not isinstance(item, dict):
            continue
        i = item.get("index", pos)
        if not isinstance(i, int) or i < 0 or i >= MAX_CALLS:
            continue
        while len(out) <= i:
            out.append(_call("", "", ""))
        fn = _dict(item.get("function"))
        call = out[i]
        if isinstance(item.get("id"), str) and item["id"]:
            call["id"] = item["id"]
        if isinstance(fn.get("name"), str) and fn["name"]:
            call["function"]["name"] = fn["name"]
        if isinstance(fn.get("arguments"), str):
            call["function"]["arguments"] += fn["arguments"]
    return out or calls


def openai_message_calls(msg: dict[str, Any]) -> list[dict[str, Any]] | None:
    """The tool calls of a whole (non-streamed) chat ``message``; None when it has none."""
    items = msg.get("tool_calls")
    if not isinstance(items, list):
        return None
    out = []
    for item in items[:MAX_CALLS]:
        if isinstance(item, dict):
            fn = _dict(item.get("function"))
            out.append(_call(item.get("id"), fn.get("name"), fn.get("arguments")))
    return out or None


def start_anthropic_call(calls: list[dict[str, Any]] | None, block: dict[str, Any]) -> list[dict[str, Any]]:
    """``calls`` with a ``tool_use`` content block begun (its input, when the block carries it whole, as JSON)."""
    out = calls if calls is not None else []
    if len(out) < MAX_CALLS:
        given = block.get("input")
        args = orjson.dumps(given).decode() if isinstance(given, dict) and given else ""
        out.append(_call(block.get("id"), block.get("name"), args))
    return out


def add_anthropic_input(calls: list[dict[str, Any]] | None, partial_json: str) -> None:
    """An ``input_json_delta`` fragment added to the last begun ``tool_use`` call."""
    if calls:
        calls[-1]["function"]["arguments"] += partial_json


def _input_of(arguments: str) -> dict[str, Any]:
    try:
        v = orjson.loads(arguments) if arguments else {}
    except orjson.JSONDecodeError:
        return {"input": arguments}
    return v if isinstance(v, dict) else {"input": v}


def anthropic_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A chat history in the OpenAI form (system messages already taken out) as Messages API messages: an
    assistant's ``tool_calls`` become ``tool_use`` blocks after its text, consecutive ``tool`` messages one
    user message of ``tool_result`` blocks (the API wants every result of a reply in the next user turn)."""
    out: list[dict[str, Any]] = []
    for m in messages:
        role = m.get("role")
        if role == "assistant" and m.get("tool_calls"):
            blocks: list[dict[str, Any]] = []
            if m.get("content"):
                blocks.append({"type": "text", "text": str(m["content"])})
            for c in m["tool_calls"]:
                fn = c.get("function") or {}
                blocks.append({"type": "tool_use", "id": c.get("id", ""), "name": fn.get("name", ""),
                               "input": _input_of(str(fn.get("arguments") or ""))})  # fmt: skip
            out.append({"role": "assistant", "content": blocks})
        elif role == "tool":
            block = {
                "type": "tool_result",
                "tool_use_id": m.get("tool_call_id", ""),
                "content": str(m.get("content") or ""),
            }
            last = out[-1] if out else None
            if (
                last is not None
                and last["role"] == "user"
                and isinstance(last["content"], list)
                and all(b.get("type") == "tool_result" for b in last["content"])
            ):
                last["content"].append(block)
            else:
                out.append({"role": "user", "content": [block]})
        else:
            out.append(dict(m))
    return out


def anthropic_tools(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``--tools`` (OpenAI form: ``{"type": "function", "function": {"name", "description", "parameters"}}``)
    in the Messages API's form (``name``, ``description``, ``input_schema``); entries already in it pass."""
    out = []
    for t in tools:
        fn = t.get("function") if t.get("type") == "function" and isinstance(t.get("function"), dict) else None
        if fn is None:
            out.append(t)
            continue
        item = {
            "name": fn.get("name", ""),
            "input_schema": fn.get("parameters") or {"type": "object", "properties": {}},
        }
        if fn.get("description"):
            item["description"] = fn["description"]
        out.append(item)
    return out


MAX_TOOLS_BYTES = 4 * 1024 * 1024


def read_tools_file(path: str) -> list[dict[str, Any]]:
    """``--tools FILE``: a JSON list of tool schemas sent with every chat request (``tools``), each
    ``{"type": "function", "function": {"name": ..., "parameters": {...}}}`` (the OpenAI form; the
    Anthropic endpoint converts it, :func:`anthropic_tools`). Raises InputFileError naming the entry."""
    from loadgen.core.errors import InputFileError

    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_TOOLS_BYTES + 1)
    except OSError as exc:
        raise InputFileError(path, None, None, exc.strerror or str(exc)) from None
    if len(raw) > MAX_TOOLS_BYTES:
        raise InputFileError(path, None, None, f"over {MAX_TOOLS_BYTES >> 20} MiB: not a tool list")
    try:
        tools = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InputFileError(path, None, None, f"not valid JSON ({exc})") from None
    if not isinstance(tools, list) or not tools:
        raise InputFileError(path, None, None, "expected a non-empty JSON list of tools")
    for i, t in enumerate(tools):
        fn = t.get("function") if isinstance(t, dict) else None
        if not isinstance(t, dict) or t.get("type") != "function" or not isinstance(fn, dict):
            raise InputFileError(path, None, f"[{i}]", 'expected {"type": "function", "function": {...}}')
        if not isinstance(fn.get("name"), str) or not fn["name"]:
            raise InputFileError(path, None, f"[{i}].function.name", "missing or not a string")
        if "parameters" in fn and not isinstance(fn["parameters"], dict):
            raise InputFileError(path, None, f"[{i}].function.parameters", "not a JSON object (a JSON schema)")
    return tools
