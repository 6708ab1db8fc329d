"""A probe's judge: counts exceedances as records arrive, watches in-flight requests for the early stop.

:class:`ProbeJudge` is the one counting path of a probe (:mod:`loadgen.sweep.probe`): every finished
request, of this process or shipped by a worker, is summarised once
(:class:`loadgen.engine.summary.RequestSummary`) and counted per target; it keeps each target's
values for the dependence rule (:mod:`loadgen.sweep.evidence`) and for the flip test
(:mod:`loadgen.sweep.client_error`), and the per-request timing rows of the stability test.
"""

from __future__ import annotations

import asyncio
import math

import numpy as np

from loadgen.core.clock import now_ns
from loadgen.core.metrics import RequestMetrics
from loadgen.core.slo import (
    CANCELLED_OVER,
    CANCELLED_UNDER,
    CANCELLED_UNKNOWN,
    MISS,
    SLOTarget,
    TargetJudge,
    exceeds,
    fail_count,
    inflight_over,
    judged_per_request,
    proves_fail,
)
from loadgen.core.types import RequestRecord
from loadgen.engine.runner import Runner
from loadgen.engine.summary import RequestSummary, summarize
from loadgen.sweep import evidence as ev
from loadgen.sweep.client_error import TargetLog

__all__ = ["ProbeJudge"]

# Failures that are the server's whatever the generator's timing (not: connect, which a saturated
# client can cause too; cancelled, the probe's own early stop; client_limit).
_SERVER_ERRORS = ("timeout", "header_timeout", "rate_limited", "http_error", "incomplete_stream", "stream_error",
                  "protocol")  # fmt: skip


def _held_unsent_ns(s: RequestSummary) -> int | None:
    """A request cancelled before its send (a probe's early stop): how long the client itself held it, for the
    flip test (its send lag, had it been sent): its age at the cancel less its wait at ``--max-concurrency``
    (``throttle_ns``). None where it waited for a pooled connection (``pool_queued``: every connection held by
    a request in flight at the server, the server's backlog) or has no end: nothing of it is the client's.

    Without this, a generator too slow for its rate (its requests scheduled, never sent) had every such
    request counted as over on its age with no send lag to take out, and its FAIL stood on the client's
    own lateness (``test_client_limited_ends_with_exit_5`` beside a busy neighbour, session 24)."""
    if s.pool_queued or s.end_ns is None:
        return None
    return max(0, s.end_ns - s.scheduled_ns - s.throttle_ns)


