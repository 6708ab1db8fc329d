"""The OpenAI-compatible answer, sans-IO: stream events and whole bodies into a record.

:class:`OpenAIStreamParser` reads an SSE stream (bytes and arrival times in) with the rules of
:func:`apply_stream_event` (one event -> facts on the record), shared with ``loadgen.locust``;
:func:`apply_body` reads a whole ``--no-stream`` body. No network here: the endpoint
(:mod:`loadgen.endpoints.openai`) feeds what it read.
"""

from __future__ import annotations

from typing import Any

import orjson

try:  # the ``fast`` extra: the common completions chunk decoded into a typed struct
    import msgspec
except ImportError:  # pragma: no cover - without the extra, orjson reads it (same rule)
    msgspec = None  # type: ignore[assignment]  # the module or None: the fast path chooses at import

from loadgen.core.errors import ProtocolError
from loadgen.core.redact import Redactor
from loadgen.core.types import RequestRecord, TokenEvent
from loadgen.endpoints.http import fail, settle
from loadgen.endpoints.stream_reader import MAX_EVENT_BYTES, StreamReader, take_token_details
from loadgen.endpoints.toolcalls import add_openai_delta, openai_message_calls

__all__ = ["MAX_USAGE_TOKENS", "OpenAIStreamParser", "apply_body", "apply_stream_event"]


def apply_body(record: RequestRecord, obj: object, *, chat: bool, redact: Redactor) -> None:
    """Fill ``record`` from a whole (non-streamed) answer ``obj`` (parsed JSON): its text,
    finish reason and usage, or a ``stream_error`` for an error object; then settle it
    (``ok`` or ``filtered``). Raises :class:`ProtocolError` on a malformed answer."""
    if not isinstance(obj, dict):
        raise ProtocolError("response body is not a JSON object")
    if obj.get("error"):
        _fail(record, "stream_error", _error_text(obj["error"], redact))
        return
    choices = obj.get("choices") or []
    if not isinstance(choices, list):
        raise ProtocolError("choices is not a list")
    text = ""
    if choices and isinstance(choices[0], dict):
        c = choices[0]
        if chat:
            msg = c.get("message") or {}
            if not isinstance(msg, dict):
                raise ProtocolError("choices[0].message is not an object")
            text = (_text_field(msg, "reasoning_content") or _text_field(msg, "reasoning")) + _text_field(
                msg, "content"
            )
            record.tool_calls = openai_message_calls(msg)
        else:
            text = _text_field(c, "text")
        record.finish_reason = c.get("finish_reason")
    record.body_text = text
    _take_usage(record, obj.get("usage"))
    settle(record, streamed=False)


def apply_stream_event(
    record: RequestRecord, data: str | bytes, t_ns: int, *, chat: bool, redact: Redactor
) -> str | None:
    """Apply one SSE event's ``data`` (text, or its UTF-8 bytes; arrived at ``t_ns``) to ``record``.

    Returns ``"done"`` at ``[DONE]``, ``"failed"`` on an in-band error object (the
    record is then a ``stream_error`` ending at ``t_ns``), else None. A token-bearing
    event (see :mod:`loadgen.core.metrics`) appends a :class:`TokenEvent`; usage is kept
    (cumulative: the last value wins); ``finish_reason`` is kept. Chunks with an empty
    ``choices`` (Azure's ``prompt_filter_results``, usage-only chunks), chunks without
    a ``delta`` (Azure's ``content_filter_results``/``content_filter_offsets``) and
    role-only deltas carry no token. Raises :class:`ProtocolError` on malformed JSON.
    """
    if data == "[DONE]" or data == b"[DONE]":
        return "done"
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError:
        if not data.strip():
            return None  # an empty event: no token
        text = data if isinstance(data, str) else data.decode("utf-8", "replace")
        raise ProtocolError(f"malformed JSON in event: {redact(text)[:80]!r}") from None
    if not isinstance(obj, dict):
        raise ProtocolError("event data is not a JSON object")
    err = obj.get("error")
    if err:
        record.end_ns = t_ns
        _fail(record, "stream_error", _error_text(err, redact))
        return "failed"
    usage = obj.get("usage")
    cont = None
    if usage:
        _take_usage(record, usage)
        cont = record.completion_tokens
    choices = obj.get("choices")
    if not choices:
        return None
    if not isinstance(choices, list):
        raise ProtocolError("choices is not a list")
    c = choices[0]
    if not isinstance(c, dict):
        raise ProtocolError("choices[0] is not an object")
    if chat:
        delta = c.get("delta") or {}
        if not isinstance(delta, dict):
            raise ProtocolError("choices[0].delta is not an object")
        content = _text_field(delta, "content")
        other = _text_field(delta, "reasoning_content") or _text_field(delta, "reasoning")
        tools = delta.get("tool_calls")
        if tools:
            other += _tool_text(tools)
            record.tool_calls = add_openai_delta(record.tool_calls, tools)
        if content or other or tools:
            record.events.append(TokenEvent(t_ns, other + content, bool(content), cont))
    else:
        text = _text_field(c, "text")
        if text:
            record.events.append(TokenEvent(t_ns, text, True, cont))
    _finish(record, c)
    return None


