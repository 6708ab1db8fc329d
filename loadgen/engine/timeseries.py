"""Sustained behaviour of one run: a compact per-interval time series and its drift.

Built from ``requests.jsonl`` after the run, in two streaming passes (memory
O(intervals), HDR histograms per interval), so it adds nothing to the run itself.

Window: the measured requests' first origin (scheduled send; the actual send with
``--latency-origin sent``) to their last end (origin + ``e2e_ms``, or
``error_e2e_ms`` for a failure), the same span as ``result.json`` ``duration_s``.
It is cut into ``INTERVALS`` equal intervals. Per interval:

* ``completed`` / ``failed``: requests that *ended* in it; ``output_tokens`` of the
  completed ones (attributed at completion); ``request_rps = completed / interval_s``,
  ``output_tps = output_tokens / interval_s``;
* ``ttft_ms`` / ``e2e_ms`` p50 and p99 of the successful requests whose *origin* is in
  it (latency by arrival: a growing queue shows as rising latency of later arrivals).
  HDR precision (±0.1 %).

* ``inflight_mean``: the client's requests in flight, averaged over the interval (each
  request counted from its actual send to its end, pro rata of its overlap with the interval:
  the time-weighted mean concurrency);
* ``sessions_active_mean`` (session runs): sessions open, averaged over the interval (each measured
  session counted from its first turn's due time to its last turn's end, think time included, pro
  rata); ``inflight_mean`` is then the turns in flight;
* ``server`` (when the server was observed, ``result.json`` ``server.series``,
  :class:`loadgen.serve.ServerObserver`): the server's gauges sampled inside the interval on
  the same clock (seconds from t0) -- ``samples`` and, per gauge, the mean and max of its
  samples: ``running`` and ``waiting`` requests, ``kv_cache_usage`` (fraction), GPU
  ``power_w`` (NVML) -- None for an interval no sample fell in. Client and server thus share
  one time axis and the same interval boundaries.

``thirds``: the same figures over the first and the last third, cut for latency from the
first to the last *origin* and for throughput from the run's measurement window
(``result.json`` ``window``, :mod:`loadgen.core.window`; given as ``window``): a third's
``output_tokens`` are the tokens generated in it, each successful request's (warm-up
included) spread evenly over [first token, end] and counted pro rata, and ``completed``
the requests that ended in it. The drain after the window is never compared, so a long
tail does not read as drift. Without a window (older callers) throughput thirds are cut
from the first to the last *end*, completions attributed at their end.

Drift (the scorecard's sustained-behaviour rows), last third against first third:
``change = last / first - 1`` for output tok/s, TTFT p50 and E2E p50. A metric
drifts when ``|change| > DRIFT_THRESHOLD`` (20 %) and, for a latency, also
``|last - first| > DRIFT_MIN_LATENCY_MS`` (5 ms: a 2 ms -> 3 ms TTFT is not a
drifting system). No verdict when a third holds fewer than
``MIN_REQUESTS_PER_THIRD`` requests.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import orjson

from loadgen.core.histograms import LatencyHistogram

TIMESERIES_VERSION = 1
INTERVALS = 12
"""Intervals per run (each 1/12 of the measured window; a third is 4 of them)."""
DRIFT_THRESHOLD = 0.20
"""Relative change (last third against first third) beyond which a metric drifts."""
DRIFT_MIN_LATENCY_MS = 5.0
"""A latency change must also exceed this many milliseconds to count as drift."""
MIN_REQUESTS_PER_THIRD = 10
"""Fewer requests than this in a third: no drift verdict."""


def request_lines(path: Path) -> Iterator[dict[str, Any]]:
    with open(path, "rb") as fh:
        for raw in fh:
            if raw.strip():
                try:
                    yield orjson.loads(raw)
                except orjson.JSONDecodeError:
                    continue  # a torn last line of an interrupted run


def request_times(d: dict[str, Any], origin: str) -> tuple[float, float] | None:
    """(origin_s, end_s) of one measured request line; None when it was never sent."""
    if d.get("phase", "measure") != "measure" or d.get("sent_s") is None:
        return None
    o = d["sent_s"] if origin == "sent" else d.get("scheduled_s")
    if o is None:
        return None
    ms = d.get("e2e_ms") if d.get("status") == "ok" else d.get("error_e2e_ms")
    return o, o + (ms or 0.0) / 1000.0


class _Bin:
    __slots__ = ("arrivals", "busy_s", "completed", "e2e", "failed", "output_tokens", "server", "session_s", "ttft")

    def __init__(self) -> None:
        self.completed = 0
        self.failed = 0
        self.output_tokens: float = 0
        self.arrivals = 0
        self.busy_s = 0.0  # request-seconds in flight inside the interval
        self.session_s: float | None = None  # session-seconds open inside the interval (session runs)
        self.server: dict[str, list[float]] = {}
        self.ttft = LatencyHistogram("ttft")
        self.e2e = LatencyHistogram("e2e")

    def to_json(self, span_s: float) -> dict[str, Any]:
        def r(v: float | None) -> float | None:
            return None if v is None else round(v, 3)

        out: dict[str, Any] = {
            "completed": self.completed,
            "failed": self.failed,
            "output_tokens": round(self.output_tokens, 3),
            "request_rps": round(self.completed / span_s, 4) if span_s > 0 else None,
            "output_tps": round(self.output_tokens / span_s, 4) if span_s > 0 else None,
            "arrivals": self.arrivals,
            "ttft_ms": {"p50": r(self.ttft.percentile_ms(50)), "p99": r(self.ttft.percentile_ms(99))},
            "e2e_ms": {"p50": r(self.e2e.percentile_ms(50)), "p99": r(self.e2e.percentile_ms(99))},
            "inflight_mean": round(self.busy_s / span_s, 4) if span_s > 0 else None,
        }
        if self.session_s is not None:
            out["sessions_active_mean"] = round(self.session_s / span_s, 4) if span_s > 0 else None
        if self.server:
            n = max(len(v) for v in self.server.values())
            out["server"] = {"samples": n} | {
                k: {"mean": round(sum(v) / len(v), 4), "max": round(max(v), 4)} if v else None
                for k, v in self.server.items()
            }
        return out


def series(
    lines: Iterable[dict[str, Any]] | Path,
    origin: str = "scheduled",
    intervals: int = INTERVALS,
    window: dict[str, Any] | None = None,
    server: dict[str, Any] | None = None,
) -> dict[str, Any] | None:
    """The time series of one run's request lines (or its ``requests.jsonl`` path).

    ``lines`` may be iterated twice (a path is re-read); ``window`` is ``result.json``'s
    ``window`` block (``start_s``/``end_s`` from t0) for the throughput thirds; ``server``
    its ``server`` block (the observed server's gauges, ``series``). Returns None when no
    measured request ended. Times in the result are seconds from the run's t0.
    """
    src = (lambda: request_lines(lines)) if isinstance(lines, Path) else (lambda it=list(lines): iter(it))
    o_lo = o_hi = e_lo = e_hi = None
    spans: dict[str, list[float]] = {}  # session id -> [first due time, last end] of its measured turns
    for d in src():
        t = request_times(d, origin)
        if t is None:
            continue
        o, e = t
        sid = d.get("session_id")
        if sid is not None:
            due = d.get("scheduled_s", o)
            span = spans.get(sid)
            if span is None:
                spans[sid] = [due, e]
            else:
                span[0], span[1] = min(span[0], due), max(span[1], e)
        o_lo, o_hi = (o, o) if o_lo is None else (min(o_lo, o), max(o_hi, o))  # type: ignore[type-var]  # o_hi/e_hi are set whenever o_lo/e_lo are
        e_lo, e_hi = (e, e) if e_lo is None else (min(e_lo, e), max(e_hi, e))  # type: ignore[type-var]  # o_hi/e_hi are set whenever o_lo/e_lo are
    if o_lo is None or o_hi is None or e_lo is None or e_hi is None or e_hi <= o_lo:
        return None
    start, end = o_lo, e_hi
    win = None
    if window and window.get("end_s") is not None and window["end_s"] > window["start_s"]:
        win = (float(window["start_s"]), float(window["end_s"]))
    width = (end - start) / intervals
    bins = [_Bin() for _ in range(intervals)]
    first, last = _Bin(), _Bin()

    def idx(t: float) -> int:
        return min(max(int((t - start) / width), 0), intervals - 1)

    for d in src():
        t = request_times(d, origin)
        if t is None:
            continue
        o, e = t
        ok = d.get("status") == "ok"
        # throughput by completion (thirds of the window, or of [first end, last end]); latency by arrival
        thirds = (_third(e, e_lo, e_hi, first, last),) if win is None else (_win_third(e, win, first, last),)
        for b in (bins[idx(e)], *thirds):
            if b is None:
                continue
            if ok:
                b.completed += 1
                if win is None or b is bins[idx(e)]:
                    b.output_tokens += int(d.get("output_tokens") or 0)
            elif d.get("error_kind") != "abandoned":  # a user who walked away is not a failure (--abandon)
                b.failed += 1
        sent = d.get("sent_s")
        if isinstance(sent, int | float) and e > sent:  # in flight from the send to the end
            _overlap(bins, sent, e, start, width, "busy_s")
        for b in (bins[idx(o)], _third(o, o_lo, o_hi, first, last)):
            if b is None:
                continue
            b.arrivals += 1
            if ok:
                if d.get("ttft_ms") is not None:
                    b.ttft.record_ns(d["ttft_ms"] * 1e6)
                if d.get("e2e_ms") is not None:
                    b.e2e.record_ns(d["e2e_ms"] * 1e6)
    if spans:
        for b in bins:
            b.session_s = 0.0
        for lo_s, hi_s in spans.values():
            _overlap(bins, lo_s, hi_s, start, width, "session_s")
    _server_samples(server, bins, start, width)
    third_s = (e_hi - e_lo) / 3
    if win is not None:
        third_s = (win[1] - win[0]) / 3
        for d in src():
            _spread_tokens(d, origin, win, first, last)
    return {
        "version": TIMESERIES_VERSION,
        "start_s": round(start, 6),
        "interval_s": round(width, 6),
        "latency_origin": origin,
        "intervals": [b.to_json(width) for b in bins],
        "thirds": {k: _no_inflight(b.to_json(third_s)) for k, b in (("first", first), ("last", last))},
    }


def _overlap(bins: list[_Bin], lo_s: float, hi_s: float, start: float, width: float, attr: str) -> None:
    """Add the overlap of [lo_s, hi_s] with each interval to its ``attr`` (seconds; pro rata)."""
    n = len(bins)
    first = min(max(int((lo_s - start) / width), 0), n - 1)
    last = min(max(int((hi_s - start) / width), 0), n - 1)
    for k in range(first, last + 1):
        lo = start + k * width
        b = bins[k]
        setattr(b, attr, getattr(b, attr) + max(0.0, min(hi_s, lo + width) - max(lo_s, lo)))


def _no_inflight(d: dict[str, Any]) -> dict[str, Any]:
    d.pop("inflight_mean", None)  # counted per interval only
    d.pop("sessions_active_mean", None)
    return d


def _server_samples(server: dict[str, Any] | None, bins: list[_Bin], start: float, width: float) -> None:
    """Put the observed server's gauge samples (``server.series``) into the intervals they fell in."""
    ser = (server or {}).get("series") or {}
    columns: list[tuple[str, list[float], list[Any]]] = [
        (k, ser.get("t_s") or [], v) for k, v in (ser.get("gauges") or {}).items()
    ]
    gpu = ser.get("gpu") or {}
    if gpu.get("power_w"):
        columns.append(("power_w", gpu.get("t_s") or [], gpu["power_w"]))
    if not columns:
        return
    for b in bins:
        b.server = {k: [] for k, _, _ in columns}
    end = start + width * len(bins)
    for key, ts, vals in columns:
        for t, v in zip(ts, vals, strict=False):
            if v is not None and start <= t < end:
                bins[min(int((t - start) / width), len(bins) - 1)].server[key].append(float(v))


def _third(t: float, start: float, end: float, first: _Bin, last: _Bin) -> _Bin | None:
    """The first-third bin, the last-third bin, or None for the middle third of [start, end]."""
    third = (end - start) / 3
    if t < start + third:
        return first
    return last if t >= end - third else None


def _win_third(t: float, win: tuple[float, float], first: _Bin, last: _Bin) -> _Bin | None:
    """The window's first-third bin, its last-third bin, or None (middle third, or outside the window)."""
    if not win[0] <= t <= win[1]:
        return None
    return _third(t, win[0], win[1], first, last)


def _spread_tokens(d: dict[str, Any], origin: str, win: tuple[float, float], first: _Bin, last: _Bin) -> None:
    """Add a successful request's output tokens, spread evenly over [first token, end], to the window's thirds."""
    n = int(d.get("output_tokens") or 0)
    if d.get("status") != "ok" or n <= 0 or d.get("e2e_ms") is None:
        return
    o = d.get("sent_s") if origin == "sent" else d.get("scheduled_s")
    if o is None:
        return
    end = o + d["e2e_ms"] / 1000.0
    begin = o + (d["ttft_ms"] / 1000.0 if d.get("ttft_ms") is not None else d["e2e_ms"] / 1000.0)
    third = (win[1] - win[0]) / 3
    for b, lo, hi in ((first, win[0], win[0] + third), (last, win[1] - third, win[1])):
        if end <= begin:
            b.output_tokens += n if lo <= end < hi or (hi == win[1] and end == hi) else 0
            continue
        overlap = min(end, hi) - max(begin, lo)
        if overlap > 0:
            b.output_tokens += n * overlap / (end - begin)


def _change(first: float | None, last: float | None) -> float | None:
    if first is None or last is None or first <= 0:
        return None
    return last / first - 1.0


def drift(ts: dict[str, Any] | None) -> dict[str, Any]:
    """Last third against first third: changes, drifting metrics and a verdict.

    Returns ``{"verdict": "steady" | "drifting" | "not measured", "changes": {metric: ratio - 1},
    "drifting": [metric, ...], "reason": str}``. Definitions in the module docstring.
    """
    if not ts or "thirds" not in ts:
        return {"verdict": "not measured", "changes": {}, "drifting": [], "reason": "no time series"}
    f, la = ts["thirds"]["first"], ts["thirds"]["last"]
    n = min(f["completed"] + f["failed"], la["completed"] + la["failed"], f["arrivals"], la["arrivals"])
    pairs = {
        "output_tps": (f["output_tps"], la["output_tps"], None),
        "ttft_p50_ms": (f["ttft_ms"]["p50"], la["ttft_ms"]["p50"], DRIFT_MIN_LATENCY_MS),
        "e2e_p50_ms": (f["e2e_ms"]["p50"], la["e2e_ms"]["p50"], DRIFT_MIN_LATENCY_MS),
    }
    changes = {k: _change(a, b) for k, (a, b, _) in pairs.items()}
    if n < MIN_REQUESTS_PER_THIRD:
        return {"verdict": "not measured", "changes": changes, "drifting": [],
                "reason": f"{n} requests in a third (fewer than {MIN_REQUESTS_PER_THIRD})"}  # fmt: skip
    drifting = []
    for k, (a, b, floor) in pairs.items():
        c = changes[k]
        if c is None or abs(c) <= DRIFT_THRESHOLD:
            continue
        if floor is not None and abs(b - a) <= floor:
            continue
        drifting.append(k)
    reason = ", ".join(f"{k} {changes[k]:+.0%}" for k in drifting) if drifting else "within ±20 %"
    return {"verdict": "drifting" if drifting else "steady", "changes": changes, "drifting": drifting, "reason": reason}
