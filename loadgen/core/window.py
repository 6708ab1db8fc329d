"""The measurement window of a run, and the one definition of every rate taken over it.

Every rate in ``result.json`` ``throughput`` (and so the sweep's answer, its cost per
million tokens and the scorecard) is a count over the *measurement window* divided by
the window's length. The window is the span in which the offered load is steady, never
the drain after the last send (a drain-inclusive denominator moves with the length of
the tail, not with the system).

**Open loop** (basis ``scheduled_sends``): the N measured requests are scheduled at
s_1 <= ... <= s_N (span = s_N - s_1). Each request owns one inter-arrival gap, so the
window is [s_1, s_1 + span * N / (N - 1)] and ``window_s = span_s * N / (N - 1)``:
``offered_rps = N / window_s = (N - 1) / span_s`` (the schedule's realized rate; MLPerf
LoadGen's Server scenario reports the scheduled rate). The counting set is the N
measured requests (all scheduled inside the window).

**Fallback** (basis ``first_send_to_last_completion``, with ``fallback_reason``): when
the span cannot carry a rate -- fewer than two measured requests, a zero span (``--rate
inf``, a trace instant), or a span shorter than the median E2E latency (a burst: the
load is never steady) -- the window is [s_1, last completion of a measured request] and
the counting set is again all N: the rates are then the batch throughput of the burst
(as ``vllm bench serve`` reports at an infinite rate).

**Closed loop** (basis ``closed_loop_steady``; users, closed-loop sessions): from the end
of the start-up ramp (every user has sent its first measured request: the later of the
first measured send and the last warm-up request's end, after which every user's request
is a measured one) to the first user's stop (the first completion after the last measured
send: a user whose request ends then finds the requests or the time used up). MLPerf's
"tail cut-off" idea. The counting set is the measured requests that *end* inside the
window. Should that window be empty (a run too short for it), the fallback above is used.

Rates (``W`` = window_s; sources above):

* ``offered_rps`` = (N - 1) / span_s = N / W (open loop; None for closed loop);
* ``completion_rps`` = successful completions whose end is inside the window / W;
* ``goodput_rps`` = conforming requests of the counting set / W (failures and
  zero-output requests are non-conforming; with no SLO every completion conforms, but
  ``goodput_rps`` is None);
* ``output_tps`` = output tokens *generated inside the window* / W, counted from each
  token event's arrival time, any request (warm-up included): the work the server did in
  the window. Token arrivals are counted in :data:`BIN_NS` bins (:class:`TokenBins`);
  bins cut by a window edge count pro rata;
* ``demanded_output_tps`` = output tokens of the counting set / W (what the measured
  requests asked for, wherever it was generated);
* ``input_tps`` = input tokens of the counting set / W; ``total_tps`` = input_tps + output_tps.

Everything here is pure (integer nanoseconds in).
"""

from __future__ import annotations

from array import array
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from loadgen.core.metrics import tokens_per_event
from loadgen.core.samples import SampleLog
from loadgen.core.types import TokenEvent

BIN_NS = 10_000_000
"""Width of a token-arrival bin (10 ms): memory O(run length / BIN_NS), 8 bytes a bin."""

OPEN = "scheduled_sends"
CLOSED = "closed_loop_steady"
FALLBACK = "first_send_to_last_completion"
END_FAILED, END_OK, END_CONFORMING = 0.0, 1.0, 2.0
"""Kinds of a measured request's end (ok includes zero-output requests and SLO misses)."""


@dataclass(frozen=True, slots=True)
class Window:
    """One run's measurement window (absolute monotonic ns) and its counting set's size."""

    basis: str
    start_ns: int
    end_ns: int
    requests: int
    span_ns: int | None = None  # open loop: last - first measured scheduled send
    fallback_reason: str | None = None

    @property
    def duration_s(self) -> float:
        return max(self.end_ns - self.start_ns, 0) / 1e9

    @property
    def offered_rps(self) -> float | None:
        """Open loop: (N - 1) / span_s = N / window_s, the schedule's rate; else None."""
        if self.basis != OPEN or not self.span_ns:
            return None
        return (self.requests - 1) / (self.span_ns / 1e9)

    def to_json(self, t0_ns: int) -> dict[str, Any]:
        """The ``result.json`` ``window`` block: times in seconds from the run's t0."""
        out: dict[str, Any] = {
            "basis": self.basis,
            "start_s": round((self.start_ns - t0_ns) / 1e9, 9),
            "end_s": round((self.end_ns - t0_ns) / 1e9, 9),
            "duration_s": self.duration_s,
            "requests": self.requests,
        }
        if self.span_ns is not None:
            out["scheduled_span_s"] = self.span_ns / 1e9
        if self.fallback_reason:
            out["fallback_reason"] = self.fallback_reason
        return out


