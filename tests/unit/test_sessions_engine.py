"""The session engine on a fake endpoint (no network): due times, the idle-gap cap, warm-up sessions,
histories carrying the actual replies, and a failed turn ending its session."""

from __future__ import annotations

import asyncio
from typing import Any

from loadgen.core.types import RequestRecord, RequestSpec, TokenEvent
from loadgen.endpoints.base import EndpointBase
from loadgen.sessions.turns import SessionPlan, SessionRunner
from loadgen.workload.session_model import Session, SessionPrompter, Turn

SERVICE_S = 0.02


class FakeEndpoint(EndpointBase):
    """Answers every request after ``SERVICE_S`` with the reply ``r<index>``; fails indexes in ``fail``."""

    config: Any = None

    def __init__(self, fail: set[int] | None = None) -> None:
        self.fail = fail or set()
        self.seen: list[RequestSpec] = []
        self.sent_ns: dict[int, int] = {}

    async def send(self, spec: RequestSpec, record: RequestRecord, gate: asyncio.Event | None = None) -> None:
        from loadgen.core.clock import now_ns

        self.seen.append(spec)
        record.sent_ns = self.sent_ns[spec.index] = now_ns()
        await asyncio.sleep(SERVICE_S)
        record.end_ns = now_ns()
        if spec.index in self.fail:
            record.error_kind = "http_error"
            return
        record.events.append(TokenEvent(record.end_ns, f"r{spec.index}"))
        record.status = "ok"

    async def open(self) -> None:
        pass

    async def close(self) -> None:
        pass

    def describe(self) -> dict[str, Any]:
        return {}


def _run(plan: SessionPlan, ep: FakeEndpoint) -> tuple[list[tuple[RequestRecord, int]], SessionRunner]:
    got: list[tuple[RequestRecord, int]] = []
    runner = SessionRunner(ep, plan, lambda r, k: got.append((r, k)), install_signal_handlers=False)
    asyncio.run(runner.run())
    return got, runner


def test_turns_are_due_at_the_previous_reply_end_plus_the_capped_delay() -> None:
    s = Session("a", (Turn(2, new_tokens=3), Turn(2, new_tokens=3, delay_s=0.05), Turn(2, new_tokens=3, delay_s=5.0)))
    plan = SessionPlan([s], SessionPrompter(api="chat"), start_offsets_ns=[0], idle_cap_s=0.1)
    ep = FakeEndpoint()
    got, runner = _run(plan, ep)
    recs = sorted(got, key=lambda x: x[1])
    assert [k for _, k in recs] == [0, 1, 2]
    r0, r1, r2 = (r for r, _ in recs)
    assert r0.scheduled_ns == runner.t0_ns
    assert r0.end_ns is not None and r1.end_ns is not None
    assert r1.scheduled_ns == r0.end_ns + 50_000_000  # latency origin: previous reply end + delay
    assert r2.scheduled_ns == r1.end_ns + 100_000_000  # 5 s capped at idle_cap 100 ms
    assert all(ep.sent_ns[r.index] >= r.scheduled_ns for r in (r0, r1, r2))  # never early
    # the history holds the actual replies
    last = ep.seen[-1].messages
    assert last is not None and [m["content"] for m in last if m["role"] == "assistant"] == ["r0", "r1"]


def test_warmup_sessions_and_a_failed_turn() -> None:
    turns = tuple(Turn(1, new_tokens=2, delay_s=0.001) for _ in range(3))
    sessions = [Session(f"s{i}", turns) for i in range(3)]
    plan = SessionPlan(sessions, SessionPrompter(), start_offsets_ns=[0, 1_000_000, 2_000_000], warmup_sessions=1)
    ep = FakeEndpoint(fail={4})  # indexes are given as turns are built: s1's second turn is index 4
    got, runner = _run(plan, ep)
    by = {(r.session_id, k): r for r, k in got}
    assert {by[("s0", k)].phase for k in range(3)} == {"warmup"}
    assert by[("s1", 0)].phase == "measure"
    failed = [key for key, r in by.items() if not r.ok]
    assert len(failed) == 1
    sid, k = failed[0]
    assert all((sid, j) not in by for j in range(k + 1, 3))  # the session ended there
    st = runner.stats
    assert st.failed == 1 and st.completed == 2 and st.unsent_turns == 2 - k
    assert len(st.durations_s) == 2  # measured sessions only


