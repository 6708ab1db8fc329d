"""Stamp lateness: how late the client's token stamps were, and how far that can move the numbers.

A token's time is the client's stamp of the read that completed its event
(:mod:`loadgen.core.metrics`); the stamp is late by the time the read waited for the client: the
process off its CPU, or the event loop busy with other work (a wave of sends, records handed
to the sink, a collection). That wait is what the user's numbers carry, so it is what the
validity check bounds (``stamp_error``), not the loop's lag at moments when no token arrived
(a loop busy between streams, at the start-up ramp, costs no stamp anything).

**Per token.** Measured with a probe of its own (:func:`probe_loop`, a 2 ms sleep every 2 ms; the
runner starts it): probe ``k`` ends at ``end_k``, ``lag_k`` after it was due (``due_k = end_k -
lag_k``): the loop did not get to its timers from ``due_k`` to ``end_k`` (the process off its CPU, a
long callback, a queue of ready work; a probe over :data:`LATE_NS` late is a hold). The reads that
waited meanwhile are handed to their readers in the same loop pass as the probe or the next, often
*after* it (its wake-up was queued first, by the timer), so a late probe then yields twice and marks
``m_k``, the end of those passes. A token stamped at ``t`` in ``(due_k, m_k]`` after a late probe is
charged ``t - due_k``: the part of that hold before its stamp, the best observable proxy of "from
when its bytes became readable" (the loop's own readiness is not visible on uvloop). A token stamped
in ``(m_{k-1}, due_k]``, or after an on-time probe, is charged 0 (the loop ran its timers on time
around it). Without the mark, a reader woken after the probe in that pass was charged nothing at
all: a 40 ms hold read as 0.5 ms in one run of three (``tests/unit/test_stamp_lateness_truth.py``,
readers as loadgen's: a task woken by its stream); with one pass, in one of ten. The ``m`` events
one read completed (one stamp) arrived over that wait, not at once: the first is charged the whole
of it, the ``i``-th ``(1 - i/m)`` of it (spread evenly, as a steady stream's tokens arrive). The
former estimator charged every token stamped in the hold the whole ``lag_k``: a read handed over
early in a long pass of the loop was charged the rest of the pass too.

**What the numbers carry.** A hold does not move every number by its length: the reads it
delays are coalesced into one read, so one ITL per stream grows by the hold and the next ones
shrink to ~0, and a TTFT moves only when its *first* token is late, and a percentile only as
far as the late samples reach across it. So each measured request (``add``) is also kept
corrected: its TTFT (from its send) and its gaps between events, as reported and with each
stamp moved back by its estimated lateness (``t_j - l_j``: a read that completed m events is
spread back over its wait), in histograms of 0.1 ms bins.
:meth:`StampLateness.moves_ms` is how far the correction moves TTFT p50, TTFT p99 and ITL p99:
the estimated error of each reported number, which the validity check bounds (``stamp_error``).
(A worst-case bound from the share of late samples alone was tried first: at C = 8 on a shared
machine 28 % of the first tokens were truly over 3 ms late and the bound allowed the TTFT p50 to
have moved 14 ms; it had moved 0.07 ms.)

Against a truth log (``scripts/bench_truth.py``: the simulator stamps each token before it
writes it; ``tests/unit/test_stamp_lateness_truth.py``): over a hold of the loop by H ms the
token-weighted p99 reads within one probe period (2 ms) of the truth either way: the part of the
hold before the probe was due is not seen, and a token first readable after the due time is
charged from it (with the runner's 5 ms loop probe, the former source, up to 5 ms). A loop busy
between reads on an idle socket charges its reads nothing.

A request whose last token was stamped after the last probe ended waits for the next probe.
Memory is fixed: the last ``KEEP_CHUNKS * CHUNK`` late probes (only those are kept: a token
older than the oldest, in a request still running, is charged 0) and the histograms of :data:`KINDS`
(bins of ``BIN_NS``, 0.1 ms, up to 1 s, TTFTs up to 10 s; 2 MB in all). They merge exactly
(``to_state`` / ``merge_state``): ``--workers`` processes send theirs to the parent, which
judges the merged run.
"""

from __future__ import annotations

