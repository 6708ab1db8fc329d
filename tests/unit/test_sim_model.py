"""The discrete-event continuous-batching model (loadgen.sim.model)."""

from __future__ import annotations

import random
import time

import pytest

from loadgen.sim.model import BatchModel, SimParams, TokenEmission, capacity_rps, simulate

MS = 1_000_000


def run_all(model: BatchModel) -> list[TokenEmission]:
    """Step the model by hand, one iteration end at a time, until idle."""
    out: list[TokenEmission] = []
    while (t := model.next_event_ns()) is not None:
        out.extend(model.advance(t))
    return out


def times_of(ems: list[TokenEmission], req_id: object) -> list[int]:
    return [e.t_ns for e in ems if e.req_id == req_id]


def test_lone_request_exact_ttft_and_itl() -> None:
    p = SimParams(ttft_ms=50, prefill_per_token_ms=0.5, itl_ms=20)
    m = BatchModel(p)
    m.arrive(1000, "a", 100, 5)
    assert m.next_event_ns() == 1000 + (50 + 0.5 * 100) * MS
    ems = run_all(m)
    assert [e.token_index for e in ems] == [0, 1, 2, 3, 4]
    assert [e.finished for e in ems] == [False] * 4 + [True]
    t = times_of(ems, "a")
    assert t[0] - 1000 == 100 * MS
    assert [b - a for a, b in zip(t, t[1:])] == [20 * MS] * 4
    assert m.next_event_ns() is None
    assert m.running == 0 and m.queued == 0


def test_two_requests_arriving_together_share_iterations() -> None:
    p = SimParams(ttft_ms=50, itl_ms=20)
    m = BatchModel(p)
    m.arrive(0, "a", 10, 3)
    m.arrive(0, "b", 10, 3)
    ems = run_all(m)
    # Both prefilled in one iteration of 2 * 50 ms, then decode together.
    assert times_of(ems, "a") == times_of(ems, "b") == [100 * MS, 120 * MS, 140 * MS]


def test_arrival_while_busy_waits_for_boundary_and_stalls_decode() -> None:
    m = BatchModel(SimParams(ttft_ms=50, itl_ms=20))
    m.arrive(0, "a", 0, 4)
    m.arrive(60 * MS, "b", 0, 2)  # during a's first decode iteration (50..70 ms)
    ems = run_all(m)
    # a: 50, 70, then an iteration of 20 decode + 50 prefill of b -> 140, then 160.
    assert times_of(ems, "a") == [50 * MS, 70 * MS, 140 * MS, 160 * MS]
    assert times_of(ems, "b") == [140 * MS, 160 * MS]


def test_arrival_exactly_at_boundary_is_admitted_there() -> None:
    m = BatchModel(SimParams(ttft_ms=50, itl_ms=20))
    m.arrive(0, "a", 0, 3)
    m.arrive(50 * MS, "b", 0, 1)  # a's prefill ends at 50 ms
    ems = run_all(m)
    assert times_of(ems, "b") == [(50 + 20 + 50) * MS]


def test_slots_limit_queues_the_third() -> None:
    m = BatchModel(SimParams(slots=2, ttft_ms=10, itl_ms=5))
    for r in "abc":
        m.arrive(0, r, 0, 2)
    assert m.running == 2 and m.queued == 1
    ems = run_all(m)
    assert times_of(ems, "a") == times_of(ems, "b") == [20 * MS, 25 * MS]
    # c waits until a and b free their slots at 25 ms, then prefills alone.
    assert times_of(ems, "c") == [35 * MS, 40 * MS]


def test_itl_per_seq_grows_step_time() -> None:
    p = SimParams(ttft_ms=0, itl_ms=10, itl_per_seq_ms=2)
    m = BatchModel(p)
    for r in range(4):
        m.arrive(0, r, 0, 3)
    ems = run_all(m)
    t = times_of(ems, 0)
    assert t == [0, 16 * MS, 32 * MS]  # 10 + 2 * (4 - 1) per step with 4 decoding
    lone = simulate([(0, 0, 3)], p)[0]
    assert lone.token_times_ns == [0, 10 * MS, 20 * MS]


