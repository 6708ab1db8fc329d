"""``loadgen run`` offers what was asked and says when the server did not keep up (issue 30 item 4,
must-show 6), against the embedded simulated endpoint on 127.0.0.1.

Before: ``run --rate 10 --duration 30s`` sent 264 requests (a Poisson count, 8.77 req/s) and
``run --rate 20`` against the embedded endpoint printed a plain ``Result is: VALID``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.fixtures.cli_proc import cli_run


def test_rate_and_duration_offer_exactly_the_rate(tmp_path: Path) -> None:
    # the must-show command itself, as a dry run (its schedule, nothing sent): 300 requests at 10.00 req/s
    dry = cli_run("run", "--rate", "10", "--duration", "30s", "--dry-run", out=tmp_path / "dry")
    assert dry.returncode == 0, dry.stderr
    lines = (tmp_path / "dry" / "schedule.jsonl").read_text().splitlines()
    assert len(lines) == 300 and "dry run: 300 requests over 29.900 s" in dry.stdout
    # a short real run: round(20 x 3) = 60 requests, offered 20.00 req/s, printed next to the asked rate
    out = tmp_path / "run"
    p = cli_run("run", "--rate", "20", "--duration", "3s", "--input-tokens", "16", "--output-tokens", "4", out=out)
    assert "Traceback" not in p.stderr
    res = json.loads((out / "result.json").read_text())
    assert res["counts"]["requests"] == 60
    assert res["client"]["schedule_realized_rps"] == pytest.approx(20.0, rel=1e-6)
    assert "offered 20.00 req/s (asked 20.00 req/s): 60 requests over 3.00 s" in p.stdout
    # --requests N: the same rate over N / R
    out2 = tmp_path / "n"
    q = cli_run("run", "--rate", "20", "--requests", "30", "--input-tokens", "16", "--output-tokens", "4", out=out2)
    assert "Traceback" not in q.stderr
    assert json.loads((out2 / "result.json").read_text())["client"]["schedule_realized_rps"] == pytest.approx(20.0)
    assert "offered 20.00 req/s (asked 20.00 req/s): 30 requests over 1.50 s" in q.stdout


@pytest.mark.timing  # the verdict rests on the simulated server's latencies
def test_an_overloaded_embedded_endpoint_did_not_keep_up(tmp_path: Path) -> None:
    # the default embedded endpoint at 20 req/s (about three times what it serves), no SLO asked
    out = tmp_path / "out"
    p = cli_run("run", "--rate", "20", "--duration", "4s", out=out)
    assert "Traceback" not in p.stderr
    verdict = next(ln for ln in p.stdout.splitlines() if ln.startswith("Result is: "))
    assert "— the server did not keep up: completions " in verdict and "TTFT p50 " in verdict, p.stdout
    kept = json.loads((out / "result.json").read_text())["server_kept_up"]
    assert kept["kept_up"] is False and kept["reasons"]
    assert kept["ttft_p50_last_s"] > 2 * kept["ttft_p50_first_s"]
    assert kept["detail"] in verdict
