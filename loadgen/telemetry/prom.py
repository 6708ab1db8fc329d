"""Live Prometheus metrics of a run (``--metrics-port``): counters, gauges, mergeable histograms.

Fed the way the live view is (:mod:`loadgen.cli.live`): a daemon thread tails the run's
``requests.jsonl`` every :data:`REFRESH_S` (the driver writes every worker's and actor's
lines there, so the exporter of the driver sees the whole run) and reads, without writing,
``len(inflight_records)`` and ``unsent`` of the runner object when there is one. Nothing
runs on the send path. Served by ``prometheus_client`` on ``host:port`` (127.0.0.1 by
default) from its own thread; on close the last exposition is written to ``metrics.prom``
beside ``requests.jsonl`` (after the last record: its counters are the run's final counts).

Metrics (``phase``: ``measure`` or ``warmup``, as in ``requests.jsonl``):

* counters: ``loadgen_requests_total{phase,status}`` (finished requests, ``status`` ok or
  error), ``loadgen_requests_sent_total{phase}`` (finished requests that were sent),
  ``loadgen_errors_total{phase,kind}`` (by ``error_kind``), ``loadgen_output_tokens_total{phase}``
  (as counted in ``requests.jsonl`` ``output_tokens``), ``loadgen_requests_unsent_total``
  (the runner's count of scheduled requests never sent; 0 under ``--workers``);
* gauges: ``loadgen_inflight_requests``, ``loadgen_schedule_lag_p99_seconds`` and
  ``loadgen_client_cpu_ratio`` (this process: CPU time / wall time), both over the last
  refresh period;
* histograms ``loadgen_ttft_seconds``, ``loadgen_itl_seconds`` (every per-token gap of
  ``itl_ms``), ``loadgen_e2e_seconds`` (successful requests), ``{phase="measure"}`` (the
  measured requests only, as ``result.json``'s latencies): the buckets of a
  Prometheus native histogram of schema 3 written as classic buckets, upper bounds
  ``2**(i/8)`` s for i in [:data:`MIN_EXP`, :data:`MAX_EXP`] and +Inf. Fixed bounds shared by
  every exporter: histograms from several generators merge *exactly* by adding bucket
  counts, and a percentile read from them lies in one bucket: within a factor 2**(1/8)
  (+9 %) of the exact value. The same names in GenAI semantic conventions, where they
  exist: ``gen_ai.server.time_to_first_token`` (TTFT) and
  ``gen_ai.server.time_per_output_token`` (ITL); these are client-side measurements.
"""

from __future__ import annotations

import math
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from loadgen.telemetry.tail import RecordTail, refresh_until_stopped

__all__ = ["BUCKET_BOUNDS_S", "MAX_EXP", "MIN_EXP", "REFRESH_S", "PromExporter"]

REFRESH_S = 0.5
"""How often the exporter reads new records (s)."""
MIN_EXP = -104  # 2**(-104/8) s = 122 µs
MAX_EXP = 56  # 2**(56/8) s = 128 s
BUCKET_BOUNDS_S: np.ndarray = np.array([2.0 ** (i / 8) for i in range(MIN_EXP, MAX_EXP + 1)])
"""Upper bounds of the histogram buckets (s), schema-3 native-histogram boundaries; then +Inf."""

HISTOGRAMS = (
    ("ttft", "Time to first token (s), from the scheduled send (gen_ai.server.time_to_first_token)"),
    ("itl", "Inter-token latency, per token gap (s) (gen_ai.server.time_per_output_token)"),
    ("e2e", "End-to-end request latency of successful requests (s)"),
)
HIST_PHASES = ("measure",)
"""Histograms are of the measured requests only, as ``result.json``'s latencies (a scrape of ~500
bucket lines costs ~6 ms of the interpreter; warm-up buckets would double it)."""


class _Hist:
    __slots__ = ("counts", "sum_s")

    def __init__(self) -> None:
        self.counts = np.zeros(BUCKET_BOUNDS_S.size + 1, dtype=np.int64)  # the last: over the top bound
        self.sum_s = 0.0

    def add(self, values_s: list[float]) -> None:
        if values_s:
            v = np.asarray(values_s, dtype=np.float64)
            self.counts += np.bincount(np.searchsorted(BUCKET_BOUNDS_S, v, side="left"), minlength=self.counts.size)
            self.sum_s += float(v.sum())