def test_advance_returns_only_past_iterations() -> None:
    m = BatchModel(SimParams(ttft_ms=50, itl_ms=20))
    m.arrive(0, "a", 0, 3)
    assert m.advance(49 * MS) == []
    assert [e.token_index for e in m.advance(50 * MS)] == [0]
    assert [e.token_index for e in m.advance(200 * MS)] == [1, 2]
    with pytest.raises(ValueError):
        m.advance(100 * MS)  # time went backwards


def test_late_arrival_keeps_emissions_of_past_iterations() -> None:
    m = BatchModel(SimParams(ttft_ms=50, itl_ms=20))
    m.arrive(0, "a", 0, 2)
    m.arrive(500 * MS, "b", 0, 1)  # a finished long ago; nobody called advance
    ems = m.advance(500 * MS)
    assert [(e.req_id, e.t_ns) for e in ems] == [("a", 50 * MS), ("a", 70 * MS)]
    assert m.next_event_ns() == 550 * MS


def test_cancel_frees_slot() -> None:
    m = BatchModel(SimParams(slots=1, ttft_ms=10, itl_ms=10))
    m.arrive(0, "a", 0, 100)
    m.arrive(0, "b", 0, 1)
    assert m.queued == 1
    m.advance(10 * MS)
    assert m.cancel("a") is True
    assert m.cancel("a") is False
    ems = run_all(m)
    assert [(e.req_id, e.t_ns) for e in ems] == [("b", 30 * MS)]


def test_simulate_equals_stepping_by_hand() -> None:
    rng = random.Random(7)
    p = SimParams(slots=4, ttft_ms=30, prefill_per_token_ms=0.1, itl_ms=15, itl_per_seq_ms=1.5)
    arrivals = []
    t = 0
    for _ in range(60):
        t += int(rng.expovariate(1 / 40) * MS)
        arrivals.append((t, rng.randint(0, 200), rng.randint(1, 12)))
    res = simulate(arrivals, p)

    m = BatchModel(p)
    got: dict[int, list[int]] = {i: [] for i in range(len(arrivals))}
    events: list[tuple[int, int]] = [(a[0], i) for i, a in enumerate(arrivals)]
    k = 0
    while True:
        nxt = m.next_event_ns()
        if k < len(events) and (nxt is None or events[k][0] <= nxt):
            a, i = events[k]
            m.arrive(a, i, arrivals[i][1], arrivals[i][2])
            k += 1
        elif nxt is not None:
            for e in m.advance(nxt):
                got[e.req_id].append(e.t_ns)  # type: ignore[index]  # the ids given are the int indexes
        else:
            break
    for i, r in enumerate(res):
        assert r.token_times_ns == got[i]
        assert len(r.token_times_ns) == arrivals[i][2]
        assert r.first_token_ns == r.token_times_ns[0]
        assert r.end_ns == r.token_times_ns[-1]
        assert r.first_token_ns > r.arrival_ns


def test_simulate_preserves_input_order() -> None:
    p = SimParams(ttft_ms=10, itl_ms=1)
    res = simulate([(100 * MS, 0, 1), (0, 0, 1)], p)
    assert res[0].arrival_ns == 100 * MS and res[0].first_token_ns == 110 * MS
    assert res[1].first_token_ns == 10 * MS


@pytest.mark.timing
def test_simulate_10k_is_fast_and_capacity_estimate_is_close() -> None:
    p = SimParams()
    cap = capacity_rps(p, 100, 16)
    assert cap == pytest.approx(1000 / (50 + 16 * 20 / 32))
    # Offer 1.5x capacity: the server saturates and completes at about capacity.
    n = 10_000
    gap_ns = int(1e9 / (1.5 * cap))
    arrivals = [(i * gap_ns, 100, 16) for i in range(n)]
    t0 = time.perf_counter()
    res = simulate(arrivals, p)
    assert time.perf_counter() - t0 < 3.0
    span_s = (res[-1].end_ns - res[0].first_token_ns) / 1e9
    assert n / span_s == pytest.approx(cap, rel=0.15)


def test_capacity_single_token_and_validation() -> None:
    p = SimParams(ttft_ms=40, prefill_per_token_ms=0.1)
    assert capacity_rps(p, 100, 1) == pytest.approx(1000 / 50)
    with pytest.raises(ValueError):
        SimParams(slots=0)
    with pytest.raises(ValueError):
        SimParams(itl_ms=-1)
    with pytest.raises(ValueError):
        BatchModel().arrive(0, "x", 0, 0)
