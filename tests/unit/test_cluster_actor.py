"""Cluster actors: clock offsets (NTP style, minimum-RTT sample kept) in exact ns; address checks."""

from __future__ import annotations

from loadgen.cluster import ping


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

    from loadgen.cluster import _check_reachable
    from loadgen.errors import ConfigError

    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen()
        port = srv.getsockname()[1]
        _check_reachable(f"127.0.0.1:{port}")
        _check_reachable(f"ray://127.0.0.1:{port}")
    with pytest.raises(ConfigError, match="nothing listens there"):
        _check_reachable(f"127.0.0.1:{port}")  # closed now
    _check_reachable("auto")  # resolved by Ray itself
