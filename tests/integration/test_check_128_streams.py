"""Issue 7, item 2: at 128 streams x 256 tokens @ 1 ms ITL, TTFT is right or the run says INVALID.

``scripts/check_128_streams.py`` runs loadgen against the simulated endpoint (own process, truth
log) and pairs every reported TTFT with the server's first-token write time. The invariant:
``|reported TTFT p50 - true TTFT p50| <= 5 ms`` or the run is INVALID with ``limited_by: client``
(never a silently wrong figure). The test can fail both ways: a silently wrong p50 on the plain
run, or a client whose event loop is deliberately blocked (30 ms every 40 ms) that is not flagged
INVALID with the stamps' lateness (or the event-loop lag) as the reason. Short runs (3 s) to keep the test at about 20 s.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timing  # asserts timing figures: the serial phase

REPO = Path(__file__).resolve().parents[2]


def test_ttft_within_5ms_of_truth_or_invalid_client(tmp_path: Path) -> None:
    out = tmp_path / "rows.json"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p))
    p = subprocess.run(
        [
            sys.executable,
            str(REPO / "scripts" / "check_128_streams.py"),
            "--duration",
            "3",
            "--stall-ms",
            "30",
            "--json",
            str(out),
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert out.exists(), p.stdout[-3000:] + p.stderr[-3000:]
    honest, overloaded = json.loads(out.read_text())
    for row in (honest, overloaded):
        assert row["streams"] == 128 and row["tokens"] == 256 and row["itl_ms"] == 1.0
        # every measured request was paired with its truth line: the comparison covers the whole run
        assert row["paired_requests"] == row["measured_requests"] > 0, row
    # the invariant on the plain run
    assert honest["stall_ms"] == 0
    assert honest["p50_error_ms"] <= 5.0 or (not honest["valid"] and honest["limited_by"] == "client"), honest
    # the deliberately overloaded client: the run says so, or its figures are right. The verdict judges
    # the stamps, not the loop (issue 22): where the stalls moved no reported TTFT (p50 and p99 within
    # 5 ms of the truth log's: the saturated simulator had queued the first tokens), VALID is right; a
    # VALID run with a moved TTFT fails here. A figure's error is its percentile less the true one, as
    # the verdict grid (scripts/bench_truth.py) defines it, not the p99 of each request's own error
    # (CI once failed a VALID run on that stricter view: p50 0.03 ms, p99 22.5 ms; the verdict bounds
    # the figures, not every request)
    assert overloaded["stall_ms"] == 30
    if overloaded["valid"]:  # the reported TTFT p50 and p99 against the true ones (the verdict grid)
        assert abs(overloaded["ttft_p50_err_ms"]) <= 5.0 and abs(overloaded["ttft_p99_err_ms"]) <= 5.0, overloaded
    else:
        assert overloaded["limited_by"] == "client", overloaded
        # the stalled loop makes the token stamps late: judged as stamp lateness (issue 22), or as the
        # event-loop lag itself where too few tokens were stamped to judge the stamps
        assert any("stamp lateness" in r or "event-loop lag" in r for r in overloaded["failed_generator_checks"]), (
            overloaded
        )
    assert p.returncode == 0, p.stdout[-3000:]
