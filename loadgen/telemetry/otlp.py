"""OTLP push of a run's live metrics (``--otlp-endpoint``): the same figures as the Prometheus endpoint.

Fed as :mod:`loadgen.telemetry.prom` is: a daemon thread tails the run's ``requests.jsonl``
every :data:`~loadgen.telemetry.prom.REFRESH_S` (every worker's and actor's lines are written
there by the driver) and reads ``len(inflight_records)`` and ``unsent`` of the runner without
writing; nothing runs on the send path. The OpenTelemetry SDK (the ``otlp`` extra) pushes
them over OTLP/HTTP (protobuf) every ``interval_s`` with cumulative temporality, and once
more on close, after the last record: the last push holds the run's final counts.

Instruments (GenAI semantic-convention names where one exists; ``loadgen.phase`` is
``measure`` or ``warmup``, as in ``requests.jsonl``):

* histograms (s) of the successful measured requests: loadgen's own ``loadgen.ttft`` (TTFT from
  the *scheduled* send), ``loadgen.itl`` (every per-token gap, ``itl_ms``), ``loadgen.e2e`` (from the
  scheduled send); and the GenAI *client* metrics of :data:`~loadgen.telemetry.prom.GENAI_SEMCONV`:
  ``gen_ai.client.operation.time_to_first_chunk`` (from the client's send, as the convention
  defines it), ``gen_ai.client.operation.time_per_output_chunk`` (chunk to chunk,
  ``inter_chunk_ms``), ``gen_ai.client.operation.duration`` (from the send to the end); never the
  GenAI *server* names (loadgen is a client). Explicit buckets: the exporter's schema-7 bounds
  (:data:`~loadgen.telemetry.prom.BUCKET_BOUNDS_S`), so the OTLP and Prometheus histograms of any
  number of generators merge exactly and a percentile is known within a factor 2**(1/128) (0.54 %);
* ``gen_ai.client.token.usage`` ({token}, ``gen_ai.token.type`` = ``output``): output tokens
  per successful measured request;
* counters ``loadgen.requests`` (``loadgen.phase``, ``loadgen.status``),
  ``loadgen.requests.sent``, ``loadgen.core.errors`` (``error.type`` = ``error_kind``),
  ``loadgen.output_tokens``, ``loadgen.requests.unsent``; gauges
  ``loadgen.inflight_requests``, ``loadgen.schedule_lag.p99`` (s, last refresh period),
  ``loadgen.client.cpu_ratio``.

The SDK's own log lines (an export that failed names the URL, query key included) go to stderr
as logging's last resort writes them, but through the run's ``redact`` first.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from loadgen.telemetry.prom import BUCKET_BOUNDS_S, REFRESH_S, histogram_values_s
from loadgen.telemetry.tail import LiveReader, Ticker

__all__ = ["OtlpPusher"]

HISTOGRAMS = (
    ("ttft", "loadgen.ttft", "TTFT from the scheduled send"),
    ("itl", "loadgen.itl", "Per-token gap (ITL)"),
    ("e2e", "loadgen.e2e", "E2E of successful requests, from the scheduled send"),
    ("ttfc", "gen_ai.client.operation.time_to_first_chunk", "From the client's send to the first chunk"),
    ("tpoc", "gen_ai.client.operation.time_per_output_chunk", "From one chunk to the next"),
    ("duration", "gen_ai.client.operation.duration", "From the client's send to the end, successful requests"),
)
HISTOGRAM_NAMES = tuple(name for _, name, _ in HISTOGRAMS)


class OtlpPusher(LiveReader):
    """The OTLP push of one run (a context manager). ``attach`` is a ``measure(runner_hook=...)``;
    ``redact``: the run's :class:`~loadgen.core.redact.Redactor`, for the SDK's log lines (module docstring)."""

    def __init__(
        self,
        jsonl: Path,
        endpoint: str,
        interval_s: float = 5.0,
        refresh_s: float = REFRESH_S,
        redact: Callable[[str], str] | None = None,
    ) -> None:
        super().__init__(jsonl, refresh_s)
        self.endpoint = endpoint
        self.interval_s = interval_s
        self._ticker = Ticker("loadgen-otlp", refresh_s, self.refresh)
        self._provider: Any = None
        self._unsent_seen = 0
        self._inst: dict[str, Any] = {}
        self._log = _ScrubbedLog(redact) if redact is not None else None

    def __enter__(self) -> OtlpPusher:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        from opentelemetry.metrics import CallbackOptions, Observation
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
        from opentelemetry.sdk.metrics.view import ExplicitBucketHistogramAggregation, View
        from opentelemetry.sdk.resources import Resource

        if self._log is not None:
            self._log.install()
        bounds = [float(b) for b in BUCKET_BOUNDS_S]
        views = [
            View(instrument_name=n, aggregation=ExplicitBucketHistogramAggregation(bounds)) for n in HISTOGRAM_NAMES
        ]
        reader = PeriodicExportingMetricReader(
            OTLPMetricExporter(endpoint=self.endpoint, timeout=10), export_interval_millis=self.interval_s * 1e3
        )
        self._provider = MeterProvider(
            metric_readers=[reader], views=views, resource=Resource.create({"service.name": "loadgen"})
        )
        m = self._provider.get_meter("loadgen")

        def gauge(value: Any) -> Any:
            def cb(options: CallbackOptions) -> Iterable[Any]:
                v = value()
                return [] if v is None else [Observation(v)]

            return cb

        self._inst = {
            **{key: m.create_histogram(name, unit="s", description=doc) for key, name, doc in HISTOGRAMS},
            "usage": m.create_histogram("gen_ai.client.token.usage", unit="{token}", description="Output tokens"),
            "requests": m.create_counter("loadgen.requests", description="Finished requests"),
            "sent": m.create_counter("loadgen.requests.sent", description="Finished requests that were sent"),
            "errors": m.create_counter("loadgen.core.errors", description="Failed requests by error kind"),
            "tokens": m.create_counter("loadgen.output_tokens", unit="{token}", description="Output tokens"),
            "unsent": m.create_counter("loadgen.requests.unsent", description="Scheduled requests never sent"),
        }
        m.create_observable_gauge(
            "loadgen.inflight_requests",
            [gauge(lambda: len(self.runner.inflight_records) if self.runner is not None else None)],
        )
        m.create_observable_gauge("loadgen.schedule_lag.p99", [gauge(lambda: self._lag_p99_s)], unit="s")
        m.create_observable_gauge("loadgen.client.cpu_ratio", [gauge(lambda: self._cpu_ratio)])
        self._ticker.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._ticker.stop()
        if self._provider is not None:
            self.refresh()  # the last records: final counts
            self._provider.shutdown()  # pushes once more, then stops
        if self._log is not None:
            self._log.remove()

    def refresh(self) -> None:
        """Record the records written since the last refresh."""
        lines = self._tail.read()
        self._client_gauges(lines, time.process_time(), time.perf_counter())
        i = self._inst
        for k, d in enumerate(lines):
            if k % 32 == 31:
                time.sleep(0)  # hand the interpreter to the event loop's thread now and then
            ph = "warmup" if d.get("phase") == "warmup" else "measure"
            ok = d.get("status") == "ok"
            i["requests"].add(1, {"loadgen.phase": ph, "loadgen.status": "ok" if ok else "error"})
            if d.get("sent_s") is not None:
                i["sent"].add(1, {"loadgen.phase": ph})
            if not ok:
                i["errors"].add(1, {"loadgen.phase": ph, "error.type": str(d.get("error_kind") or "error")})
            n = int(d.get("output_tokens") or 0)
            if n:
                i["tokens"].add(n, {"loadgen.phase": ph})
            if ok and ph == "measure":
                attrs = {"loadgen.phase": ph}
                for key, vs in histogram_values_s(d).items():
                    for v in vs:
                        i[key].record(v, attrs)
                i["usage"].record(n, {"loadgen.phase": ph, "gen_ai.token.type": "output"})
        r = self.runner
        unsent = int(getattr(r, "unsent", 0) or 0) + int(getattr(r, "unsent_warmup", 0) or 0)
        if unsent > self._unsent_seen:
            i["unsent"].add(unsent - self._unsent_seen)
            self._unsent_seen = unsent


class _ScrubbedLog(logging.Handler):
    """The ``opentelemetry`` loggers' lines on stderr, each through ``redact`` (installed for one push's life)."""

    def __init__(self, redact: Callable[[str], str]) -> None:
        super().__init__(logging.WARNING)  # the level of logging.lastResort, which wrote them before
        self.redact = redact
        self._propagate = True

    def install(self) -> None:
        log = logging.getLogger("opentelemetry")
        log.addHandler(self)
        self._propagate, log.propagate = log.propagate, False

    def remove(self) -> None:
        log = logging.getLogger("opentelemetry")
        log.removeHandler(self)
        log.propagate = self._propagate

    def emit(self, record: logging.LogRecord) -> None:
        try:
            sys.stderr.write(self.redact(self.format(record)) + "\n")
        except Exception:
            self.handleError(record)
