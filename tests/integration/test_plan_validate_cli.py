"""Must-show 2 of issue 19: ``loadgen plan --validate`` holds the SLO at the planned size and does not at
one replica fewer, replaying the peak interval against simulated replicas that loadgen starts itself.

The capacity is a checked-in real sweep (tests/fixtures/capacity/sim2: ``--fifo --slots 2 --ttft-ms 40``,
one output token, ttft:p99<=500ms; its answer 50.06 req/s, and one replica of that profile serves at
most 2 / 40 ms = 50 req/s). The peak demand is 1.4 x that saturation rate: the plan needs 2 replicas
(35 req/s each, 70 % busy), and one replica alone is overloaded by 40 % (its queue grows ~20 requests
a second, so TTFTs pass 500 ms within seconds): the two verdicts are far apart. No timing is asserted:
on a busy machine the planned replay may be INVALID (the client's schedule lag over the sweep's 50 ms
bound), and then the verdict must agree with the replay's own records.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

import pytest

from tests.fixtures.cli_proc import cli_run

pytestmark = pytest.mark.timing  # asserts timing figures: the serial phase

ROOT = Path(__file__).resolve().parents[2]
SIM2 = ROOT / "tests" / "fixtures" / "capacity" / "sim2"
SATURATION_RPS = 2 / 0.040  # the profile's two FIFO servers, 40 ms a request


def _validation(out: Path) -> dict:
    return json.loads((out / "plan.json").read_text())["plans"][0]["validation"]


@pytest.mark.timeout(300)
def test_validate_holds_at_the_planned_size_and_not_one_fewer(tmp_path: Path) -> None:
    answer = json.loads((SIM2 / "sweep.json").read_text())["answer"]["max_rate_rps"]
    peak = 1.4 * SATURATION_RPS
    assert math.ceil(peak / (answer * 0.9)) == 2  # the plan's size at the peak, by hand
    demand = tmp_path / "demand.csv"
    demand.write_text(f"start_s,rate_rps\n0,{peak / 4}\n3600,{peak}\n7200,{peak / 2}\n")
    common = ["plan", "--capacity", str(SIM2), "--demand", str(demand), "--validate", "--validate-seconds", "6s"]

    out = tmp_path / "planned"
    p = cli_run(*common, out=out, timeout=180)
    v = _validation(out) if (out / "plan.json").is_file() else None
    assert v is not None, p.stdout[-3000:] + p.stderr[-3000:]
    assert v["replicas"] == v["planned_replicas"] == 2 and v["slice"]["start_s"] == 3600
    assert v["slice"]["time_scale"] == pytest.approx(3600 / 6)
    run = json.loads((Path(v["run_dir"]) / "result.json").read_text())
    lines = [json.loads(x) for x in (Path(v["run_dir"]) / "requests.jsonl").read_text().splitlines() if x.strip()]
    counts = Counter(d["replica"] for d in lines)
    assert set(counts) == {0, 1} and abs(counts[0] - counts[1]) <= 1  # round robin over both replicas
    assert [r["requests"] for r in v["per_replica"]] == [counts[0], counts[1]]
    if v["verdict"] == "invalid":  # a busy machine: the client's timing, as its records say
        assert not run["validity"]["valid"] and p.returncode == 5, p.stdout[-3000:]
    else:
        assert v["verdict"] == "held", p.stdout[-3000:] + p.stderr[-3000:]
        assert run["validity"]["valid"] and run["slo"]["met"] and p.returncode == 0
        assert "HELD" in p.stdout and "Validation by replay" in (out / "plan.html").read_text()

    fewer = tmp_path / "fewer"
    q = cli_run(*common, "--validate-replicas", "1", out=fewer, timeout=180)
    w = _validation(fewer) if (fewer / "plan.json").is_file() else None
    assert w is not None, q.stdout[-3000:] + q.stderr[-3000:]
    assert w["replicas"] == 1 and w["planned_replicas"] == 2
    # overloaded by 40 %: missed even with each request's own schedule lag taken off (so also when INVALID)
    assert w["verdict"] == "not held" and q.returncode == 1, q.stdout[-3000:] + q.stderr[-3000:]
    run1 = json.loads((Path(w["run_dir"]) / "result.json").read_text())
    assert not run1["slo"]["met"] and "NOT HELD" in q.stdout


@pytest.mark.timeout(180)
def test_validate_against_real_replicas_and_its_usage_errors(tmp_path: Path) -> None:
    from loadgen.sim.launch import SimProcess

    demand = tmp_path / "demand.csv"
    demand.write_text("start_s,rate_rps\n0,20\n3600,70\n")
    common = ["plan", "--capacity", str(SIM2), "--demand", str(demand), "--validate", "--validate-seconds", "3s"]
    real = tmp_path / "real"  # a sweep of some other server: no simulated profile to start
    real.mkdir()
    doc = json.loads((SIM2 / "sweep.json").read_text())
    doc["config"]["embedded_simulated_endpoint"] = False
    (real / "sweep.json").write_text(json.dumps(doc))
    p = cli_run("plan", "--capacity", str(real), *common[3:], out=tmp_path / "x", timeout=180)
    assert p.returncode == 2 and "give --validate-endpoint URL once per replica (2)" in p.stderr, p.stderr
    sims = [SimProcess("--fifo --slots 2 --ttft-ms 40 --itl-ms 2".split()) for _ in range(2)]
    try:
        urls = [str(s.url) for s in sims]
        q = cli_run(*common, "--validate-endpoint", urls[0], out=tmp_path / "y", timeout=180)
        assert q.returncode == 2 and "given 1 times: the validation needs 2 replicas" in q.stderr, q.stderr
        out = tmp_path / "z"
        r = cli_run("plan", "--capacity", str(real), *common[3:], "--validate-endpoint", urls[0], "--validate-endpoint",
                    urls[1], "--balance", "least-outstanding", out=out, timeout=180)  # fmt: skip
    finally:
        for s in sims:
            s.stop()
    v = _validation(out) if (out / "plan.json").is_file() else None
    assert v is not None, r.stdout[-3000:] + r.stderr[-3000:]
    assert [x["url"].split("/v1")[0] for x in v["per_replica"]] == urls and v["balance"] == "least-outstanding"
    assert v["verdict"] in ("held", "invalid") and r.returncode == {"held": 0, "invalid": 5}[v["verdict"]]
    assert all(x["requests"] > 0 for x in v["per_replica"])
