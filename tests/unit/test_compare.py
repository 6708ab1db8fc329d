"""Scorecard: comparability check, ranking withheld, 'not measured' rows, exact formulas."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loadgen.errors import InputFileError
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
        "config": {"model": "m", "api": "completions", "input_tokens": 128, "output_tokens": out_tokens, "arrival": "poisson", "latency_origin": "scheduled"},
        "conditions": {"endpoint": {"model": "m", "api": "completions", "stream": True}},
        "answer": {
            "max_rate_rps": rate, "output_tps": out_tps, "goodput_rps": rate * 0.99,
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
