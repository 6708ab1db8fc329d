"""HDR histograms of latency metrics, in integer microseconds, mergeable across processes.

Wraps ``hdrh.histogram.HdrHistogram`` (HdrHistogram by Gil Tene; Python port
``hdrhistogram``). Every value is recorded in integer microseconds (the unit is
fixed in :attr:`LatencyHistogram.unit`) with 3 significant digits, i.e. a
relative error of at most 0.1 % (1 µs resolution below 2 ms). The range is 1 µs
to 1 hour; 0 is recordable. A value above the range is never dropped
silently: it is counted in ``overflow_count`` and its exact maximum kept.

Histograms merge exactly (bucket counts add), so shards recorded in several
processes or hosts give the same histogram as one process recording everything.

Memory: the range takes 23,552 counters (184 KiB) a histogram, nearly all zero. A run holds
dozens (the aggregator's, the stamp checks', two per interval of ``result.json``
``timeseries``), so the counters live on an anonymous memory map (:func:`_on_zero_pages`):
a page is resident only once a bucket on it counts something.
"""

from __future__ import annotations

import ctypes
import math
import mmap
from collections.abc import Sequence

import numpy as np
from hdrh.histogram import HdrHistogram

HIGHEST_US = 3_600_000_000
SIGNIFICANT_FIGURES = 3


def _on_zero_pages(hist: HdrHistogram) -> HdrHistogram:
    """``hist`` with its counts moved to an anonymous memory map (the same counts).

    hdrh allocates the counts as a ctypes array that is zero-filled, so all 184 KiB are resident
    at once; a fresh map's pages are the kernel's shared zero page until written. The histogram
    and its encoder's payload both hold the array (``record``, ``add`` and ``encode`` go
    through it), so both get the new one; only the non-zero counts are copied.
    """
    old = hist.counts
    new = type(old).from_buffer(mmap.mmap(-1, ctypes.sizeof(old)))  # keeps the map alive
    src = np.ctypeslib.as_array(old)
    nz = np.flatnonzero(src)
    if nz.size:
        np.ctypeslib.as_array(new)[nz] = src[nz]
    hist.counts = new
    hist.encoder.payload.counts = new
    return hist


