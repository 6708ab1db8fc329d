"""Did the server keep up with an open-loop run? ``result.json`` ``server_kept_up``.

A run whose server cannot serve the offered rate builds a queue for as long as it lasts; its
percentiles then describe the run's length, not the system. Without SLO targets nothing else
says so, so every open-loop run is judged here (with or without targets), by two rules:

1. **Completions short of sends.** ``completions_fraction`` = measured requests that completed
   successfully inside the measurement window (:mod:`loadgen.core.window`: the same count as
   ``throughput.completion_rps``) / measured requests sent (the window's N). Even a server that
   keeps up leaves the requests scheduled in the window's last moments unfinished at its end:
   that is the *tail*. ``completions_expected_fraction`` is what a steady server with the
   latencies of the window's first half would have completed: the mean over the measured
   requests of the share of those reference latencies (E2E from the scheduled send of the
   successful requests scheduled in the first half) that fit between the request's scheduled
   send and the window's end. The server did not keep up when the completions fall short of
   that by more than :data:`COMPLETIONS_SLACK`.
2. **A growing backlog.** The sweep's stability test, :func:`loadgen.core.stability.backlog_trend`
   (first-token delay or decode pace rising across the window: Mann-Kendall and Theil-Sen), on the
   run's measured requests.

``ttft_p50_first_s`` / ``ttft_p50_last_s`` are the median first-token delays (first token -
scheduled send) of the first and the last interval the trend test used. Judged for open-loop
runs whose window is the window of scheduled sends; a closed-loop run (its users wait for the
server: it cannot fall behind), a burst (``--rate inf``, the fallback window) and a session run
get ``None``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from loadgen.core.samples import SampleLog
from loadgen.core.stability import backlog_trend
from loadgen.engine.summary import RequestSummary

__all__ = ["COMPLETIONS_SLACK", "KeepUpLog", "judge_keep_up"]

COMPLETIONS_SLACK = 0.10
"""Completions may fall this far (a fraction of the sends) below what the tail explains before the
server is said not to have kept up: a stable server's completions scatter a few points around the
expectation on short runs (a 60-request run: one request is 1.7 points)."""


class KeepUpLog:
    """Per measured request, what :func:`judge_keep_up` needs, kept as requests finish.

    The scheduled send, the end of a successful request (NaN otherwise), the first token
    (NaN: none) and the TPOT (NaN: under two tokens), in :class:`SampleLog` s (``log()`` makes
    one; 32 bytes a request, spilled with the aggregator's other samples); instants in ns after
    the first scheduled send seen (float64 stays exact).
    """

    def __init__(self, log: Callable[[], SampleLog]) -> None:
        self._origin_ns: int | None = None
        self._sched = log()
        self._ok_end = log()
        self._first = log()
        self._tpot = log()

    def add(self, s: RequestSummary) -> None:
        """One measured request's summary."""
        if self._origin_ns is None:
            self._origin_ns = s.scheduled_ns
        o = self._origin_ns
        self._sched.append(s.scheduled_ns - o)
        self._ok_end.append(s.end_ns - o if s.ok and s.end_ns is not None else math.nan)
        self._first.append(s.first_event_ns - o if s.first_event_ns is not None else math.nan)
        self._tpot.append(float(s.tpot_ns) if s.tpot_ns is not None else math.nan)

    def judge(self, window_end_ns: int) -> dict[str, Any] | None:
        """:func:`judge_keep_up` of the requests logged, the window ending at ``window_end_ns`` (absolute)."""
        if self._origin_ns is None:
            return None
        return judge_keep_up(
            self._sched.values(),
            self._ok_end.values(),
            self._first.values(),
            self._tpot.values(),
            float(window_end_ns - self._origin_ns),
        )


def _expected_fraction(sched: np.ndarray, ok_end: np.ndarray, window_end: float) -> float | None:
    """Completions a steady server with the first half's latencies would have had in the window (module doc)."""
    lo, hi = float(sched.min()), float(sched.max())
    ok = np.isfinite(ok_end)
    ref = ok & (sched <= lo + 0.5 * (hi - lo))
    if not ref.any():
        ref = ok
    if not ref.any():
        return None
    lat = np.sort(ok_end[ref] - sched[ref])
    fits = np.searchsorted(lat, window_end - sched, side="right")  # reference latencies that end in the window
    return float(np.mean(fits / lat.size))


def _seconds(ns: float | None) -> str:
    return "-" if ns is None else f"{ns / 1e9:.3g} s"


def judge_keep_up(
    scheduled_ns: np.ndarray,
    ok_end_ns: np.ndarray,
    first_token_ns: np.ndarray,
    tpot_ns: np.ndarray,
    window_end_ns: float,
) -> dict[str, Any] | None:
    """The ``server_kept_up`` block of the measured requests of one open-loop run (module doc).

    Arrays per measured request, one clock (ns): the scheduled send, the end of a successful
    request (NaN for a failed one), the first token (NaN: none), the TPOT (NaN: under two tokens);
    ``window_end_ns`` the measurement window's end on the same clock. None for no requests.
    """
    sched = np.asarray(scheduled_ns, dtype=np.float64)
    if sched.size == 0:
        return None
    ok_end = np.asarray(ok_end_ns, dtype=np.float64)
    done = np.isfinite(ok_end) & (ok_end <= window_end_ns)
    fraction = float(done.sum() / sched.size)
    expected = _expected_fraction(sched, ok_end, window_end_ns)
    trends = backlog_trend(sched, np.asarray(first_token_ns, dtype=np.float64), tpot_ns, np.ones(sched.size, bool))
    reasons: list[str] = []
    words = f"completions {fraction * 100:.0f} % of sends"
    if expected is not None:
        words += f" ({expected * 100:.0f} % expected with the tail)"
        if fraction < expected - COMPLETIONS_SLACK:
            reasons.append(
                f"completions in the window {fraction * 100:.0f} % of sends, short of the {expected * 100:.0f} % "
                f"a steady server's tail explains by more than {COMPLETIONS_SLACK * 100:.0f} points"
            )
    reasons += [f"{t.series} rising: {t.describe()}" for t in trends if t.growing]
    ftd = next((t for t in trends if t.series == "first_token_delay"), None)
    first = ftd.first if ftd is not None else None
    last = ftd.last if ftd is not None else None
    kept_up = not reasons
    head = "the server kept up" if kept_up else "the server did not keep up"
    detail = f"{head}: {words}"
    if ftd is not None:
        detail += f", TTFT p50 {_seconds(first)} → {_seconds(last)}"
    return {
        "kept_up": kept_up,
        "completions_fraction": fraction,
        "completions_expected_fraction": expected,
        "ttft_p50_first_s": None if first is None else first / 1e9,
        "ttft_p50_last_s": None if last is None else last / 1e9,
        "trends": [
            {
                "series": t.series,
                "rise_ms": t.rise / 1e6,
                "median_ms": t.median / 1e6,
                "mann_kendall_s": t.s,
                "p": t.p,
                "growing": t.growing,
            }
            for t in trends
        ],
        "reasons": reasons,
        "detail": detail,
    }
