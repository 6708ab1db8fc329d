"""An open-loop schedule held compactly: send times in arrays, requests built on demand.

A run of hours at hundreds of requests a second has millions of entries. Holding a
:class:`~loadgen.core.types.RequestSpec` (prompt text and all, about 0.5-1 KB) for each
from the start costs gigabytes, so a :class:`Schedule` keeps only

* ``offsets_ns``: the send offsets from t0 (int64, 8 bytes a request), non-decreasing;
* ``warm``: whether each entry is warm-up (bool, 1 byte a request);

and a function that builds the spec at a base position (``Workload.spec``, seeded:
the same position always gives the same request, so building late changes nothing).
The runner builds each spec a little before its deadline and drops it when the
request ends (:mod:`loadgen.engine.runner`). ``schedule[w::n]`` is worker ``w``'s shard
(a view: the arrays are shared, positions map back to the base schedule).
Iterating yields :class:`~loadgen.core.types.ScheduledRequest` entries built one by one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import overload

import numpy as np

from loadgen.core.types import RequestSpec, ScheduledRequest

__all__ = ["Schedule", "as_schedule"]


class Schedule:
    """Send offsets and phases in arrays; ``spec(k)`` builds entry ``k``'s request on demand."""

    __slots__ = ("offsets_ns", "warm", "_spec_at", "_positions")

    def __init__(
        self,
        offsets_ns: np.ndarray,
        warm: np.ndarray,
        spec_at: Callable[[int], RequestSpec],
        positions: range | None = None,
    ) -> None:
        self.offsets_ns = np.asarray(offsets_ns, dtype=np.int64)
        self.warm = np.asarray(warm, dtype=np.bool_)
        if self.offsets_ns.shape != self.warm.shape:
            raise ValueError("offsets and phases differ in length")
        self._spec_at = spec_at
        self._positions = range(self.offsets_ns.size) if positions is None else positions

    @classmethod
    def from_list(cls, items: Sequence[ScheduledRequest]) -> Schedule:
        """Wrap specs built beforehand (tests, :meth:`Workload.schedule`): no lazy building."""
        offs = np.fromiter((s.offset_ns for s in items), dtype=np.int64, count=len(items))
        warm = np.fromiter((s.phase != "measure" for s in items), dtype=np.bool_, count=len(items))
        specs = [s.spec for s in items]
        return cls(offs, warm, specs.__getitem__)

    def __len__(self) -> int:
        return self.offsets_ns.size

    def offset_ns(self, k: int) -> int:
        return int(self.offsets_ns[k])

    def phase(self, k: int) -> str:
        return "warmup" if self.warm[k] else "measure"

    def spec(self, k: int) -> RequestSpec:
        """Build entry ``k``'s request (the same request every time it is asked for)."""
        return self._spec_at(self._positions[k])

    @overload
    def __getitem__(self, k: int) -> ScheduledRequest: ...
    @overload
    def __getitem__(self, k: slice) -> Schedule: ...
    def __getitem__(self, k: int | slice) -> ScheduledRequest | Schedule:
        if isinstance(k, slice):
            return Schedule(self.offsets_ns[k], self.warm[k], self._spec_at, self._positions[k])
        if k < 0:
            k += len(self)
        return ScheduledRequest(self.offset_ns(k), self.spec(k), self.phase(k))  # type: ignore[arg-type]  # phase() returns the Literal values as str

    def __iter__(self) -> Iterator[ScheduledRequest]:
        for k in range(len(self)):
            yield self[k]

    def measure_offsets_ns(self) -> np.ndarray:
        """Offsets of the measured (not warm-up) entries, in schedule order."""
        return self.offsets_ns[~self.warm]

    def count_phases(self, start: int = 0) -> tuple[int, int]:
        """(measured, warm-up) entries from position ``start`` on."""
        warm = int(np.count_nonzero(self.warm[start:]))
        return len(self) - start - warm, warm


def as_schedule(s: Schedule | Sequence[ScheduledRequest]) -> Schedule:
    """A :class:`Schedule` for either form a :class:`~loadgen.engine.runner.RunPlan` accepts."""
    return s if isinstance(s, Schedule) else Schedule.from_list(s)
