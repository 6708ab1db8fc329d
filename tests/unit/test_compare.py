"""Scorecard: comparability check, ranking withheld, 'not measured' rows, exact formulas."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loadgen.core.errors import InputFileError
from loadgen.report.compare import NOT_MEASURED, load_system, scorecard, write_outputs


def _sweep(d: Path, *, out_tokens: int, rate: float, out_tps: float, cost: float | None, joules: float | None) -> Path:
    d.mkdir(parents=True)
    probe = d / "probe-01"
    probe.mkdir()
    res = {
        "schema_version": 1,
        "counts": {"requests": 400, "failed": 4},
        "tokens": {"output": 12000},
        "latency_ms": {m: {"p50": 10.0, "p99": 20.0} for m in ("ttft", "tpot", "itl", "e2e")},
    }
    if joules is not None:
        res["energy"] = {"joules": joules}
    (probe / "result.json").write_text(json.dumps(res))
    doc = {
        "schema_version": 1,
        "slo": [{"target": "ttft:p99<=300ms", "metric": "ttft", "percentile": 99.0, "threshold_ms": 300.0}],
        "config": {
            "model": "m",
            "api": "completions",
            "input_tokens": 128,
            "output_tokens": out_tokens,
            "arrival": "poisson",
            "latency_origin": "scheduled",
        },
        "conditions": {"endpoint": {"model": "m", "api": "completions", "stream": True}},
        "answer": {
            "max_rate_rps": rate,
            "output_tps": out_tps,
            "goodput_rps": rate * 0.99,
            "cost_per_million_output_tokens_usd": (cost / (out_tps * 3600) * 1e6) if cost else None,
            "output_tps_per_accelerator": None,
        },
        "probes": [{"offered_rps": rate, "verdict": "pass", "dir": "probe-01", "latency_ms": {"ttft": {"p99": 20.0}}}],
    }
    (d / "sweep.json").write_text(json.dumps(doc))
    return d


def test_different_output_lengths_are_not_comparable_and_not_ranked(tmp_path: Path) -> None:
    a = load_system(str(_sweep(tmp_path / "a", out_tokens=128, rate=10, out_tps=1280, cost=3.6, joules=None)))
    b = load_system(str(_sweep(tmp_path / "b", out_tokens=256, rate=8, out_tps=2048, cost=None, joules=None)))
    card = scorecard([a, b])
    assert card["comparable"] is False
    assert any(r.startswith("output_tokens differs") for r in card["reasons"])
    assert all(r["best"] is None for r in card["rows"])
    forced = scorecard([a, b], force=True)
    assert forced["forced"] is True
    assert next(r for r in forced["rows"] if r["key"] == "max_rate_rps")["best"] == "a"


def test_rows_from_inputs_exact_and_not_measured(tmp_path: Path) -> None:
    a = load_system(str(_sweep(tmp_path / "a", out_tokens=128, rate=10, out_tps=1000, cost=3.6, joules=6000.0)))
    b = load_system(str(_sweep(tmp_path / "b", out_tokens=128, rate=12, out_tps=1200, cost=None, joules=None)))
    card = scorecard([a, b])
    assert card["comparable"] is True
    rows = {r["key"]: r for r in card["rows"]}
    # $3.60 per hour at 1000 output tok/s -> $1.00 per million output tokens
    assert rows["cost_per_million_output_tokens_usd"]["values"] == {"a": pytest.approx(1.0), "b": NOT_MEASURED}
    # 12000 output tokens over 6000 J -> 2 tokens per joule
    assert rows["output_tokens_per_joule"]["values"] == {"a": 2.0, "b": NOT_MEASURED}
    assert rows["max_rate_rps"]["best"] == "b"
    assert rows["error_rate"]["values"]["a"] == 0.01
    write_outputs(card, [a, b], tmp_path / "out")
    assert json.loads((tmp_path / "out" / "scorecard.json").read_text())["schema_version"] == 1
    assert (tmp_path / "out" / "scorecard.csv").read_text().startswith("metric,a,b,best")
    assert "loadgen scorecard" in (tmp_path / "out" / "scorecard.html").read_text()


def test_bad_input_names_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "sweep.json"
    bad.write_text("{not json")
    with pytest.raises(InputFileError) as e:
        load_system(str(bad))
    assert str(bad) in str(e.value)
    with pytest.raises(InputFileError):
        load_system(str(tmp_path / "missing"))


def test_quality_sustained_and_interactivity_rows(tmp_path: Path) -> None:
    from loadgen.engine.timeseries import series

    a_dir = _sweep(tmp_path / "a", out_tokens=128, rate=10, out_tps=1000, cost=None, joules=None)
    b_dir = _sweep(tmp_path / "b", out_tokens=128, rate=12, out_tps=1200, cost=None, joules=None)
    # a: a concurrency sweep with a drifting answer probe and a check.json next to it
    doc = json.loads((a_dir / "sweep.json").read_text())
    doc["answer"].update(max_rate_rps=None, concurrency=4, request_rps=9.5)
    doc["probes"] = [
        {"offered_rps": 0.0, "concurrency": 2, "request_rps": 5.0, "verdict": "pass", "dir": "probe-00",
         "latency_ms": {"ttft": {"p99": 10.0}}},
        {"offered_rps": 0.0, "concurrency": 4, "request_rps": 9.5, "verdict": "pass", "dir": "probe-01",
         "latency_ms": {"ttft": {"p99": 20.0}}},
    ]  # fmt: skip
    doc["interactivity"] = [
        {"concurrency": 2, "per_user_output_tps": 50.0, "output_tps": 100.0, "meets_slo": True},
        {"concurrency": 4, "per_user_output_tps": 40.0, "output_tps": 160.0, "meets_slo": True},
    ]
    (a_dir / "sweep.json").write_text(json.dumps(doc))
    lines = [{"phase": "measure", "scheduled_s": float(i), "sent_s": float(i), "status": "ok",
              "ttft_ms": 300.0 if i >= 20 else 100.0, "e2e_ms": 500.0, "output_tokens": 10} for i in range(30)]  # fmt: skip
    res = json.loads((a_dir / "probe-01" / "result.json").read_text())
    res["timeseries"] = series(lines)
    (a_dir / "probe-01" / "result.json").write_text(json.dumps(res))
    check = {"kind": "loadgen-check", "schema_version": 1, "settings": {"load": "one request at a time"},
             "agreement": {"first_token_agreement": 1.0, "exact_match_rate": 0.75, "mean_lcp_tokens": 12.5,
                           "output_length_agreement": 1.0, "token_unit": "token_ids"},
             "reference": {"source": "ref/check.json"}, "summary": {"accuracy": {"accuracy": 0.5}}}  # fmt: skip
    (a_dir / "check.json").write_text(json.dumps(check))
    a, b = load_system(str(a_dir)), load_system(str(b_dir))
    card = scorecard([a, b])
    rows = {r["key"]: r for r in card["rows"]}
    assert rows["max_concurrency"]["values"] == {"a": 4, "b": NOT_MEASURED}
    assert rows["max_rate_rps"]["values"]["a"] == 9.5  # closed loop: the rate achieved at the answer
    assert rows["quality_exact_match_rate"]["values"] == {"a": 0.75, "b": NOT_MEASURED}
    assert rows["quality_accuracy"]["values"] == {"a": 0.5, "b": NOT_MEASURED}
    assert rows["quality_exact_match_rate"]["best"] is None  # one measured value: nothing to rank
    assert rows["sustained"]["values"]["a"].startswith("drifting (ttft_p50_ms +")
    assert rows["sustained"]["values"]["b"] == NOT_MEASURED
    assert rows["sustained_ttft_p50_change"]["values"]["a"] == pytest.approx(2.0, rel=2e-3)
    assert card["warnings"] == [f"a drifts over its run: {a.drift['reason']}"]
    assert card["interactivity"]["a"][1]["per_user_output_tps"] == 40.0 and "b" not in card["interactivity"]
    assert card["checks"]["a"]["reference"] == "ref/check.json"
    write_outputs(card, [a, b], tmp_path / "out")
    page = (tmp_path / "out" / "scorecard.html").read_text()
    assert "Drift:" in page and "quality: exact-match rate" in page
    # a tie among all systems marks no best
    tie = scorecard([b, load_system(str(b_dir), label="b2")])
    assert next(r for r in tie["rows"] if r["key"] == "max_rate_rps")["best"] is None


def test_cli_compare_check_flag(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from loadgen.cli import main

    a = _sweep(tmp_path / "a", out_tokens=128, rate=10, out_tps=1000, cost=None, joules=None)
    b = _sweep(tmp_path / "b", out_tokens=128, rate=12, out_tps=1200, cost=None, joules=None)
    chk = tmp_path / "elsewhere.json"
    chk.write_text(json.dumps({"kind": "loadgen-check", "agreement": {"exact_match_rate": 0.5}, "summary": {}}))
    r = CliRunner().invoke(
        main, ["compare", str(a), str(b), "--check", "-", "--check", str(chk), "--out", str(tmp_path / "o")]
    )
    assert r.exit_code == 0, r.output
    rows = {x["key"]: x for x in json.loads((tmp_path / "o" / "scorecard.json").read_text())["rows"]}
    assert rows["quality_exact_match_rate"]["values"] == {"a": NOT_MEASURED, "b": 0.5}
    r = CliRunner().invoke(main, ["compare", str(a), str(b), "--check", str(chk)])
    assert r.exit_code == 2 and "--check given 1 times for 2 results" in r.output


def test_zero_itl_from_multi_token_chunks_is_not_ranked_best(tmp_path: Path) -> None:
    a = load_system(str(_sweep(tmp_path / "a", out_tokens=128, rate=10, out_tps=1000, cost=None, joules=None)))
    b = load_system(str(_sweep(tmp_path / "b", out_tokens=128, rate=12, out_tps=1200, cost=None, joules=None)))
    c = load_system(str(_sweep(tmp_path / "c", out_tokens=128, rate=12, out_tps=1200, cost=None, joules=None)))
    a.values["itl_p50_ms"] = 0.0  # half its tokens came with the token before (buffered chunks)
    b.values["itl_p50_ms"] = 12.0
    c.values["itl_p50_ms"] = 9.0
    card = scorecard([a, b, c])
    rows = {r["key"]: r for r in card["rows"]}
    assert rows["itl_p50_ms"]["values"]["a"] == 0.0  # shown as measured...
    assert rows["itl_p50_ms"]["best"] == "c"  # ...but never the best
    assert any(w.startswith("a: ITL p50") and "not ranked" in w for w in card["warnings"])
    a.values["itl_p50_ms"] = 5.0
    assert {r["key"]: r for r in scorecard([a, b, c])["rows"]}["itl_p50_ms"]["best"] == "a"


def test_a_point_estimate_answer_is_said_on_the_scorecard(tmp_path: Path) -> None:
    # issue 23: a point-estimate answer is labelled in every place it is shown, the scorecard included
    a_dir = _sweep(tmp_path / "a", out_tokens=128, rate=10, out_tps=1000, cost=None, joules=None)
    doc = json.loads((a_dir / "sweep.json").read_text())
    doc["answer"].update(point_estimate=True, verdict_text="PASS (point estimate)")
    (a_dir / "sweep.json").write_text(json.dumps(doc))
    b = load_system(str(_sweep(tmp_path / "b", out_tokens=128, rate=12, out_tps=1200, cost=None, joules=None)))
    card = scorecard([load_system(str(a_dir)), b])
    said = [w for w in card["warnings"] if "point estimate" in w]
    assert said == [
        "a: the answer is PASS (point estimate): its probe did not hold the requests needed to decide "
        "the percentile at the chosen confidence"
    ]
    write_outputs(card, [load_system(str(a_dir)), b], tmp_path / "out")
    assert "PASS (point estimate)" in (tmp_path / "out" / "scorecard.html").read_text()