import asyncio
import math
from array import array
from collections.abc import Sequence
from itertools import chain

import numpy as np

from loadgen.core.clock import now_ns

__all__ = ["StampLateness", "probe_loop"]

CHUNK = 4096
KEEP_CHUNKS = 16
PROBE_S = 0.002
"""The stamp probe's period (:func:`probe_loop`): a hold is seen from at most this long after it began (1 ms:
~1 % of a core more; the runner's 5 ms loop probe missed up to 5 ms of each hold)..."""
LATE_NS = 1_000_000
"""...and a probe later than this is a hold (uvloop keeps timers in whole ms: a 2 ms sleep ends 2-3 ms later)."""
BIN_NS = 100_000
NBINS = 10_000
TTFT_NBINS = 100_000  # TTFTs as reported and corrected: 0.1 ms bins up to 10 s (longer in one overflow bin)
BATCH_TOKENS = 4096
"""Token events charged together (:meth:`StampLateness._charge_batch`): 16 requests of 256 tokens in ~0.4 ms
(a pause of the loop, kept short: twice the batch saves ~15 % of the cost and doubles the pause)."""
KINDS = {
    "tokens": NBINS,
    "first": NBINS,
    "gap": NBINS,
    "gap_corrected": NBINS,
    "ttft": TTFT_NBINS,
    "ttft_corrected": TTFT_NBINS,
}
"""The histograms (name: bins before the overflow one): every token's lateness, the first tokens', the gaps
between events and the TTFTs from the send as reported and corrected."""
MOVED = (("ttft_p50", "ttft", 50.0), ("ttft_p99", "ttft", 99.0), ("itl_p99", "gap", 99.0))
"""The numbers whose estimated error the validity check bounds: (name, histogram, percentile)."""