def _finish(record: RequestRecord, c: dict[str, Any]) -> None:
    """A chunk's ``finish_reason``, when it gives one, is the record's (the last one given wins)."""
    fr = c.get("finish_reason")
    if fr:
        record.finish_reason = fr


class OpenAIStreamParser(StreamReader):
    """Sans-IO reader of an OpenAI-style SSE stream into a record: bytes and arrival times in.

    ``feed(chunk, t_ns)`` takes one read (stamped with its arrival) and returns True
    once the stream has ended (``[DONE]``) or failed in-band; ``finish(t_ns)`` is
    called at the end of the body. A clean end is ``[DONE]``, or EOF after a
    ``finish_reason`` with no partial event pending; anything else is an
    ``incomplete_stream``. A clean end with ``finish_reason: "content_filter"`` is the
    ``filtered`` error kind; a stream whose tokens came in one burst (a buffering proxy,
    see :func:`loadgen.core.metrics.is_buffered`) is marked ``buffered``: its TPOT and ITL
    are not measurable (both by :func:`~loadgen.endpoints.http.settle`).
    """

    __slots__ = ("chat", "_plain", "_max")
    END_EVENT = "[DONE] or finish_reason"

    def __init__(
        self, record: RequestRecord, *, chat: bool, redact: Redactor, max_event_bytes: int = MAX_EVENT_BYTES
    ) -> None:
        super().__init__(record, redact=redact, max_event_bytes=max_event_bytes)
        self.chat = chat
        self._plain = True  # the decoder holds nothing (never fed, or clean after its last feed)
        self._max = max_event_bytes

    def feed(self, chunk: bytes, t_ns: int) -> bool:
        # The common read first: whole ``data:`` events, LF only (10: LF, 13: CR; an int's membership
        # is one memchr pass, several times cheaper than a bytes needle's).
        if self._plain and chunk.endswith(b"\n\n") and chunk.startswith(b"data:") and 13 not in chunk:
            if self.dec.at_start:
                self.dec.started()
            one = chunk[6:-2] if chunk[5] == 32 else chunk[5:-2]  # 32: the space after "data:"
            if 10 not in one and len(chunk) - 2 <= self._max:  # one whole data-only event
                if not self.chat and _COMPLETION_CHUNK(self.record, one, t_ns):
                    return False
                return self._apply_one(one, t_ns)
            events = _plain_data_events(chunk, self._max)
            if events is not None:  # whole data-only events, nothing pending
                return self._apply_many(events, t_ns)
        got = self._apply([ev.data for ev in self.dec.feed(chunk)], t_ns)
        self._plain = self.dec.clean()
        return got

    def _apply_one(self, data: bytes, t_ns: int) -> bool:
        """One event's ``data``: :func:`apply_stream_event`'s rules, the common chunk without
        its checks' calls (:func:`_apply_plain`), anything else by :func:`apply_stream_event`."""
        if data == b"[DONE]":
            self.done = True
            self.record.end_ns = t_ns
            return True
        try:
            obj = orjson.loads(data)
        except orjson.JSONDecodeError:
            obj = None
        if obj is not None and _apply_plain(self.record, obj, t_ns, self.chat):
            return False
        return self._apply([data], t_ns)

    def _apply_many(self, events: list[bytes], t_ns: int) -> bool:
        """Several whole events of one read (a client behind its reads gets them coalesced)."""
        chunk = None if self.chat else _COMPLETION_CHUNK
        rec = self.record
        for data in events:
            if chunk is not None and chunk(rec, data, t_ns):
                continue
            if self._apply_one(data, t_ns):
                return True
        return False

    def _apply(self, events: list[str] | list[bytes], t_ns: int) -> bool:
        rec = self.record
        for data in events:
            r = apply_stream_event(rec, data, t_ns, chat=self.chat, redact=self.redact)
            if r == "done":
                self.done = True
                rec.end_ns = t_ns
                break
            if r == "failed":
                self.failed = True
                break
        return self.done or self.failed

    def clean_eof(self) -> bool:
        """EOF after a ``finish_reason`` with no partial event pending is a clean end (no ``[DONE]``)."""
        return self.record.finish_reason is not None and not self.dec.pending