class LatencyHistogram:
    """One metric's HDR histogram; values in integer microseconds.

    ``record_ns(value_ns)`` rounds to the nearest microsecond. Percentiles and
    the mean come back in milliseconds (``*_ms``).
    """

    unit = "us"
    __slots__ = ("name", "hist", "overflow_count", "overflow_max_us", "sum_us", "count")

    def __init__(self, name: str) -> None:
        self.name = name
        self.hist = _on_zero_pages(HdrHistogram(1, HIGHEST_US, SIGNIFICANT_FIGURES))
        self.hist.set_tag(name)
        self.overflow_count = 0
        self.overflow_max_us = 0
        self.sum_us = 0
        self.count = 0

    def record_ns(self, value_ns: float) -> None:
        v = int(value_ns / 1000 + 0.5) if value_ns >= 0 else 0
        self.count += 1
        self.sum_us += v
        if not self.hist.record_value(v):
            self.overflow_count += 1
            if v > self.overflow_max_us:
                self.overflow_max_us = v

    def record_many_ns(self, values_ns: Sequence[float] | np.ndarray, *also: LatencyHistogram) -> None:
        """Record many values at once: the same counts as ``record_ns`` on each, in a few numpy passes;
        into this histogram and each of ``also`` (same values: the indices are computed once).

        A request's per-token values (ITL, inter-chunk: hundreds a request) cost ~8 µs each through
        ``record_ns`` (hdrh's index arithmetic in Python): milliseconds per record, on the loop
        that stamps the reads. Here the bucket index of every value is computed as hdrh computes
        it (bucket = bit length of ``v | sub_bucket_mask`` less the unit and half-count
        magnitudes; sub-bucket = ``v >> bucket``) and the counts added in place (each distinct
        index once, with its multiplicity: ``np.unique``, ~3x cheaper than ``np.add.at``).
        Every histogram here has the same layout (1 µs to 1 hour, 3 figures).
        """
        if len(values_ns) == 0:
            return
        x = np.asarray(values_ns, dtype=np.float64)
        v = np.where(x >= 0, np.floor(x / 1000 + 0.5), 0.0).astype(np.int64)  # as record_ns rounds
        h = self.hist
        bits = np.frexp((v | h.sub_bucket_mask).astype(np.float64))[1]  # bit length (exact below 2**53)
        bucket = bits - h.unit_magnitude - (h.sub_bucket_half_count_magnitude + 1)
        sub = v >> (bucket + h.unit_magnitude)
        idx = ((bucket + 1) << h.sub_bucket_half_count_magnitude) + (sub - h.sub_bucket_half_count)
        ok = (idx >= 0) & (idx < h.counts_len)
        over = v[~ok]
        inside = v[ok]
        at, times = np.unique(idx[ok], return_counts=True)
        times = times.astype(np.uint64)
        total, n_over = int(v.sum()), int(over.size)
        max_over = int(over.max()) if n_over else 0
        lo, hi = (int(inside.min()), int(inside.max())) if inside.size else (0, 0)
        for t in (self, *also):
            t.count += int(v.size)
            t.sum_us += total
            if n_over:
                t.overflow_count += n_over
                t.overflow_max_us = max(t.overflow_max_us, max_over)
            if inside.size:
                th = t.hist
                np.ctypeslib.as_array(th.counts)[at] += times
                th.total_count += int(inside.size)
                th.min_value = min(th.min_value, lo)
                th.max_value = max(th.max_value, hi)

    def merge(self, other: LatencyHistogram) -> None:
        """Add ``other``'s counts into this histogram (exact)."""
        self.hist.add(other.hist)
        self.overflow_count += other.overflow_count
        self.overflow_max_us = max(self.overflow_max_us, other.overflow_max_us)
        self.sum_us += other.sum_us
        self.count += other.count

    def percentile_ms(self, p: float) -> float | None:
        """Value at percentile ``p`` (0-100) in ms; HDR-precision (±0.1 %); None if empty."""
        if self.count == 0:
            return None
        n_hdr = self.hist.get_total_count()
        if not self.overflow_count:
            return self.hist.get_value_at_percentile(p) / 1000
        # overflowed values rank above everything recorded: rank against the full count
        rank = max(1, math.ceil(p / 100 * self.count))
        if rank > n_hdr:
            return self.overflow_max_us / 1000
        return self.hist.get_value_at_percentile(100.0 * rank / n_hdr) / 1000

    def mean_ms(self) -> float | None:
        """Exact mean (from the running sum of recorded integer µs), in ms."""
        return self.sum_us / self.count / 1000 if self.count else None

    def max_ms(self) -> float | None:
        if self.count == 0:
            return None
        return max(self.hist.get_max_value(), self.overflow_max_us) / 1000

    def encode(self) -> str:
        """Compressed base64 form (HdrHistogram V2 encoding) for shipping between processes."""
        enc = self.hist.encode()
        return enc.decode() if isinstance(enc, bytes) else enc

    def to_state(self) -> dict:
        return {
            "name": self.name,
            "encoded": self.encode(),
            "overflow_count": self.overflow_count,
            "overflow_max_us": self.overflow_max_us,
            "sum_us": self.sum_us,
            "count": self.count,
        }

    @classmethod
    def from_state(cls, state: dict) -> LatencyHistogram:
        h = cls(state["name"])
        if state["count"] - state["overflow_count"] > 0:
            h.hist = _on_zero_pages(HdrHistogram.decode(state["encoded"]))
            h.hist.set_tag(state["name"])
        h.overflow_count = state["overflow_count"]
        h.overflow_max_us = state["overflow_max_us"]
        h.sum_us = state["sum_us"]
        h.count = state["count"]
        return h


def record_token_gaps(
    hist: dict[str, LatencyHistogram], itl_ns: Sequence[float], inter_chunk_ns: Sequence[int]
) -> None:
    """One measured request's per-token samples (ns, :class:`loadgen.metrics.RequestMetrics`'
    ``itl_ns`` and ``inter_chunk_ns``) into ``hist["itl"]`` and ``hist["inter_chunk"]`` (the
    aggregator's and a worker's alike). One token a chunk makes the two lists equal: their bucket
    indices are then computed once (:meth:`LatencyHistogram.record_many_ns`)."""
    if itl_ns == inter_chunk_ns:
        hist["itl"].record_many_ns(itl_ns, hist["inter_chunk"])
    else:
        hist["itl"].record_many_ns(itl_ns)
        hist["inter_chunk"].record_many_ns(inter_chunk_ns)
