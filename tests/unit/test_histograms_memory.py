"""A histogram is resident only where it counts something (issue 22, must-show 4: memory).

Each :class:`~loadgen.core.histograms.LatencyHistogram` spans 1 µs to 1 hour at 3 digits: 23,552
counters, 184 KiB. hdrh zero-fills them, so a run's dozens of histograms (two per ``timeseries``
interval) were all resident; on zero pages only the pages a value lands on are. The counts, the
percentiles, the encoding and the merge stay those of hdrh's own histogram fed the same values.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from hdrh.histogram import HdrHistogram

from loadgen.core.histograms import HIGHEST_US, SIGNIFICANT_FIGURES, LatencyHistogram


def _resident_kib() -> int:
    with open("/proc/self/statm", encoding="ascii") as fh:
        return int(fh.read().split()[1]) * (os.sysconf("SC_PAGE_SIZE") // 1024)


@pytest.mark.timing
@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="needs Linux /proc")
def test_empty_histograms_are_not_resident() -> None:
    LatencyHistogram("warm")  # numpy, hdrh and the first map set up outside the measure
    before = _resident_kib()
    hs = [LatencyHistogram(f"h{i}") for i in range(64)]
    grown = _resident_kib() - before
    # zero-filled: 64 x 184 KiB = 11.5 MiB; on zero pages: a few KiB of Python objects
    assert grown < 4096, f"64 empty histograms made {grown} KiB resident"
    for h in hs:
        h.record_ns(12_345_000)  # one page each once they count
    assert _resident_kib() - before < 4096 + 64 * 8


def test_counts_and_figures_are_hdrh_own() -> None:
    rng = np.random.default_rng(7)
    values_ns = np.concatenate([rng.exponential(3e6, 3000), rng.uniform(0, 5e9, 50), [0.0, 1e3, 7.2e15]])
    ours, shard = LatencyHistogram("x"), LatencyHistogram("x")
    ours.record_many_ns(values_ns[:2000])
    for v in values_ns[2000:]:
        shard.record_ns(float(v))
    ours.merge(LatencyHistogram.from_state(shard.to_state()))  # shipped, decoded, merged
    ref = HdrHistogram(1, HIGHEST_US, SIGNIFICANT_FIGURES)
    for v in values_ns:
        us = int(v / 1000 + 0.5)
        ref.record_value(us)  # the one over an hour is refused: ours counts it as overflow
    assert list(np.ctypeslib.as_array(ours.hist.counts)) == list(np.ctypeslib.as_array(ref.counts))
    assert ours.hist.get_total_count() == ref.get_total_count() and ours.overflow_count == 1
    for p in (50.0, 90.0, 99.0, 99.9):
        assert ours.hist.get_value_at_percentile(p) == ref.get_value_at_percentile(p)
    assert HdrHistogram.decode(ours.encode()).get_value_at_percentile(99) == ref.get_value_at_percentile(99)
