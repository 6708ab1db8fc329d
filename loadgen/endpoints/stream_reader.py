"""What the three SSE stream readers share (OpenAI chat/completions, the Responses API, Anthropic
Messages): the record being filled, the redactor, the SSE decoder, the two end flags, and the
end of the body (:meth:`StreamReader.finish`): a stream that ended cleanly is settled
(:func:`~loadgen.endpoints.http.settle`: ``ok``, ``buffered`` or ``filtered``); one whose body
closed before its end event is an ``incomplete_stream``, named after the event it lacked.
"""

from __future__ import annotations

from typing import Any

from loadgen.core.redact import Redactor
from loadgen.core.sse import SSEDecoder
from loadgen.core.types import RequestRecord
from loadgen.endpoints.http import fail, settle

MAX_EVENT_BYTES = 16 * 1024 * 1024
"""The largest SSE event a reader keeps (a larger one is a ``protocol`` error in the decoder)."""


class StreamReader:
    """Sans-IO reader of one event stream into ``record``; a subclass reads the events (``feed``).

    ``done``: the stream's end event arrived; ``failed``: it failed in-band (the record says how).
    """

    __slots__ = ("record", "redact", "dec", "done", "failed")

    END_EVENT = "its end event"
    """What a clean end is, for the ``incomplete_stream`` detail: "stream closed before ..."."""

    def __init__(self, record: RequestRecord, *, redact: Redactor, max_event_bytes: int = MAX_EVENT_BYTES) -> None:
        self.record = record
        self.redact = redact
        self.dec = SSEDecoder(max_event_bytes)
        self.done = False
        self.failed = False

    def clean_eof(self) -> bool:
        """Whether a body that closed without the end event still ended the stream cleanly (never, here)."""
        return False

    def finish(self, t_ns: int) -> None:
        """The end of the body at ``t_ns``: settle a cleanly ended stream, else ``incomplete_stream``."""
        rec = self.record
        if self.failed:
            return
        if not self.done:
            self.dec.close()
            rec.end_ns = t_ns
            if not self.clean_eof():
                fail(rec, "incomplete_stream", f"stream closed before {self.END_EVENT}")
                return
        settle(rec)


def take_token_details(record: RequestRecord, usage: dict[str, Any], output_key: str, input_key: str) -> None:
    """Reasoning and cached-prompt tokens from a usage block's details, where they are counts:
    ``usage[output_key].reasoning_tokens`` and ``usage[input_key].cached_tokens`` (OpenAI's
    ``completion_tokens_details`` / ``prompt_tokens_details``, the Responses API's
    ``output_tokens_details`` / ``input_tokens_details``)."""
    det = usage.get(output_key)
    if isinstance(det, dict) and isinstance(det.get("reasoning_tokens"), int):
        record.reasoning_tokens = det["reasoning_tokens"]
    det = usage.get(input_key)
    if isinstance(det, dict) and isinstance(det.get("cached_tokens"), int):
        record.cached_prompt_tokens = det["cached_tokens"]
