"""``loadgen compare`` reads peers' result files (issue 35, item 1): ``vllm bench serve --save-result``
0.33.0, GuideLLM 0.8.1 and AIPerf 0.13.0, the real files of ../shared/peer-results (GuideLLM's with
its per-request lists cut to two entries each: tests/fixtures/peers). Their own figures stand in
loadgen's rows where the definitions are the same; each definition that is not is named; a
foreign JSON is refused in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from loadgen.cli import main
from loadgen.core.errors import InputFileError
from loadgen.report.compare import NOT_MEASURED, System, scorecard
from loadgen.report.peers import detect, load_any, peer_systems

PEERS = Path(__file__).resolve().parents[1] / "fixtures" / "peers"
VLLM = PEERS / "vllm_bench_serve_0.33.0_c16.json"
AIPERF = PEERS / "aiperf_0.13.0_c16_profile_export_aiperf.json"
GUIDELLM = PEERS / "guidellm_0.8.1_c16.json"


def _one(path: Path) -> System:
    systems = peer_systems(path)
    assert systems is not None and len(systems) == 1
    return systems[0]


def test_each_format_is_detected_and_loadgen_files_are_not() -> None:
    assert detect(json.loads(VLLM.read_text())) == "vllm-bench"
    assert detect(json.loads(AIPERF.read_text())) == "aiperf"
    assert detect(json.loads(GUIDELLM.read_text())) == "guidellm"
    assert detect({"schema_version": 5, "counts": {}, "latency_ms": {}}) is None
    assert detect([1, 2]) is None


def test_vllm_bench_figures_and_its_definitions() -> None:
    s = _one(VLLM)
    v = s.values
    assert v["ttft_p50_ms"] == pytest.approx(13.8295, abs=1e-3) and v["ttft_p99_ms"] == pytest.approx(19.7069, abs=1e-3)
    assert v["tpot_p99_ms"] == pytest.approx(1.01974, abs=1e-4)
    # its ITL is per chunk: loadgen's inter-chunk row, not the per-token ITL row
    assert v["inter_chunk_p99_ms"] == pytest.approx(2.16947, abs=1e-4)
    assert v["itl_p99_ms"] == NOT_MEASURED
    assert v["e2e_p99_ms"] == pytest.approx(278.271, abs=1e-2)
    assert v["output_tps"] == pytest.approx(15110.97, abs=0.01)
    assert v["error_rate"] == 0.0
    c = s.conditions
    assert c["latency_origin"] == "sent" and c["api"] == "completions"
    assert c["arrival"] == "closed loop, 16 concurrent" and c["model"] == "fake-model"
    defs = " ".join(s.definitions)
    assert "own send" in defs and "gap between chunks" in defs and "whole run" in defs


def test_aiperf_inter_token_latency_is_its_per_request_mean_in_the_tpot_row() -> None:
    s = _one(AIPERF)
    v = s.values
    assert v["ttft_p99_ms"] == pytest.approx(118.406, abs=1e-2)
    assert v["tpot_p99_ms"] == pytest.approx(1.33869, abs=1e-4)  # inter_token_latency: a per-request mean
    assert v["inter_chunk_p99_ms"] == pytest.approx(10.2121, abs=1e-3)  # inter_chunk_latency
    assert v["output_tps"] == pytest.approx(10490.35, abs=0.01)
    assert s.conditions["arrival"] == "closed loop, 16 concurrent"
    assert s.conditions["input_tokens"] == "32" and s.conditions["output_tokens"] == "256"  # as loadgen records them


def test_guidellm_request_latency_in_ms_and_no_per_chunk_gap() -> None:
    s = _one(GUIDELLM)
    v = s.values
    assert v["ttft_p50_ms"] == pytest.approx(22.4087, abs=1e-3) and v["ttft_p99_ms"] == pytest.approx(54.913, abs=1e-2)
    assert v["e2e_p50_ms"] == pytest.approx(272.601, abs=1e-2)  # request_latency is in seconds in its file
    assert v["tpot_p99_ms"] == pytest.approx(1.13891, abs=1e-4)
    assert v["inter_chunk_p99_ms"] == NOT_MEASURED and v["itl_p99_ms"] == NOT_MEASURED
    assert v["output_tps"] == pytest.approx(12497.65, abs=0.01)
    assert any("TTFT included" in d for d in s.definitions)


def test_a_scorecard_of_three_tools_names_every_difference_and_ranks_none() -> None:
    systems = [s for p in (VLLM, GUIDELLM, AIPERF) for s in load_any(str(p))]
    card = scorecard(systems)
    assert card["comparable"] is False and any(r.startswith("tool differs") for r in card["reasons"])
    assert all(r["best"] is None for r in card["rows"])
    assert sum("own send" in w for w in card["warnings"]) == 3
    assert [x["tool"] for x in card["systems"]] == ["vllm bench serve (vllm)", "GuideLLM 0.8.1", "AIPerf 0.13.0"]


def test_cli_compare_reads_peer_files_and_refuses_a_foreign_json_in_one_line(tmp_path: Path) -> None:
    r = CliRunner().invoke(main, ["compare", str(VLLM), str(AIPERF), "--out", str(tmp_path / "c")])
    assert r.exit_code == 0, r.output
    assert "13.83" in r.output and "118.41" in r.output and "note:" in r.output
    card = json.loads((tmp_path / "c" / "scorecard.json").read_text())
    assert {x["tool"] for x in card["systems"]} == {"vllm bench serve (vllm)", "AIPerf 0.13.0"}
    foreign = tmp_path / "other.json"
    foreign.write_text('{"results": [1, 2, 3]}')
    r = CliRunner().invoke(main, ["compare", str(foreign), "--out", str(tmp_path / "d")])
    assert r.exit_code == 2 and "Traceback" not in r.output
    err = [ln for ln in r.output.splitlines() if ln.startswith("Error:")]
    assert len(err) == 1 and str(foreign) in err[0] and "not a loadgen result.json" in err[0]


def test_a_peer_file_of_a_known_format_with_wrong_types_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "vllm.json"
    doc = json.loads(VLLM.read_text())
    doc["max_concurrency"] = {"oops": 1}
    doc["completed"] = "many"
    bad.write_text(json.dumps(doc))
    s = peer_systems(bad)  # odd values read as "not measured", never a traceback
    assert s is not None and s[0].values["error_rate"] == NOT_MEASURED
    guide = json.loads(GUIDELLM.read_text())
    guide["benchmarks"][0]["metrics"] = ["not", "a", "dict"]
    bad.write_text(json.dumps(guide))
    with pytest.raises(InputFileError) as ei:
        peer_systems(bad)
    assert "guidellm result file" in str(ei.value) and str(bad) in str(ei.value)


def test_capacity_and_plan_name_a_peer_file_in_one_line(tmp_path: Path) -> None:
    """``capacity`` and ``plan`` read sweeps (the highest load meeting an SLO), which no peer file holds: the
    refusal names the tool and where its file is read instead."""
    r = CliRunner().invoke(main, ["capacity", "ci", str(GUIDELLM)])
    err = [ln for ln in r.output.splitlines() if ln.startswith("Error:")]
    assert r.exit_code == 2 and len(err) == 1, r.output
    assert "a GuideLLM result file" in err[0] and "loadgen compare" in err[0]
