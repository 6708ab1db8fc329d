"""A probe counts the same evidence in one process and over worker processes (issue 29, must show 3).

In one process the probe's judge sees each finished record (``on_record``); with ``--workers N`` it
sees what a worker ships, the pickled :class:`~loadgen.engine.summary.RequestSummary`
(``on_summary``). The same requests must give the same counts, censored requests, dependence
rows and timing rows either way — cancelled requests (an early stop) included, which were once
counted by two different rules.
"""

from __future__ import annotations

import pickle
from typing import Any, Literal

import numpy as np
import pytest

from loadgen.core.metrics import compute
from loadgen.core.slo import CANCELLED_OVER, CANCELLED_UNDER, CANCELLED_UNKNOWN, SLOTarget, cancelled_state
from loadgen.core.types import Phase, RequestRecord, TokenEvent
from loadgen.engine.summary import summarize
from loadgen.sweep import ProbeJudge

MS = 1_000_000
TARGETS = [
    SLOTarget("ttft", 90.0, 50 * MS),
    SLOTarget("e2e", 99.0, 200 * MS),
    SLOTarget("time_to_first_answer_token", 90.0, 60 * MS),
    SLOTarget("tpot", 90.0, 3 * MS),
    SLOTarget("itl", 99.0, 5 * MS),
]


def record(
    index: int,
    *,
    scheduled: int,
    first: int | None,
    end: int | None,
    status: Literal["ok", "error"] = "ok",
    error_kind: str | None = None,
    phase: Phase = "measure",
    tokens: int = 4,
    gap: int = MS,
    answer: bool = True,
) -> RequestRecord:
    r = RequestRecord(index=index, phase=phase, scheduled_ns=scheduled, sent_ns=scheduled + MS // 10)
    r.status = status
    r.error_kind = error_kind
    if first is not None:
        r.events = [TokenEvent(first + i * gap, "tok ", answer) for i in range(tokens)]
        r.completion_tokens = tokens
    r.end_ns = end
    return r


def mixed_records() -> list[RequestRecord]:
    """Ok, slow, failed, zero-output, warm-up and cancelled requests (over, under and unknown)."""
    recs = []
    t = 0
    for i in range(40):
        t += 7 * MS
        slow = i % 9 == 0
        first = t + (80 if slow else 20) * MS
        recs.append(
            record(i, scheduled=t, first=first, end=first + 4 * (4 if slow else 1) * MS, gap=(4 if slow else 1) * MS)
        )
    recs.append(record(40, scheduled=t, first=None, end=t + 5 * MS, status="error", error_kind="http_error"))
    recs.append(record(41, scheduled=t, first=None, end=t + 9 * MS, status="error", error_kind="timeout"))
    recs.append(record(42, scheduled=t, first=None, end=t + MS, status="ok", tokens=0))  # zero output
    recs.append(record(43, scheduled=0, first=10 * MS, end=14 * MS, phase="warmup"))
    # cancelled by an early stop at t + 100 ms: first token in time (under), first token late (over),
    # no token and already over TTFT's 50 ms (over), no token and still young (unknown), reasoning only
    stop = t + 100 * MS
    recs.append(record(44, scheduled=t + 60 * MS, first=t + 90 * MS, end=stop, status="error", error_kind="cancelled"))
    recs.append(record(45, scheduled=t, first=t + 70 * MS, end=stop, status="error", error_kind="cancelled"))
    recs.append(record(46, scheduled=t, first=None, end=stop, status="error", error_kind="cancelled"))
    recs.append(record(47, scheduled=t + 95 * MS, first=None, end=stop, status="error", error_kind="cancelled"))
    recs.append(
        record(
            48, scheduled=t + 80 * MS, first=t + 85 * MS, end=stop, status="error", error_kind="cancelled", answer=False
        )
    )
    return recs


def evidence(j: ProbeJudge) -> dict[str, Any]:
    return {
        "targets": [(tj.target.label, tj.n, tj.k, tj.censored, tj.server_errors) for tj in j.targets],
        "censored": j.censored,
        "dep": {i: list(rows) for i, rows in j.dep.rows.items()},
        "timing": [a.tolist() for a in j.timing()],
    }


def judge() -> ProbeJudge:
    j = ProbeJudge(TARGETS, n_cap=1000, confidence=0.95)
    j.new_segment()
    return j


def test_one_process_and_workers_count_the_same_evidence() -> None:
    one, many = judge(), judge()
    for r in mixed_records():
        m = compute(r)
        one.on_record(r, m)
        # what a worker process ships: the summary, pickled across the pipe
        many.on_summary(pickle.loads(pickle.dumps(summarize(r, m, TARGETS))))
    a, b = evidence(one), evidence(many)
    for key in a:
        if key == "timing":
            for x, y in zip(a[key], b[key], strict=True):
                np.testing.assert_array_equal(np.asarray(x, dtype=float), np.asarray(y, dtype=float))
        else:
            assert a[key] == b[key], key
    # and the counts are the rule's, not merely equal: 5 cancelled requests, by target
    ttft = next(t for t in a["targets"] if t[0].startswith("ttft"))
    # 40 finished + 3 failed or zero-output + 4 cancelled and known: 44 and 48 under (a first event, the
    # reasoning one counts for TTFT), 45 and 46 over; 47 (5 ms old, no token) censored
    assert ttft[1:4] == (47, 5 + 3 + 2, 1)  # k: 5 slow (i % 9 == 0), 3 failed or empty, 2 cancelled over
    assert a["censored"] == 5  # every cancelled request is censored for TPOT, never known before its end


@pytest.mark.parametrize(
    ("first_ms", "scheduled_ms", "target", "expected"),
    [
        (90, 60, "ttft", CANCELLED_UNDER),  # first token 30 ms after its schedule: under 50 ms
        (70, 0, "ttft", CANCELLED_OVER),  # 70 ms: over
        (None, 0, "ttft", CANCELLED_OVER),  # no token at 100 ms of age: over already
        (None, 95, "ttft", CANCELLED_UNKNOWN),  # 5 ms old, no token: censored
        (None, 0, "e2e", CANCELLED_UNKNOWN),  # 100 ms of a 200 ms E2E target: not known
        (90, 60, "tpot", CANCELLED_UNKNOWN),  # per-token targets are never known before the end
    ],
)
def test_cancelled_state(first_ms: int | None, scheduled_ms: int, target: str, expected: str) -> None:
    t = next(x for x in TARGETS if x.metric == target)
    r = record(0, scheduled=scheduled_ms * MS, first=None if first_ms is None else first_ms * MS, end=100 * MS,
               status="error", error_kind="cancelled")  # fmt: skip
    assert cancelled_state(t, r, 100 * MS) == expected
