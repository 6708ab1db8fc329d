"""``loadgen export --format llmd-br`` (issue 35, item 2): the llm-d Benchmark Report v0.2.1 of a run
and of each probe of a sweep meets the published schema (tests/fixtures/llmd_br.py: required fields,
types, enumerations, closed objects) and carries the run's own figures."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from click.testing import CliRunner

from loadgen.cli import main
from loadgen.report.llmd import BR_FILE, benchmark_report
from tests.fixtures.llmd_br import SCHEMA

LAT = {"count": 200, "mean": 12.0, "p50": 11.0, "p90": 15.0, "p95": 16.0, "p99": 20.0, "p999": 22.0, "max": 23.0}


def _result(d: Path, *, rate: float | None = 10.0, concurrency: int | None = None, itl: bool = True) -> Path:
    d.mkdir(parents=True)
    lat = {"ttft": LAT, "tpot": dict(LAT, mean=1.2), "e2e": dict(LAT, mean=300.0)}
    if itl:
        lat["itl"] = dict(LAT, mean=1.2)
    doc = {
        "schema_version": 5,
        "loadgen_version": "0.1.0",
        "started_at": "2026-12-06T10:00:00.000000+00:00",
        "duration_s": 20.5,
        "config": {
            "input_tokens": "128",
            "output_tokens": "lognormal:mean=64,sigma=0.5",
            "concurrency": concurrency,
            "label": "a100",
            "api_key_env": "KEY",
        },  # fmt: skip
        "counts": {"requests": 200, "completed": 198, "failed": 2, "unsent": 0},
        "tokens": {"input": 25600, "output": 12800},
        "throughput": {
            "offered_rps": rate,
            "request_rps": 9.9,
            "input_tps": 1267.0,
            "output_tps": 633.6,
            "total_tps": 1900.6,
        },  # fmt: skip
        "latency_ms": lat,
    }
    (d / "result.json").write_text(json.dumps(doc))
    return d


def test_a_run_report_meets_the_schema_and_holds_the_runs_figures(tmp_path: Path) -> None:
    d = _result(tmp_path / "run")
    r = CliRunner().invoke(main, ["export", "--format", "llmd-br", str(d)])
    assert r.exit_code == 0, r.output
    rep = json.loads((d / BR_FILE).read_text())
    jsonschema.validate(rep, SCHEMA)
    assert rep["version"] == "0.2.1"
    agg = rep["results"]["request_performance"]["aggregate"]
    assert agg["requests"] == {"total": 200, "failures": 2, "incomplete": 0}
    ttft = agg["latency"]["time_to_first_token"]
    assert ttft["units"] == "ms" and ttft["p99"] == 20.0 and ttft["p99p9"] == 22.0 and ttft["mean"] == 12.0
    assert agg["latency"]["request_latency"]["mean"] == 300.0
    assert agg["throughput"]["output_token_rate"] == {"units": "tokens/s", "mean": 633.6}
    assert agg["throughput"]["request_rate"]["units"] == "queries/s"
    load = rep["scenario"]["load"]["standardized"]
    assert load["tool"] == "loadgen" and load["rate_qps"] == 10.0 and load["source"] == "random"
    assert load["input_seq_len"] == {"distribution": "fixed", "value": 128}
    assert "output_seq_len" not in load  # a lognormal length is not a fixed one: left out, not invented
    assert rep["run"]["time"]["duration"] == "PT20.5S" and rep["run"]["time"]["end"] == "2026-12-06T10:00:20.500000Z"


def test_unmeasured_statistics_are_left_out_never_zero(tmp_path: Path) -> None:
    d = _result(tmp_path / "run", rate=None, concurrency=8, itl=False)
    rep = benchmark_report(json.loads((d / "result.json").read_text()), d)
    jsonschema.validate(rep, SCHEMA)
    assert "inter_token_latency" not in rep["results"]["request_performance"]["aggregate"]["latency"]
    assert rep["scenario"]["load"]["standardized"]["concurrency"] == 8
    assert "rate_qps" not in rep["scenario"]["load"]["standardized"]


def test_a_sweep_gets_one_report_a_probe_with_its_stage_and_the_sweeps_id(tmp_path: Path) -> None:
    sw = tmp_path / "sweep"
    sw.mkdir()
    for i, rate in enumerate((5.0, 10.0)):
        _result(sw / f"probe-{i + 1:02d}", rate=rate)
    (sw / "sweep.json").write_text(json.dumps({"schema_version": 3, "started_at": "x", "answer": {}, "probes": [
        {"dir": "probe-01", "offered_rps": 5.0}, {"dir": "probe-02", "offered_rps": 10.0}]}))  # fmt: skip
    r = CliRunner().invoke(main, ["export", str(sw)])
    assert r.exit_code == 0, r.output
    reps = [json.loads((sw / f"probe-{i:02d}" / BR_FILE).read_text()) for i in (1, 2)]
    for rep in reps:
        jsonschema.validate(rep, SCHEMA)
    assert [x["scenario"]["load"]["standardized"]["stage"] for x in reps] == [0, 1]
    assert reps[0]["run"]["eid"] == reps[1]["run"]["eid"] and reps[0]["run"]["uid"] != reps[1]["run"]["uid"]


def test_the_schema_encoding_can_fail(tmp_path: Path) -> None:
    d = _result(tmp_path / "run")
    rep = benchmark_report(json.loads((d / "result.json").read_text()), d)
    rep["results"]["request_performance"]["aggregate"]["latency"]["time_to_first_token"]["units"] = "msec"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(rep, SCHEMA)
    del rep["run"]["uid"]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(rep, SCHEMA)


def test_a_directory_without_results_is_one_line(tmp_path: Path) -> None:
    r = CliRunner().invoke(main, ["export", str(tmp_path)])
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert "holds neither sweep.json nor result.json" in r.output