class StampLateness:
    """Stamp lateness (module docstring): ``probe`` per loop probe (:func:`probe_loop`), ``add`` per request.

    Requests are charged in batches (:data:`BATCH_TOKENS` token events, or at any read of the
    histograms): numpy's per-call cost (~25 calls a charge) is paid once a batch, not once a request.
    A batch charges exactly what its requests charged one at a time: a request enters it only once
    every probe that can charge its stamps has been seen (a later late probe's window starts after
    them), and it is charged before the late probes it needs are dropped."""

    __slots__ = ("_marks", "_spans", "_last_ns", "_counts", "_pending", "_batch", "_batch_n", "_tokens")

    def __init__(self) -> None:
        self._marks: list[array[int]] = []  # late probes only: the end of each one's window...
        self._spans: list[array[int]] = []  # ...and its length from the probe's due time
        self._last_ns = -1  # the last probe's end (any probe): later stamps wait for the next one
        self._counts = {k: np.zeros(n + 1, dtype=np.int64) for k, n in KINDS.items()}
        self._pending: list[tuple[Sequence[int], int | None]] = []  # stamped after the last probe: at the next
        self._batch: list[tuple[Sequence[int], int | None]] = []  # ready to charge, charged together
        self._batch_n = 0  # token events in the batch
        self._tokens = 0  # token events charged

    @property
    def tokens(self) -> int:
        """Token events charged (every request added, once its probe is seen)."""
        self._charge_batch()
        return self._tokens

    def probe(self, end_ns: int, lag_ns: int, mark_ns: int | None = None) -> None:
        """One loop probe: it ended at ``end_ns``, ``lag_ns`` after its deadline (was due at ``end_ns - lag_ns``);
        ``mark_ns``: when the loop passes after it were over (default ``end_ns``). Only a late one (over
        :data:`LATE_NS`) is kept: a token outside every late probe's window is charged nothing."""
        mark = end_ns if mark_ns is None else max(mark_ns, end_ns)
        self._last_ns = mark
        if lag_ns > LATE_NS:
            if not self._marks or len(self._marks[-1]) >= CHUNK:
                if len(self._marks) >= KEEP_CHUNKS:
                    self._charge_batch()  # with the probes it may need
                    del self._marks[0], self._spans[0]
                self._marks.append(array("q"))
                self._spans.append(array("q"))
            self._marks[-1].append(mark)
            self._spans[-1].append(mark - (end_ns - lag_ns))
        if self._pending:
            pending, self._pending = self._pending, []
            for times, sent in pending:
                self._queue(times, sent)

    def add(self, times_ns: Sequence[int], sent_ns: int | None = None) -> None:
        """Charge one request's token events, stamped at ``times_ns`` (in order; the first is its first token);
        ``sent_ns``: when it was sent (its TTFT from the send is kept as reported and corrected)."""
        if not len(times_ns):
            return
        if times_ns[-1] > self._last_ns:
            self._pending.append((times_ns, sent_ns))  # in the probe running now: its lag is not known yet
            return
        self._queue(times_ns, sent_ns)

    def _queue(self, times_ns: Sequence[int], sent_ns: int | None) -> None:
        self._batch.append((times_ns, sent_ns))
        self._batch_n += len(times_ns)
        if self._batch_n >= BATCH_TOKENS:
            self._charge_batch()

    def _late(self, t: np.ndarray) -> np.ndarray:
        """Each stamp's lateness (ns): the part of its late probe's hold before it; 0 outside every one."""
        if not self._marks:
            return np.zeros(t.size, dtype=np.int64)
        k = len(self._marks) - 1
        first = int(t.min())
        while k > 0 and self._marks[k][0] > first:
            k -= 1
        marks = np.frombuffer(self._marks[k], dtype=np.int64)
        spans = np.frombuffer(self._spans[k], dtype=np.int64)
        if k < len(self._marks) - 1:
            marks = np.concatenate([marks, *(np.frombuffer(e, dtype=np.int64) for e in self._marks[k + 1 :])])
            spans = np.concatenate([spans, *(np.frombuffer(g, dtype=np.int64) for g in self._spans[k + 1 :])])
        idx = np.minimum(np.searchsorted(marks, t, side="left"), marks.size - 1)
        span = spans[idx]
        return np.where(t <= marks[idx], np.clip(t - (marks[idx] - span), 0, span), 0)

    def _charge_batch(self) -> None:
        """Charge the batch's requests: all their stamps in one array, each request's first token and gaps
        within it; the ``m`` events of one read (one stamp) spread over its wait (module docstring)."""
        batch = self._batch
        if not batch:
            return
        self._batch, self._batch_n = [], 0
        lens = np.fromiter((len(x) for x, _ in batch), dtype=np.int64, count=len(batch))
        t = np.fromiter(chain.from_iterable(x for x, _ in batch), dtype=np.int64, count=int(lens.sum()))
        starts = np.zeros(lens.size, dtype=np.int64)
        np.cumsum(lens[:-1], out=starts[1:])
        late = self._late(t)
        self._tokens += int(t.size)
        gaps = np.diff(t)
        inside = np.ones(gaps.size, dtype=bool)  # a gap between two events of one request
        inside[starts[1:] - 1] = False
        if late.any():
            # m events completed by one read (one stamp) arrived over its wait: the first at most ``late``
            # before the stamp, the others spread evenly after it (a steady stream's pace), not all at once
            new = np.concatenate([[True], (gaps != 0) | ~inside])
            group_starts = np.flatnonzero(new)
            gid = np.cumsum(new) - 1
            size = np.diff(np.append(group_starts, t.size))[gid]
            pos = np.arange(t.size) - group_starts[gid]
            late = late - late * pos // size
        sent = [s for _, s in batch]
        has_sent = np.fromiter((s is not None for s in sent), dtype=bool, count=len(sent))
        if has_sent.any():  # TTFT from the send, as reported and corrected (the first stamp less its lateness)
            sent_ns = np.fromiter((s or 0 for s in sent), dtype=np.int64, count=len(sent))[has_sent]
            ttft = t[starts[has_sent]] - sent_ns
            self._count("ttft", ttft, TTFT_NBINS)
            self._count("ttft_corrected", ttft - late[starts[has_sent]], TTFT_NBINS)
        self._count("first", late[starts], NBINS)
        self._count("tokens", late, NBINS)
        if gaps.size and inside.any():
            self._count("gap", gaps[inside], NBINS)
            self._count("gap_corrected", np.maximum(np.diff(t - late), 0)[inside], NBINS)

    def _count(self, kind: str, values_ns: np.ndarray, top: int) -> None:
        """Add ``values_ns`` (negative ones as 0) to ``kind``'s bins, the last of ``top + 1`` the overflow."""
        idx = np.minimum(np.maximum(values_ns, 0) // BIN_NS, top)
        lo = int(idx.min())
        c = np.bincount(idx - lo)
        self._counts[kind][lo : lo + c.size] += c

    def moves_ms(self) -> dict[str, float]:
        """The estimated error of TTFT p50, TTFT p99 and ITL p99 (:data:`MOVED`), in ms: reported - corrected
        (module docstring; to the 0.1 ms bin); a number without samples is left out."""
        self._charge_batch()
        out: dict[str, float] = {}
        for name, kind, p in MOVED:
            rep = self.percentile_ms(p, kind)
            cor = self.percentile_ms(p, f"{kind}_corrected")
            if rep is not None and cor is not None:
                out[name] = round(rep - cor, 1)
        return out

    def max_ms(self, kind: str = "tokens") -> float | None:
        """The largest lateness of ``kind`` (ms, the top bin's upper edge; ``math.inf`` when one is past the last
        bin, over 1 s); None without any. With the part of a hold a probe cannot see (at most
        :data:`PROBE_S`), it bounds every stamp's error: the bound the verdict's flip test moves values by
        (:mod:`loadgen.sweep.client_error`)."""
        self._charge_batch()
        c = self._counts[kind]
        nz = np.flatnonzero(c)
        if not nz.size:
            return None
        top = int(nz[-1])
        return math.inf if top >= c.size - 1 else (top + 1) * BIN_NS / 1e6

    def percentile_ms(self, p: float, kind: str = "tokens") -> float | None:
        """The ``p``-th percentile (0-100) of ``kind``, in ms (the bin's upper edge); None without any."""
        self._charge_batch()
        c = self._counts[kind]
        n = int(c.sum()) if kind != "tokens" else self._tokens
        if not n:
            return None
        rank = max(int(np.ceil(p / 100 * n)), 1)
        b = int(np.searchsorted(np.cumsum(c), rank))
        return (b + 1) * BIN_NS / 1e6

    def to_state(self) -> dict[str, object]:
        """The histograms as plain data (a worker's message): ``bin_ns``, ``tokens`` and each kind's non-empty bins."""
        self._charge_batch()
        out: dict[str, object] = {"bin_ns": BIN_NS, "tokens": self._tokens}
        for k, c in self._counts.items():
            nz = np.flatnonzero(c)
            out[f"hist_{k}"] = [nz.tolist(), c[nz].tolist()]
        return out

    def merge_state(self, state: dict[str, object]) -> None:
        """Add another process's :meth:`to_state` (exact: the bins are added)."""
        if state.get("bin_ns") != BIN_NS:
            raise ValueError(f"stamp-lateness bins of {state.get('bin_ns')} ns, not {BIN_NS}")
        for k in KINDS:
            pair: list[list[int]] = state[f"hist_{k}"]  # type: ignore[assignment]  # a bins, counts pair (plain data)
            np.add.at(self._counts[k], np.asarray(pair[0], dtype=np.int64), np.asarray(pair[1], dtype=np.int64))
        self._charge_batch()
        self._tokens += int(state["tokens"])  # type: ignore[call-overload]  # an int in a plain-data dict


async def probe_loop(stamps: StampLateness, period_s: float = PROBE_S) -> None:
    """Probe the event loop for ``stamps`` every ``period_s`` until cancelled (the runner runs one a run).

    A sleep of ``period_s``: its overrun is the hold. A late probe then yields twice and marks the end of
    those passes (module docstring): the reads that waited are handed over in the probe's pass and the
    next, some after it. ~1000 wake-ups a second of a few µs each.
    """
    period_ns = int(period_s * 1e9)
    while True:
        t = now_ns()
        await asyncio.sleep(period_s)
        end = now_ns()
        lag = end - t - period_ns
        if lag > LATE_NS:
            await asyncio.sleep(0)
            await asyncio.sleep(0)
        stamps.probe(end, lag, now_ns())
