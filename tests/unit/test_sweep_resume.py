"""A sweep resumed from its directory (issue 35, item 3), in virtual time: probes whose verdict is a
function of their rate (PASS up to 10 req/s), no server. A sweep killed at its fourth probe and resumed
reads its three finished probes (never run again), and its remaining decisions are those of the
uninterrupted sweep given the same verdicts."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

import loadgen.sweep.search as search_mod
from loadgen.engine.runplan import LoadConfig
from loadgen.sweep import Sweep, SweepConfig
from loadgen.sweep.probe import Probe
from loadgen.sweep.resume import PROBES_LOG, Replay
from tests.unit.test_sweep_logic import P90

KNEE_RPS = 10.0


def _fake_run_probe(calls: list[float]) -> Any:
    async def fake(ctx: Any, rate: float, out_dir: Path, **kw: Any) -> Probe:
        calls.append(rate)
        ok = rate <= KNEE_RPS
        return Probe(
            offered_rps=rate, verdict="pass" if ok else "fail", low_confidence=False, exceedance_fraction={},
            confidence_bounds={}, censored=0, duration_s=2.0, stopped_early=False, latency_ms={},
            achieved_send_rps=rate, request_rps=rate, output_tps=16 * rate, total_tps=32 * rate, goodput_rps=rate,
            dir=out_dir.name, verdict_text="PASS" if ok else "FAIL", e2e_p99_ms=100.0 + rate,
        )  # fmt: skip

    return fake


async def _no_starving(**_: Any) -> bool:
    return False


def _sweep(out: Path, replay: Replay | None = None) -> Sweep:
    scfg = SweepConfig(slos=[P90], probe_duration_s=2.0, precision=0.05, start_rate_rps=3.0, calibration_s=0.0,
                       unloaded_requests=0)  # fmt: skip
    out.mkdir(exist_ok=True)
    sw = Sweep(None, LoadConfig(), scfg, out, config_record={}, replay=replay)  # type: ignore[arg-type]  # no endpoint: the probes are fakes
    sw.starved.before_load = _no_starving  # type: ignore[method-assign]  # no wake-up measurement in virtual time
    return sw


def _decisions(res: dict[str, Any]) -> list[tuple[float, str]]:
    return [(p["offered_rps"], p["verdict"]) for p in res["probes"]]


def test_a_sweep_killed_at_its_fourth_probe_resumes_with_the_same_decisions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[float] = []
    monkeypatch.setattr(search_mod, "run_probe", _fake_run_probe(calls))
    full = asyncio.run(_sweep(tmp_path / "full").search()).result
    assert len(full["probes"]) >= 6 and full["answer"]["max_rate_rps"] <= KNEE_RPS
    recorded = (tmp_path / "full" / PROBES_LOG).read_text().splitlines()
    assert len(recorded) == len(full["probes"])  # each probe written as it finished

    # the same sweep, killed while its fourth probe ran: three finished probes on disk
    cut = tmp_path / "cut"
    cut.mkdir()
    (cut / PROBES_LOG).write_text("\n".join(recorded[:3]) + "\n" + recorded[3][:40])  # a torn fourth line
    calls.clear()
    sw = _sweep(cut, Replay(cut))
    resumed = asyncio.run(sw.search()).result
    assert calls == [p["offered_rps"] for p in full["probes"][3:]]  # the three were read, never run again
    assert _decisions(resumed) == _decisions(full)
    assert resumed["answer"]["max_rate_rps"] == full["answer"]["max_rate_rps"]
    assert resumed["answer"]["bracket_rps"] == full["answer"]["bracket_rps"]
    assert sw.replay is not None and sw.replay.describe()["probes_read"] == 3
    assert len((cut / PROBES_LOG).read_text().splitlines()) == len(full["probes"])  # written whole again


def test_a_recorded_probe_without_a_verdict_and_a_different_search_are_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[float] = []
    monkeypatch.setattr(search_mod, "run_probe", _fake_run_probe(calls))
    full = asyncio.run(_sweep(tmp_path / "full").search()).result
    lines = (tmp_path / "full" / PROBES_LOG).read_text().splitlines()
    second = json.loads(lines[1])
    second["verdict"] = "interrupted"  # the probe the interrupt cut: no verdict
    cut = tmp_path / "cut"
    cut.mkdir()
    (cut / PROBES_LOG).write_text(lines[0] + "\n" + json.dumps(second) + "\n")
    calls.clear()
    resumed = asyncio.run(_sweep(cut, Replay(cut)).search()).result
    assert calls[0] == full["probes"][1]["offered_rps"] and len(calls) == len(full["probes"]) - 1
    assert _decisions(resumed) == _decisions(full)
    # a log whose first probe is at another rate than this search's first: nothing is read
    other = json.loads(lines[0])
    other["offered_rps"] = 99.0
    (cut / PROBES_LOG).write_text(json.dumps(other) + "\n")
    calls.clear()
    sw = _sweep(cut, Replay(cut))
    asyncio.run(sw.search())
    assert sw.replay is not None and sw.replay.describe()["probes_read"] == 0 and sw.replay.diverged
    assert len(calls) == len(full["probes"])
