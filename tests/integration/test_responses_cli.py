"""``loadgen run --api responses`` against a scripted server speaking the Responses API's event stream.

The server (tests/fixtures/scripted_server.py) plays each request's typed events on time and logs when it
flushed each; the run's TTFT and ITL are read from the event types (the first ``output_text.delta``, the
gaps between deltas) and match the server's flush times; the output counts are the usage of
``response.completed``; the request is the Responses form (``input`` items, ``max_output_tokens``, no
chat-only fields). A ``--no-stream`` run reads the whole Responses object.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.fixtures.cli_proc import cli_run
from tests.fixtures.scripted_server import ScriptedServer

TTFT_S, ITL_S, TOKENS = 0.030, 0.006, 8


def _ev(obj: dict[str, Any]) -> str:
    return f"event: {obj['type']}\ndata: {json.dumps(obj, separators=(',', ':'))}\n\n"


def _stream_script() -> dict[str, Any]:
    writes: list[list[Any]] = [
        [0.0, _ev({"type": "response.created", "response": {"status": "in_progress"}})],
        [0.0, _ev({"type": "response.output_item.added", "item": {"type": "message", "id": "m1"}})],
    ]
    for i in range(TOKENS):
        writes.append(
            [TTFT_S + i * ITL_S, _ev({"type": "response.output_text.delta", "item_id": "m1", "delta": "tok "})]
        )
    end = TTFT_S + TOKENS * ITL_S
    writes.append([end, _ev({"type": "response.output_item.done", "item": {"type": "message", "id": "m1"}})])
    usage = {"input_tokens": 20, "output_tokens": TOKENS}
    writes.append([end, _ev({"type": "response.completed", "response": {"status": "completed", "usage": usage}})])
    return {"writes": writes}


def _run(url: str, out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return cli_run("run", "--endpoint", url, "--api", "responses",
                   "--model", "scripted", "--rate", "10", "--requests", "20", "--input-tokens", "16",
                   "--output-tokens", str(TOKENS), "--no-progress", "--out", str(out), *extra, timeout=120)  # fmt: skip


@pytest.mark.timing  # TTFT and ITL against the server's flush times: the serial phase
def test_stream_ttft_and_itl_from_the_event_types(tmp_path: Path) -> None:
    srv = ScriptedServer([_stream_script() for _ in range(22)]).start_in_thread()  # 20 + the pre-flight
    try:
        proc = _run(srv.url + "/v1/responses", tmp_path / "run")
    finally:
        srv.stop_thread()
    assert "took the path /v1/responses as --api responses" in proc.stderr
    res = json.loads((tmp_path / "run" / "result.json").read_text())
    assert res["counts"]["completed"] == 20 and res["counts"]["failed"] == 0, proc.stderr[-2000:]
    assert res["tokens"]["output"] == 20 * TOKENS and res["tokens"]["output_estimated_requests"] == 0
    body = srv.posts[-1].json
    assert body["max_output_tokens"] == TOKENS and body["stream"] is True and body["model"] == "scripted"
    assert isinstance(body["input"], list) and body["input"][-1]["role"] == "user"
    assert not {"max_tokens", "messages", "stream_options", "ignore_eos", "min_tokens"} & set(body)
    # TTFT and ITL against the server's own flush times (its time origin: the request body read)
    true_ttft = [(p.flush_ns[2] - p.arrival_ns) / 1e6 for p in srv.posts[1:]]
    true_itl = [
        (b - a) / 1e6 for p in srv.posts[1:] for a, b in zip(p.flush_ns[2 : 2 + TOKENS - 1], p.flush_ns[3 : 2 + TOKENS])
    ]
    rows = [json.loads(x) for x in (tmp_path / "run" / "requests.jsonl").read_text().splitlines()]
    ttft_sent = [r["ttft_ms"] - (r["sent_s"] - r["scheduled_s"]) * 1e3 for r in rows]
    assert abs(np.median(ttft_sent) - np.median(true_ttft)) < 2.0, (np.median(ttft_sent), np.median(true_ttft))
    assert abs(res["latency_ms"]["itl"]["p50"] - np.median(true_itl)) < 1.0


def test_whole_body_without_stream(tmp_path: Path) -> None:
    answer = {"status": "completed", "output": [{"type": "message", "content": [{"type": "output_text", "text": "a b c"}]}],
              "usage": {"input_tokens": 20, "output_tokens": TOKENS}}  # fmt: skip
    srv = ScriptedServer([{"status": 200, "body": answer} for _ in range(22)]).start_in_thread()
    try:
        proc = _run(srv.url, tmp_path / "run", "--no-stream")
    finally:
        srv.stop_thread()
    res = json.loads((tmp_path / "run" / "result.json").read_text())
    assert res["counts"]["completed"] == 20, proc.stderr[-2000:]
    assert res["tokens"]["output"] == 20 * TOKENS
    assert "stream" not in srv.posts[-1].json