def open_loop_window(
    first_scheduled_ns: int, last_scheduled_ns: int, n: int, *, median_e2e_ns: float | None, last_end_ns: int | None
) -> Window:
    """The open-loop window of ``n`` measured requests scheduled from first to last (see module docstring)."""
    span = max(last_scheduled_ns - first_scheduled_ns, 0)
    reason = None
    if n < 2:
        reason = f"{n} measured request(s): no inter-arrival gap"
    elif span == 0:
        reason = "every measured request was scheduled at one instant"
    elif median_e2e_ns is not None and span < median_e2e_ns:
        reason = f"scheduled span {span / 1e9:.3f} s is shorter than the median E2E {median_e2e_ns / 1e9:.3f} s"
    if reason is not None:
        return fallback_window(first_scheduled_ns, last_end_ns, n, reason, span_ns=span)
    end = first_scheduled_ns + round(span * n / (n - 1))
    return Window(OPEN, first_scheduled_ns, end, n, span_ns=span)


def fallback_window(
    first_scheduled_ns: int, last_end_ns: int | None, n: int, reason: str, span_ns: int | None = None
) -> Window:
    """[first measured scheduled send, last measured completion], all ``n`` requests counted."""
    end = last_end_ns if last_end_ns is not None else first_scheduled_ns
    return Window(FALLBACK, first_scheduled_ns, max(end, first_scheduled_ns), n, span_ns, reason)


def closed_loop_start_ns(first_measured_scheduled_ns: int, last_warmup_end_ns: int | None) -> int:
    """End of the start-up ramp: every user's request in flight is a measured one from here on."""
    if last_warmup_end_ns is None:
        return first_measured_scheduled_ns
    return max(first_measured_scheduled_ns, last_warmup_end_ns)


