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
from array import array
from collections.abc import Mapping, Sequence
from typing import Protocol

import numpy as np
from hdrh.histogram import HdrHistogram

from loadgen.core.metrics import RequestMetrics, token_pace_ns

HIGHEST_US = 3_600_000_000
SIGNIFICANT_FIGURES = 3

BINCOUNT_SPAN = 2048
"""A batch whose bucket indices span fewer than this (16 KiB of counts) is counted with one ``bincount``."""

PENDING_MAX = 4096
"""Values buffered before they are counted (:meth:`LatencyHistogram.flush`): ~130 KiB a histogram
(references and their floats); a batch is counted in ~0.2 ms, ~40 ns a value (a pause of the loop:
larger batches save little and lengthen the pause that the reads stamped meanwhile wait out)."""


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

    Values (:meth:`record_ns`, :meth:`record_many_ns`) wait in a list and are counted in
    batches of up to :data:`PENDING_MAX` (:meth:`flush`): numpy's per-call cost (~20 calls a batch)
    is paid once per batch, not once per request. Every read of the histogram (``hist``,
    ``count``, ``sum_us``, the overflow, the percentiles, :meth:`merge`, :meth:`encode`) counts the
    buffer first, so what is read is always every value recorded.
    """

    unit = "us"
    __slots__ = ("name", "_hist", "_overflow_count", "_overflow_max_us", "_sum_us", "_count", "_pending")

    def __init__(self, name: str) -> None:
        self.name = name
        self._hist = _on_zero_pages(HdrHistogram(1, HIGHEST_US, SIGNIFICANT_FIGURES))
        self._hist.set_tag(name)
        self._overflow_count = 0
        self._overflow_max_us = 0
        self._sum_us = 0
        self._count = 0
        self._pending: list[float] = []

    def _counted(self) -> LatencyHistogram:
        """This histogram with its buffered values counted (what every read goes through)."""
        if self._pending:
            self.flush()
        return self

    @property
    def hist(self) -> HdrHistogram:
        """The HDR histogram, every recorded value counted."""
        return self._counted()._hist

    @hist.setter
    def hist(self, value: HdrHistogram) -> None:
        self._hist = value

    @property
    def count(self) -> int:
        """Values recorded (inside the range and over it)."""
        return self._counted()._count

    @property
    def sum_us(self) -> int:
        """The sum of the recorded values (integer µs): the exact mean's numerator."""
        return self._counted()._sum_us

    @property
    def overflow_count(self) -> int:
        """Values above the range (counted here, never dropped)."""
        return self._counted()._overflow_count

    @property
    def overflow_max_us(self) -> int:
        """The largest value above the range (µs; 0: none)."""
        return self._counted()._overflow_max_us

    def record_ns(self, value_ns: float) -> None:
        """Record one value (ns), rounded to the nearest µs (a negative one as 0); buffered as
        :meth:`record_many_ns` buffers (one C-level append; hdrh's own ``record_value`` is ~3 µs of Python)."""
        pending = self._pending
        pending.append(value_ns)
        if len(pending) >= PENDING_MAX:
            self.flush()

    def record_many_ns(self, values_ns: Sequence[float] | np.ndarray, *also: LatencyHistogram) -> None:
        """Record many values (ns): the same counts as ``record_ns`` on each, into this histogram and
        each of ``also``. They wait in the buffer (a C-level copy of the references: an ``array('d')`` or
        numpy would convert each value, ~20x dearer) and are counted by :meth:`flush`
        when it holds :data:`PENDING_MAX` values or the histogram is read."""
        for t in (self, *also):
            t._pending.extend(values_ns)
            if len(t._pending) >= PENDING_MAX:
                t.flush()

    def flush(self) -> None:
        """Count the buffered values, in a few numpy passes.

        One by one through ``record_ns`` a per-token value costs ~8 µs (hdrh's index arithmetic in
        Python). Here the bucket index of every value is computed as hdrh computes it (bucket = bit
        length of ``v | sub_bucket_mask`` less the unit and half-count magnitudes; sub-bucket =
        ``v >> bucket``) and the counts added in place: a ``bincount`` over the batch's index range when
        it is narrow (~4x cheaper than ``np.unique``), else each distinct index once with its
        multiplicity (``np.unique``, ~3x cheaper than ``np.add.at``, and no page of counts written that
        holds none). Every histogram here has the same layout (1 µs to 1 hour, 3 figures).
        """
        if not self._pending:
            return
        x = np.fromiter(self._pending, dtype=np.float64, count=len(self._pending))
        self._pending = []
        v = np.where(x >= 0, np.floor(x / 1000 + 0.5), 0.0).astype(np.int64)  # as record_ns rounds
        h = self._hist
        bits = np.frexp((v | h.sub_bucket_mask).astype(np.float64))[1]  # bit length (exact below 2**53)
        bucket = bits - h.unit_magnitude - (h.sub_bucket_half_count_magnitude + 1)
        sub = v >> (bucket + h.unit_magnitude)
        idx = ((bucket + 1) << h.sub_bucket_half_count_magnitude) + (sub - h.sub_bucket_half_count)
        ok = (idx >= 0) & (idx < h.counts_len)
        over = v[~ok]
        inside = v[ok]
        self._count += int(v.size)
        self._sum_us += int(v.sum())
        if over.size:
            self._overflow_count += int(over.size)
            self._overflow_max_us = max(self._overflow_max_us, int(over.max()))
        if inside.size:
            at = idx[ok]
            counts = np.ctypeslib.as_array(h.counts)
            lo, hi = int(at.min()), int(at.max())
            if hi - lo < BINCOUNT_SPAN:  # a narrow batch: one pass over its own few pages
                counts[lo : hi + 1] += np.bincount(at - lo).astype(np.uint64)
            else:  # a wide one: only the buckets it holds (the others stay on zero pages)
                at, times = np.unique(at, return_counts=True)
                counts[at] += times.astype(np.uint64)
            h.total_count += int(inside.size)
            h.min_value = min(h.min_value, int(inside.min()))
            h.max_value = max(h.max_value, int(inside.max()))

    def merge(self, other: LatencyHistogram) -> None:
        """Add ``other``'s counts into this histogram (exact)."""
        self.hist.add(other.hist)  # both flushed by the reads
        self._overflow_count += other.overflow_count
        self._overflow_max_us = max(self._overflow_max_us, other.overflow_max_us)
        self._sum_us += other.sum_us
        self._count += other.count

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
        h._overflow_count = state["overflow_count"]
        h._overflow_max_us = state["overflow_max_us"]
        h._sum_us = state["sum_us"]
        h._count = state["count"]
        return h


