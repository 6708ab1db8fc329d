"""Exact per-request samples with bounded memory: a chunk in RAM, the rest on disk.

Exact percentiles need every sample. A long run has millions of requests, each with
a handful of per-request values (TTFT, TPOT, E2E, schedule lag, network timings ...):
about 64 bytes a request, or 45 MiB an hour at 200 req/s if kept in memory. A
:class:`SampleLog` keeps the newest :data:`CHUNK` float64 values in an ``array('d')``
and appends every full chunk to one :class:`SpillFile` per run (an unnamed temporary
file, gone when closed or when the process dies; by default in the run's output
directory, so nothing a later run could mistake for a result is left). Memory per
log is at most one chunk (32 KiB); disk is 8 bytes a value. :meth:`SampleLog.values`
reads them back, in order, for the final percentiles: the numbers are exactly those
an in-memory array would give.
"""

from __future__ import annotations

import os
import tempfile
from array import array
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["CHUNK", "SampleLog", "SpillFile"]

CHUNK = 4096
"""Values a log keeps in memory before it appends them to its spill file (32 KiB)."""


class SpillFile:
    """One unnamed temporary file shared by a run's sample logs (opened on first use)."""

    def __init__(self, directory: str | Path | None = None) -> None:
        self.directory = None if directory is None else str(directory)
        self._fh: Any = None
        self.bytes = 0

    def append(self, data: bytes) -> int:
        """Write ``data`` at the end; returns its offset."""
        if self._fh is None:
            self._fh = tempfile.TemporaryFile(prefix=".loadgen-samples-", dir=self.directory)
        off = self.bytes
        os.pwrite(self._fh.fileno(), data, off)
        self.bytes += len(data)
        return off

    def read(self, offset: int, size: int) -> bytes:
        return os.pread(self._fh.fileno(), size, offset)

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None

    def __getstate__(self) -> dict[str, Any]:
        raise TypeError("a SpillFile stays in the process that wrote it")


class SampleLog:
    """An append-only float64 sequence: the newest chunk in memory, older chunks spilled.

    ``len(log)``, ``np.asarray(log)`` (all values, in order) and :meth:`values` as for
    an ``array('d')``. Without a spill file it is a plain in-memory array.
    """

    __slots__ = ("_buf", "_chunks", "_n_spilled", "_spill")

    def __init__(self, spill: SpillFile | None = None) -> None:
        self._buf = array("d")
        self._chunks: list[tuple[int, int]] = []  # (offset, values) in the spill file
        self._n_spilled = 0
        self._spill = spill

    def append(self, v: float) -> None:
        buf = self._buf
        buf.append(v)
        if len(buf) >= CHUNK and self._spill is not None:
            self._chunks.append((self._spill.append(buf.tobytes()), len(buf)))
            self._n_spilled += len(buf)
            self._buf = array("d")

    def __len__(self) -> int:
        return self._n_spilled + len(self._buf)

    def __bool__(self) -> bool:
        return len(self) > 0

    @property
    def spilled(self) -> int:
        """Values on disk."""
        return self._n_spilled

    def values(self) -> np.ndarray:
        """Every value, in the order appended (float64; read back from disk where spilled)."""
        out = np.empty(len(self), dtype=np.float64)
        k = 0
        for off, n in self._chunks:
            assert self._spill is not None
            out[k : k + n] = np.frombuffer(self._spill.read(off, n * 8), dtype=np.float64)
            k += n
        out[k:] = np.frombuffer(self._buf, dtype=np.float64) if len(self._buf) else ()
        return out

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        v = self.values()
        return v if dtype is None else v.astype(dtype)

    def __iter__(self) -> Iterator[float]:
        return iter(self.values().tolist())
