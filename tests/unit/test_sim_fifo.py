"""The FIFO multi-server model (``loadgen sim --fifo``): exact token times in integer ns."""

from __future__ import annotations

from typing import Any

import pytest

from loadgen.sim.fifo import FifoModel, new_model
from loadgen.sim.model import BatchModel, SimParams, capacity_rps, simulate

MS = 1_000_000


def _params(**kw: Any) -> SimParams:
    return SimParams(fifo=True, **kw)


def test_a_lone_request_gets_ttft_then_one_token_per_itl() -> None:
    m = FifoModel(_params(slots=1, ttft_ms=20, itl_ms=2))
    m.arrive(0, "a", 16, 4)
    em = m.advance(100 * MS)
    assert [(e.t_ns, e.token_index, e.finished) for e in em] == [
        (20 * MS, 0, False),
        (22 * MS, 1, False),
        (24 * MS, 2, False),
        (26 * MS, 3, True),
    ]
    assert m.next_event_ns() is None and m.running == 0


def test_servers_are_independent_no_batch_coupling() -> None:
    """Two servers: a second request's prefill does not delay the first one's tokens."""
    m = FifoModel(_params(slots=2, ttft_ms=20, itl_ms=2))
    m.arrive(0, "a", 0, 3)
    m.arrive(21 * MS, "b", 0, 2)
    em = [(e.req_id, e.t_ns) for e in m.advance(100 * MS)]
    assert [t for r, t in em if r == "a"] == [20 * MS, 22 * MS, 24 * MS]
    assert [t for r, t in em if r == "b"] == [41 * MS, 43 * MS]


def test_one_fifo_queue_serves_in_arrival_order_when_a_server_frees() -> None:
    m = FifoModel(_params(slots=1, ttft_ms=10, itl_ms=1))
    for i, rid in enumerate("abc"):
        m.arrive(i * MS, rid, 0, 2)  # each holds the server 11 ms
    assert m.queued == 2 and m.running == 1
    firsts = {e.req_id: e.t_ns for e in m.advance(1_000 * MS) if e.token_index == 0}
    assert firsts == {"a": 10 * MS, "b": 21 * MS, "c": 32 * MS}


def test_cancel_frees_the_server_for_the_next_in_line() -> None:
    m = FifoModel(_params(slots=1, ttft_ms=10, itl_ms=1))
    m.arrive(0, "a", 0, 100)
    m.arrive(0, "b", 0, 1)
    m.advance(5 * MS)
    assert m.cancel("a") and not m.cancel("a")
    em = m.advance(100 * MS)
    assert [(e.req_id, e.t_ns) for e in em] == [("b", 15 * MS)]


def test_new_model_and_capacity_follow_the_fifo_flag() -> None:
    assert isinstance(new_model(_params()), FifoModel)
    assert isinstance(new_model(SimParams()), BatchModel)
    # 4 servers, 20 ms + 15 x 2 ms = 50 ms a request: 80 req/s
    assert capacity_rps(_params(slots=4, ttft_ms=20, itl_ms=2), 16, 16) == pytest.approx(80.0)


def test_simulate_runs_the_fifo_model_on_a_virtual_clock() -> None:
    p = _params(slots=1, ttft_ms=10, itl_ms=1)
    res = simulate([(0, 0, 2), (0, 0, 2)], p, model=new_model(p))
    assert [(r.first_token_ns, r.end_ns) for r in res] == [(10 * MS, 11 * MS), (21 * MS, 22 * MS)]
