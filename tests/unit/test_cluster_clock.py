"""``--cluster`` across hosts: every instant an actor reports is mapped onto the driver's clock.

Each host has its own CLOCK_MONOTONIC (seconds to days apart) and a wall clock off by its
NTP error. The driver's real :meth:`loadgen.spread.cluster.Cluster.run` (ping, t0, mapping, the shared
:class:`loadgen.spread.workers.Collector`, the real :class:`loadgen.engine.results.Aggregator`) runs here
against fake Ray actors whose clocks are offset on purpose: one host's monotonic clock is
1,000 s behind the driver's, the other's 3,600 s ahead, and their wall clocks are 40 ms and
-25 ms off. The actors "run" their shard instantly, answering each request 30 ms after its
scheduled time with 3 tokens, 10 ms apart, all on their own clocks. Without the mapping the
aggregate mixed the clocks (the public report: a 60 s run read 1,008 s and 6 req/s instead of 100).
"""

from __future__ import annotations

import dataclasses
import io
import os
import time
from typing import Any

import orjson
import pytest

import loadgen.spread.cluster as cluster
from loadgen.core.metrics import compute
from loadgen.core.redact import Redactor
from loadgen.core.types import RequestRecord, TokenEvent
from loadgen.engine.recordlog import record_line
from loadgen.engine.results import Aggregator
from loadgen.engine.runplan import LoadConfig, build_plan, build_workload
from loadgen.engine.summary import RequestSummary, summarize
from loadgen.spread.job import SpreadJob
from loadgen.spread.workers import (
    SUMMARY_DURATIONS,
    SUMMARY_INSTANT_BINS,
    SUMMARY_INSTANT_POINTS,
    SUMMARY_INSTANTS,
    shard_plan,
    summary_on_clock,
)

MS = 1_000_000
RATE = 100.0
N = 60
E2E_NS = 30 * MS
HOSTS = [  # (monotonic clock - driver's, wall clock - driver's), ns
    (-1_000 * 1_000_000_000, 40 * MS),
    (3_600 * 1_000_000_000, -25 * MS),
]


class _Ref:
    def __init__(self, fn: Any, args: tuple) -> None:
        try:
            self.value, self.exc = fn(*args), None
        except Exception as exc:  # delivered by ray.get, as Ray does
            self.value, self.exc = None, exc


class _Method:
    def __init__(self, fn: Any) -> None:
        self.fn = fn

    def remote(self, *args: Any) -> _Ref:
        return _Ref(self.fn, args)


class _Handle:
    def __init__(self, actor: Any) -> None:
        self._actor = actor

    def __getattr__(self, name: str) -> _Method:
        return _Method(getattr(self._actor, name))


