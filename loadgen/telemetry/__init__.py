"""Live export of a run's metrics while it runs (``--metrics-port``): the one room here that serves.

:mod:`loadgen.telemetry.prom`: the Prometheus endpoint (counters, gauges, histograms that merge
exactly across generators); :mod:`loadgen.telemetry.tail`: the reader of ``requests.jsonl``
as it is written, shared with the live terminal view; :mod:`loadgen.telemetry.otlp`: the OTLP
push. The Prometheus page is rendered and served by loadgen itself (the standard library's
``http.server``); the OpenTelemetry SDK (the ``otlp`` extra) is loaded when a push starts.
"""

from __future__ import annotations

__all__: list[str] = []
