"""The loadgen tab's live figures: charts over time, throughput and the SLO verdict of the test so far.

Locust's own statistics count one row per request (type ``E2E``); everything loadgen
measures beyond that is here, computed from the same records the collector aggregates
(and ``result.json`` gets):

* **Series** (:class:`LiveSeries`): one-second bins from the test's t0. Per bin,
  ``output_tps`` = output tokens that *arrived* in the bin / bin length, from the
  aggregator's token-arrival bins (:class:`loadgen.core.window.TokenBins`, the counting rule
  of ``throughput.output_tps``); ``completed_rps`` / ``failed_rps`` = requests that
  *ended* in the bin / bin length; TTFT, TPOT and E2E p50 and p99 (ms) of the successful
  requests that ended in the bin (by completion, as Locust's own charts), percentiles
  as ``result.json`` takes them (:func:`numpy.percentile`, linear). A long test is shown
  with wider bins (adjacent seconds merged, at most :data:`MAX_POINTS` points).
* **Throughput and SLO**: :meth:`loadgen.engine.results.Aggregator.throughput` and
  :meth:`~loadgen.engine.results.Aggregator.slo_result` over the test so far (the measurement
  window of :mod:`loadgen.core.window`, the verdict rules of :mod:`loadgen.core.slo`).

Pure: no Locust, no gevent.
"""

from __future__ import annotations

import math
from array import array
from typing import Any

import numpy as np

from loadgen.core.metrics import RequestMetrics
from loadgen.core.types import RequestRecord
from loadgen.engine.results import Aggregator

BIN_NS = 1_000_000_000
MAX_POINTS = 300
_LAT = ("ttft", "tpot", "e2e")


class LiveSeries:
    """Per-second bins of one test (module docstring): ends, failures, latencies by completion."""

    def __init__(self, t0_ns: int) -> None:
        self.t0_ns = t0_ns
        self.completed = array("q")
        self.failed = array("q")
        self.lat: dict[str, list[array[float]]] = {k: [] for k in _LAT}

    def _bin(self, t_ns: int) -> int:
        i = max((t_ns - self.t0_ns) // BIN_NS, 0)
        while len(self.completed) <= i:
            self.completed.append(0)
            self.failed.append(0)
            for v in self.lat.values():
                v.append(array("d"))
        return int(i)

    def add(self, rec: RequestRecord, m: RequestMetrics) -> None:
        if rec.end_ns is None or rec.phase != "measure":
            return
        i = self._bin(rec.end_ns)
        if not rec.ok:
            self.failed[i] += 1
            return
        self.completed[i] += 1
        for name, v in (("ttft", m.ttft_ns), ("tpot", m.tpot_ns), ("e2e", m.e2e_ns)):
            if v is not None:
                self.lat[name][i].append(v / 1e6)

    def to_json(self, agg: Aggregator, now_ns: int) -> dict[str, Any]:
        """The series up to ``now_ns`` (the current second left out while it fills)."""
        n = min(len(self.completed), max((now_ns - self.t0_ns) // BIN_NS, 0))
        width = max(1, math.ceil(n / MAX_POINTS))
        t_s: list[float] = []
        out: dict[str, list[float]] = {k: [] for k in ("output_tps", "completed_rps", "failed_rps")}
        pct: dict[str, list[float | None]] = {f"{k}_{p}_ms": [] for k in _LAT for p in ("p50", "p99")}
        for lo in range(0, n - n % width if n >= width else 0, width):
            hi = lo + width
            span_s = width * BIN_NS / 1e9
            start = self.t0_ns + lo * BIN_NS
            t_s.append(hi * BIN_NS / 1e9)
            out["output_tps"].append(agg.win.tokens.between(start, start + width * BIN_NS) / span_s)
            out["completed_rps"].append(sum(self.completed[lo:hi]) / span_s)
            out["failed_rps"].append(sum(self.failed[lo:hi]) / span_s)
            for k in _LAT:
                parts = [np.frombuffer(a, dtype=np.float64) for a in self.lat[k][lo:hi]]
                vals = np.concatenate(parts) if parts else np.zeros(0)
                p50, p99 = np.percentile(vals, [50, 99]) if vals.size else (None, None)
                pct[f"{k}_p50_ms"].append(None if p50 is None else round(float(p50), 3))
                pct[f"{k}_p99_ms"].append(None if p99 is None else round(float(p99), 3))
        return {"bin_s": float(width), "t_s": t_s, **out, **pct}


def summary(agg: Aggregator) -> dict[str, Any]:
    """Throughput over the measurement window so far and the SLO verdict (None without an SLO)."""
    tp = agg.throughput() if agg.requests else {}
    keep = ("offered_rps", "achieved_send_rps", "completion_rps", "goodput_rps", "output_tps", "input_tps")
    slo = agg.slo_result() if agg.slos and agg.requests else None
    return {
        "throughput": {k: tp.get(k) for k in keep},
        "slo": None
        if slo is None
        else {"met": slo["met"], "attainment": slo["attainment"], "goodput_rps": slo["goodput_rps"],
              "targets": [{k: t[k] for k in ("target", "value_ms", "met", "exceedances", "denominator")}
                          for t in slo["targets"]]},
    }  # fmt: skip
