"""A content filter's answer is its own outcome, ``filtered``: not a success, not in goodput,
counted by kind (docs/measurement.md, "Error kinds")."""

from __future__ import annotations

import json

from loadgen.core.metrics import compute
from loadgen.core.redact import Redactor
from loadgen.core.slo import parse_slo
from loadgen.core.types import ERROR_KINDS, RequestRecord
from loadgen.endpoints.http import fill_http_error
from loadgen.endpoints.openai import OpenAIStreamParser
from loadgen.engine.results import Aggregator
from tests.fixtures.fake_platforms import azure_chat_writes

MS = 1_000_000

AZURE_PROMPT_FILTERED = {
    "error": {
        "message": "The response was filtered due to the prompt triggering Azure OpenAI's content management policy.",
        "type": None,
        "param": "prompt",
        "code": "content_filter",
        "status": 400,
        "innererror": {
            "code": "ResponsibleAIPolicyViolation",
            "content_filter_result": {"hate": {"filtered": True, "severity": "high"}},
        },
    }
}


def _stream(i: int, finish_reason: str) -> RequestRecord:
    rec = RequestRecord(index=i, phase="measure", scheduled_ns=i * 100 * MS, sent_ns=i * 100 * MS)
    w = azure_chat_writes(
        ["a", "b"],
        [0.2 + 0.1 * i, 0.25 + 0.1 * i],
        filter_at_s=0.01 + 0.1 * i,
        usage={"completion_tokens": 2, "prompt_tokens": 5, "total_tokens": 7},
        finish_reason=finish_reason,
    )
    p = OpenAIStreamParser(rec, chat=True, redact=Redactor())
    for t_s, text in w:
        p.feed(text.encode(), round(t_s * 1e9))
    p.finish(round(w[-1][0] * 1e9))
    return rec


def test_filtered_is_an_error_kind() -> None:
    assert "filtered" in ERROR_KINDS


def test_filtered_requests_are_counted_apart_and_never_conform() -> None:
    agg = Aggregator(slos=[parse_slo("ttft:p99<=5s")])
    try:
        for i, fr in enumerate(["stop", "content_filter", "stop", "content_filter", "stop"]):
            rec = _stream(i, fr)
            agg.add(rec, compute(rec))
        c = agg.counts()
        assert c["completed"] == 3 and c["failed"] == 2 and c["errors_by_kind"] == {"filtered": 2}
        assert agg.output_tokens == 6  # the filtered requests' tokens are not useful output
        slo = agg.slo_result()
        assert slo is not None and slo["conforming_requests"] == 3 and slo["denominator"] == 5
        assert len(agg.samples["ttft"].values()) == 3
    finally:
        agg.close()


def test_prompt_refused_by_the_filter_is_filtered_with_its_status() -> None:
    rec = RequestRecord(index=0, phase="measure", scheduled_ns=0)
    fill_http_error(rec, 400, {}, json.dumps(AZURE_PROMPT_FILTERED).encode(), Redactor())
    assert rec.error_kind == "filtered" and rec.http_status == 400 and not rec.ok
    assert rec.error_detail is not None and rec.error_detail.startswith("HTTP 400: ")
    other = RequestRecord(index=1, phase="measure", scheduled_ns=0)
    fill_http_error(other, 400, {}, b'{"error": {"code": "invalid_value", "message": "bad"}}', Redactor())
    assert other.error_kind == "http_error"