class PromExporter:
    """The exporter of one run (a context manager). ``attach`` is a ``measure(runner_hook=...)``."""

    def __init__(self, jsonl: Path, port: int, host: str = "127.0.0.1", refresh_s: float = REFRESH_S) -> None:
        self.jsonl = jsonl
        self.host = host
        self.port = port
        self.refresh_s = refresh_s
        self.runner: Any = None
        self._tail = RecordTail(jsonl)
        self._lock = threading.Lock()
        self._requests: Counter[tuple[str, str]] = Counter()
        self._sent: Counter[str] = Counter()
        self._errors: Counter[tuple[str, str]] = Counter()
        self._tokens: Counter[str] = Counter()
        self._hists = {(name, ph): _Hist() for name, _ in HISTOGRAMS for ph in HIST_PHASES}
        self._lag_p99_s: float | None = None
        self._cpu_ratio: float | None = None
        self._cpu = (time.process_time(), time.perf_counter())
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._server: Any = None
        self._registry: Any = None

    def attach(self, runner: Any) -> None:
        """Keep a read-only reference to the runner (in flight, unsent)."""
        self.runner = runner

    def __enter__(self) -> PromExporter:
        from prometheus_client import CollectorRegistry, start_http_server

        self._registry = CollectorRegistry(auto_describe=False)
        self._registry.register(self)  # a Collector: it has collect()
        self._server, _ = start_http_server(self.port, addr=self.host, registry=self._registry)
        self.port = int(self._server.server_port)
        self._thread = threading.Thread(target=self._loop, name="loadgen-metrics", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
        self.refresh()  # the last records: final counts
        if self._registry is not None:
            from prometheus_client import generate_latest

            try:
                (self.jsonl.parent / "metrics.prom").write_bytes(generate_latest(self._registry))
            except OSError:
                pass
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/metrics"

    def _loop(self) -> None:
        refresh_until_stopped(self._stop, self.refresh_s, self.refresh)

    def refresh(self) -> None:
        """Fold the records written since the last refresh into the metrics."""
        lines = self._tail.read()
        cpu, wall = time.process_time(), time.perf_counter()
        lags = [float(d["schedule_lag_ms"]) / 1e3 for d in lines if d.get("schedule_lag_ms") is not None]
        values: dict[tuple[str, str], list[float]] = {key: [] for key in self._hists}
        with self._lock:
            if wall > self._cpu[1]:
                self._cpu_ratio = (cpu - self._cpu[0]) / (wall - self._cpu[1])
            self._cpu = (cpu, wall)
            self._lag_p99_s = float(np.percentile(lags, 99)) if lags else self._lag_p99_s
            for d in lines:
                ph = "warmup" if d.get("phase") == "warmup" else "measure"
                ok = d.get("status") == "ok"
                self._requests[(ph, "ok" if ok else "error")] += 1
                if d.get("sent_s") is not None:
                    self._sent[ph] += 1
                if not ok:
                    self._errors[(ph, str(d.get("error_kind") or "error"))] += 1
                self._tokens[ph] += int(d.get("output_tokens") or 0)
                if ok and ph in HIST_PHASES:
                    if d.get("ttft_ms") is not None:
                        values[("ttft", ph)].append(float(d["ttft_ms"]) / 1e3)
                    if d.get("e2e_ms") is not None:
                        values[("e2e", ph)].append(float(d["e2e_ms"]) / 1e3)
                    values[("itl", ph)].extend(float(v) / 1e3 for v in d.get("itl_ms") or ())
            for key, vs in values.items():
                self._hists[key].add(vs)  # one bucket count per histogram and refresh

    def collect(self) -> Iterator[Any]:
        """The metrics, for ``prometheus_client`` (called from its server thread)."""
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

        with self._lock:
            req = CounterMetricFamily("loadgen_requests", "Finished requests", labels=["phase", "status"])
            for (ph, st), n in sorted(self._requests.items()):
                req.add_metric([ph, st], n)
            sent = CounterMetricFamily("loadgen_requests_sent", "Finished requests that were sent", labels=["phase"])
            for ph, n in sorted(self._sent.items()):
                sent.add_metric([ph], n)
            err = CounterMetricFamily("loadgen_errors", "Failed requests by error kind", labels=["phase", "kind"])
            for (ph, kind), n in sorted(self._errors.items()):
                err.add_metric([ph, kind], n)
            tok = CounterMetricFamily("loadgen_output_tokens", "Output tokens of finished requests", labels=["phase"])
            for ph, n in sorted(self._tokens.items()):
                tok.add_metric([ph], n)
            r = self.runner
            unsent = CounterMetricFamily("loadgen_requests_unsent", "Scheduled requests never sent")
            unsent.add_metric([], int(getattr(r, "unsent", 0) or 0) + int(getattr(r, "unsent_warmup", 0) or 0))
            inflight = GaugeMetricFamily("loadgen_inflight_requests", "Requests in flight now")
            inflight.add_metric([], len(r.inflight_records) if r is not None else math.nan)
            lag = GaugeMetricFamily("loadgen_schedule_lag_p99_seconds", "p99 schedule lag, last refresh period")
            lag.add_metric([], math.nan if self._lag_p99_s is None else self._lag_p99_s)
            cpu = GaugeMetricFamily("loadgen_client_cpu_ratio", "Client process CPU time / wall time")
            cpu.add_metric([], math.nan if self._cpu_ratio is None else self._cpu_ratio)
            hists = []
            for name, doc in HISTOGRAMS:
                h = HistogramMetricFamily(f"loadgen_{name}_seconds", doc, labels=["phase"])
                for ph in HIST_PHASES:
                    hs = self._hists[(name, ph)]
                    cum = np.cumsum(hs.counts)
                    buckets = [(_le(b), int(c)) for b, c in zip(BUCKET_BOUNDS_S, cum[:-1])]
                    buckets.append(("+Inf", int(cum[-1])))
                    h.add_metric([ph], buckets, hs.sum_s)
                hists.append(h)
        yield from (req, sent, err, tok, unsent, inflight, lag, cpu, *hists)


def _le(bound_s: float) -> str:
    return repr(float(bound_s))
