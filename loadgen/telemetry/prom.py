"""Live Prometheus metrics of a run (``--metrics-port``): counters, gauges, mergeable histograms.

Fed the way the live view is (:mod:`loadgen.cli.live`): a daemon thread tails the run's
``requests.jsonl`` every :data:`REFRESH_S` (the driver writes every worker's and actor's
lines there, so the exporter of the driver sees the whole run) and reads, without writing,
``len(inflight_records)`` and ``unsent`` of the runner object when there is one. Nothing
runs on the send path. On close the last exposition is written to ``metrics.prom`` beside
``requests.jsonl`` (after the last record: its counters are the run's final counts).

**A page that cannot starve the client** (issue 33): the exposition is rendered by that thread at
most once per :data:`RENDER_S`, by hand (~1 ms for 3,500 lines), and written to a private file; the
endpoint (``host:port``, 127.0.0.1 by default, bound here) is served by a child process,
:mod:`loadgen.telemetry.pageserver`, which answers every scrape with that file's bytes. A flood of
scrapes costs that process, never the client's CPU or interpreter lock (``scripts/bench_metrics_flood``).
Bound to an address other than loopback it requires a token: ``Authorization: Bearer <token>``
(``--metrics-token-env NAME``), as the web UI does.

Metrics (``phase``: ``measure`` or ``warmup``, as in ``requests.jsonl``):

* counters: ``loadgen_requests_total{phase,status}`` (finished requests, ``status`` ok or
  error), ``loadgen_requests_sent_total{phase}`` (finished requests that were sent),
  ``loadgen_errors_total{phase,kind}`` (by ``error_kind``), ``loadgen_output_tokens_total{phase}``
  (as counted in ``requests.jsonl`` ``output_tokens``), ``loadgen_requests_unsent_total``
  (the runner's count of scheduled requests never sent; 0 under ``--workers``);
* gauges: ``loadgen_inflight_requests``, ``loadgen_schedule_lag_p99_seconds`` and
  ``loadgen_client_cpu_ratio`` (this process: CPU time / wall time), both over the last
  refresh period;
* histograms of the measured requests only (``{phase="measure"}``, as ``result.json``'s latencies):
  loadgen's own ``loadgen_ttft_seconds`` (TTFT from the *scheduled* send), ``loadgen_itl_seconds``
  (every per-token gap of ``itl_ms``), ``loadgen_e2e_seconds`` (successful requests, from the
  scheduled send); and the OpenTelemetry GenAI *client* metrics (:data:`GENAI_SEMCONV`) under their
  Prometheus names: ``gen_ai_client_operation_time_to_first_chunk_seconds`` (from the client's send,
  as the convention defines it: ``ttft_ms`` less the send's lateness), ``..._time_per_output_chunk_seconds``
  (``inter_chunk_ms``: chunk to chunk), ``gen_ai_client_operation_duration_seconds`` (E2E from the send).

**Buckets**: the boundaries of a Prometheus native histogram of schema :data:`SCHEMA` (7: 128 per
doubling, a factor 2**(1/128) = 1.0054 apart) written as classic buckets, upper bounds
``2**(i/128)`` s for i in [:data:`MIN_EXP`, :data:`MAX_EXP`] (122 µs to 128 s) and +Inf. A
percentile read back with ``histogram_quantile`` (linear within a bucket) is within 0.54 % of the
value: the 1 % the table promises (the earlier 8 per doubling gave ±4.5 %). Only the buckets around
the values seen are written: a bucket holding values, and the one below each run of such buckets
(its ``le`` is the lower edge ``histogram_quantile`` interpolates from); omitted buckets hold
nothing, so the page stays a few hundred lines (about 1 line per 0.54 % of the values' range, per
label set) and ``histogram_quantile`` reads it exactly as the whole set. A bound is written from the
first refresh that holds a value at or just above it, and from then on (counts only grow): in a
``rate()`` window that began before it was first written it counts from its first scrape. Fixed bounds shared by every
exporter: histograms from several generators merge *exactly* by adding bucket counts, an omitted
bucket's cumulative count being that of the written one below it. One run's exporter already holds
all of its ``--workers`` and Ray actors. PromQL's ``sum by (le)`` over the pages of several separate
runs adds only the ``le`` series each page wrote, so it undercounts where their values' ranges differ:
merge those by the rule above (or read each page alone). Cost per label set: one line per bucket
written, ~70 bytes; 2,000 lognormal values (sigma 0.8, a 60x range) wrote ~710 of the 2,562 (the test).
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from loadgen.telemetry.tail import LiveReader, Ticker

__all__ = ["BUCKET_BOUNDS_S", "GENAI_SEMCONV", "MAX_EXP", "MIN_EXP", "REFRESH_S", "SCHEMA", "PromExporter",
           "histogram_values_s"]  # fmt: skip

REFRESH_S = 0.5
"""How often the exporter reads new records (s)."""
RENDER_S = 1.0
"""The exposition is rendered at most this often (s); scrapes between two renders get the kept page."""
SCHEMA = 7
"""Native-histogram schema of the bucket boundaries: 2**SCHEMA buckets per doubling."""
MIN_EXP = -104 * 16  # 2**(-1664/128) s = 122 µs
MAX_EXP = 56 * 16  # 2**(896/128) s = 128 s
BUCKET_BOUNDS_S: np.ndarray = np.exp2(np.arange(MIN_EXP, MAX_EXP + 1) / 2.0**SCHEMA)
"""Upper bounds of the histogram buckets (s), schema-7 native-histogram boundaries; then +Inf."""
_LE = [repr(float(b)) for b in BUCKET_BOUNDS_S]
GENAI_SEMCONV = (
    "OpenTelemetry semantic conventions v1.41.0, docs/gen-ai/gen-ai-metrics.md (status: Development; "
    "the GenAI conventions have since moved to the semantic-conventions-genai repository)"
)
"""The document whose GenAI client metric names the exporters use (pinned: the names are at Development status)."""

HISTOGRAMS = (
    ("loadgen_ttft_seconds", "ttft", "Time to first token (s), from the scheduled send"),
    ("loadgen_itl_seconds", "itl", "Inter-token latency, per token gap (s)"),
    ("loadgen_e2e_seconds", "e2e", "End-to-end latency of successful requests (s), from the scheduled send"),
    ("gen_ai_client_operation_time_to_first_chunk_seconds", "ttfc",
     "gen_ai.client.operation.time_to_first_chunk: from the client's send to the first chunk (s)"),
    ("gen_ai_client_operation_time_per_output_chunk_seconds", "tpoc",
     "gen_ai.client.operation.time_per_output_chunk: from one chunk to the next (s)"),
    ("gen_ai_client_operation_duration_seconds", "duration",
     "gen_ai.client.operation.duration: from the client's send to the end (s), successful requests"),
)  # fmt: skip
HIST_PHASES = ("measure",)
"""Histograms are of the measured requests only, as ``result.json``'s latencies."""


