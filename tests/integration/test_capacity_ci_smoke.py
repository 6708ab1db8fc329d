"""The confidence interval on a sweep's answer covers the simulated endpoint's reference (issue 19, must-show 4).

* The CI smoke of ``scripts/bench_capacity_ci`` (the full run is 20 seeds, ``--seeds 20``): two
  seeds on the model's virtual clock (``--virtual``: the sweep's search and probe-judging code,
  probes simulated; seeded, so the outcome is fixed), each 95 % interval covering the steady-state
  reference, the probes' dependence rule recorded. About 10 s.
* ``loadgen sweep`` as the user types it, every judged target recording its effective counts and
  ``loadgen capacity ci`` reading its interval off them, is checked on the live sweep of
  test_capacity_cli.py (``test_the_live_sweep_records_its_effective_counts_and_capacity_ci_reads_them``):
  the same sweep, run once.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.cli_proc import REPO, cli_env

pytestmark = pytest.mark.timing  # asserts timing figures: the serial phase


@pytest.mark.timeout(120)
def test_two_seed_smoke_of_the_coverage_benchmark(tmp_path: Path) -> None:
    p = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "bench_capacity_ci.py"), "--virtual", "--seeds", "2",
         "--reference-requests", "20000", "--reference-runs", "1", "--group", "2", "--out", str(tmp_path)],
        cwd=REPO, env=cli_env(), capture_output=True, text=True, timeout=110,
    )  # fmt: skip
    assert p.returncode == 0, p.stdout + p.stderr
    cov = json.loads((tmp_path / "coverage.json").read_text())
    assert 35.0 < cov["reference_rps"] < 40.0  # 2 FIFO servers, 40 ms a request, p99 TTFT <= 200 ms
    assert cov["mode"] == "virtual clock, effective counts"
    assert [r["seed"] for r in cov["rows"]] == [1, 2]
    for r in cov["rows"]:
        assert r["covered"], r
        assert r["confidence"] == pytest.approx(0.95) and "effective counts" in r["method"]
        # no certified PASS below the answer leaves the lower end open (L = 0: 9 of 20 seeds with 60 s probes)
        assert r["ci_lower_rps"] is None or r["ci_lower_rps"] <= r["max_rate_rps"]
        assert r["ci_upper_rps"] is None or r["ci_upper_rps"] > r["max_rate_rps"]
    sweep = json.loads((tmp_path / "seed-1" / "sweep.json").read_text())
    judged = [t for q in sweep["probes"] for t in q["targets"]]
    assert judged and all(t["effective_requests"] <= t["requests"] and t["tau"] for t in judged)
    assert "covered in 2 of 2 seeds" in p.stdout
