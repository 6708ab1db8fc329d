"""scripts/bench_verdict_truth's pure parts (issue 30, Must show 5): pairing requests with truth lines, a
request's judged value, the probe's rule on truth values, the on-time queue model, holds in a window, the plan.
The bench itself (sweeps against the simulated endpoint) is run by hand: ``scripts/bench_verdict_truth``."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from loadgen.core.slo import parse_slo

ROOT = Path(__file__).resolve().parents[2]


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_verdict_truth", ROOT / "scripts" / "bench_verdict_truth.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


bv = _bench()
T = parse_slo("ttft:p99<=120ms")
T0 = 1_000_000_000_000


def _rec(index: int, sched_s: float, **kw: Any) -> dict[str, Any]:
    r = {"index": index, "phase": "measure", "scheduled_s": sched_s, "sent_s": sched_s, "status": "ok",
         "error_kind": None, "ttft_ms": 30.0, "tpot_ms": 2.0, "output_tokens": 16}  # fmt: skip
    r.update(kw)
    return r


def test_pairing_takes_the_same_index_nearest_its_send() -> None:
    truth = [
        {"request_id": None, "arrival_ns": T0},  # the preflight: no id
        {"request_id": "abc-3", "arrival_ns": T0 - 4_000_000_000},  # the unloaded check's index 3, long before
        {"request_id": "abc-3", "arrival_ns": T0 + 100_200_000},
        {"request_id": "abc-3", "arrival_ns": T0 + 9_100_000_000},  # the next segment's index 3
    ]
    got = bv.pair_truth([_rec(3, 0.1), _rec(4, 0.1)], truth, T0)
    assert got[0] is truth[2] and got[1] is None


def test_a_request_is_judged_as_the_probe_judges_it() -> None:
    thr = T.threshold_ns
    truth = {"first_token_ns": T0 + 25_000_000, "chunks": [[T0 + 25_000_000, 1], [T0 + 55_000_000, 15]]}
    assert bv.judged_request(_rec(0, 0.0), T0, thr, None, False)[1] == 30_000_000
    sched, value, first, tpot, measured = bv.judged_request(_rec(0, 0.0), T0, thr, truth, True)
    assert (sched, value, first, measured) == (T0, 25_000_000, T0 + 25_000_000, True)
    assert tpot == 30_000_000 / 15
    assert bv.judged_request(_rec(0, 0.0, status="error", error_kind="timeout"), T0, thr, truth, True)[1] == math.inf
    young = _rec(0, 0.0, status="error", error_kind="cancelled", ttft_ms=None, error_e2e_ms=50.0)
    old = dict(young, error_e2e_ms=150.0)
    assert bv.judged_request(young, T0, thr, None, False)[1] is None  # censored
    assert bv.judged_request(old, T0, thr, None, False)[1] == math.inf


def _reqs(values_ms: list[float]) -> list[tuple[int, float | None, float, float, bool]]:
    return [
        (T0 + i * 20_000_000, v * 1e6, T0 + i * 20_000_000 + v * 1e6, math.nan, True) for i, v in enumerate(values_ms)
    ]


def test_the_rule_on_truth_values() -> None:
    passing = bv.judge([_reqs([30.0] * 400)], T, 0.95)
    assert (passing["verdict"], passing["k"], passing["n"]) == ("pass", 0, 400)
    failing = bv.judge([_reqs([30.0] * 370 + [200.0] * 30)], T, 0.95)
    assert failing["verdict"] == "fail" and failing["k"] == 30
    censored = bv.judge([[*_reqs([30.0] * 10), (T0, None, math.nan, math.nan, True)]], T, 0.95, trend=False)
    assert (censored["n"], censored["censored"]) == (10, 1)


def test_the_on_time_queue_is_fifo_over_the_schedule() -> None:
    got = bv.on_time_ttft_ns(np.asarray([20.0, 0.0, 10.0]), 1, 5.0, 50.0)
    assert got.tolist() == [5.0 + 80.0, 5.0, 5.0 + 40.0]
    assert bv.on_time_ttft_ns(np.asarray([0.0, 0.0]), 2, 5.0, 50.0).tolist() == [5.0, 5.0]


def test_holds_in_a_window_and_a_missed_hold() -> None:
    holds = [(0, 50_000_000), (100_000_000, 400_000_000), (900_000_000, 950_000_000)]
    assert bv.holds_in(holds, 40_000_000, 200_000_000) == [10.0, 100.0]  # clipped to the window
    assert bv.missed(300.0, 299.0) is False and bv.missed(300.0, 290.0) is True and bv.missed(None, 5.0) is None


def test_the_full_plan_meets_the_issue_counts() -> None:
    ref = 59.64
    plan = bv.FULL_PLAN
    assert len(plan) >= 20
    assert sum(1 for s in plan if abs(round(s.frac * ref, 2) / ref - 1) <= bv.NEAR) >= 8
    assert sum(1 for s in plan if s.inject == "holds") >= 5
    assert len(bv.QUICK_PLAN) == 6
