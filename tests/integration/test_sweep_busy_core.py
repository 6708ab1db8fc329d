"""The sweep's answer holds while another process keeps a core busy (issue 15, must show 3).

Four independent FIFO servers (``loadgen sim --fifo --slots 4``: 20 ms to the first token, 2 ms
per further token, 16 tokens, so 50 ms a request and 80 req/s of capacity), SLO p99 TTFT <=
120 ms. The M/D/4 reference on the simulated endpoint's own model and a virtual clock
(:func:`loadgen.sim.reference.reference_max_rate`) is ~59.7 req/s. ``loadgen sweep`` as the user
types it must land within 0.85-1.08 x that reference while ``nice -n 19 yes`` holds a core,
and say how many probes it re-ran (a probe made INVALID by a client stall is re-run, not the
end of the sweep). Where the machine is busier still and the client's own schedule lag stays
over its bound above the answer, the sweep must say "client limited" (exit 5) and its answer,
a lower bound, must still land in that range. The shortened CI form: 10 s probes, not sized past 10 s, 10 % precision (about 70 s);
``scripts/bench_sweep --profile md4 --busy-core`` runs the full form with three seeds.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from loadgen.core.slo import parse_slo
from loadgen.sim.model import SimParams
from loadgen.sim.reference import reference_max_rate
from tests.fixtures.cli_proc import cli_run

pytestmark = pytest.mark.timing  # asserts timing figures: the serial phase


@pytest.mark.timeout(300)
def test_md4_sweep_lands_near_the_reference_with_a_core_busy(tmp_path: Path) -> None:
    params = SimParams(slots=4, ttft_ms=20, itl_ms=2, fifo=True)
    ref = reference_max_rate(params, parse_slo("ttft:p99<=120ms"), input_tokens=16, output_tokens=16)
    assert 55 < ref < 65, ref  # the M/D/4 knee of this profile
    out = tmp_path / "sweep"
    # --max-probe-duration 10s: the CI form's time. Probes sized for their evidence run 20-40 s near the knee
    # (tau 10-30 there) and answer no better within this test's range on a 2-core machine (0.86-0.94 x in three
    # runs at a 15-20 s cap): the sized form is scripts/bench_sweep --profile md4
    args = ["--slo", "ttft:p99<=120ms", "--probe-duration", "10s", "--max-probe-duration", "10s", "--precision", "10%",
            "--calibration", "3s",
            "--input-tokens", "16", "--output-tokens", "16", "--seed", "1",
            "--sim-args", "--slots 4 --fifo --ttft-ms 20 --itl-ms 2", "--out", str(out)]  # fmt: skip
    busy = subprocess.Popen(["nice", "-n", "19", "yes"], stdout=subprocess.DEVNULL)
    try:
        p = cli_run("sweep", *args, timeout=280)
    finally:
        busy.kill()
        busy.wait()
    assert "Traceback" not in p.stderr, p.stderr
    res = json.loads((out / "sweep.json").read_text())
    ans = res["answer"]["max_rate_rps"]
    reruns = res.get("reruns")
    assert reruns is not None  # re-runs are always reported, an empty list when none
    print(f"\nM/D/4 answer {ans} req/s vs reference {ref:.2f} ({(ans or 0) / ref:.3f} x); {len(reruns)} re-run(s)")
    if p.returncode == 5:
        # A CI machine busier than one nice-19 core (steal time, CPU quota): the client's own
        # schedule lag was over its bound above the answer, and the sweep says so. That is the
        # verdict table working (the client's timing makes a probe INVALID); the answer is then
        # a lower bound, and it must still be a right one: not above the reference by more than the
        # search's own tolerance (the range below; 1.02 x failed a passing probe at 1.021 x in CI).
        assert res["answer"]["limited_by"] == "client", res["answer"]
        assert "client limited" in p.stdout, p.stdout[-3000:]
        assert ans is not None
    else:
        assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
        assert res["answer"]["limited_by"] is None
    assert 0.85 * ref <= ans <= 1.08 * ref, (ans, ref, [(q["offered_rps"], q["verdict"]) for q in res["probes"]])
