"""The OpenAI Responses API (``--api responses``), sans-IO: the request body, its event stream and whole body.

Request (https://platform.openai.com/docs/api-reference/responses/create): ``POST {root}/responses`` with
``model``, ``input`` (the chat messages; a history's tool calls as ``function_call`` items and their
results as ``function_call_output`` items: :func:`responses_input`), ``max_output_tokens`` and
``stream``; ``--tools`` in the flat form (:func:`responses_tools`).

Stream (https://platform.openai.com/docs/api-reference/responses-streaming): typed events, each event's
``data`` a JSON object whose ``type`` says what it is. Token-bearing, stamped at arrival like chat deltas
(:mod:`loadgen.core.metrics`): ``response.output_text.delta`` and ``response.refusal.delta`` (answer
content), ``response.reasoning_text.delta`` and ``response.reasoning_summary_text.delta`` (reasoning),
``response.function_call_arguments.delta`` (a tool call's arguments). A ``function_call`` item
(``response.output_item.added`` / ``.done``) gives a call its ``call_id`` and ``name``; the record keeps
the calls in the chat form (:mod:`loadgen.endpoints.toolcalls`), so a session history carries them back
by the same rules. ``response.completed`` ends the stream cleanly with the usage (``output_tokens``:
the output count; ``input_tokens``, ``output_tokens_details.reasoning_tokens``,
``input_tokens_details.cached_tokens``); ``response.incomplete`` ends it at ``max_output_tokens``
(finish reason ``length``) or a content filter (``filtered``); ``response.failed`` and ``error`` events
are a ``stream_error``. Nothing else ends it: EOF first is an ``incomplete_stream``. No continuous usage:
the tokens of each delta are estimated from its characters (``itl_estimated``), as a chat stream's are
without it.
"""

from __future__ import annotations

from typing import Any

import orjson

from loadgen.core.errors import ProtocolError
from loadgen.core.redact import Redactor
from loadgen.core.types import RequestRecord, TokenEvent
from loadgen.endpoints.http import fail, settle
from loadgen.endpoints.stream_reader import MAX_EVENT_BYTES, StreamReader, take_token_details
from loadgen.endpoints.toolcalls import MAX_CALLS, make_call

__all__ = ["ResponsesStreamParser", "apply_responses_body", "responses_body", "responses_input", "responses_tools"]

_ANSWER_DELTAS = frozenset({"response.output_text.delta", "response.refusal.delta"})
_OTHER_DELTAS = frozenset({
    "response.reasoning_text.delta",
    "response.reasoning_summary_text.delta",
    "response.function_call_arguments.delta",
})  # fmt: skip
_INCOMPLETE_REASONS = {"max_output_tokens": "length", "content_filter": "content_filter"}


