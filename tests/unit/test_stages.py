"""``--stages``: parsing, the staged open-loop schedule and each request's stage (loadgen.engine.stages)."""

from __future__ import annotations

import numpy as np
import pytest

from loadgen.core.errors import ConfigError
from loadgen.engine.runplan import LoadConfig, build_plan
from loadgen.engine.stages import Stage, StageLog, open_loop_stage_offsets, parse_stages, stage_starts_ns
from loadgen.workload.arrivals import Arrivals


def test_parse_rates_and_users() -> None:
    assert parse_stages("10:60s,20:1m") == (Stage(60.0, rate_rps=10.0), Stage(60.0, rate_rps=20.0))
    assert parse_stages("c=8:30s, c=16:30s") == (Stage(30.0, concurrency=8), Stage(30.0, concurrency=16))


@pytest.mark.parametrize(
    "text, says",
    [
        ("10:60s,c=8:30s", "not both"),
        ("10", "entry 1 '10'"),
        ("10:60s,abc:5s", "entry 2"),
        ("0:10s", "rate must be > 0"),
        ("c=1.5:10s", "whole number"),
        ("10:0s", "duration must be > 0"),
    ],
)
def test_parse_refuses_in_one_line(text: str, says: str) -> None:
    with pytest.raises(ConfigError, match=says.replace("'", ".")):
        parse_stages(text)


def test_open_loop_offsets_offer_each_stage_exactly_within_its_span() -> None:
    stages = parse_stages("10:4s,40:2s,5:4s")
    offs, warm = open_loop_stage_offsets(stages, Arrivals(warmup_s=1.0), seed=3)
    assert int(warm.sum()) == 10  # the first stage's rate over the 1 s warm-up
    starts = stage_starts_ns(stages, 1.0)
    assert starts == [1_000_000_000, 5_000_000_000, 7_000_000_000, 11_000_000_000]
    meas = offs[~warm]
    assert np.all(np.diff(offs) >= 0)
    for k, s in enumerate(stages):
        inside = meas[(meas >= starts[k]) & (meas < starts[k + 1])]
        assert inside.size == round(s.rate_rps * s.duration_s)  # type: ignore[operator]  # rate stages
        # conditioned on the stage's rate: (n - 1) / span
        assert (inside.size - 1) / ((inside[-1] - inside[0]) / 1e9) == pytest.approx(s.rate_rps, rel=1e-6)
    assert offs[warm].max() < starts[0]


def test_build_plan_and_the_rules() -> None:
    st = parse_stages("10:2s,20:2s")
    plan = build_plan(LoadConfig(rate_rps=15.0, duration_s=4.0, stages=st, input_tokens=8, output_tokens=4))
    assert plan.mode == "open" and len(plan.schedule) == 60
    closed = build_plan(
        LoadConfig(concurrency=8, duration_s=4.0, stages=parse_stages("c=2:2s,c=8:2s"), input_tokens=8, output_tokens=4)
    )
    assert closed.mode == "closed" and closed.stages == ((0, 2), (2_000_000_000, 8))
    with pytest.raises(ConfigError, match="clashes with --requests"):
        LoadConfig(rate_rps=15.0, requests=10, stages=st).validate()
    with pytest.raises(ConfigError, match="--warmup as a time"):
        LoadConfig(rate_rps=15.0, duration_s=4.0, warmup_requests=5, stages=st).validate()


def test_each_request_counts_in_the_stage_its_schedule_falls_in() -> None:
    log = StageLog(parse_stages("10:1s,20:1s"), 0.5, [], None)
    log.t0_ns = 1_000
    assert [log.stage_of(1_000 + t) for t in (0, 499_999_999, 500_000_000, 1_499_999_999, 1_500_000_000, 2_500_000_000)] == [
        None, None, 0, 0, 1, None,
    ]  # fmt: skip
    log.close()