def histogram_values_s(d: dict[str, Any]) -> dict[str, list[float]]:
    """One successful record's values (s) for each histogram key of :data:`HISTOGRAMS` (shared with OTLP).

    The GenAI client figures count from the client's send: ``ttft_ms`` and ``e2e_ms`` (from the scheduled
    send) less ``sent_s - scheduled_s`` (the send's lateness, connection set-up included: the convention's
    "when the client issues the request")."""
    out: dict[str, list[float]] = {}
    late_ms = 0.0
    if d.get("sent_s") is not None and d.get("scheduled_s") is not None:
        late_ms = max(0.0, (float(d["sent_s"]) - float(d["scheduled_s"])) * 1e3)
    if d.get("ttft_ms") is not None:
        out["ttft"] = [float(d["ttft_ms"]) / 1e3]
        out["ttfc"] = [(float(d["ttft_ms"]) - late_ms) / 1e3]
    if d.get("e2e_ms") is not None:
        out["e2e"] = [float(d["e2e_ms"]) / 1e3]
        out["duration"] = [(float(d["e2e_ms"]) - late_ms) / 1e3]
    out["itl"] = [float(v) / 1e3 for v in d.get("itl_ms") or ()]
    out["tpoc"] = [float(v) / 1e3 for v in d.get("inter_chunk_ms") or ()]
    return out


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

    def buckets(self) -> list[tuple[str, int]]:
        """Cumulative ``(le, count)`` of the buckets written (module docstring: held ones and the one below
        each run of them), then +Inf."""
        held = np.flatnonzero(self.counts[:-1])
        keep = np.union1d(held, held[held > 0] - 1)
        cum = np.cumsum(self.counts)
        out = [(_LE[i], int(cum[i])) for i in keep]
        out.append(("+Inf", int(cum[-1])))
        return out