class FakeHost:
    """A worker actor on another host: its own monotonic and wall clocks, answers at once."""

    def __init__(self, mono_off_ns: int, wall_off_ns: int, code: str) -> None:
        self.mono_off, self.wall_off, self.code = mono_off_ns, wall_off_ns, code
        self.out: list[tuple] = []
        self.shard: Any = None
        self.load: Any = None
        self.t0: int | None = None

    def mono(self) -> int:
        return time.perf_counter_ns() + self.mono_off

    def info(self) -> dict[str, Any]:
        return {"host": f"fake{self.mono_off}", "ip": "127.0.0.1", "node_id": str(self.mono_off), "pid": os.getpid()}

    def clock(self) -> int:
        return time.time_ns() + self.wall_off

    def code_hash(self) -> str:
        return self.code

    def prepare(self, w: int, n: int, ep_cfg: Any, redactor: Any, load: Any, timeout_s: float) -> tuple:
        self.load = load
        self.shard = shard_plan(build_plan(load, build_workload(load)), w, n).schedule
        return ("ready", len(self.shard), {"monotonic_ns": self.mono(), "wall_ns": self.clock()})

    def go(self, t0_ns: int, lease_ns: int = 0) -> None:
        """The shard's requests, as the worker body reports them, on this host's clock."""
        self.t0 = t0_ns
        batch = []
        for k in range(len(self.shard)):
            sched = t0_ns + self.shard.offset_ns(k)
            rec = RequestRecord(k, "measure", sched, requested_output_tokens=3, sent_ns=sched + MS // 5)
            rec.events = [TokenEvent(sched + E2E_NS - j * 10 * MS, "x") for j in (2, 1, 0)]
            rec.end_ns, rec.status, rec.completion_tokens = sched + E2E_NS, "ok", 3
            m = compute(rec, None, "scheduled")
            batch.append((orjson.dumps(record_line(rec, m, t0_ns)), summarize(rec, m, [])))
        self.out = [("recs", batch), ("done", _stats(sched + E2E_NS), {})]

    def take(self, wait_s: float, lease_ns: int | None = None) -> list[tuple]:
        out, self.out = self.out, []
        return out

    def stop(self, cancel: bool) -> None:
        pass


def _stats(end_ns: int) -> dict[str, Any]:
    return {
        "interrupted": False,
        "unsent": 0,
        "unsent_warmup": 0,
        "cpu_s": 0.1,
        "wall_s": 1.0,
        "loop_lag_ms": [0.1],
        "aborted_reason": None,
        "end_ns": end_ns,
    }


class FakeRay:
    """The few Ray calls :class:`loadgen.spread.cluster.Cluster` makes, answered in process."""

    __version__ = "fake"

    def __init__(self) -> None:
        self.hosts = list(HOSTS)
        self.code = cluster.code_hash()

    def remote(self, **kw: Any) -> Any:
        ray = self

        class _Cls:
            @staticmethod
            def options(**kw: Any) -> Any:
                return _Cls

            @staticmethod
            def remote() -> _Handle:
                mono, wall = ray.hosts.pop(0)
                return _Handle(FakeHost(mono, wall, ray.code))

        return lambda cls: _Cls

    @staticmethod
    def get(ref: Any, timeout: float | None = None) -> Any:
        if isinstance(ref, list):
            return [FakeRay.get(r) for r in ref]
        if ref.exc is not None:
            raise ref.exc
        return ref.value

    @staticmethod
    def wait(refs: list, num_returns: int = 1, timeout: float | None = None) -> tuple[list, list]:
        return refs[:num_returns], refs[num_returns:]

    def kill(self, actor: Any, no_restart: bool = True) -> None:
        pass

    def shutdown(self) -> None:
        pass

    def available_resources(self) -> dict[str, float]:
        return {"CPU": 4.0}


@pytest.mark.timing
def test_actor_instants_are_mapped_onto_the_drivers_clock(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    monkeypatch.setattr(cluster, "_import_ray", FakeRay)
    monkeypatch.setattr(cluster.Cluster, "_connect", lambda self, runtime_env: None)
    load = LoadConfig(rate_rps=RATE, arrival="constant", requests=N, input_tokens=8, output_tokens=3, salt="s")
    plan = build_plan(load)
    agg = Aggregator(spill_dir=tmp_path)
    seen: list[RequestSummary] = []
    fh = io.BytesIO()
    with cluster.Cluster("fake:1") as cl:
        outcome, cond = cl.run(SpreadJob(2, None, load, plan, agg, fh, Redactor(), on_summary=seen.append))
    assert not outcome.client.worker_failures and outcome.unsent == 0 and agg.requests == N
    offs = [a["clock_offset"]["offset_ms"] for a in cond["actors"]]
    assert offs == pytest.approx([40.0, -25.0], abs=5.0)  # the pings measured the wall-clock offsets
    # every instant is on the driver's clock: the schedule, 1 / RATE apart from the driver's t0
    span_ns = round((N - 1) / RATE * 1e9)
    got = sorted(s.scheduled_ns - outcome.t0_ns for s in seen)
    want = [round(i / RATE * 1e9) for i in range(N)]
    assert all(abs(g - w) < 5 * MS for g, w in zip(got, want)), (got[:3], got[-3:])
    for s in seen:
        assert s.end_ns is not None and s.sent_ns is not None
        assert s.end_ns - s.scheduled_ns == E2E_NS and s.e2e_ns == E2E_NS  # durations untouched
    # so the run's span and rates are those of one clock: a 0.59 s schedule, 100 req/s
    assert agg.duration_s == pytest.approx((span_ns + E2E_NS) / 1e9, abs=0.01)
    th = agg.throughput()
    assert th["achieved_send_rps"] == pytest.approx(RATE, rel=0.02)
    if "demanded_output_tps" in th:  # the window's token count reads the mapped token-arrival bins
        assert th["output_tps"] == pytest.approx(th["demanded_output_tps"], rel=0.1)
    # requests.jsonl lines are relative to each actor's own t0: the same on every host
    lines = [orjson.loads(x) for x in fh.getvalue().splitlines()]
    assert sorted(round(x["scheduled_s"] * RATE) for x in lines) == sorted([*range(0, N, 2), *range(1, N, 2)])


def test_summary_on_clock_moves_instants_only() -> None:
    rec = RequestRecord(0, "measure", 5_000 * MS, requested_output_tokens=2, sent_ns=5_001 * MS)
    rec.events = [TokenEvent(5_020 * MS, "a"), TokenEvent(5_040 * MS, "b")]
    rec.end_ns, rec.status, rec.completion_tokens = 5_040 * MS, "ok", 2
    rec.ratelimit, rec.response_headers_ns = {"remaining-requests": 7.0}, 5_010 * MS
    s = summarize(rec, compute(rec, None, "scheduled"), [])
    shift = -4_000_000 * MS  # the sender's clock 4,000 s ahead of the receiver's
    t = summary_on_clock(s, shift)
    assert (t.scheduled_ns, t.sent_ns, t.end_ns) == (
        1_000 * MS + shift + 4_000 * MS,
        5_001 * MS + shift,
        5_040 * MS + shift,
    )
    assert t.ratelimit_points == ((5_010 * MS + shift, {"remaining-requests": 7.0}),)
    for f in SUMMARY_DURATIONS:
        assert getattr(t, f) == getattr(s, f), f
    for f in SUMMARY_INSTANT_BINS:
        if hasattr(s, f):
            from loadgen.core.window import BIN_NS

            assert [b for b, _ in getattr(t, f)] == [(e.t_ns + shift) // BIN_NS for e in rec.events]
    assert summary_on_clock(s, 0) is s


def test_every_time_field_of_a_summary_is_classified() -> None:
    """A new instant in RequestSummary must be mapped across hosts (or declared a duration)."""
    known = {*SUMMARY_INSTANTS, *SUMMARY_INSTANT_POINTS, *SUMMARY_INSTANT_BINS, *SUMMARY_DURATIONS}
    timeish = [
        f.name
        for f in dataclasses.fields(RequestSummary)
        if f.name.endswith(("_ns", "_bins", "_points", "_at", "_time", "_times"))
    ]
    assert set(timeish) <= known, sorted(set(timeish) - known)