def responses_input(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A chat history (OpenAI chat form) as Responses ``input`` items: messages as they are, an assistant's
    ``tool_calls`` as ``function_call`` items after its text, each ``tool`` message a ``function_call_output``."""
    out: list[dict[str, Any]] = []
    for m in messages:
        role = m.get("role")
        if role == "assistant" and m.get("tool_calls"):
            if m.get("content"):
                out.append({"role": "assistant", "content": str(m["content"])})
            for c in m["tool_calls"]:
                fn = c.get("function") or {}
                out.append({"type": "function_call", "call_id": c.get("id", ""), "name": fn.get("name", ""),
                            "arguments": str(fn.get("arguments") or "")})  # fmt: skip
        elif role == "tool":
            out.append({"type": "function_call_output", "call_id": m.get("tool_call_id", ""),
                        "output": str(m.get("content") or "")})  # fmt: skip
        else:
            content = m.get("content")
            if isinstance(content, list):  # content parts (--images): the Responses API's own part types
                content = [_part(p) for p in content]
            out.append({"role": role, "content": content if content is not None else ""})
    return out


def _part(p: object) -> object:
    """A chat content part as a Responses input part (text -> ``input_text``, ``image_url`` -> ``input_image``)."""
    if not isinstance(p, dict):
        return p
    if p.get("type") == "text":
        return {"type": "input_text", "text": p.get("text", "")}
    if p.get("type") == "image_url":
        url = p.get("image_url")
        return {"type": "input_image", "image_url": url.get("url", "") if isinstance(url, dict) else url}
    return p


def responses_tools(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``--tools`` (chat form ``{"type": "function", "function": {...}}``) in the Responses API's flat form
    (``{"type": "function", "name", "description", "parameters"}``); entries already flat pass."""
    out = []
    for t in tools:
        fn = t.get("function") if isinstance(t.get("function"), dict) else None
        out.append(t if fn is None else {"type": "function", **fn})
    return out


def responses_body(
    model: str | None,
    prompt: str,
    messages: tuple[dict[str, Any], ...] | None,
    max_tokens: int | None,
    *,
    stream: bool,
    extra: dict[str, Any],
) -> dict[str, Any]:
    """The request body of one Responses request (``extra``: ``--extra-body``, its ``tools`` made flat)."""
    body: dict[str, Any] = {"model": model}
    body["input"] = responses_input(list(messages)) if messages else [{"role": "user", "content": prompt}]
    if max_tokens is not None:
        body["max_output_tokens"] = max_tokens
    if stream:
        body["stream"] = True
    body.update(extra)
    if isinstance(body.get("tools"), list):
        body["tools"] = responses_tools(body["tools"])
    return body


def _take_usage(rec: RequestRecord, usage: object) -> None:
    if not isinstance(usage, dict):
        return
    out, inp = usage.get("output_tokens"), usage.get("input_tokens")
    if isinstance(out, int) and out >= 0:
        rec.completion_tokens = out
    if isinstance(inp, int) and inp >= 0:
        rec.prompt_tokens = inp
    take_token_details(rec, usage, "output_tokens_details", "input_tokens_details")


def _error_text(obj: dict[str, Any], redact: Redactor) -> str:
    err: dict[str, Any] = obj["error"] if isinstance(obj.get("error"), dict) else obj
    resp = obj.get("response")
    if isinstance(resp, dict) and isinstance(resp.get("error"), dict):
        err = resp["error"]
    return redact(str(err.get("message") or err.get("code") or err.get("type") or err))[:300]


class _Calls:
    """A reply's function calls by item id, in the record's chat form."""

    __slots__ = ("rec", "by_item")

    def __init__(self, rec: RequestRecord) -> None:
        self.rec = rec
        self.by_item: dict[str, dict[str, Any]] = {}

    def item(self, item: object) -> None:
        if not isinstance(item, dict) or item.get("type") != "function_call":
            return
        key = str(item.get("id") or item.get("call_id") or len(self.by_item))
        call = self.by_item.get(key)
        if call is None:
            calls = self.rec.tool_calls if self.rec.tool_calls is not None else []
            if len(calls) >= MAX_CALLS:
                return
            call = make_call(item.get("call_id"), item.get("name"), "")
            calls.append(call)
            self.rec.tool_calls = calls
            self.by_item[key] = call
        if isinstance(item.get("call_id"), str) and item["call_id"]:
            call["id"] = item["call_id"]
        if isinstance(item.get("name"), str) and item["name"]:
            call["function"]["name"] = item["name"]
        if isinstance(item.get("arguments"), str) and item["arguments"]:
            call["function"]["arguments"] = item["arguments"]  # the whole arguments, at .done

    def args(self, item_id: object, delta: str) -> None:
        call = self.by_item.get(str(item_id))
        if call is not None:
            call["function"]["arguments"] += delta


class ResponsesStreamParser(StreamReader):
    """Sans-IO reader of a Responses event stream into a record (the module docstring's rules), with the
    interface of :class:`~loadgen.endpoints.openai_stream.OpenAIStreamParser`: ``feed(chunk, t_ns)`` True
    once the stream ended or failed, ``finish(t_ns)`` at the end of the body."""

    __slots__ = ("calls",)
    END_EVENT = "response.completed"

    def __init__(self, record: RequestRecord, *, redact: Redactor, max_event_bytes: int = MAX_EVENT_BYTES) -> None:
        super().__init__(record, redact=redact, max_event_bytes=max_event_bytes)
        self.calls = _Calls(record)

    def feed(self, chunk: bytes, t_ns: int) -> bool:
        for ev in self.dec.feed(chunk):
            if self._apply(ev.data, t_ns):
                return True
        return False

    def _apply(self, data: str, t_ns: int) -> bool:
        if not data.strip() or data == "[DONE]":
            return False
        try:
            obj = orjson.loads(data)
        except orjson.JSONDecodeError:
            raise ProtocolError(f"malformed JSON in event: {self.redact(data)[:80]!r}") from None
        if not isinstance(obj, dict):
            raise ProtocolError("event data is not a JSON object")
        typ = obj.get("type")
        rec = self.record
        if typ in _ANSWER_DELTAS or typ in _OTHER_DELTAS:
            delta = obj.get("delta")
            if not isinstance(delta, str):
                raise ProtocolError(f"{typ}: delta is not a string")
            if delta:
                rec.events.append(TokenEvent(t_ns, delta, typ in _ANSWER_DELTAS))
                if typ == "response.function_call_arguments.delta":
                    self.calls.args(obj.get("item_id"), delta)
        elif typ in ("response.output_item.added", "response.output_item.done"):
            self.calls.item(obj.get("item"))
        elif typ in ("response.completed", "response.incomplete"):
            resp: dict[str, Any] = obj["response"] if isinstance(obj.get("response"), dict) else {}
            _take_usage(rec, resp.get("usage"))
            if typ == "response.completed":
                rec.finish_reason = "tool_calls" if rec.tool_calls else "stop"
            else:
                details = resp.get("incomplete_details")
                why = details.get("reason") if isinstance(details, dict) else None
                rec.finish_reason = _INCOMPLETE_REASONS.get(str(why), str(why or "incomplete"))
            rec.end_ns = t_ns
            self.done = True
            return True
        elif typ in ("response.failed", "error"):
            rec.end_ns = t_ns
            fail(rec, "stream_error", _error_text(obj, self.redact))
            self.failed = True
            return True
        return False


def apply_responses_body(record: RequestRecord, obj: object, *, redact: Redactor) -> None:
    """Fill ``record`` from a whole (``--no-stream``) Responses object: its output text (reasoning first),
    function calls, usage and status, or a ``stream_error``; then settle it."""
    if not isinstance(obj, dict):
        raise ProtocolError("response body is not a JSON object")
    if obj.get("error"):
        fail(record, "stream_error", _error_text(obj, redact))
        return
    output = obj.get("output") or []
    if not isinstance(output, list):
        raise ProtocolError("output is not a list")
    reasoning, answer = [], []
    calls = _Calls(record)
    for item in output:
        if not isinstance(item, dict):
            continue
        if item.get("type") == "message":
            for part in item.get("content") or []:
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    answer.append(part["text"])
                elif isinstance(part, dict) and isinstance(part.get("refusal"), str):
                    answer.append(part["refusal"])
        elif item.get("type") == "reasoning":
            for part in item.get("content") or item.get("summary") or []:
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    reasoning.append(part["text"])
        elif item.get("type") == "function_call":
            calls.item(item)
    record.body_text = "".join(reasoning) + "".join(answer)
    _take_usage(record, obj.get("usage"))
    if obj.get("status") == "incomplete":
        why = (obj.get("incomplete_details") or {}).get("reason")
        record.finish_reason = _INCOMPLETE_REASONS.get(str(why), str(why or "incomplete"))
    else:
        record.finish_reason = "tool_calls" if record.tool_calls else "stop"
    settle(record, streamed=False)
