"""``--model a=0.7,b=0.3``: the mix, per-model SLO targets, and each model judged on its own requests."""

from __future__ import annotations

import pytest

from loadgen.core.errors import ConfigError
from loadgen.core.metrics import compute
from loadgen.core.slo import SLOTarget, parse_slo, per_model
from loadgen.core.types import RequestRecord, TokenEvent
from loadgen.engine.models import ModelLog
from loadgen.engine.results import Aggregator
from loadgen.sweep.config import SweepConfig
from loadgen.sweep.judge import ProbeJudge
from loadgen.workload.models import ModelMix, parse_model_mix
from loadgen.workload.spec import Workload, WorkloadOptions

MS = 1_000_000


def _rec(i: int, model: str, ttft_ms: float) -> RequestRecord:
    r = RequestRecord(index=i, phase="measure", scheduled_ns=i * MS, sent_ns=i * MS, status="ok", model=model)
    t = i * MS + round(ttft_ms * MS)
    r.events = [TokenEvent(t, "a"), TokenEvent(t + MS, "b")]
    r.end_ns, r.completion_tokens, r.finish_reason = t + 2 * MS, 2, "length"
    return r


def test_parse_and_pick() -> None:
    assert parse_model_mix("only-one") is None
    mix = parse_model_mix("a=0.7,b=0.3", seed=5)
    assert mix == ModelMix(("a", "b"), (0.7, 0.3), 5)
    assert parse_model_mix("x,y,z").weights == pytest.approx((1 / 3,) * 3)  # type: ignore[union-attr]  # a mix
    for bad in ("a=0,b=1", "a=1,a=2", "a=x,b"):
        with pytest.raises(ConfigError, match="--model"):
            parse_model_mix(bad)
    picks = [mix.pick(i) for i in range(10_000)]
    assert 0.68 < picks.count("a") / 10_000 < 0.72
    assert picks == [ModelMix(("a", "b"), (0.7, 0.3), 5).pick(i) for i in range(10_000)]  # the same on a rerun
    wl = Workload(WorkloadOptions(input_tokens=8, output_tokens=2, model_mix=mix, salt="s"))
    assert [wl.spec(i).model for i in range(50)] == picks[:50]


def test_targets_per_model() -> None:
    t = parse_slo("ttft:p99<=300ms@lora-a")
    assert t.model == "lora-a" and t.label == "ttft:p99<=300ms@lora-a"
    assert t.applies("lora-a") and not t.applies("base") and parse_slo("ttft:p99<=300ms").applies("base")
    got = per_model([parse_slo("ttft:p90<=50ms"), t], ("base", "lora-a"))
    assert [x.label for x in got] == ["ttft:p90<=50ms@base", "ttft:p90<=50ms@lora-a", "ttft:p99<=300ms@lora-a"]
    with pytest.raises(ConfigError, match="not a model of --model"):
        per_model([parse_slo("ttft:p99<=1s@other")], ("base", "lora-a"))
    assert SweepConfig(slos=got, min_model_share=0.25).needed_requests() == 4 * SweepConfig(slos=got).needed_requests()


def test_each_model_judged_on_its_own_requests() -> None:
    slos = per_model([SLOTarget("ttft", 90.0, 50 * MS)], ("fast", "slow"))
    agg = Aggregator(slos)
    judge = ProbeJudge(slos, 100, 0.975)
    log = ModelLog(ModelMix(("fast", "slow"), (0.5, 0.5)), slos, None)
    for i in range(40):  # "slow" misses its TTFT target every time; "fast" never does
        rec = _rec(i, "fast" if i % 2 else "slow", 10 if i % 2 else 80)
        m = compute(rec)
        agg.add(rec, m)
        judge.on_record(rec, m)
        log.add(rec, m)
    slo = agg.slo_result()
    assert slo is not None
    by = {e["target"]: e for e in slo["targets"]}
    assert by["ttft:p90<=50ms@fast"]["met"] and by["ttft:p90<=50ms@fast"]["denominator"] == 20
    assert not by["ttft:p90<=50ms@slow"]["met"] and by["ttft:p90<=50ms@slow"]["exceedances"] == 20
    assert not slo["met"] and slo["conforming_requests"] == 20  # the fast model's requests conform
    counts = {tj.target.label: (tj.k, tj.n) for tj in judge.targets}
    assert counts == {"ttft:p90<=50ms@fast": (0, 20), "ttft:p90<=50ms@slow": (20, 20)}
    res = log.results(agg.window(), open_loop=True)
    assert res["models"]["fast"]["slo"]["met"] and not res["models"]["slow"]["slo"]["met"]
    assert res["models"]["fast"]["slo"]["targets"][0]["target"] == "ttft:p90<=50ms"  # as its own run states it
    assert res["slo_every_model"] is False
    flip = agg.slo_flip(0.5, from_schedule=True)  # lags aligned per target
    assert {t["target"] for t in flip["targets"]} == {"ttft:p90<=50ms@fast", "ttft:p90<=50ms@slow"}
    log.close()