def test_a_stop_that_cancels_in_flight_turns_ends_a_closed_loop_run_with_its_records() -> None:
    """A sweep probe's early stop (``request_stop(cancel_inflight=True)``) in closed loop: the turns in
    flight are recorded ``cancelled`` with the runner's reason, the rest counted unsent, and the run
    returns (it raised CancelledError out of ``run()`` when a slot awaited its cancelled session)."""
    sessions = [Session(f"s{i}", tuple(Turn(2, new_tokens=3, delay_s=0.01) for _ in range(3))) for i in range(6)]
    plan = SessionPlan(sessions, SessionPrompter(api="chat"), mode="closed", concurrency=2)
    got: list[tuple[RequestRecord, int]] = []

    async def go() -> SessionRunner:
        runner = SessionRunner(FakeEndpoint(), plan, lambda r, k: got.append((r, k)), install_signal_handlers=False)
        runner.cancel_reason = "stopped early"
        task = asyncio.create_task(runner.run())
        for _ in range(5000):  # until a turn is in flight (at most ~5 s): the early-stop watch reads them
            if runner.inflight_records:
                break
            await asyncio.sleep(0.001)
        assert runner.inflight_records
        runner.request_stop(interrupted=False, cancel_inflight=True)
        await asyncio.wait_for(task, 5)
        return runner

    runner = asyncio.run(go())
    cancelled = [r for r, _ in got if r.error_kind == "cancelled"]
    assert cancelled and all(r.error_detail == "stopped early" for r in cancelled)
    assert runner.stats.started < 6 and runner.stats.unsent_turns > 0 and not runner.inflight_records


def test_a_session_run_measures_its_stamps_lateness() -> None:
    """Session runs judge their stamps as the runner's runs do (stamp_error): every measured turn's token
    events are charged, and the run's client figures carry them (they read event-loop lag alone before)."""
    turns = tuple(Turn(1, new_tokens=2, delay_s=0.001) for _ in range(3))
    plan = SessionPlan([Session(f"s{i}", turns) for i in range(4)], SessionPrompter(), start_offsets_ns=[0] * 4)
    got: list[tuple[RequestRecord, int]] = []
    runner = SessionRunner(FakeEndpoint(), plan, lambda r, k: got.append((r, k)), install_signal_handlers=False)
    outcome = asyncio.run(runner.run())
    measured = sum(len(r.events) for r, _ in got if r.phase == "measure")
    assert measured == 12
    assert outcome.client.stamp_tokens == measured and outcome.client.stamps is runner.stamps
    assert outcome.client.stamp_lateness_p99_ms is not None


def test_a_sink_that_falls_behind_holds_a_bounded_backlog() -> None:
    """The engine's rule (tests/unit/test_runner_gate.py), with the session's turns carried through:
    past SINK_BACKLOG_EVENTS token events waiting, a sliced pass goes on until the backlog is back
    under it; none lost or reordered, each handed with its turn."""
    from loadgen.core.clock import now_ns
    from loadgen.engine.run_core import SINK_BACKLOG_EVENTS

    handed: list[int] = []
    plan = SessionPlan([], SessionPrompter(), start_offsets_ns=[])
    turns: list[int] = []

    def sink(r: RequestRecord, k: int) -> None:
        handed.append(r.index)
        turns.append(k)

    runner = SessionRunner(FakeEndpoint(), plan, sink, install_signal_handlers=False)
    events = [TokenEvent(t_ns=i, text="x") for i in range(1024)]
    for i in range(200):  # 200 records x 1024 events: ~3x the bound
        runner._finished(RequestRecord(index=i, phase="warmup", scheduled_ns=0, events=list(events)), i % 3)
    runner._flush_done(until_ns=now_ns())  # already past its slice: without the bound, one record and stop
    assert runner._done_events <= SINK_BACKLOG_EVENTS
    assert runner._done_events == sum(len(r.events) for r in runner._done)
    assert handed == list(range(len(handed))) and len(handed) >= 200 - SINK_BACKLOG_EVENTS // 1024
    runner._flush_done()
    assert handed == list(range(200)) and runner._done_events == 0
    assert turns == [i % 3 for i in range(200)]
