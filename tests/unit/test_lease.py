"""A worker sends only within its lease (issue 34, item 2: loadgen/spread/lease.py).

An actor cut off from its driver (a partition) kept sending, and after the link came back sent 4 more
requests after the run was over. With a lease that is never renewed, the engine starts no send due past
it, and stops after ``LEASE_LOST_NS``: what was due after the lease is unsent, nothing else goes out.
And the driver's split of a lost worker's shard: due within the lease and undelivered is lost with the
client, due after it is unsent.
"""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

import loadgen.engine.lifecycle as lifecycle
from loadgen.core.clock import now_ns
from loadgen.core.types import RequestRecord, RequestSpec
from loadgen.engine.runner import Runner
from loadgen.engine.runplan import LoadConfig, build_plan
from loadgen.spread.lease import split_by_lease, split_missing

MS = 1_000_000


class Instant:
    """An endpoint that answers at once: the send instants are the engine's."""

    def __init__(self) -> None:
        self.sent: list[int] = []

    def accepts_send_gate(self) -> bool:
        return False

    async def send(self, spec: RequestSpec, rec: RequestRecord, gate: object = None) -> None:
        rec.sent_ns = now_ns()
        self.sent.append(rec.sent_ns)
        await asyncio.sleep(0.001)
        rec.end_ns, rec.status = now_ns(), "ok"


@pytest.mark.timing
@pytest.mark.alone  # its 20 sends must start within a 200 ms lease: beside another test none started (session 22's CI)
def test_no_send_starts_past_a_lease_that_is_not_renewed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lifecycle, "LEASE_LOST_NS", 300 * MS)
    plan = build_plan(
        LoadConfig(rate_rps=100, arrival="constant", requests=60, input_tokens=4, output_tokens=2, salt="s")
    )
    ep = Instant()
    got: list[RequestRecord] = []

    async def go() -> tuple[Runner, int]:
        runner = Runner(ep, plan, got.append, install_signal_handlers=False)  # type: ignore[arg-type]  # a fake endpoint
        await runner.prepare()
        t0 = now_ns() + 50 * MS
        runner.start_at(t0)
        runner.lease_ns = lambda: t0 + 200 * MS  # granted once, never renewed
        out = await runner.run()
        return runner, out.unsent + out.unsent_warmup

    runner, unsent = asyncio.run(go())
    t0 = runner.t0_ns
    assert ep.sent and max(ep.sent) < t0 + 200 * MS + 5 * MS  # nothing sent past the lease (a send's own slack)
    assert len(got) == len(ep.sent) == 20 and unsent == 40  # offsets 0, 10, ... 190 ms: 20 due within it
    assert runner.aborted_reason is not None and "lease" in runner.aborted_reason


def test_a_lost_workers_shard_splits_by_its_lease() -> None:
    shard = np.arange(0, 2_000 * MS, 100 * MS, dtype=np.int64)  # 20 sends, 100 ms apart
    assert split_by_lease(shard, 5, 1_000 * MS) == (5, 10)  # due before 1 s: 10, 5 delivered: 5 lost, 10 unsent
    assert split_by_lease(shard, 5, None) == (0, 15)  # never got "go": nothing was sent
    assert split_by_lease(shard, 20, 1_000 * MS) == (0, 0)
    assert split_by_lease(shard, 12, 1_000 * MS) == (0, 8)  # more delivered than due (a later lease): no loss
    closed = build_plan(LoadConfig(concurrency=5, requests=40, input_tokens=4, output_tokens=2, salt="s"))
    assert split_missing(closed, 0, 2, 10, 1_000 * MS) == (3, 7)  # one request in flight per user of its 3
    sessions = type("Shape", (), {"mode": "sessions", "schedule": []})()  # loadgen.sessions.spread's plan
    assert split_missing(sessions, 0, 2, 7, 1_000 * MS) == (0, 7)
