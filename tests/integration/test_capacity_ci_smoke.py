"""The confidence interval on a sweep's answer covers the simulated endpoint's reference (issue 19, must-show 4).

* The CI smoke of ``scripts/bench_capacity_ci`` (the full run is 20 seeds, ``--seeds 20``): two
  seeds on the model's virtual clock (``--virtual``: the sweep's search and probe-judging code,
  probes simulated; seeded, so the outcome is fixed), each 95 % interval covering the steady-state
  reference, the probes' dependence rule recorded. About 10 s.
* ``loadgen sweep`` as the user types it, against the embedded simulated endpoint (127.0.0.1):
  every judged target of every probe records its autocorrelation times and effective counts, and
  ``loadgen capacity ci`` reads its interval off those. About 20-40 s on a busy 2-core machine;
  nothing here depends on timing (the client's INVALID probes are allowed: they carry no counts).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.cli_proc import REPO, cli_env, cli_run


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


@pytest.mark.timeout(150)
def test_a_real_sweep_records_its_effective_counts_and_capacity_ci_reads_them(tmp_path: Path) -> None:
    out = tmp_path / "s"
    args = ["--slo", "ttft:p90<=200ms", "--probe-duration", "1s", "--precision", "25%", "--calibration", "2s",
            "--input-tokens", "32", "--output-tokens", "1", "--max-schedule-lag", "100ms", "--max-loop-lag", "100ms",
            "--sim-args", "--fifo --slots 2 --ttft-ms 40 --itl-ms 2"]  # fmt: skip
    p = cli_run("sweep", args, out, timeout=140)
    assert "Traceback" not in p.stderr, p.stderr
    res = json.loads((out / "sweep.json").read_text())
    assert "effective requests" in res["evidence_rule"]
    counted = [t for q in res["probes"] if q["verdict"] in ("pass", "fail") for t in q["targets"]]
    if not counted:  # a machine too busy to keep any schedule: every probe INVALID, on its client checks
        assert all(q["verdict"] == "invalid" and q["validity_detail"] for q in res["probes"]), res["probes"]
        return
    for t in counted:
        assert 1 <= t["effective_requests"] <= t["requests"] and t["effective_exceedances"] <= t["exceedances"]
        assert len(t["tau"]) >= 1 and min(t["tau"]) >= 1.0
        lo, hi = t["bounds"]
        assert 0.0 <= lo <= hi <= 1.0
    ci = subprocess.run([sys.executable, "-m", "loadgen.cli", "capacity", "ci", str(out)], cwd=REPO, env=cli_env(),
                        capture_output=True, text=True, timeout=60)  # fmt: skip
    assert ci.returncode == 0, ci.stdout + ci.stderr
    assert "effective counts" in " ".join(ci.stdout.split())
