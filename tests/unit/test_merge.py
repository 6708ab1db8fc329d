"""Merging worker shards gives the same result as one process over the same records."""

from __future__ import annotations

import math
import random
from typing import cast

from loadgen.core.histograms import LatencyHistogram
from loadgen.core.metrics import compute
from loadgen.core.slo import parse_slo
from loadgen.core.types import RequestRecord, RequestSpec, ScheduledRequest, TokenEvent
from loadgen.engine.results import Aggregator
from loadgen.engine.runner import RunPlan
from loadgen.engine.summary import summarize
from loadgen.spread.workers import shard_plan

MS = 1_000_000


def _records(n: int, seed: int = 5) -> list[RequestRecord]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        sched = i * 10 * MS
        r = RequestRecord(index=i, phase="measure", scheduled_ns=sched, sent_ns=sched + rng.randint(0, MS))
        if rng.random() < 0.1:
            r.status, r.error_kind, r.end_ns = "error", rng.choice(["http_error", "timeout"]), sched + 50 * MS
        else:
            t = sched + rng.randint(50, 400) * MS
            k = rng.randint(1, 40)
            for j in range(k):
                t += rng.randint(1, 30) * MS
                r.events.append(TokenEvent(t, "w" * rng.randint(1, 8), True, j + 1))
            r.completion_tokens = k
            r.status, r.end_ns = "ok", t + MS
        out.append(r)
    return out


def test_sharded_summaries_equal_one_process() -> None:
    slos = [parse_slo("ttft:p99<=300ms"), parse_slo("tpot:p90<=20ms")]
    recs = _records(2000)
    whole = Aggregator(slos)
    for r in recs:
        whole.add(r, compute(r))
    merged = Aggregator(slos)
    for w in range(3):
        hist = {"itl": LatencyHistogram("itl"), "inter_chunk": LatencyHistogram("inter_chunk")}
        for r in recs[w::3]:
            m = compute(r)
            s = summarize(r, m, slos)
            merged.add_summary(s)
            if s.ok and not s.zero_output:
                for v in m.itl_ns:
                    hist["itl"].record_ns(v)
                for v in m.inter_chunk_ns:
                    hist["inter_chunk"].record_ns(v)
        merged.merge_token_histograms({k: h.to_state() for k, h in hist.items()})
    a, b = whole.latency_ms(), merged.latency_ms()
    for name in ("ttft", "tpot", "e2e", "schedule_lag", "error_e2e"):
        # exact percentiles: identical; the mean only up to the order of float summation
        assert {k: v for k, v in a[name].items() if k != "mean"} == {k: v for k, v in b[name].items() if k != "mean"}, (
            name
        )
        assert math.isclose(a[name]["mean"], b[name]["mean"], rel_tol=1e-12), name
    for name in ("itl", "inter_chunk"):
        assert a[name] == b[name], name  # HDR merge is exact bucket for bucket
    assert whole.counts() == merged.counts()
    assert whole.slo_result() == merged.slo_result()
    assert whole.throughput() == merged.throughput()


def test_shards_cover_the_schedule_once() -> None:
    sched = [ScheduledRequest(i * 1000, RequestSpec(i, "p")) for i in range(101)]
    plan = RunPlan(mode="open", schedule=sched)
    parts = [shard_plan(plan, w, 4).schedule for w in range(4)]
    idx = sorted(s.spec.index for p in parts for s in p)
    assert idx == list(range(101))
    closed = RunPlan(mode="closed", concurrency=10, max_requests=33, warmup_requests=5)
    cs = [shard_plan(closed, w, 4) for w in range(4)]
    assert sum(c.concurrency for c in cs) == 10
    assert sum(cast(int, c.max_requests) for c in cs) == 33  # a closed plan with a count shards it
    assert sum(c.warmup_requests for c in cs) == 5
    assert [c.index_start for c in cs] == [0, 1, 2, 3] and all(c.index_stride == 4 for c in cs)
