"""The token-deadline SLO against the simulated endpoint's truth log (issue 36, must-show 2).

``loadgen run --slo tbt_deadline:p90<=8ms`` against a simulated endpoint writing a token every 5 ms
with a 52 ms stall in ~30 % of the streams: token i is due by the first token + i x 8 ms, so every token
before the 18th after a stall is late. The share of late tokens the run reports is within 0.5 points of
the share computed from the server's own write times (the truth log), in one process and over two
worker processes (their histograms and counts merged).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from loadgen.sim.launch import SimProcess
from tests.fixtures.cli_proc import cli_run

pytestmark = pytest.mark.timing  # asserts timing figures: the serial phase

TARGET_MS = 8.0


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def _true_late_share(run: Path, truth_path: Path) -> tuple[float, int]:
    """The share of late tokens from the server's writes, over the run's measured successful requests."""
    truth = {t["request_id"].rsplit("-", 1)[1]: t for t in _lines(truth_path) if t.get("request_id")}
    late = judged = 0
    for r in _lines(run / "requests.jsonl"):
        if r["phase"] != "measure" or r["status"] != "ok":
            continue
        times = [c[0] for c in truth[str(r["index"])]["chunks"] for _ in range(c[1])]  # [write_ns, tokens]
        for i, t in enumerate(times[1:], 1):
            judged += 1
            late += (t - times[0]) / i > TARGET_MS * 1e6
    return late / judged, judged


@pytest.mark.parametrize("workers", [1, 2])
def test_late_token_share_matches_the_truth(tmp_path: Path, workers: int) -> None:
    truth_path = tmp_path / "truth.jsonl"
    sim_args = ["--ttft-ms", "20", "--itl-ms", "5", "--itl-per-seq-ms", "0", "--fault-stall", "0.3",
                "--stall-ms", "52", "--seed", "7", "--truth-log", str(truth_path)]  # fmt: skip
    out = tmp_path / "run"
    with SimProcess(sim_args) as sim:
        assert sim.url is not None
        proc = cli_run("run", "--endpoint", sim.url,
                       "--rate", "12", "--requests", "72", "--warmup", "0", "--workers", str(workers),
                       "--input-tokens", "16", "--output-tokens", "100", "--no-progress",
                       "--slo", f"tbt_deadline:p90<={TARGET_MS:g}ms", out=out, timeout=180)  # fmt: skip
    assert (out / "result.json").exists(), proc.stderr[-2000:]
    res = json.loads((out / "result.json").read_text())
    entry = res["slo"]["targets"][0]
    assert entry["metric"] == "tbt_deadline"
    true_share, true_judged = _true_late_share(out, truth_path)
    assert entry["judged_tokens"] == true_judged and true_judged >= 60 * 99
    assert 0.03 < true_share < 0.5  # the stalls made tokens late, not all of them
    assert abs(entry["late_token_share"] - true_share) <= 0.005, (entry, true_share)
    assert "late tokens:" in proc.stdout
