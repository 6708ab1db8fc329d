"""Long runs hold nothing per request in memory: lazy schedule, spilled exact samples.

The lazy :class:`~loadgen.core.schedule.Schedule` builds the same requests as the eager
``Workload.schedule`` (offsets, phases, specs), shards like a list, and costs about
9 bytes a request; :class:`~loadgen.core.samples.SampleLog` gives back exactly the values
appended (so percentiles are unchanged) while keeping at most one chunk in memory.
"""

from __future__ import annotations

import gc
import tracemalloc
from array import array
from pathlib import Path

import numpy as np
import pytest

from loadgen.core.samples import CHUNK, SampleLog, SpillFile
from loadgen.core.schedule import Schedule, as_schedule
from loadgen.core.slo import parse_slo
from loadgen.engine.results import Aggregator, summarize_exact
from loadgen.engine.runner import realized_send_rps
from loadgen.engine.runplan import LoadConfig, build_plan
from loadgen.workload.arrivals import Arrivals, arrival_offsets_array, arrival_offsets_ns
from loadgen.workload.spec import Workload, WorkloadOptions


def test_lazy_schedule_equals_the_eager_one() -> None:
    for arrivals in (
        Arrivals(rate_rps=40.0, arrival="gamma", burstiness=0.5, requests=60, warmup_requests=5),
        Arrivals(rate_rps=30.0, duration_s=2.0, warmup_s=0.5),
    ):
        opts = WorkloadOptions(input_tokens="uniform:8,40", output_tokens=4, seed=3, salt="s")
        eager = Workload(opts).schedule(arrivals)
        w = Workload(opts)
        lazy = w.lazy_schedule(arrivals)
        assert w.builder.built == 0  # nothing built yet
        assert list(lazy) == eager
        shard = lazy[1::3]
        assert list(shard) == eager[1::3]
        assert shard.count_phases(0) == (
            sum(s.phase == "measure" for s in eager[1::3]),
            sum(s.phase == "warmup" for s in eager[1::3]),
        )


def test_lazy_trace_schedule_equals_the_eager_one() -> None:
    opts = WorkloadOptions(trace="builtin:azure-conv-2023", trace_max_requests=7, trace_loop=True, salt="t")
    eager = Workload(opts).schedule(Arrivals(requests=20))
    assert list(Workload(opts).lazy_schedule(Arrivals(requests=20))) == eager


def test_arrival_array_equals_the_list() -> None:
    for kind, b in (("poisson", 1.0), ("gamma", 0.3), ("constant", 1.0)):
        a = arrival_offsets_array(kind, 500.0, duration_s=3.0, seed=2, burstiness=b)
        assert a.dtype == np.int64 and a.tolist() == arrival_offsets_ns(
            kind, 500.0, duration_s=3.0, seed=2, burstiness=b
        )
        assert np.all(np.diff(a) >= 0) and a[-1] < 3e9


@pytest.mark.timing
def test_plan_costs_about_9_bytes_a_request() -> None:
    cfg = LoadConfig(rate_rps=500.0, requests=200_000, input_tokens=32, output_tokens=8, salt="m")
    build_plan(cfg)  # load the corpus etc. once
    gc.collect()
    tracemalloc.start()
    try:
        plan = build_plan(cfg)
        gc.collect()
        held = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert len(plan.schedule) == 200_000
    assert held / 200_000 < 12, held / 200_000  # offsets 8 B + warm-up flag 1 B (+ fixed overhead)


def test_realized_rate_of_a_list_and_a_schedule_agree() -> None:
    w = Workload(WorkloadOptions(salt="r"))
    lazy = w.lazy_schedule(Arrivals(rate_rps=100.0, requests=50, warmup_requests=5))
    listed = as_schedule(list(lazy))
    assert realized_send_rps(lazy, 3) == realized_send_rps(listed, 3)
    offs = [s.offset_ns for s in lazy if s.phase == "measure"][:-3]
    assert realized_send_rps(lazy, 3) == (len(offs) - 1) / ((offs[-1] - offs[0]) / 1e9)
    assert isinstance(lazy, Schedule)


def test_sample_log_spills_and_gives_back_every_value(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    vals = rng.lognormal(17, 1, 3 * CHUNK + 123)
    spill = SpillFile(tmp_path)
    log = SampleLog(spill)
    ref = array("d")
    for v in vals.tolist():
        log.append(v)
        ref.append(v)
    assert len(log) == len(ref) and log.spilled == 3 * CHUNK
    assert len(log._buf) < CHUNK  # memory: at most one chunk
    assert np.array_equal(log.values(), np.asarray(ref))
    assert summarize_exact(log) == summarize_exact(ref)  # exact percentiles unchanged
    assert list(tmp_path.iterdir()) == []  # the spill file has no name
    spill.close()


def test_aggregator_percentiles_unchanged_past_the_chunk(tmp_path: Path) -> None:
    slos = [parse_slo("e2e:p99<=40ms")]
    agg = Aggregator(slos, spill_dir=tmp_path)
    mem = Aggregator(slos)
    for log in (*mem.samples.values(), *mem.slo_values.values()):
        log._spill = None  # an in-memory log: the reference
    rng = np.random.default_rng(1)
    n = CHUNK + 5000
    e2e = rng.integers(1_000_000, 60_000_000, n)
    for a in (agg, mem):
        for v in e2e.tolist():
            a._sample("e2e", v)
            a.slo_values[slos[0].label].append(v)
        a.requests = a.completed = a.conforming = n
    assert agg.samples["e2e"].spilled == (n // CHUNK) * CHUNK > 0
    assert agg.latency_ms()["e2e"] == mem.latency_ms()["e2e"]
    assert agg.slo_result() == mem.slo_result()
    agg.close()
