"""The OpenAI stream parser's fast path (one whole ``data:`` event per read, the common chunk
applied without the full checks) gives exactly the record the full rules give, or hands the
event to them: every case read once as a whole read through ``OpenAIStreamParser.feed`` and once
through ``apply_stream_event`` directly, the records compared field by field."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import loadgen.endpoints.openai_stream as osm
from loadgen.core.errors import ProtocolError
from loadgen.core.redact import Redactor
from loadgen.core.types import RequestRecord
from loadgen.endpoints.openai_stream import OpenAIStreamParser, apply_stream_event

RED = Redactor([])
U3 = '"usage":{"prompt_tokens":7,"completion_tokens":3,"total_tokens":10}'
CASES = [
    '{"choices":[{"index":0,"text":" a","finish_reason":null}],' + U3 + "}",
    '{"choices":[{"index":0,"text":" a","finish_reason":"length"}]}',
    '{"choices":[{"index":0,"text":"","finish_reason":"stop"}]}',
    '{"choices":[{"index":0,"text":null}]}',
    '{"choices":[],' + U3 + "}",
    '{"choices":null,"usage":null}',
    '{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}],' + U3 + "}",
    '{"choices":[{"index":0,"delta":{"content":" b"},"finish_reason":null}]}',
    '{"choices":[{"index":0,"delta":{"content":null}}]}',
    '{"choices":[{"index":0,"delta":{"reasoning_content":" think"}}]}',
    '{"choices":[{"index":0,"delta":{"content":" c","reasoning":" r"}}]}',
    '{"choices":[{"index":0,"delta":{"tool_calls":[{"function":{"name":"f","arguments":"{}"}}]}}]}',
    '{"choices":[{"index":0,"delta":null}]}',
    '{"choices":[{"index":0,"text":" a"}],"usage":{"completion_tokens":2,"completion_tokens_details":{"reasoning_tokens":1}}}',
    '{"choices":[{"index":0,"text":" a"}],"usage":{"prompt_tokens":2,"prompt_tokens_details":{"cached_tokens":1}}}',
    '{"choices":[{"index":0,"text":" a"}],"usage":{"prompt_tokens":2}}',
    '{"choices":[{"index":0,"text":" a"}],"usage":{"prompt_tokens":2,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":1}}}',
    '{"choices":[{"index":0,"text":" a"}],"usage":{"completion_tokens":-1}}',
    '{"choices":[{"index":0,"text":" a"}],"usage":{"completion_tokens":99999999}}',
    '{"choices":[{"index":0,"text":" a"}],"usage":{}}',
    '{"choices":[{"index":0,"text":5}]}',
    '{"choices":{"text":" a"}}',
    '{"choices":["a"]}',
    '{"choices":[{"delta":"x"}]}',
    '{"error":{"message":"boom"}}',
    '{"error":{"message":"boom"},"choices":[{"index":0,"text":" a"}],' + U3 + "}",
    '{"choices":[{"index":0,"text":" a"}],"usage":{"prompt_tokens":7,"completion_tokens":true,"total_tokens":10}}',
    '{"choices":[{"index":0,"text":" a"}],"usage":{"prompt_tokens":true,"completion_tokens":3,"total_tokens":10}}',
    '{"choices":[{"index":0,"text":" a"},{"text":5}],' + U3 + "}",
    '{"choices":[{"index":0,"text":" a"}],' + U3[:-1] + ',"x":' + "[" * 2000 + "]" * 2000 + "}}",  # deep nesting
    '{"error":null,"choices":[{"text":" a"}]}',
    "[1, 2]",
    "null",
    '{"choices": [',
    "",
    "[DONE]",
]


@pytest.fixture(params=["msgspec", "orjson"], autouse=True)
def completion_reader(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every test runs with each reader of the common completions chunk (msgspec: the ``fast``
    extra; orjson: without it); both must give the full rules' record."""
    if request.param == "msgspec":
        if osm.msgspec is None:
            pytest.skip("msgspec is not installed (the fast extra)")
        monkeypatch.setattr(osm, "_COMPLETION_CHUNK", osm._apply_completion_struct)
    else:
        monkeypatch.setattr(osm, "_COMPLETION_CHUNK", osm._apply_completion_chunk)
    return str(request.param)


