"""``requests.jsonl``: one line per finished request, written (and flushed) as it finishes.

A crash or Ctrl-C loses nothing already measured. Times are seconds from the
run's t0 (``scheduled_s``, ``sent_s``) or milliseconds (``*_ms``).
"""

from __future__ import annotations

from typing import IO, Any

import orjson

from loadgen.metrics import RequestMetrics
from loadgen.redact import Redactor
from loadgen.types import RequestRecord


def _ms(v: float | None) -> float | None:
    return None if v is None else round(v / 1e6, 6)


def record_line(
    rec: RequestRecord,
    m: RequestMetrics,
    t0_ns: int,
    *,
    save_text: bool = False,
    token_lists: bool = True,
) -> dict[str, Any]:
    """The JSON object written for one request (schema in docs/architecture.md)."""
    d: dict[str, Any] = {
        "index": rec.index,
        "phase": rec.phase,
        "scheduled_s": round((rec.scheduled_ns - t0_ns) / 1e9, 9),
        "sent_s": None if rec.sent_ns is None else round((rec.sent_ns - t0_ns) / 1e9, 9),
        "status": rec.status,
        "error_kind": rec.error_kind,
        "error_detail": rec.error_detail,
        "http_status": rec.http_status,
        "retry_after_s": rec.retry_after_s,
        "ttft_ms": _ms(m.ttft_ns),
        "time_to_first_answer_token_ms": _ms(m.time_to_first_answer_token_ns),
        "tpot_ms": _ms(m.tpot_ns),
        "e2e_ms": _ms(m.e2e_ns),
        "error_e2e_ms": _ms(m.error_e2e_ns),
        "schedule_lag_ms": _ms(m.schedule_lag_ns),
        "connect_ms": _ms(rec.connect_ns) if rec.connect_ns else 0.0,
        "requested_input_tokens": rec.requested_input_tokens,
        "requested_output_tokens": rec.requested_output_tokens,
        "input_tokens": rec.prompt_tokens,
        "output_tokens": m.output_tokens,
        "output_tokens_estimated": m.output_tokens_estimated,
        "itl_estimated": m.itl_estimated,
        "finish_reason": rec.finish_reason,
        "chunks": len(rec.events),
    }
    if rec.reasoning_tokens is not None:
        d["reasoning_tokens"] = rec.reasoning_tokens
    if rec.prefix_group is not None:
        d["prefix_group"] = rec.prefix_group
    if rec.session_id is not None:
        d["session_id"] = rec.session_id
    if token_lists:
        d["itl_ms"] = [round(v / 1e6, 6) for v in m.itl_ns]
        d["inter_chunk_ms"] = [round(v / 1e6, 6) for v in m.inter_chunk_ns]
    if save_text:
        d["output_text"] = rec.text
    return d


class RecordWriter:
    """Appends one JSON line per request to an open text file and flushes it."""

    def __init__(self, fh: IO[bytes], t0_ns: int, *, save_text: bool, token_lists: bool, redactor: Redactor) -> None:
        self.fh = fh
        self.t0_ns = t0_ns
        self.save_text = save_text
        self.token_lists = token_lists
        self.redactor = redactor
        self.lines = 0

    def write(self, rec: RequestRecord, m: RequestMetrics) -> None:
        d = record_line(rec, m, self.t0_ns, save_text=self.save_text, token_lists=self.token_lists)
        if d["error_detail"] and self.redactor:
            d["error_detail"] = self.redactor(d["error_detail"])
        self.fh.write(orjson.dumps(d) + b"\n")
        self.fh.flush()
        self.lines += 1