_fail = fail

_OK_DELTA_KEYS = frozenset({"content", "role"})


def _apply_plain(rec: RequestRecord, obj: object, t_ns: int, chat: bool) -> bool:
    """Apply the common chunk (a JSON object without ``error``; usage absent or the three plain
    counts; ``choices[0]`` with a string ``text``, or a ``delta`` of ``content``/``role`` only)
    as :func:`apply_stream_event` would, and return True; False, with ``rec`` untouched, for
    anything else (the caller then applies it by :func:`apply_stream_event`, its checks and errors)."""
    if type(obj) is not dict or obj.get("error"):
        return False
    usage = obj.get("usage")
    ct = pt = None
    if usage:
        if type(usage) is not dict or len(usage) > 3 or "completion_tokens_details" in usage:
            return False
        ct, pt = usage.get("completion_tokens"), usage.get("prompt_tokens")
        if type(ct) is not int or not 0 <= ct <= MAX_USAGE_TOKENS or (pt is not None and type(pt) is not int):
            return False
        if "prompt_tokens_details" in usage:
            return False
    choices = obj.get("choices")
    text: Any = ""
    fr = None
    if choices:
        if type(choices) is not list:
            return False
        c = choices[0]
        if type(c) is not dict:
            return False
        if chat:
            delta = c.get("delta")
            if delta:
                if type(delta) is not dict or not _OK_DELTA_KEYS.issuperset(delta):
                    return False
                text = delta.get("content")
        else:
            text = c.get("text")
        if text is None:
            text = ""
        elif type(text) is not str:
            return False
        fr = c.get("finish_reason")
    if ct is not None:
        rec.completion_tokens = ct
        if pt is not None:
            rec.prompt_tokens = pt
    if text:
        rec.events.append(TokenEvent(t_ns, text, True, ct))
    if fr:
        rec.finish_reason = fr
    return True


def _apply_completion_chunk(rec: RequestRecord, data: bytes, t_ns: int) -> bool:
    """:func:`_apply_plain` for the most common event of all, a completions chunk with its
    continuous usage (``{"choices": [{"text": str, "finish_reason": ...}], "usage": {3 plain
    counts}}`` and whatever other fields), in one call: True when applied; False, with ``rec``
    untouched, for anything else (the caller then applies it by the general rules: ``[DONE]``,
    bad JSON, errors, chat, unusual usage). The same checks in the same order as
    :func:`_apply_plain`, without its branches for the other shapes."""
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError:
        return False
    if type(obj) is not dict or obj.get("error"):
        return False
    usage = obj.get("usage")
    choices = obj.get("choices")
    if type(usage) is not dict or type(choices) is not list or not choices:
        return False  # no usage, or a usage-only chunk: the general fast path
    if len(usage) > 3 or "completion_tokens_details" in usage or "prompt_tokens_details" in usage:
        return False
    ct = usage.get("completion_tokens")
    pt = usage.get("prompt_tokens")
    if type(ct) is not int or not 0 <= ct <= MAX_USAGE_TOKENS or (pt is not None and type(pt) is not int):
        return False
    c = choices[0]
    if type(c) is not dict:
        return False
    text = c.get("text")
    if text is not None and type(text) is not str:
        return False
    rec.completion_tokens = ct
    if pt is not None:
        rec.prompt_tokens = pt
    if text:
        rec.events.append(TokenEvent(t_ns, text, True, ct))
    _finish(rec, c)
    return True


if msgspec is not None:

    class _Usage(msgspec.Struct, gc=False):  # no cycles: not tracked by the collector
        completion_tokens: int
        prompt_tokens: int | None = None
        completion_tokens_details: Any = msgspec.UNSET
        prompt_tokens_details: Any = msgspec.UNSET

    class _Choice(msgspec.Struct, gc=False):
        text: str | None = None
        finish_reason: Any = None

    class _Chunk(msgspec.Struct, gc=False):
        choices: list[_Choice] | None = None
        usage: _Usage | None = None
        error: Any = None

    _decode_chunk = msgspec.json.Decoder(_Chunk).decode
    # whatever the decoder rejects goes to the general rules, which name it: besides its own errors
    # msgspec raises RecursionError on deep nesting and UnicodeDecodeError on invalid UTF-8
    _NOT_A_CHUNK: tuple[type[Exception], ...] = (Exception,)
    _UNSET: msgspec.UnsetType = msgspec.UNSET


