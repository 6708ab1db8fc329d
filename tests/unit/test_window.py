"""The measurement window and the rates over it (loadgen.core.window, Aggregator.throughput): exact tiny cases."""

from __future__ import annotations

import pytest

from loadgen.core.metrics import compute
from loadgen.core.slo import parse_slo
from loadgen.core.types import RequestRecord, TokenEvent
from loadgen.core.window import BIN_NS, CLOSED, FALLBACK, OPEN, TokenBins, open_loop_window, token_bins
from loadgen.engine.results import Aggregator

S = 1_000_000_000
MS = 1_000_000


def rec(i: int, sched_s: float, dur_s: float, tokens: int, *, ok: bool = True, phase: str = "measure") -> RequestRecord:
    """A streamed request scheduled at ``sched_s`` whose ``tokens`` arrive evenly over its ``dur_s``."""
    t = int(sched_s * S)
    end = t + int(dur_s * S)
    step = (end - t) // max(tokens, 1)
    r = RequestRecord(index=i, phase=phase, scheduled_ns=t, sent_ns=t, end_ns=end, requested_output_tokens=tokens)  # type: ignore[arg-type]  # phase is a Phase literal
    r.events = [TokenEvent(t + step * (k + 1), "x") for k in range(tokens)]
    r.completion_tokens = tokens
    r.prompt_tokens = 10
    r.status = "ok" if ok else "error"
    if not ok:
        r.error_kind = "http_error"
    return r


def test_open_loop_window_owns_one_gap_per_request() -> None:
    w = open_loop_window(0, 9 * S, 10, median_e2e_ns=0.5 * S, last_end_ns=20 * S)
    assert w.basis == OPEN and w.start_ns == 0 and w.end_ns == 10 * S  # 9 s * 10 / 9
    assert w.offered_rps == pytest.approx(1.0)  # (N - 1) / span = N / window


@pytest.mark.parametrize(
    ("last", "n", "median", "why"),
    [(0, 5, 0.1 * S, "one instant"), (0, 1, None, "1 measured"), (1 * S, 5, 2.0 * S, "shorter than the median E2E")],
)
def test_fallback_first_send_to_last_completion(last: int, n: int, median: float | None, why: str) -> None:
    w = open_loop_window(0, last, n, median_e2e_ns=median, last_end_ns=7 * S)
    assert w.basis == FALLBACK and (w.start_ns, w.end_ns, w.requests) == (0, 7 * S, n)
    assert w.fallback_reason is not None and why in w.fallback_reason
    assert w.offered_rps is None


def test_token_bins_pro_rata_edges() -> None:
    b = TokenBins()
    b.add(5 * BIN_NS + 1, 10)  # bin 5
    b.add(2 * BIN_NS, 4)  # earlier bin: grows to the left
    b.add(9 * BIN_NS, 1)
    assert b.total() == 15
    assert b.between(0, 100 * BIN_NS) == 15
    assert b.between(5 * BIN_NS + BIN_NS // 2, 6 * BIN_NS) == pytest.approx(5.0)  # half of bin 5
    assert b.between(6 * BIN_NS, 9 * BIN_NS) == 0.0


def test_token_bins_of_a_request() -> None:
    ev = [TokenEvent(1 * MS, "a"), TokenEvent(2 * MS, "b"), TokenEvent(15 * MS, "c")]
    assert token_bins(ev, 3, 20 * MS) == ((0, 2), (1, 1))
    assert token_bins([], 7, 25 * MS) == ((2, 7),)  # not streamed: all at the end
    assert token_bins(ev, 0, 20 * MS) == ()


def _agg(recs: list[RequestRecord], slo: str | None = "e2e:p99<=2s") -> Aggregator:
    agg = Aggregator([parse_slo(slo)] if slo else [])
    for r in recs:
        agg.add(r, compute(r))
    return agg


def test_rates_over_the_window_not_the_drain() -> None:
    # 10 requests at 1/s (window [0, 10 s]); the last one is long: it drains to 29 s
    recs = [rec(i, float(i), 1.0, 100) for i in range(9)] + [rec(9, 9.0, 20.0, 2000)]
    recs[3] = rec(3, 3.0, 1.0, 100, ok=False)  # a failure: not conforming, not completed
    agg = _agg(recs)
    w = agg.window()
    assert w is not None and (w.basis, w.start_ns, w.end_ns, w.requests) == (OPEN, 0, 10 * S, 10)
    t = agg.throughput()
    assert t["offered_rps"] == pytest.approx(1.0)
    # completions ending in [0, 10]: requests 0..8 but 3 failed -> 8
    assert t["completion_rps"] == pytest.approx(0.8) and t["request_rps"] == t["completion_rps"]
    # conforming of the measured set: 8 ok short ones (the long one misses e2e <= 2 s)
    assert t["goodput_rps"] == pytest.approx(8 / 10)
    # tokens generated inside [0, 10 s]: 8 x 100 (the failed one's 100 arrived too: 900) + the long one's first second
    assert t["output_tps"] == pytest.approx((900 + 100) / 10, rel=1e-3)
    assert t["demanded_output_tps"] == pytest.approx((800 + 2000) / 10)
    assert t["input_tps"] == pytest.approx(9 * 10 / 10)
    # the old figures, named as such: over 29 s
    assert t["output_tps_incl_drain"] == pytest.approx(2800 / 29)
    assert t["goodput_rps_incl_drain"] == pytest.approx(8 / 29)
    assert agg.slo_result()["goodput_rps"] == t["goodput_rps"]  # type: ignore[index]  # an SLO is set


def test_warmup_tokens_count_in_output_tps_only() -> None:
    recs = [rec(i, float(i), 0.9, 100) for i in range(5)] + [rec(99, 0.0, 2.0, 300, phase="warmup")]
    t = _agg(recs, None).throughput()
    # window [0, 5 s]; warm-up's 300 tokens arrived in it; 500 measured tokens
    assert t["output_tps"] == pytest.approx(800 / 5, rel=1e-3)
    assert t["demanded_output_tps"] == pytest.approx(500 / 5)
    assert t["goodput_rps"] is None


def test_closed_loop_window_from_ramp_to_first_stop() -> None:
    # 2 users: warm-up requests end at 1 s; user A: 1-3, 3-5, 5-7 (stops at 7); user B: 1-4, 4-8
    recs = [rec(90, 0.0, 1.0, 10, phase="warmup"), rec(91, 0.0, 1.0, 10, phase="warmup")]
    recs += [rec(0, 1.0, 2.0, 10), rec(1, 1.0, 3.0, 10), rec(2, 3.0, 2.0, 10), rec(3, 4.0, 4.0, 10)]
    recs += [rec(4, 5.0, 2.0, 10)]
    agg = _agg(recs, None)
    agg.open_loop = False
    w = agg.window()
    # ramp ends at 1 s (last warm-up end); last send at 5 s; first completion after it: 7 s
    assert w is not None and (w.basis, w.start_ns, w.end_ns) == (CLOSED, 1 * S, 7 * S)
    assert w.requests == 4  # ends at 3, 4, 5, 7 s
    assert agg.throughput()["completion_rps"] == pytest.approx(4 / 6)
