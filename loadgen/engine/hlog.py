"""The HdrHistogram interval log of a run (``histograms.hlog``) and its whole-run log beside it
(``histograms_run.hlog``), both in HdrHistogram's log format V1.3 (what its ``HistogramLogProcessor``
and ``HistogramLogReader`` read): values in integer microseconds, one tagged line per metric.

* ``histograms.hlog``: one line per time-series interval per metric. The intervals are the run's
  time series (``result.json`` ``timeseries``: ``start_s`` and ``interval_s`` from t0,
  :mod:`loadgen.engine.timeseries`); a request's values go to the interval in which it *ended*
  (its end from the latency origin: :func:`loadgen.engine.timeseries.request_times`), each
  per-token gap of ITL and inter-chunk with its request. An interval with no value of a metric has
  no line for it. StartTimestamp is seconds from the log's BaseTime (the run's t0).
* ``histograms_run.hlog``: one line per metric for the whole run, the aggregator's histograms
  (the same counts as ``result.json`` ``latency_ms``; before issue 35 this was ``histograms.hlog``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from loadgen.core.histograms import LatencyHistogram
from loadgen.engine.timeseries import request_lines, request_times

__all__ = ["hlog_header", "INTERVAL_METRICS", "write_interval_hlog", "write_run_hlog"]

INTERVAL_METRICS = ("ttft", "time_to_first_answer_token", "tpot", "e2e", "schedule_lag", "itl", "inter_chunk")
"""Metrics of the interval log: the record line's ``<metric>_ms`` (a number, or a list for the gaps)."""


def hlog_header(start_s: float, what: str) -> list[str]:
    """The V1.3 header lines of a log whose BaseTime is ``start_s`` (seconds since the epoch)."""
    return [
        "#[Histogram log format version 1.3]",
        f"#[StartTime: {start_s:.3f} (seconds since epoch)]",
        f"#[BaseTime: {start_s:.3f} (seconds since epoch)]",
        f"#[loadgen: values in microseconds; {what}]",
        '"StartTimestamp","Interval_Length","Interval_Max","Interval_Compressed_Histogram"',
    ]


def _line(tag: str, start_s: float, length_s: float, h: LatencyHistogram) -> str:
    return f"Tag={tag},{start_s:.3f},{length_s:.3f},{h.hist.get_max_value() / 1e6:.3f},{h.encode()}"


def write_run_hlog(path: Path, hists: dict[str, LatencyHistogram], t0_wall_s: float, span_s: float) -> None:
    """One line per metric (with values) for the whole run of ``span_s`` seconds from t0."""
    lines = hlog_header(t0_wall_s, "one tagged histogram per metric for the whole run")
    lines += [_line(name, 0.0, span_s, h) for name, h in hists.items() if h.hist.get_total_count()]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def write_interval_hlog(
    path: Path, records: Path, origin: str, t0_wall_s: float, timeseries: dict[str, Any] | None
) -> int:
    """The interval log of the request lines in ``records`` on ``timeseries``' intervals; returns the
    number of interval lines written (0, with the header alone, when the run has no time series)."""
    lines = hlog_header(t0_wall_s, "one tagged histogram per metric per time-series interval")
    n_lines = 0
    if timeseries and timeseries.get("intervals"):
        start, width, n = float(timeseries["start_s"]), float(timeseries["interval_s"]), len(timeseries["intervals"])
        bins: list[dict[str, LatencyHistogram]] = [{} for _ in range(n)]
        for d in request_lines(records):
            t = request_times(d, origin)
            if t is None or width <= 0:
                continue
            b = bins[min(max(int((t[1] - start) / width), 0), n - 1)]
            for m in INTERVAL_METRICS:
                v = d.get(f"{m}_ms")
                if v is None:
                    continue
                h = b.get(m)
                if h is None:
                    h = b[m] = LatencyHistogram(m)
                if isinstance(v, list):
                    h.record_many_ns([x * 1e6 for x in v])
                else:
                    h.record_ns(v * 1e6)
        for i, b in enumerate(bins):
            for m in INTERVAL_METRICS:
                if m in b and b[m].hist.get_total_count():
                    lines.append(_line(m, start + i * width, width, b[m]))
                    n_lines += 1
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return n_lines