class TokenBins:
    """Output-token arrivals counted in :data:`BIN_NS` bins of the monotonic clock.

    Bin ``b`` holds the tokens that arrived in [b * BIN_NS, (b + 1) * BIN_NS). The bins
    grow in both directions from the first one seen (a plain ``array('q')``, 8 bytes a
    bin: 2.9 MB an hour), so any order of arrival is fine.
    """

    __slots__ = ("base", "counts")

    def __init__(self) -> None:
        self.base = 0
        self.counts: array[int] = array("q")

    def add_bin(self, b: int, tokens: int) -> None:
        """Add ``tokens`` to absolute bin index ``b`` (= t_ns // BIN_NS)."""
        if not self.counts:
            self.base = b
            self.counts.append(0)
        if b < self.base:
            self.counts[0:0] = array("q", bytes(8 * (self.base - b)))
            self.base = b
        i = b - self.base
        if i >= len(self.counts):
            self.counts.extend(array("q", bytes(8 * (i + 1 - len(self.counts)))))
        self.counts[i] += tokens

    def add(self, t_ns: int, tokens: int) -> None:
        self.add_bin(t_ns // BIN_NS, tokens)

    def total(self) -> int:
        return sum(self.counts)

    def between(self, start_ns: int, end_ns: int) -> float:
        """Tokens that arrived in [start_ns, end_ns]; a bin cut by an edge counts pro rata."""
        if not self.counts or end_ns <= start_ns:
            return 0.0
        total = 0.0
        lo = max(start_ns // BIN_NS, self.base)
        hi = min(end_ns // BIN_NS, self.base + len(self.counts) - 1)
        for b in range(lo, hi + 1):
            c = self.counts[b - self.base]
            if not c:
                continue
            b0, b1 = b * BIN_NS, (b + 1) * BIN_NS
            overlap = min(b1, end_ns) - max(b0, start_ns)
            if overlap >= BIN_NS:
                total += c
            elif overlap > 0:
                total += c * overlap / BIN_NS
        return total


def token_bins(events: list[TokenEvent], output_tokens: int, end_ns: int | None) -> tuple[tuple[int, int], ...]:
    """One request's output tokens by arrival bin: ``((t_ns // BIN_NS, tokens), ...)``.

    Each token-bearing event's tokens at its arrival time (one per event when the counts
    match, else :func:`loadgen.core.metrics.tokens_per_event`); a response without events (not
    streamed) delivers all its tokens at its end. Any request, ok or not.
    """
    if output_tokens <= 0:
        return ()
    if not events:
        return ((end_ns // BIN_NS, output_tokens),) if end_ns is not None else ()
    if len(events) == output_tokens:  # one token an event: each bin's events, counted in C (stamps are in order)
        return tuple(Counter([e.t_ns // BIN_NS for e in events]).items())
    ks = tokens_per_event(events, output_tokens)[0]
    out: list[tuple[int, int]] = []
    for ev, k in zip(events, ks):
        if k <= 0:
            continue
        b = ev.t_ns // BIN_NS
        if out and out[-1][0] == b:
            out[-1] = (b, out[-1][1] + k)
        else:
            out.append((b, k))
    return tuple(out)


class WindowLog:
    """What one run's window and its counts need, kept as requests finish.

    Token arrivals of every request (:class:`TokenBins`), the last warm-up end, and per
    measured request its end (ns after the first end seen), kind (``END_*``), output and
    input tokens, in :class:`~loadgen.core.samples.SampleLog` s (``log()`` makes one): 32
    bytes a request, spilled to disk with the aggregator's other samples.
    """

    def __init__(self, log: Callable[[], SampleLog]) -> None:
        self.tokens = TokenBins()
        self.last_warmup_end_ns: int | None = None
        self._origin_ns: int | None = None
        self._ends = log()
        self._kind = log()
        self._out = log()
        self._in = log()

    def add_tokens(self, bins: tuple[tuple[int, int], ...]) -> None:
        for b, k in bins:
            self.tokens.add_bin(b, k)

    def add_warmup_end(self, end_ns: int | None) -> None:
        if end_ns is not None and (self.last_warmup_end_ns is None or end_ns > self.last_warmup_end_ns):
            self.last_warmup_end_ns = end_ns

    def add_end(self, end_ns: int, kind: float, output_tokens: int, input_tokens: int) -> None:
        if self._origin_ns is None:
            self._origin_ns = end_ns
        self._ends.append(end_ns - self._origin_ns)
        self._kind.append(kind)
        self._out.append(output_tokens)
        self._in.append(input_tokens)

    def ends_ns(self) -> np.ndarray:
        """Measured requests' end times (absolute ns, float64)."""
        if self._origin_ns is None:
            return np.zeros(0)
        return self._ends.values() + float(self._origin_ns)

    def window(
        self,
        open_loop: bool,
        first_scheduled_ns: int,
        last_scheduled_ns: int,
        n: int,
        *,
        median_e2e_ns: float | None,
        last_end_ns: int | None,
    ) -> Window:
        """The run's window (module docstring): open loop, closed loop, or the fallback."""
        if open_loop:
            return open_loop_window(
                first_scheduled_ns, last_scheduled_ns, n, median_e2e_ns=median_e2e_ns, last_end_ns=last_end_ns
            )
        start = closed_loop_start_ns(first_scheduled_ns, self.last_warmup_end_ns)
        ends = self.ends_ns()
        later = ends[ends > last_scheduled_ns]
        end = int(later.min()) if later.size else None
        if end is None or end <= start:
            reason = "closed loop: no span between the end of the ramp and the first user's stop"
            return fallback_window(first_scheduled_ns, last_end_ns, n, reason)
        return Window(CLOSED, start, end, int(((ends >= start) & (ends <= end)).sum()))

    def counts(self, w: Window) -> dict[str, float]:
        """Counts over ``w``: completions ending inside, conforming requests, tokens (module docstring)."""
        ends = self.ends_ns()
        kind = self._kind.values()
        inside = (ends >= w.start_ns) & (ends <= w.end_ns)
        # the counting set: every measured request (open loop, fallback), those ending inside (closed loop)
        counted = inside if w.basis == CLOSED else np.ones(ends.shape, dtype=bool)
        return {
            "completions": float(((kind >= END_OK) & inside).sum()),
            "conforming": float(((kind == END_CONFORMING) & counted).sum()),
            "demanded_output_tokens": float(self._out.values()[counted].sum()),
            "input_tokens": float(self._in.values()[counted].sum()),
            "output_tokens": self.tokens.between(w.start_ns, w.end_ns),
        }


def rate(count: float | None, window: Window | None) -> float | None:
    """count / window_s; None without a window of positive length or without a count."""
    if window is None or count is None or window.duration_s <= 0:
        return None
    return count / window.duration_s
