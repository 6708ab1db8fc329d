"""An interrupted sweep without a server (issue 20 item 11): the rule of
:mod:`loadgen.sweep.verdict` on a probe's counts, no extension after an interrupt, the second
signal, and the answer's words. The CLI as the user types it: tests/integration/test_sweep_interrupt.py.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import loadgen.sweep.probe as probe_mod
from loadgen.core.metrics import compute
from loadgen.engine.runplan import LoadConfig
from loadgen.sweep import ProbeJudge, Sweep, SweepConfig
from loadgen.sweep.config import SweepContext
from loadgen.sweep.probe import _finish_probe, run_probe
from loadgen.sweep.verdict import INTERRUPTED, interrupted_answer, probe_verdict_text, text_of
from tests.fixtures.run_results import run_result
from tests.unit.test_sweep_logic import MS, P90, FakeRunner, feed, rec, result


def finish(j: ProbeJudge, results: list[dict[str, Any]], interrupted: bool) -> Any:
    scfg = SweepConfig(slos=[t.target for t in j.targets], probe_duration_s=2.0)
    return _finish_probe(
        j, scfg, [run_result(r) for r in results], 50.0, Path("probe-x"), 2.0, len(results), None, interrupted
    )


# --------------------------------------------------------------------------- the rule on counts


def test_an_interrupted_probe_has_no_verdict_whatever_its_counts() -> None:
    # 0 of 100 over decides PASS for p90 on its counts; interrupted, it earns nothing
    j = ProbeJudge([P90], n_cap=300, confidence=0.95)
    feed(j, *[rec(i, first=10 * MS) for i in range(100)])
    assert finish(j, [result()], interrupted=False).verdict == "pass"
    p = finish(j, [result()], interrupted=True)
    assert (p.verdict, p.low_confidence) == ("interrupted", False)
    assert [t["verdict_text"] for t in p.targets] == [INTERRUPTED]
    assert "point_estimate" not in p.targets[0]
    assert not any("PASS" in r or "FAIL" in r for r in p.reasons), p.reasons
    assert probe_verdict_text(p.verdict, low_confidence=p.low_confidence, stopped_early=False) == INTERRUPTED


def test_an_interrupted_probe_is_neither_a_point_estimate_nor_invalid_nor_a_server_fail() -> None:
    j = ProbeJudge([P90], n_cap=300, confidence=0.95)
    feed(j, *[rec(i, first=(80 if i < 8 else 10) * MS) for i in range(100)])  # undecided: a point estimate
    assert finish(j, [result()], interrupted=True).verdict == "interrupted"
    j = ProbeJudge([P90], n_cap=300, confidence=0.95)
    feed(j, *[rec(i, first=10 * MS) for i in range(100)])
    p = finish(j, [result(valid=False)], interrupted=True)  # the client's timing failed too
    assert p.verdict == "interrupted" and p.validity_detail  # the detail is kept, the verdict is not INVALID
    j = ProbeJudge([P90], n_cap=300, confidence=0.95)
    feed(j, *[rec(i, status="error", error_kind="http_error", end=MS) for i in range(100)])
    assert finish(j, [result(valid=False)], interrupted=True).verdict == "interrupted"


def test_older_sweep_json_words_for_an_interrupted_probe() -> None:
    assert text_of({"verdict": "interrupted"}) == INTERRUPTED


# --------------------------------------------------------------------------- no extension after a stop


def _fake_measure(calls: list[bool], n: int) -> Any:
    """``measure`` that feeds ``n`` conforming records per segment (3 x 8: fewer than the 29 p90 needs)."""

    async def fake(endpoint: Any, load: LoadConfig, out_dir: Path, **kw: Any) -> Any:
        calls.append(True)
        for i in range(n):
            r = rec(1000 * len(calls) + i, scheduled=i * 100 * MS, first=i * 100 * MS + 10 * MS)
            kw["on_record"](r, compute(r))
        res = result()
        res.update(interrupted=False, counts={"requests": n, "errors_by_kind": {}}, client={})
        return SimpleNamespace(result=run_result(res))

    return fake


@pytest.mark.parametrize("stopped", [False, True])
def test_an_undecided_probe_is_not_extended_once_the_sweep_is_stopped(
    monkeypatch: pytest.MonkeyPatch, stopped: bool
) -> None:
    calls: list[bool] = []
    monkeypatch.setattr(probe_mod, "measure", _fake_measure(calls, 8))
    scfg = SweepConfig(slos=[P90], probe_duration_s=2.0, max_extensions=2)
    p = asyncio.run(
        run_probe(
            SweepContext(None, LoadConfig(), scfg, {}),  # type: ignore[arg-type]  # the fake measure sends nothing
            5.0,
            Path("probe-x"),
            index=1,
            stop_requested=lambda: stopped,
        )
    )
    if stopped:
        assert (len(calls), p.segments, p.verdict, p.verdict_text) == (1, 1, "interrupted", INTERRUPTED)
    else:  # the control: undecided, so extended twice, then a point estimate
        assert (len(calls), p.segments, p.verdict_text) == (3, 3, "PASS (point estimate)")


# --------------------------------------------------------------------------- the signals


def test_the_second_interrupt_cancels_what_is_in_flight() -> None:
    sw = Sweep.__new__(Sweep)  # only the interrupt state: no endpoint
    sw.interrupted = sw.cancelled = False
    said: list[str] = []
    sw.progress = said.append
    r = FakeRunner()
    sw._set_runner(r)  # type: ignore[arg-type]  # a stand-in runner
    sw.interrupt()
    assert r.stops == [(True, False)]  # drain
    sw.interrupt()
    assert r.stops[-1] == (True, True) and r.cancel_reason == "in flight at a second interrupt"  # type: ignore[attr-defined]  # set by the sweep
    late = FakeRunner()
    sw._set_runner(late)  # type: ignore[arg-type]  # a run started after it: cancelled at once too
    assert late.stops == [(True, True)]
    assert len(said) == 2 and "interrupt again" in said[0]


# --------------------------------------------------------------------------- the answer's words


def sweep_doc(lo: float | None, hi: float | None, **answer: Any) -> dict[str, Any]:
    probes = [{"verdict": "pass"}] * (lo is not None) + [{"verdict": "fail"}] * (hi is not None)
    a = {"bracket_rps": [lo, hi], "max_rate_rps": lo, "output_tps": 100.0, "goodput_rps": 4.5, **answer}
    return {"interrupted": True, "slo": [{"target": "ttft:p90<=500ms"}], "answer": a, "probes": probes}


def test_interrupted_answer_is_at_most_a_bracket_or_a_lower_bound() -> None:
    line = interrupted_answer(sweep_doc(10.0, 20.0))
    assert line.startswith("interrupted: the search stopped after 2 decided probes;")
    assert "10.00 req/s met ttft:p90<=500ms and 20.00 req/s failed: the answer lies in 10.00..20.00 req/s" in line
    line = interrupted_answer(sweep_doc(10.0, None))
    assert "10.00 req/s met ttft:p90<=500ms: a lower bound (no higher rate was decided)" in line
    line = interrupted_answer(sweep_doc(10.0, None, untested_above_rps=40.0))
    assert "rates above 40.00 req/s could not be tested by this client" in line
    line = interrupted_answer(sweep_doc(None, 20.0))
    assert "no rate tested met ttft:p90<=500ms (20.00 req/s failed; no lower rate was decided): no answer" in line
    assert "even the lowest" not in line
    assert interrupted_answer(sweep_doc(None, None)).endswith(
        "after 0 decided probes; no answer (no probe was decided)"
    )
    doc = sweep_doc(None, None, concurrency=8, request_rps=3.0, point_estimate=True)
    doc["probes"] = [{"verdict": "pass", "concurrency": 8}, {"verdict": "interrupted", "concurrency": 16}]
    assert "8 users met ttft:p90<=500ms (a point estimate): a lower bound" in interrupted_answer(doc)
    doc["answer"]["concurrency"] = None
    doc["probes"][0]["verdict"] = "fail"
    assert interrupted_answer(doc).endswith("; no user count tested met ttft:p90<=500ms: no answer")


def test_an_interrupted_sweep_is_said_on_the_scorecard(tmp_path: Path) -> None:
    from loadgen.report.compare import load_system, scorecard, write_outputs
    from tests.unit.test_compare import _sweep

    a_dir = _sweep(tmp_path / "a", out_tokens=128, rate=10, out_tps=1000, cost=None, joules=None)
    doc = json.loads((a_dir / "sweep.json").read_text())
    doc["interrupted"] = True
    doc["probes"].append({"offered_rps": 20.0, "verdict": "interrupted", "verdict_text": INTERRUPTED, "dir": "p2"})
    (a_dir / "sweep.json").write_text(json.dumps(doc))
    b_dir = _sweep(tmp_path / "b", out_tokens=128, rate=12, out_tps=1200, cost=None, joules=None)
    systems = [load_system(str(a_dir)), load_system(str(b_dir))]
    card = scorecard(systems)
    said = [w for w in card["warnings"] if "interrupted" in w]
    assert said == [
        "a: the sweep was interrupted: its answer is at most the lower bound or bracket its decided probes show"
    ]
    assert systems[0].curve_states == ["pass", "invalid"]  # the interrupted probe: no verdict, not drawn as one
    write_outputs(card, systems, tmp_path / "out")
    assert "the sweep was interrupted" in (tmp_path / "out" / "scorecard.html").read_text()