def _via_full(data: str, chat: bool) -> tuple[object, ...]:
    rec = RequestRecord(index=0, phase="measure", scheduled_ns=0)
    try:
        r = apply_stream_event(rec, data.encode(), 5, chat=chat, redact=RED)
    except ProtocolError as exc:
        return ("raised", str(exc))
    if r == "done":
        rec.end_ns = 5
    return _facts(rec, r)


def _via_feed(data: str, chat: bool) -> tuple[object, ...]:
    rec = RequestRecord(index=0, phase="measure", scheduled_ns=0)
    p = OpenAIStreamParser(rec, chat=chat, redact=RED)
    try:
        p.feed(f"data: {data}\n\n".encode(), 5)
    except ProtocolError as exc:
        return ("raised", str(exc))
    return _facts(rec, "done" if p.done else "failed" if p.failed else None)


def _facts(rec: RequestRecord, r: str | None) -> tuple[object, ...]:
    return (
        r, [(e.t_ns, e.text, e.answer, e.usage_completion_tokens) for e in rec.events], rec.completion_tokens,
        rec.prompt_tokens, rec.reasoning_tokens, rec.cached_prompt_tokens, rec.finish_reason, rec.status,
        rec.error_kind, rec.error_detail, rec.end_ns,
    )  # fmt: skip


@pytest.mark.parametrize("chat", [False, True])
@pytest.mark.parametrize("data", CASES)
def test_fast_path_gives_the_full_rules_record(data: str, chat: bool) -> None:
    assert _via_feed(data, chat) == _via_full(data, chat)


_text = st.one_of(st.none(), st.text(max_size=4), st.integers(-1, 3), st.booleans(), st.floats(0, 2))
_usage = st.one_of(
    st.none(),
    st.dictionaries(
        st.sampled_from(
            ["prompt_tokens", "completion_tokens", "total_tokens", "prompt_tokens_details",
             "completion_tokens_details", "other"]
        ),
        st.one_of(st.integers(-2, 5), st.none(), st.just({"cached_tokens": 1}), st.booleans(),
                  st.just(4.0), st.just(2**22 + 1), st.just("7")),
        max_size=5,
    ),
)  # fmt: skip
_extra = st.dictionaries(st.sampled_from(["error", "id", "object"]), st.one_of(st.none(), st.just("x"), st.just(0)))


@pytest.mark.timing
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])  # the reader is set for all examples
@given(
    text=_text, usage=_usage, fr=st.sampled_from([None, "stop", "length", "", 3]), chat=st.booleans(),
    extra=_extra, more=st.sampled_from([[], [{"text": 5}], ["a"], [{"index": 1, "text": " b"}]]),
)  # fmt: skip
def test_fast_path_agrees_on_generated_chunks(
    text: object, usage: object, fr: object, chat: bool, extra: dict[str, object], more: list[object]
) -> None:
    import json

    choice = {"index": 0, "finish_reason": fr, **({"delta": {"content": text}} if chat else {"text": text})}
    obj: dict[str, object] = {**extra, "choices": [choice, *more]}
    if usage is not None:
        obj["usage"] = usage
    data = json.dumps(obj)
    assert _via_feed(data, chat) == _via_full(data, chat)


@pytest.mark.parametrize("chat", [False, True])
def test_one_read_of_many_events_gives_the_full_rules_record(chat: bool) -> None:
    # every case that neither raises nor ends the stream, then [DONE], then one more (not applied)
    ok = [d for d in CASES if _via_full(d, chat)[0] is None] + ["[DONE]", CASES[0]]
    rec = RequestRecord(index=0, phase="measure", scheduled_ns=0)
    p = OpenAIStreamParser(rec, chat=chat, redact=RED)
    assert p.feed("".join(f"data: {d}\n\n" for d in ok).encode(), 5)
    full = RequestRecord(index=0, phase="measure", scheduled_ns=0)
    for d in ok:
        if apply_stream_event(full, d.encode(), 5, chat=chat, redact=RED) == "done":
            full.end_ns = 5
            break
    assert _facts(rec, "done") == _facts(full, "done")
