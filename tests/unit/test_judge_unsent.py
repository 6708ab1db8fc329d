"""A probe stopped early whose requests the client never sent: the client's lateness, not the server's.

At 12,000 req/s on a busy machine the generator fell seconds behind; the probe's early stop cancelled
thousands of requests it had scheduled and never sent, each over TTFT on its age alone. The flip test
(:mod:`loadgen.sweep.client_error`) had no send lag to take out of them, so "FAIL, VALID for this verdict"
blamed the server for the client's own lateness (session 24's CI, beside a busy neighbour). A request
cancelled before its send now carries the time the client held it; one that waited for a pooled
connection (the server's backlog) carries none.
"""

from __future__ import annotations

from loadgen.core.metrics import compute
from loadgen.core.slo import SLOTarget
from loadgen.core.types import RequestRecord, TokenEvent
from loadgen.sweep import ProbeJudge
from loadgen.sweep.client_error import flip_test

MS = 1_000_000
TTFT = SLOTarget("ttft", 90.0, 200 * MS)


def _judged(pool_queued: bool) -> ProbeJudge:
    j = ProbeJudge([TTFT], n_cap=200, confidence=0.95)
    j.new_segment()
    for i in range(40):  # sent in time, answered in 5 ms
        r = RequestRecord(index=i, phase="measure", scheduled_ns=i * MS, sent_ns=i * MS + MS // 10)
        r.events = [TokenEvent(i * MS + 5 * MS, "tok", True)]
        r.completion_tokens, r.status, r.end_ns = 1, "ok", i * MS + 6 * MS
        j.on_record(r, compute(r))
    stop = 3000 * MS
    for i in range(40, 200):  # scheduled, never sent, cancelled by the early stop at 3 s
        r = RequestRecord(index=i, phase="measure", scheduled_ns=40 * MS + i * 5 * MS, sent_ns=None)
        r.status, r.error_kind, r.end_ns, r.pool_queued = "error", "cancelled", stop, pool_queued
        j.on_record(r, compute(r))
    j.stopped_early = True
    return j


def _flip(j: ProbeJudge) -> bool:
    tj = j.targets[0]
    return flip_test([(tj, j.dep.effective(0, tj), j.logs.get(0))], [], 1.0, 0.95, stopped_early=True,
                     fail_k=j.fail_k).stands  # fmt: skip


def test_requests_the_client_never_sent_carry_the_time_it_held_them() -> None:
    j = _judged(pool_queued=False)
    tj = j.targets[0]
    assert (tj.n, tj.k) == (200, 160)  # every cancelled one is over on its age (the early stop's rule)
    lags = list(j.logs[0].lags)
    assert lags[:40] == [MS // 10] * 40
    # held by the client from its schedule to the cancel (1.97 to 2.76 s)
    assert lags[40:] == [float(3000 * MS - (40 * MS + i * 5 * MS)) for i in range(40, 200)]
    assert not _flip(j)  # the FAIL could be the client's lateness: the probe stays INVALID


def test_requests_waiting_for_a_pooled_connection_are_the_servers_backlog() -> None:
    j = _judged(pool_queued=True)
    assert list(j.logs[0].lags)[40:] == [0.0] * 160
    assert _flip(j)  # every connection held by the server's requests in flight: the FAIL stands