class ProbeJudge:
    """Counts exceedances as records arrive and watches in-flight requests for early stop."""

    def __init__(self, slos: list[SLOTarget], n_cap: int, confidence: float) -> None:
        self.targets = [TargetJudge(t) for t in slos]
        self.n_cap = n_cap
        self.confidence = confidence
        self.runner: Runner | None = None
        self.stopped_early = False
        self.censored = 0
        self.dep = ev.DependenceLog({i: tj.target.threshold_ns for i, tj in enumerate(self.targets)})
        self.logs = {i: TargetLog() for i, tj in enumerate(self.targets) if judged_per_request(tj.target)}  # flip test
        # exceedances out of n_cap that make FAIL certain, computed once: certain_fail() runs every
        # 100 ms on the event loop that sends the requests and must not evaluate binomial bounds there
        self.set_cap(n_cap)

    def set_cap(self, n_cap: int) -> None:
        """The largest possible probe (requests); sets the exceedance counts that make FAIL certain."""
        self.n_cap = n_cap
        self.fail_k = {
            tj.target.label: fail_count(n_cap, tj.target, self.confidence)
            for tj in self.targets
            if tj.target.metric not in ("itl", "tpot", "tbt_deadline")
        }

    def new_segment(self) -> None:
        """Start the per-request timing rows of a new segment (for the stability test)."""
        self.rows: list[tuple[int, int | None, float, bool, bool, float]] = []

    def timing(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """This segment's (scheduled_ns, end_ns, first_token_ns or NaN, measured, ok, tpot_ns or NaN) arrays."""
        rows = getattr(self, "rows", [])
        ends = [r[1] for r in rows if r[1] is not None]
        last = max(ends) if ends else 0
        sched = np.asarray([r[0] for r in rows], dtype=np.int64)
        end = np.asarray([r[1] if r[1] is not None else last for r in rows], dtype=np.int64)
        first = np.asarray([r[2] for r in rows], dtype=np.float64)
        meas = np.asarray([r[3] for r in rows], dtype=np.bool_)
        ok = np.asarray([r[4] for r in rows], dtype=np.bool_)
        tpot = np.asarray([r[5] for r in rows], dtype=np.float64)
        return sched, end, first, meas, ok, tpot

    def on_summary(self, s: RequestSummary) -> None:
        """Count one finished request: the one counting path, for a request of this process
        (:meth:`on_record` summarises it first) and one shipped by a worker process alike."""
        first = float(s.first_event_ns) if s.first_event_ns is not None else math.nan
        tpot = float(s.tpot_ns) if s.tpot_ns is not None else math.nan
        getattr(self, "rows", []).append((s.scheduled_ns, s.end_ns, first, s.phase == "measure", bool(s.ok), tpot))
        if s.phase != "measure":
            return
        censored = False
        for i, tj in enumerate(self.targets):
            t = tj.target
            if not judged_per_request(t) or not t.applies(s.model):  # (a target of another model of a mix)
                continue
            if s.error_kind == "cancelled":  # slo.cancelled_state: a miss, conforming, or censored
                state = s.cancelled_states[i] if i < len(s.cancelled_states) else CANCELLED_UNKNOWN
                if state == CANCELLED_OVER:
                    tj.n += 1
                    tj.k += 1
                    self.dep.add(i, s.scheduled_ns, MISS)  # over, its value unknown: a miss in its run
                    # for the flip test, the least it can be: its first token's value, or its age when cancelled
                    # (judged over on a clock that carries its own send lag: the flip test takes that out)
                    lag = s.schedule_lag_ns if s.sent_ns is not None else _held_unsent_ns(s)
                    if t.metric != "e2e" and s.first_event_ns is not None:
                        self.logs[i].add(float(s.first_event_ns - s.scheduled_ns), lag)
                    elif s.end_ns is not None:
                        self.logs[i].add(float(s.end_ns - s.scheduled_ns), lag)
                elif state == CANCELLED_UNDER:
                    tj.n += 1  # measured before the stop, and it conforms: not censored
                else:
                    tj.censored += 1
                    censored = True
                continue
            tj.n += 1
            self.dep.add(i, s.scheduled_ns, v := s.slo_values[i] if (s.ok and not s.zero_output) else MISS)
            self.logs[i].add(v, s.schedule_lag_ns)
            if exceeds(t, v):
                tj.k += 1
                if not s.ok and s.error_kind in _SERVER_ERRORS:
                    tj.server_errors += 1
        if censored:
            self.censored += 1

    def on_record(self, rec: RequestRecord | None, m: RequestMetrics | None) -> None:
        """Count a request of this process: summarised as a worker process ships it, then :meth:`on_summary`."""
        if rec is None or m is None:  # worker mode: counted in on_summary
            return
        self.on_summary(summarize(rec, m, [tj.target for tj in self.targets]))

    def certain_fail(self) -> bool:
        """True when the probe would FAIL even if every remaining request conformed."""
        inflight = list(self.runner.inflight_records.values()) if self.runner else []
        now = now_ns()
        for tj in self.targets:
            t = tj.target
            if t.metric in ("itl", "tpot", "tbt_deadline"):
                continue
            k = tj.k + sum(
                1 for r in inflight if r.phase == "measure" and t.applies(r.model) and inflight_over(t, r, now)
            )
            if k >= self.fail_k[t.label]:
                return True
        return False

    def fails_on_server_errors(self) -> bool:
        """True when the server's errors alone make a target FAIL (out of ``n_cap`` after an early
        stop): a generator that lagged cannot have caused HTTP errors, so that verdict stands."""
        for tj in self.targets:
            if not judged_per_request(tj.target):
                continue
            n = self.n_cap if self.stopped_early else tj.n
            if proves_fail(tj.server_errors, n, tj.target, self.confidence):
                return True
        return False

    async def watch(self, period_s: float = 0.1) -> None:
        while True:
            await asyncio.sleep(period_s)
            if self.runner is not None and self.certain_fail():
                self.stopped_early = True
                self.runner.request_stop(interrupted=False, cancel_inflight=True)
                return
