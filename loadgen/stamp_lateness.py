"""Stamp lateness: how late the client's token stamps were, token-weighted.

A token's time is the client's stamp of the read that completed its event
(:mod:`loadgen.metrics`); the stamp is late by the time the read waited for the client: the
process off its CPU, or the event loop busy with other work (a wave of sends, records handed
to the sink, a collection). That wait is what the user's numbers carry, so it is what the
validity check bounds (``stamp_lateness_p99``), not the loop's lag at moments when no token
arrived (a loop busy between streams, at the start-up ramp, costs no stamp anything).

Measured with the runner's event-loop probe (a 5 ms sleep every 5 ms): probe ``k`` ends at
``end_k``, ``lag_k`` after it was due (``due_k = end_k - lag_k``): the loop was held from
before ``due_k`` to ``end_k`` (the process off its CPU, a long callback, a queue of ready
work). A token stamped in ``(due_k, end_k]`` was stamped in or right after that hold, and a
read that became ready during it waited for it: it is charged ``lag_k`` (an upper bound for
each); a token stamped in ``(end_{k-1}, due_k]`` is charged 0 (the loop ran its timers on
time around it). Every token event of every measured request counts once (``add``), so
the percentile is over tokens, not over time: a hold with many reads pending weighs by
those reads, one with none weighs nothing.

A token stamped after the last probe ended waits for the next probe (its lag is not known
before). Memory is fixed: the probes of the last ``KEEP_CHUNKS * CHUNK`` probes (~5 minutes at 200
a second; a token older than that, in a request still running, is not charged) and a
histogram of ``NBINS`` bins of ``BIN_NS`` (0.1 ms up to 1 s; longer in one overflow bin).
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence

import numpy as np

__all__ = ["StampLateness"]

CHUNK = 4096
KEEP_CHUNKS = 16
BIN_NS = 100_000
NBINS = 10_000


class StampLateness:
    """Token-weighted stamp lateness (module docstring): ``probe`` per loop probe, ``add`` per record."""

    __slots__ = ("_ends", "_lags", "_counts", "_pending", "tokens")

    def __init__(self) -> None:
        self._ends: list[array[int]] = []
        self._lags: list[array[int]] = []
        self._counts = np.zeros(NBINS + 1, dtype=np.int64)
        self._pending: array[int] = array("q")  # stamped after the last probe ended: charged by the next one
        self.tokens = 0  # token events charged

    def probe(self, end_ns: int, lag_ns: int) -> None:
        """One loop probe: it ended at ``end_ns``, ``lag_ns`` after its deadline."""
        if not self._ends or len(self._ends[-1]) >= CHUNK:
            self._ends.append(array("q"))
            self._lags.append(array("q"))
            if len(self._ends) > KEEP_CHUNKS:
                del self._ends[0], self._lags[0]
        lag_ns = max(lag_ns, 0)
        self._ends[-1].append(end_ns)
        self._lags[-1].append(lag_ns)
        if self._pending:
            t = np.frombuffer(self._pending, dtype=np.int64)
            self._charge(np.where(t > end_ns - lag_ns, lag_ns, 0))
            self._pending = array("q")

    def add(self, times_ns: Sequence[int]) -> None:
        """Charge each token event stamped at ``times_ns`` (one request's, in order) its probe's lag."""
        if not len(times_ns):
            return
        if not self._ends:
            self._pending.extend(times_ns)
            return
        first = times_ns[0]
        k = len(self._ends) - 1
        while k > 0 and self._ends[k][0] > first:
            k -= 1
        ends = np.frombuffer(self._ends[k], dtype=np.int64)
        lags = np.frombuffer(self._lags[k], dtype=np.int64)
        if k < len(self._ends) - 1:
            ends = np.concatenate([ends, *(np.frombuffer(e, dtype=np.int64) for e in self._ends[k + 1 :])])
            lags = np.concatenate([lags, *(np.frombuffer(g, dtype=np.int64) for g in self._lags[k + 1 :])])
        t = np.asarray(times_ns, dtype=np.int64)
        idx = np.searchsorted(ends, t, side="left")
        after = idx >= ends.size
        if after.any():  # in the probe running now: its lag is not known yet
            self._pending.extend(t[after].tolist())
        keep = ~after & (t >= ends[0] - 10_000_000)  # before the kept probes: not charged
        idx, t = idx[keep], t[keep]
        if idx.size:
            lag = lags[idx]
            self._charge(np.where(t > ends[idx] - lag, lag, 0))  # stamped after its probe was due: in the hold

    def _charge(self, late_ns: np.ndarray) -> None:
        np.add.at(self._counts, np.minimum(late_ns // BIN_NS, NBINS), 1)  # in place: no histogram-sized temporary
        self.tokens += int(late_ns.size)

    def percentile_ms(self, p: float) -> float | None:
        """The ``p``-th percentile (0-100) over the charged tokens, in ms (the bin's upper edge); None without any."""
        if not self.tokens:
            return None
        rank = max(int(np.ceil(p / 100 * self.tokens)), 1)
        b = int(np.searchsorted(np.cumsum(self._counts), rank))
        return (b + 1) * BIN_NS / 1e6