class PromExporter(LiveReader):
    """The exporter of one run (a context manager). ``attach`` is a ``measure(runner_hook=...)``;
    ``token``: required of every scrape as ``Authorization: Bearer <token>`` when given."""

    def __init__(
        self, jsonl: Path, port: int, host: str = "127.0.0.1", refresh_s: float = REFRESH_S, token: str | None = None
    ) -> None:
        super().__init__(jsonl, refresh_s)
        self.host = host
        self.port = port
        self.token = token
        self._lock = threading.Lock()
        self._requests: Counter[tuple[str, str]] = Counter()
        self._sent: Counter[str] = Counter()
        self._errors: Counter[tuple[str, str]] = Counter()
        self._tokens: Counter[str] = Counter()
        self._hists = {(key, ph): _Hist() for _, key, _ in HISTOGRAMS for ph in HIST_PHASES}
        self._ticker = Ticker("loadgen-metrics", refresh_s, self._tick)
        self._server: subprocess.Popen[bytes] | None = None  # the page server (loadgen.telemetry.pageserver)
        self._dir: str | None = None
        self._page_path: str | None = None
        self._page = b""
        self._rendered_at = -math.inf

    def __enter__(self) -> PromExporter:
        import socket
        import subprocess
        import sys
        import tempfile

        family = socket.AF_INET6 if ":" in self.host.strip("[]") else socket.AF_INET
        listener = socket.socket(family, socket.SOCK_STREAM)
        try:
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind((self.host.strip("[]"), self.port))
            listener.listen(64)
            self.port = int(listener.getsockname()[1])
            self._dir = tempfile.mkdtemp(prefix="loadgen-metrics-")  # 0700: the page is the run's own
            self._page_path = os.path.join(self._dir, "page")
            self.render()
            self._server = subprocess.Popen(
                [sys.executable, "-m", "loadgen.telemetry.pageserver", str(listener.fileno()), self._page_path,
                 str(os.getpid())],
                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                pass_fds=(listener.fileno(),), close_fds=True,
            )  # fmt: skip
            assert self._server.stdin is not None
            self._server.stdin.write(((self.token or "") + "\n").encode())  # the token never in an argv
            self._server.stdin.close()
        finally:
            listener.close()  # the child holds it now
        self._ticker.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._ticker.stop()
        self.refresh()  # the last records: final counts
        self.render()
        try:
            (self.jsonl.parent / "metrics.prom").write_bytes(self._page)
        except OSError:
            pass
        if self._server is not None:
            self._server.kill()
            self._server.wait(timeout=5)
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/metrics"

    def page(self) -> bytes:
        """The kept exposition (rendered at most once per :data:`RENDER_S`)."""
        return self._page

    def render(self) -> None:
        """Render the exposition now and keep it."""
        self._page = self.exposition()
        self._rendered_at = time.monotonic()
        if self._page_path is not None:  # for the page server (loadgen.telemetry.pageserver): whole or not at all
            tmp = self._page_path + ".new"
            try:
                with open(tmp, "wb") as fh:
                    fh.write(self._page)
                os.replace(tmp, self._page_path)
            except OSError:
                pass

    def _tick(self) -> None:
        """The thread's tick: refresh the counts; render the page every :data:`RENDER_S`."""
        self.refresh()
        if time.monotonic() - self._rendered_at >= RENDER_S:
            self.render()

    def refresh(self) -> None:
        """Fold the records written since the last refresh into the metrics."""
        lines = self._tail.read()
        cpu, wall = time.process_time(), time.perf_counter()
        values: dict[tuple[str, str], list[float]] = {key: [] for key in self._hists}
        with self._lock:
            self._client_gauges(lines, cpu, wall)
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
                    for name, vs in histogram_values_s(d).items():
                        values[(name, ph)].extend(vs)
            for hk, hv in values.items():
                self._hists[hk].add(hv)  # one bucket count per histogram and refresh

    def exposition(self) -> bytes:
        """The Prometheus text exposition (format 0.0.4) of the metrics now, written by hand: ~100x faster than
        ``prometheus_client``'s generic path for a page of thousands of bucket lines (70 ms -> under 1 ms a render)."""
        out: list[str] = []

        def family(name: str, kind: str, doc: str) -> None:
            out.append(f"# HELP {name} {doc}\n# TYPE {name} {kind}\n")

        with self._lock:
            family("loadgen_requests_total", "counter", "Finished requests")
            out.extend(f'loadgen_requests_total{{phase="{ph}",status="{st}"}} {n}\n'
                       for (ph, st), n in sorted(self._requests.items()))  # fmt: skip
            family("loadgen_requests_sent_total", "counter", "Finished requests that were sent")
            out.extend(f'loadgen_requests_sent_total{{phase="{ph}"}} {n}\n' for ph, n in sorted(self._sent.items()))
            family("loadgen_errors_total", "counter", "Failed requests by error kind")
            out.extend(f'loadgen_errors_total{{kind="{_label(kind)}",phase="{ph}"}} {n}\n'
                       for (ph, kind), n in sorted(self._errors.items()))  # fmt: skip
            family("loadgen_output_tokens_total", "counter", "Output tokens of finished requests")
            out.extend(f'loadgen_output_tokens_total{{phase="{ph}"}} {n}\n' for ph, n in sorted(self._tokens.items()))
            r = self.runner
            family("loadgen_requests_unsent_total", "counter", "Scheduled requests never sent")
            out.append(
                f"loadgen_requests_unsent_total {int(getattr(r, 'unsent', 0) or 0) + int(getattr(r, 'unsent_warmup', 0) or 0)}\n"
            )
            gauges = (
                ("loadgen_inflight_requests", "Requests in flight now",
                 len(r.inflight_records) if r is not None else None),
                ("loadgen_schedule_lag_p99_seconds", "p99 schedule lag, last refresh period", self._lag_p99_s),
                ("loadgen_client_cpu_ratio", "Client process CPU time / wall time", self._cpu_ratio),
            )  # fmt: skip
            for name, doc, v in gauges:
                family(name, "gauge", doc)
                out.append(f"{name} {'NaN' if v is None else repr(float(v))}\n")
            for name, key, doc in HISTOGRAMS:
                family(name, "histogram", doc)
                for ph in HIST_PHASES:
                    hs = self._hists[(key, ph)]
                    pre = f'{name}_bucket{{phase="{ph}",le="'
                    out.extend(f'{pre}{le}"}} {c}\n' for le, c in hs.buckets())
                    total = int(hs.counts.sum())
                    out.append(f'{name}_count{{phase="{ph}"}} {total}\n{name}_sum{{phase="{ph}"}} {hs.sum_s!r}\n')
        return "".join(out).encode()


def _label(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
