"""The Locust worker's clock offset (loadgen.locust.clocksync): the smallest round trip's sample, its
uncertainty half that round trip, and the one-line refusal of a worker whose offset is not known within 1 ms."""

from __future__ import annotations

from typing import Any

from loadgen.locust.clocksync import MAX_HALF_RTT_NS, MIN_PINGS, ClockProbe, best_offset, clock_refusal

MS = 1_000_000


def test_the_smallest_round_trip_sets_the_offset() -> None:
    # the master reads 5 s ahead of the worker; one-way delays vary, the 0.2 ms round trip is the best
    shift = 5_000 * MS
    samples = [(0, shift + 3 * MS, 4 * MS), (10 * MS, 10 * MS + shift + MS // 10, 10 * MS + MS // 5),
               (20 * MS, 20 * MS + shift + 9 * MS, 21 * MS)]  # fmt: skip
    got = best_offset(samples)
    assert got is not None
    assert got["offset_ns"] == shift and got["half_rtt_ns"] == MS // 10 and got["pings"] == 3
    assert best_offset([]) is None


def test_a_clock_known_only_within_more_than_a_millisecond_is_refused_in_one_line() -> None:
    assert clock_refusal({"offset_ns": 7, "half_rtt_ns": MAX_HALF_RTT_NS, "pings": 10}) is None
    why = clock_refusal({"offset_ns": 7, "half_rtt_ns": 3 * MS, "pings": 60})
    assert why is not None and "3.000 ms over 60 pings" in why and "\n" not in why
    assert "not measured" in (clock_refusal(None) or "")


class _EchoRunner:
    """A master 2 s ahead that answers each ping at once (through the probe's own handler)."""

    def __init__(self) -> None:
        self.probe: ClockProbe | None = None
        self.sent: list[tuple[str, Any]] = []

    def send_message(self, kind: str, data: Any) -> None:
        self.sent.append((kind, data))
        if kind == "loadgen_ping" and self.probe is not None:
            self.probe.on_pong({"seq": data["seq"], "t2": data["t1"] + 2_000 * MS})


def test_the_probe_pings_at_least_ten_times_and_reports_to_the_master() -> None:
    runner = _EchoRunner()
    probe = ClockProbe(runner)
    runner.probe = probe
    got = probe.run()
    assert got is not None and got["pings"] == MIN_PINGS
    assert abs(got["offset_ns"] - 2_000 * MS) <= got["half_rtt_ns"] + 1
    assert runner.sent[-1] == ("loadgen_clock", got)
