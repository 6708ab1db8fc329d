"""Cluster actors without Ray: clock offsets (NTP style, minimum-RTT sample kept) in exact ns, address checks, liveness."""

from __future__ import annotations

import pytest

from loadgen.spread.cluster import ping


class FakeLink:
    """A local clock and a remote one ``offset_ns`` ahead; each exchange takes (out, back) ns."""

    def __init__(self, offset_ns: int, delays: list[tuple[int, int]]) -> None:
        self.t = 1_000_000
        self.offset = offset_ns
        self.delays = list(delays)

    def local(self) -> int:
        return self.t

    def remote(self) -> int:
        out, back = self.delays.pop(0)
        self.t += out
        stamp = self.t + self.offset
        self.t += back
        return stamp


def test_symmetric_legs_give_the_exact_offset() -> None:
    link = FakeLink(-7_000_000, [(2_000_000, 2_000_000)])
    r = ping(link.remote, 1, local=link.local)
    assert r == {"offset_ms": -7.0, "rtt_ms": 4.0, "uncertainty_ms": 2.0, "samples": 1}


def test_the_minimum_rtt_sample_is_kept() -> None:
    # the 2 ms round trip is kept; the slow asymmetric ones would be 3 ms and 4 ms off
    link = FakeLink(5_000_000, [(1_000_000, 7_000_000), (1_000_000, 1_000_000), (9_000_000, 1_000_000)])
    r = ping(link.remote, 3, local=link.local)
    assert r["offset_ms"] == 5.0 and r["rtt_ms"] == 2.0 and r["samples"] == 3


def test_an_asymmetric_kept_sample_is_off_by_at_most_its_uncertainty() -> None:
    link = FakeLink(0, [(1_000_000, 3_000_000)])
    r = ping(link.remote, 1, local=link.local)
    assert r["offset_ms"] == -1.0 and abs(r["offset_ms"]) <= r["uncertainty_ms"] == 2.0


def test_a_dead_cluster_address_fails_fast_and_a_live_one_passes() -> None:
    import socket

    import pytest

    from loadgen.core.errors import ConfigError
    from loadgen.spread.cluster import _check_reachable

    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen()
        port = srv.getsockname()[1]
        _check_reachable(f"127.0.0.1:{port}")
        _check_reachable(f"ray://127.0.0.1:{port}")
    with pytest.raises(ConfigError, match="nothing listens there"):
        _check_reachable(f"127.0.0.1:{port}")  # closed now
    _check_reachable("auto")  # resolved by Ray itself


@pytest.mark.timing
def test_take_reports_an_actor_event_loop_that_runs_no_callback(monkeypatch) -> None:
    import asyncio
    import time

    import loadgen.spread.cluster as cluster

    actor = cluster._WorkerActor()  # the plain class: no Ray needed
    loop = asyncio.new_event_loop()  # never run: a wedged loop
    try:
        actor._loop = loop
        assert actor.take(0.01) == []  # quiet so far: a liveness callback is scheduled
        monkeypatch.setattr(cluster, "STALL_TIMEOUT_S", 0.0)
        time.sleep(0.01)
        (msg,) = actor.take(0.01)
        assert msg[0] == "error" and "event loop unresponsive" in msg[1]
    finally:
        loop.close()


@pytest.mark.timing
def test_take_of_a_live_quiet_loop_reports_nothing() -> None:
    import asyncio
    import threading
    import time

    import loadgen.spread.cluster as cluster

    actor = cluster._WorkerActor()
    loop = asyncio.new_event_loop()
    t = threading.Thread(target=loop.run_forever, daemon=True)
    t.start()
    try:
        actor._loop = loop
        for _ in range(5):
            assert actor.take(0.02) == []  # each call finds the previous liveness callback run
        deadline = time.monotonic() + 5
        while actor._tick_since is not None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert actor._tick_since is None
    finally:
        loop.call_soon_threadsafe(loop.stop)
        t.join(5)
        loop.close()