def _apply_completion_struct(rec: RequestRecord, data: bytes, t_ns: int) -> bool:
    """:func:`_apply_completion_chunk` with ``msgspec`` (the ``fast`` extra): the event decoded
    straight into the few fields read (a typed struct: the other fields skipped, the types checked
    by the decoder), ~40 % fewer instructions an event than ``orjson.loads`` into a dict and the
    checks on it. Whatever the struct cannot hold (another type, a usage with details, an error,
    a missing count) is not applied here: False, and the general rules take it, as there."""
    try:
        obj = _decode_chunk(data)
    except _NOT_A_CHUNK:
        return False
    usage = obj.usage
    choices = obj.choices
    if obj.error or usage is None or not choices:
        return False
    if usage.completion_tokens_details is not _UNSET or usage.prompt_tokens_details is not _UNSET:
        return False
    ct = usage.completion_tokens
    if not 0 <= ct <= MAX_USAGE_TOKENS:
        return False
    rec.completion_tokens = ct
    if usage.prompt_tokens is not None:
        rec.prompt_tokens = usage.prompt_tokens
    c = choices[0]
    if c.text:
        rec.events.append(TokenEvent(t_ns, c.text, True, ct))
    if c.finish_reason:
        rec.finish_reason = c.finish_reason
    return True


_COMPLETION_CHUNK = _apply_completion_struct if msgspec is not None else _apply_completion_chunk
"""How :meth:`OpenAIStreamParser.feed` applies the common completions chunk: with ``msgspec``
when it is installed, else with ``orjson`` (the same rule; ``tests/unit/test_stream_fast_path.py``
checks both against :func:`apply_stream_event`)."""


def _plain_data_events(chunk: bytes, max_event_bytes: int) -> list[bytes] | None:
    """The ``data`` of each event of ``chunk`` when it holds only whole one-line ``data:`` events
    (LF line ends, no other field, no comment, none over ``max_event_bytes``): what
    :class:`~loadgen.core.sse.SSEDecoder` would dispatch for it from a clean state, without decoding
    to text (orjson reads the UTF-8 bytes and rejects invalid ones). None: anything else (the
    decoder takes the chunk)."""
    pieces = chunk.split(b"\n\n")
    pieces.pop()  # what follows the last blank line: empty (the chunk ends with one)
    out = []
    for p in pieces:
        if p[:5] != b"data:" or b"\n" in p or len(p) > max_event_bytes:
            return None
        out.append(p[6:] if p[5:6] == b" " else p[5:])
    return out


MAX_USAGE_TOKENS = 1 << 22
"""A reported token count above this (4 Mi) is not believed: a protocol error."""


def _count(usage: dict[str, Any], name: str) -> int | None:
    """An integer token count of ``usage`` (anything else is ignored, as before); a negative or
    absurd one is a ProtocolError: per-token metrics allocate one slot per reported token."""
    v = usage.get(name)
    if not isinstance(v, int) or isinstance(v, bool):
        return None
    if not 0 <= v <= MAX_USAGE_TOKENS:
        raise ProtocolError(f"usage.{name} is not a plausible token count: {v}")
    return v


def _text_field(obj: dict[str, Any], name: str) -> str:
    """A text field of a choice or delta: "" when absent or null; ProtocolError when not a string."""
    v = obj.get(name)
    if v is None:
        return ""
    if not isinstance(v, str):
        raise ProtocolError(f"{name} is not a string: {type(v).__name__}")
    return v


def _take_usage(record: RequestRecord, usage: object) -> None:
    if type(usage) is dict and len(usage) <= 3:  # per chunk with continuous usage: {prompt, completion, total}
        ct, pt = usage.get("completion_tokens"), usage.get("prompt_tokens")
        if type(ct) is int and 0 <= ct <= MAX_USAGE_TOKENS and (pt is None or isinstance(pt, int)):
            record.completion_tokens = ct
            if pt is not None:
                record.prompt_tokens = pt
            if "completion_tokens_details" not in usage and "prompt_tokens_details" not in usage:
                return  # what the full reading below would do with this usage, without its calls
    if not isinstance(usage, dict):
        return
    ct = _count(usage, "completion_tokens")
    if ct is not None:
        record.completion_tokens = ct
    pt = usage.get("prompt_tokens")
    if isinstance(pt, int):
        record.prompt_tokens = pt
    take_token_details(record, usage, "completion_tokens_details", "prompt_tokens_details")


def _error_text(err: object, redact: Redactor) -> str:
    """The error's message, secrets scrubbed *before* it is cut to 300 characters."""
    if isinstance(err, dict):
        return redact(str(err.get("message") or err.get("type") or err))[:300]
    return redact(str(err))[:300]


def _tool_text(tools: object) -> str:
    out = []
    if isinstance(tools, list):
        for t in tools:
            if isinstance(t, dict):
                fn = t.get("function") or {}
                out.append(str(fn.get("name") or "") + str(fn.get("arguments") or ""))
    return "".join(out) or " "