def token_histograms(pace: bool = False) -> dict[str, LatencyHistogram]:
    """The per-token histograms a process records into: ``itl`` and ``inter_chunk``, and ``tbt_pace``
    (each token's pace since the first, :func:`loadgen.core.metrics.token_pace_ns`) when ``pace``: a run
    with a token-deadline target."""
    out = {"itl": LatencyHistogram("itl"), "inter_chunk": LatencyHistogram("inter_chunk")}
    if pace:
        out["tbt_pace"] = LatencyHistogram("tbt_pace")
    return out


class GapSink(Protocol):
    """What per-token values are recorded into: a :class:`LatencyHistogram` or a :class:`GapBuffer`."""

    def record_many_ns(self, values_ns: Sequence[float] | np.ndarray, /) -> None: ...


class GapBuffer:
    """Per-token values (ns) kept raw until shipped: a worker's side of the driver's histograms. A worker
    ships them with each batch of records (:meth:`take`), so every record that reached the driver has its
    values there, also when the worker dies later (issue 34: a dead actor's delivered records were left
    out of ITL, its histogram came only with "done")."""

    __slots__ = ("values",)

    def __init__(self) -> None:
        self.values = array("d")

    def record_many_ns(self, values_ns: Sequence[float] | np.ndarray, /) -> None:
        self.values.extend(values_ns)

    def take(self) -> bytes:
        """The values buffered since the last take, as float64 bytes (``array('d').frombytes``)."""
        out = self.values.tobytes()
        self.values = array("d")
        return out


def record_token_gaps(hist: Mapping[str, GapSink], m: RequestMetrics) -> None:
    """One measured request's per-token samples (ns, :class:`loadgen.core.metrics.RequestMetrics`'
    ``itl_ns`` and ``inter_chunk_ns``) into ``hist["itl"]`` and ``hist["inter_chunk"]`` (the
    aggregator's and a worker's alike), and its tokens' paces into ``hist["tbt_pace"]`` when there is
    one (:func:`token_histograms`), buffered and counted in batches (:meth:`LatencyHistogram.record_many_ns`)."""
    hist["itl"].record_many_ns(m.itl_ns)
    hist["inter_chunk"].record_many_ns(m.inter_chunk_ns)
    pace = hist.get("tbt_pace")
    if pace is not None:
        pace.record_many_ns(token_pace_ns(m))
