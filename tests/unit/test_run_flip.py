"""A run with SLO targets is INVALID on the client's timing only when that error could flip a verdict (issue 30).

The run's rule (docs/measurement.md, "A run's flip test"): with only timing checks failed, every request's
value is moved down by its error (its send lag for latency from the scheduled time, plus ``e``, the bound
on one stamp's lateness) and up by ``e``, and each target's exact percentile is judged again; met/not met
the same both ways: the verdict stands. Tiny exact cases in integer nanoseconds; then the aggregator's
aligned send lags, the validity block, and ``build_result`` end to end (a sweep probe's run keeps the
strict rule: its verdict is the probe's own flip test).
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from loadgen.core.metrics import compute
from loadgen.core.slo import SLOTarget
from loadgen.core.timing_error import run_flip, run_target_flip, shifted_exceedances
from loadgen.core.types import RequestRecord, TokenEvent
from loadgen.engine.lifecycle import ClientStats, RunOutcome
from loadgen.engine.results import Aggregator
from loadgen.engine.runplan import LoadConfig
from loadgen.engine.validity import ValidityBounds, needs_flip_test, validity, verdict_stands
from loadgen.measurement import build_result

MS = 1_000_000
TTFT_P50 = SLOTarget("ttft", 50.0, 100 * MS)
TPOT_P50 = SLOTarget("tpot", 50.0, 100 * MS)


def arr(*ms: float) -> np.ndarray:
    return np.asarray([v * MS for v in ms], dtype=np.float64)


# ---------------------------------------------------------------------- the rule, exact


def test_a_verdict_far_from_its_threshold_stands() -> None:
    x = run_target_flip(TTFT_P50, arr(10, 20, 30, 40), arr(0, 5, 0, 0), 2 * MS)
    assert x == {
        "target": "ttft:p50<=100ms", "met": True, "met_low": True, "met_high": True, "stands": True,
        "value_ms": 25.0, "margin_ms": 75.0,
    }  # fmt: skip


def test_a_fail_that_the_send_lag_could_explain_flips() -> None:
    # p50 of (80, 99, 103, 120) = 101 ms > 100: not met. With request 3's 5 ms send lag taken out (and
    # e = 0.5 ms): (79.5, 98.5, 97.5, 119.5) -> p50 98 ms: met. A FAIL must still be a FAIL without the lag.
    x = run_target_flip(TTFT_P50, arr(80, 99, 103, 120), arr(0, 0, 5, 0), 0.5 * MS)
    assert (x["met"], x["met_low"], x["met_high"], x["stands"]) == (False, True, False, False)
    assert x["margin_ms"] == pytest.approx(-1.0)
    # the same values as TPOT: a difference of two stamps holds no send lag, moved by e alone: 100.5 ms
    y = run_target_flip(TPOT_P50, arr(80, 99, 103, 120), arr(0, 0, 5, 0), 0.5 * MS)
    assert (y["met"], y["met_low"], y["met_high"], y["stands"]) == (False, False, False, True)


def test_a_pass_within_the_stamp_error_of_its_threshold_flips_only_where_a_stamp_can_be_early() -> None:
    # TTFT (from the scheduled time) is never under-measured: a stamp is taken after its token arrived, so a
    # PASS as measured stands however close (p50 99.5 ms, met; e = 1 ms)
    x = run_target_flip(TTFT_P50, arr(90, 99, 100, 110), np.zeros(4), 1 * MS)
    assert (x["met"], x["met_low"], x["met_high"], x["stands"]) == (True, True, True, True)
    # TPOT is a difference of two stamps, either of which can be the late one: within e of it, it flips
    tpot = SLOTarget("tpot", 50.0, 100 * MS)
    y = run_target_flip(tpot, arr(90, 99, 100, 110), np.zeros(4), 1 * MS)
    assert (y["met"], y["met_low"], y["met_high"], y["stands"]) == (True, True, False, False)
    # the threshold is inclusive: e = 0.5 ms lands exactly on it, still met
    assert run_target_flip(tpot, arr(90, 99, 100, 110), np.zeros(4), 0.5 * MS)["stands"]


def test_misses_and_unmeasured_values_do_not_move() -> None:
    # two of four failed (+inf): p50 is +inf whatever the timing, a miss stays a miss
    x = run_target_flip(TTFT_P50, arr(10, 20, math.inf, math.inf), arr(30, 30, 30, 30), 50 * MS)
    assert (x["met"], x["met_low"], x["met_high"], x["stands"], x["margin_ms"]) == (False, False, False, True, None)
    # a TPOT of 0 (one output token: not measured, conforms) is not moved up by e
    tight = SLOTarget("tpot", 50.0, 1 * MS)
    assert run_target_flip(tight, arr(0, 0, 0, 50), np.zeros(4), 2 * MS)["stands"]
    assert shifted_exceedances(arr(0, 0, 0, 50), np.zeros(4), tight, 2 * MS) == (1, 1)


def test_a_pooled_itl_point_value_moves_as_a_whole() -> None:
    # ITL: the run's verdict is the pooled per-token percentile, a point value (no counts to recount)
    itl = SLOTarget("itl", 99.0, 20 * MS)
    conform = np.zeros(100)
    near = run_target_flip(itl, conform, np.zeros(100), 1 * MS, itl_pooled_ms=20.5)
    assert (near["met"], near["met_low"], near["met_high"], near["stands"]) == (False, True, False, False)
    assert run_target_flip(itl, conform, np.zeros(100), 1 * MS, itl_pooled_ms=25.0)["stands"]
    # over 1 % of requests failed: not met however the pooled value moves
    misses = np.concatenate([np.zeros(97), np.full(3, math.inf)])
    assert run_target_flip(itl, misses, np.zeros(100), 1 * MS, itl_pooled_ms=19.9)["stands"]


def test_the_run_stands_only_when_every_target_stands_and_the_error_is_bounded() -> None:
    far = (TTFT_P50, arr(10, 20, 30, 40), np.zeros(4), None)
    near = (TPOT_P50, arr(90, 99, 100, 110), np.zeros(4), None)
    both = run_flip([far, near], 1.0)
    assert not both["stands"] and [x["stands"] for x in both["targets"]] == [True, False]
    assert both["margin_ms"] == pytest.approx(0.5) and both["stamp_error_bound_ms"] == 1.0
    assert run_flip([far], 1.0)["stands"]
    for e in (None, math.inf):  # a stamp over 1 s late, or none measured: nothing stands
        out = run_flip([far], e)
        assert not out["stands"] and out["stamp_error_bound_ms"] is None and "not bounded" in out["reason"]


# ---------------------------------------------------------------------- the aggregator and the validity block


def _aggregator(lags_ms: list[float], ttft_ms: list[float], slos: list[SLOTarget]) -> Aggregator:
    """Requests 10 ms apart (100 req/s), each sent late by its lag, first token ``ttft`` after its scheduled
    time; the last one failed (a miss on every target)."""
    agg = Aggregator(slos)
    for i, (lag, ttft) in enumerate(zip(lags_ms, ttft_ms)):
        t = 1_000 * MS + i * 10 * MS
        sent, first = t + round(lag * MS), t + round(ttft * MS)
        failed = i == len(lags_ms) - 1
        rec = RequestRecord(
            i, "measure", t, sent_ns=sent, end_ns=first + 4 * MS, status="error" if failed else "ok",
            error_kind="http_error" if failed else None, completion_tokens=0 if failed else 2,
            events=[] if failed else [TokenEvent(first, "a"), TokenEvent(first + 2 * MS, "b")],
        )  # fmt: skip
        agg.add(rec, compute(rec))
    return agg


def test_the_aggregator_keeps_each_requests_send_lag_beside_its_values() -> None:
    slo = SLOTarget("ttft", 50.0, 100 * MS)
    # p50 of (80, 99, 103, 120, +inf) = 103 ms: not met; request 2's 5 ms lag taken out -> 99.5 with e 0.5
    agg = _aggregator([0, 0, 5, 0, 1], [80, 99, 103, 120, 0], [slo])
    assert list(agg.slo_lags[slo.label].values() / MS) == [0, 0, 5, 0, 1]
    assert not agg.slo_flip(0.5, from_schedule=True)["stands"]
    # latency from the send: the lag is not in the value, so nothing is taken out
    assert agg.slo_flip(0.5, from_schedule=False)["stands"]


def _validity(agg: Aggregator, **bounds: Any) -> dict[str, Any]:
    client = ClientStats(open_loop=True, loop_lag_ms=[0.5, 1.0], schedule_realized_rps=100.0)
    return validity(agg, client, ValidityBounds(min_requests=1, min_duration_s=0, max_error_rate=1, **bounds))


def test_a_verdict_that_stands_makes_the_run_valid_and_keeps_every_check() -> None:
    slo = SLOTarget("ttft", 50.0, 5_000 * MS)
    agg = _aggregator([2, 2, 2, 2, 2], [50, 60, 70, 80, 0], [slo])
    v = _validity(agg, max_schedule_lag_p99_ms=0.001)
    assert not v["valid"] and v["limited_by"] == "client" and needs_flip_test(v)
    out = verdict_stands(v, agg.slo_flip(6.0, from_schedule=True), agg)
    assert out["valid"] and out["limited_by"] is None and "remedy" not in out
    assert out["checks"] == v["checks"]  # every check and its figure, the failed lag check included
    assert out["verdict_stands"]["stands"] and out["verdict_stands"]["stamp_error_bound_ms"] == 6.0
    # a tight SLO whose value is within the error: the run stays INVALID, with what could flip
    tight = SLOTarget("ttft", 50.0, 69 * MS)
    agg = _aggregator([2, 2, 2, 2, 2], [50, 60, 70, 80, 0], [tight])
    out = verdict_stands(v, agg.slo_flip(6.0, from_schedule=True), agg)
    assert not out["valid"] and out["limited_by"] == "client" and not out["verdict_stands"]["stands"]


def test_a_failed_check_of_the_load_itself_is_not_judged_by_the_verdict() -> None:
    agg = _aggregator([2, 2, 2, 2, 2], [50, 60, 70, 80, 0], [SLOTarget("ttft", 50.0, 5_000 * MS)])
    v = _validity(agg, max_schedule_lag_p99_ms=0.001)
    v["checks"].append({"name": "send_rate", "group": "generator", "ok": False, "detail": "3 % off"})
    assert not needs_flip_test(v)
    assert not needs_flip_test(_validity(agg))  # nothing failed: nothing to judge


class _Endpoint:
    def describe(self) -> dict[str, Any]:
        return {"kind": "test"}


@pytest.mark.parametrize("flip_test", [True, False])
def test_build_result_judges_a_run_by_its_verdict_only_when_asked(flip_test: bool) -> None:
    # `loadgen run` asks (LoadConfig.slo_flip_test); a sweep probe's run does not: its verdict is the probe's
    slo = SLOTarget("ttft", 50.0, 5_000 * MS)
    agg = _aggregator([2, 2, 2, 2, 2], [50, 60, 70, 80, 0], [slo])
    bounds = ValidityBounds(min_requests=1, min_duration_s=0, max_error_rate=1, max_schedule_lag_p99_ms=0.001)
    cfg = LoadConfig(rate_rps=100.0, slos=[slo], bounds=bounds, slo_flip_test=flip_test)
    client = ClientStats(open_loop=True, loop_lag_ms=[0.5, 1.0], schedule_realized_rps=100.0)
    outcome = RunOutcome(0, 0, False, 0, 0, client, 2_000 * MS)
    res = build_result(
        agg, outcome, cfg, _Endpoint(), started_at=dt.datetime.now(dt.UTC), config_record={}, fd_limit=(1, 1)
    )
    v = res["validity"]
    assert v["valid"] is flip_test and ("verdict_stands" in v) is flip_test
    if flip_test:
        assert v["verdict_stands"]["stamp_error_bound_ms"] == pytest.approx(6.0)  # loop lag 1 ms + its 5 ms probe
    assert res["latency_error_ms"] == {"bound_ms": pytest.approx(6.0), "estimated_moves_ms": None}


def test_a_failed_worker_is_named_in_the_result() -> None:
    """Issue 34: ``client.worker_failures`` was promised in a docstring and never written to result.json."""
    agg = _aggregator([2, 2], [50, 60], [])
    cfg = LoadConfig(rate_rps=100.0, bounds=ValidityBounds(min_requests=1, min_duration_s=0))
    client = ClientStats(open_loop=True, loop_lag_ms=[0.5], schedule_realized_rps=100.0,
                         worker_failures=["worker 1 died (exit code -9)"])  # fmt: skip
    res = build_result(agg, RunOutcome(0, 0, False, 0, 0, client, 2_000 * MS), cfg, _Endpoint(),
                       started_at=dt.datetime.now(dt.UTC), config_record={}, fd_limit=(1, 1))  # fmt: skip
    assert res["client"]["worker_failures"] == ["worker 1 died (exit code -9)"]
    assert not res["validity"]["valid"]  # a lost worker voids the run (its requests are unsent)


class _Moves:
    """Stands for StampLateness: the estimated moves of the three headline percentiles."""

    def __init__(self, moves: dict[str, float]) -> None:
        self.moves = moves

    def moves_ms(self) -> dict[str, float]:
        return self.moves


@pytest.mark.parametrize(("move_ms", "with_slo", "ok"), [(1.9, False, True), (2.6, False, False), (2.6, True, True),
                                                          (5.5, True, False)])  # fmt: skip
def test_without_slo_targets_each_headline_percentile_is_held_to_two_ms(
    move_ms: float, with_slo: bool, ok: bool
) -> None:
    """Issue 31 item 4: a run without SLO targets (its percentiles are the answer) is VALID only where each
    estimated move is within EDGE_ERROR_MS; with targets the stamp bound (5 ms) and the flip test judge it."""
    from loadgen.engine.runplan import LoadConfig
    from loadgen.engine.validity import EDGE_ERROR_MS

    slos = [SLOTarget("ttft", 99.0, 300 * MS)] if with_slo else []
    cfg = LoadConfig(rate_rps=10.0, requests=10, slos=slos)
    bounds = replace(cfg.validity_bounds(), min_requests=1, min_duration_s=0, max_error_rate=1)
    assert (bounds.max_stamp_error_ms == EDGE_ERROR_MS) is (not with_slo)
    client = ClientStats(open_loop=True, loop_lag_ms=[0.5], schedule_realized_rps=100.0, stamp_lateness_p99_ms=1.0,
                         stamp_tokens=5000, stamps=_Moves({"ttft_p50": 0.1, "ttft_p99": move_ms, "itl_p99": -0.2}))  # type: ignore[arg-type]  # a stand-in for StampLateness  # fmt: skip
    agg = _aggregator([0, 0, 0], [80, 90, 0], slos)
    check = next(c for c in validity(agg, client, bounds)["checks"] if c["name"] == "stamp_error")
    assert check["ok"] is ok, check["detail"]
    assert ("without SLO targets" in check["detail"]) is (not with_slo)


@pytest.mark.parametrize(("spin_s", "ok"), [(0.0, False), (0.5, True)])
def test_the_client_cpu_check_leaves_out_the_senders_idle_spin(spin_s: float, ok: bool) -> None:
    client = ClientStats(open_loop=True, loop_lag_ms=[0.5], schedule_realized_rps=100.0, cpu_s=0.99, wall_s=1.0,
                         spin_idle_s=spin_s)  # fmt: skip
    v = validity(_aggregator([0, 0, 0], [80, 90, 0], []), client, ValidityBounds(min_requests=1, min_duration_s=0,
                                                                                   max_error_rate=1))  # fmt: skip
    check = next(c for c in v["checks"] if c["name"] == "client_cpu")
    assert check["ok"] is ok and v["client_cpu_fraction"] == pytest.approx(0.99)
    assert v["client_busy_cpu_fraction"] == pytest.approx(0.99 - spin_s)
    assert ("idle spin" in check["detail"]) is (spin_s > 0)


@pytest.mark.timing  # a preempted pass is longer than an idle one: alone on the machine
def test_an_idle_spin_is_counted_and_a_busy_loop_is_not() -> None:
    import asyncio

    from loadgen.core.clock import now_ns
    from loadgen.engine.lifecycle import RunEngine

    async def spin(busy_us: int) -> tuple[int, int]:
        eng = RunEngine(None, lambda r: None, install_signal_handlers=False)  # type: ignore[arg-type]  # no endpoint: only _spin runs
        stop = False

        async def worker() -> None:  # another task's work in every loop pass
            while not stop:
                t = now_ns() + busy_us * 1000
                while now_ns() < t:
                    pass
                await asyncio.sleep(0)

        w = asyncio.create_task(worker()) if busy_us else None
        t0 = now_ns()
        await eng._spin(t0 + 20_000_000)
        stop = True
        if w is not None:
            await w
        return eng.spin_idle_ns, now_ns() - t0

    idle, took = asyncio.run(spin(0))
    assert idle > 0.5 * took  # nothing else ran: most of the spin was idle
    idle, took = asyncio.run(spin(50))
    assert idle < 0.2 * took  # 50 us of other work in every pass: not idle
