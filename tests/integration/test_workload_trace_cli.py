"""``loadgen run --trace FILE --trace-format burstgpt``: failed requests of the log (0 response tokens).

BurstGPT logs its failed requests with 0 response tokens, some with 0 request tokens too.
By default they are skipped, counted, printed and recorded in ``result.json``; with
``--trace-keep-zero-output`` they are replayed asking for 1 token (``traces/README.md``).
Before the fix the run refused the whole file (``field 'Request tokens': must be >= 1``, exit 2)
and the option did not exist. Exit 1 is allowed: a handful of sends on a busy machine can
miss the client-timing checks, which are not what is tested here. Against the session's simulated endpoint (127.0.0.1).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.fixtures.cli_proc import cli_run

BURSTGPT = """Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type
0,ChatGPT,20,8,28,Conversation log
0.1,ChatGPT,30,0,30,Conversation log
0.2,GPT-4,25,6,31,API log
0.3,ChatGPT,0,0,0,Conversation log
0.4,ChatGPT,10,5,15,Conversation log
0.5,GPT-4,12,7,19,API log
0.6,ChatGPT,44,0,44,Conversation log
0.7,ChatGPT,16,4,20,Conversation log
"""
FAILED_LINES = {3, 5, 8}  # 1-based file lines of the rows with 0 response tokens


def _load(out: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    res = json.loads((out / "result.json").read_text())
    lines = [json.loads(x) for x in (out / "requests.jsonl").read_text().splitlines()]
    return res, sorted(lines, key=lambda x: x["index"])


def test_burstgpt_failed_rows_are_skipped_counted_or_kept(sim_url: str, tmp_path: Path) -> None:
    trace = tmp_path / "burstgpt.csv"
    trace.write_text(BURSTGPT)
    base = ["--endpoint", sim_url, "--trace", str(trace), "--trace-format", "burstgpt", "--no-preflight"]

    p = cli_run("run", *base, out=tmp_path / "skip")
    assert p.returncode in (0, 1), p.stdout[-2000:] + p.stderr[-2000:]  # 1: 8 sends too few for timing checks
    assert "skipped 3 rows with 0 output tokens" in p.stdout, p.stdout
    res, lines = _load(tmp_path / "skip")
    tr = res["config"]["workload"]["trace"]
    assert (tr["rows"], tr["skipped_zero_output_rows"], tr["zero_output_rows"]) == (5, 3, "skipped")
    assert res["counts"]["requests"] == res["counts"]["completed"] == 5
    assert [x["requested_output_tokens"] for x in lines] == [8, 6, 5, 7, 4]
    assert [x["scheduled_s"] for x in lines] == [0.0, 0.2, 0.4, 0.5, 0.7]

    p = cli_run("run", *base, "--trace-keep-zero-output", out=tmp_path / "keep")
    assert p.returncode in (0, 1), p.stdout[-2000:] + p.stderr[-2000:]  # 1: 8 sends too few for timing checks
    assert "kept 3 rows with 0 output tokens" in p.stdout, p.stdout
    res, lines = _load(tmp_path / "keep")
    tr = res["config"]["workload"]["trace"]
    assert (tr["rows"], tr["skipped_zero_output_rows"], tr["kept_zero_output_rows"]) == (8, 0, 3)
    assert tr["zero_output_rows"].startswith("kept")
    assert res["counts"]["requests"] == res["counts"]["completed"] == 8
    assert [x["requested_output_tokens"] for x in lines] == [8, 1, 6, 1, 5, 7, 1, 4]
    assert [x["requested_input_tokens"] for x in lines] == [20, 30, 25, 1, 10, 12, 44, 16]
    assert res["config"]["trace_keep_zero_output"] is True
