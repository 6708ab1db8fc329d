"""``loadgen run`` offers what was asked and says when its server did not keep up (issue 30 item 4).

The schedule: ``--rate R --duration D`` is round(R x D) requests conditioned on that count
(``LoadConfig.exact_rate``, the sweep probes' definition). The keep-up rule
(:mod:`loadgen.engine.keepup`) on the simulated endpoint's own model on its virtual clock
(:func:`loadgen.sim.model.simulate`) and on hand-made cases.
"""

from __future__ import annotations

import math
from typing import cast

import numpy as np
import pytest

from loadgen.core.schedule import Schedule
from loadgen.engine.keepup import COMPLETIONS_SLACK, judge_keep_up
from loadgen.engine.open_loop import realized_send_rps
from loadgen.engine.runplan import LoadConfig, build_plan
from loadgen.sim.model import SimParams, simulate
from loadgen.workload.arrivals import arrival_offsets_array

MD1 = SimParams(slots=1, ttft_ms=50, itl_ms=2)  # 100 ms per request (26 tokens), one at a time: 10 req/s


def schedule_of(cfg: LoadConfig) -> Schedule:
    return cast(Schedule, build_plan(cfg).schedule)  # an open-loop plan has a Schedule


@pytest.mark.parametrize(
    ("rate", "duration", "arrival"), [(10.0, 30.0, "poisson"), (20.0, 3.0, "gamma"), (7.3, 11.0, "poisson")]
)
def test_a_run_for_a_duration_offers_round_rate_times_duration_at_the_rate(
    rate: float, duration: float, arrival: str
) -> None:
    for seed in range(5):
        cfg = LoadConfig(rate_rps=rate, duration_s=duration, arrival=arrival, burstiness=0.5 if arrival == "gamma" else 1.0,
                         seed=seed, exact_rate=True, salt="t")  # fmt: skip
        sched = schedule_of(cfg)
        assert len(sched) == round(rate * duration) and not sched.warm.any()
        assert realized_send_rps(sched) == pytest.approx(rate, rel=1e-6)
        assert np.all(np.diff(sched.offsets_ns) >= 0)
    # before: a plain Poisson count over 30 s at 10 req/s, 264 requests for seed 0 (8.77 req/s)
    assert arrival_offsets_array("poisson", 10.0, duration_s=30.0, seed=0).size == 264


def test_warm_up_seconds_ride_before_the_exact_count() -> None:
    cfg = LoadConfig(rate_rps=10.0, duration_s=30.0, warmup_s=2.0, seed=3, exact_rate=True, salt="t")
    sched = schedule_of(cfg)
    assert int(sched.warm.sum()) == 20 and int((~sched.warm).sum()) == 300
    assert realized_send_rps(sched) == pytest.approx(10.0, rel=1e-6)
    assert cfg.exact_requests() == (300, 20)


def test_a_request_count_is_offered_at_the_rate_and_the_library_default_is_unchanged() -> None:
    sched = schedule_of(LoadConfig(rate_rps=10.0, requests=100, seed=0, exact_rate=True, salt="t"))
    assert len(sched) == 100 and realized_send_rps(sched) == pytest.approx(10.0, rel=1e-6)
    plain = schedule_of(LoadConfig(rate_rps=10.0, requests=100, seed=0, salt="t"))
    assert realized_send_rps(plain) == pytest.approx(8.43, abs=0.01)  # the issue's --rate 10 --requests 100
    assert LoadConfig(rate_rps=10.0, duration_s=30.0).exact_requests() is None  # exact_rate off
    assert LoadConfig(rate_rps=10.0, duration_s=1.0, exact_rate=True, workload=None).exact_requests() == (10, 0)
    assert LoadConfig(rate_rps=0.1, duration_s=1.0, exact_rate=True).exact_requests() == (1, 0)  # never 0


def run_model(params: SimParams, rate: float, seconds: float, seed: int) -> dict | None:
    """The keep-up block of one virtual open-loop run at ``rate`` (exact-rate Poisson sends)."""
    sched = schedule_of(LoadConfig(rate_rps=rate, duration_s=seconds, seed=seed, exact_rate=True, salt="t"))
    res = simulate([(int(o), 16, 26) for o in sched.offsets_ns], params)
    s = np.array([r.arrival_ns for r in res], dtype=np.float64)
    end = np.array([r.end_ns for r in res], dtype=np.float64)
    first = np.array([r.first_token_ns for r in res], dtype=np.float64)
    tpot = np.array([(r.end_ns - r.first_token_ns) / (r.output_tokens - 1) for r in res], dtype=np.float64)
    n = s.size
    window_end = s[0] + (s[-1] - s[0]) * n / (n - 1)
    return judge_keep_up(s, end, first, tpot, window_end)


def test_a_stable_server_kept_up() -> None:
    # M/D/1 at 60 % of its capacity, 20 s: the tail explains the few requests unfinished at the window's end
    verdicts = [run_model(MD1, 6.0, 20.0, seed) for seed in range(20)]
    assert all(v is not None for v in verdicts)
    kept = [v for v in verdicts if v and v["kept_up"]]
    assert len(kept) >= 19
    for v in kept:
        assert v["completions_fraction"] >= v["completions_expected_fraction"] - COMPLETIONS_SLACK
        assert v["detail"].startswith("the server kept up: completions ")


def test_an_overloaded_server_did_not_keep_up() -> None:
    # 130 % of capacity over 20 s: a queue that grows for the whole run
    for seed in range(10):
        v = run_model(MD1, 13.0, 20.0, seed)
        assert v is not None and not v["kept_up"], v
        assert any("first_token_delay rising" in r for r in v["reasons"])
        assert v["ttft_p50_last_s"] > 5 * v["ttft_p50_first_s"]
        assert v["detail"].startswith("the server did not keep up: completions ")
        assert " % of sends" in v["detail"] and "TTFT p50 " in v["detail"] and " → " in v["detail"]


def test_completions_short_of_the_tail_are_not_keeping_up() -> None:
    # 100 requests over 10 s, 50 ms each; the server stops answering halfway: no trend can be taken
    # past it (no first tokens), but half the sends never complete
    s = np.arange(100) * 1e8
    end = s + 5e7
    first = s + 4e7
    tpot = np.full(100, 1e6)
    end[50:], first[50:], tpot[50:] = math.nan, math.nan, math.nan
    v = judge_keep_up(s, end, first, tpot, 1e10)
    assert v is not None and not v["kept_up"]
    assert v["completions_fraction"] == pytest.approx(0.5)
    assert v["completions_expected_fraction"] == pytest.approx(1.0)
    assert "short of the 100 %" in v["reasons"][0]
    # the same server answering everything kept up
    ok = judge_keep_up(s, s + 5e7, s + 4e7, np.full(100, 1e6), 1e10)
    assert ok is not None and ok["kept_up"] and ok["completions_fraction"] == 1.0 and ok["reasons"] == []


def test_a_long_steady_tail_is_explained() -> None:
    # every request takes 3 s in a 4 s window: only the first quarter can finish in it, as expected
    s = np.linspace(0, 3.96e9, 100)
    v = judge_keep_up(s, s + 3e9, s + 1e8, np.full(100, 2e7), 4e9)
    assert v is not None and v["kept_up"], v
    assert v["completions_fraction"] == pytest.approx(v["completions_expected_fraction"])
    assert judge_keep_up(np.zeros(0), np.zeros(0), np.zeros(0), np.zeros(0), 0.0) is None
