"""Live export of a run's metrics while it runs (``--metrics-port``): the one room here that serves.

:mod:`loadgen.telemetry.prom`: the Prometheus endpoint (counters, gauges, histograms that merge
exactly across generators); :mod:`loadgen.telemetry.tail`: the reader of ``requests.jsonl``
as it is written, shared with the live terminal view. Importing the package imports no
network library; ``prometheus_client`` (the ``telemetry`` extra) is loaded when an exporter
starts.
"""

from __future__ import annotations

__all__: list[str] = []
