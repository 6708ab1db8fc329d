"""Streaming aggregation of request records into a run result.

:class:`Aggregator` takes each finished request once (``add(record, metrics)``),
keeps exact per-request samples (for exact percentiles) and HDR histograms of
every metric (for merging and per-token percentiles), and produces the
``result.json`` body with :meth:`Aggregator.result`.

Memory: the exact samples live in :class:`~loadgen.core.samples.SampleLog` s (float64; the
newest 4 Ki values of each in memory, older ones in one unnamed temporary file per
aggregator, ``spill_dir``), so a run's memory does not grow with its length; the disk
cost is 8 bytes a value, about 64 bytes a request. No per-request object is kept.

Percentile method: per-request metrics (TTFT, time to first answer token,
TPOT, E2E, schedule lag, error E2E) are exact over the run's samples with linear
interpolation (numpy's default); per-token metrics (ITL, inter-chunk latency)
come from HDR histograms (3 significant digits, ±0.1 %), their means exact.

The rules applied here live elsewhere: SLO values and verdicts in :mod:`loadgen.core.slo`,
the client-timing validity checks in :mod:`loadgen.engine.validity`.
"""

from __future__ import annotations

import math
from array import array
from pathlib import Path
from typing import Any

import numpy as np

from loadgen.core.histograms import LatencyHistogram, record_token_gaps, token_histograms
from loadgen.core.metrics import RequestMetrics
from loadgen.core.samples import SampleLog, SpillFile
from loadgen.core.slo import MISS, POOLED_HISTOGRAM, SLOTarget, exceeds, judged_per_request, run_target_verdict
from loadgen.core.timing_error import run_flip
from loadgen.core.types import RequestRecord
from loadgen.core.window import END_CONFORMING, END_FAILED, END_OK, Window, WindowLog, open_loop_window, rate
from loadgen.engine.keepup import KeepUpLog
from loadgen.engine.summary import NETWORK_METRICS, RequestSummary, summarize

PERCENTILES = (("p50", 50.0), ("p90", 90.0), ("p95", 95.0), ("p99", 99.0), ("p999", 99.9))
PER_REQUEST_METRICS = ("ttft", "time_to_first_answer_token", "tpot", "e2e", "schedule_lag", "error_e2e")
PER_TOKEN_METRICS = ("itl", "inter_chunk")
LATENCY_METRICS = (
    "ttft",
    "time_to_first_answer_token",
    "itl",
    "inter_chunk",
    "tpot",
    "e2e",
    "schedule_lag",
    "error_e2e",
)
RATELIMIT_SERIES_POINTS = 1000
RATELIMIT_POINTS_KEPT = 200_000


def summarize_exact(values: list[float] | array | SampleLog, scale: float = 1e-6) -> dict[str, Any]:
    """count/mean/percentiles/max of exact samples (ns in, ms out by default)."""
    n = len(values)
    out: dict[str, Any] = {"count": n}
    if n == 0:
        out.update({"mean": None, **{k: None for k, _ in PERCENTILES}, "max": None})
        return out
    a = np.asarray(values, dtype=np.float64)
    ps = np.percentile(a, [p for _, p in PERCENTILES])
    out["mean"] = float(a.mean()) * scale
    for (k, _), v in zip(PERCENTILES, ps):
        out[k] = float(v) * scale
    out["max"] = float(a.max()) * scale
    low = [k for k, p in PERCENTILES if n < math.ceil(100 / (100 - p))]
    if low:
        out["low_sample_percentiles"] = low
    return out


def summarize_hdr(h: LatencyHistogram) -> dict[str, Any]:
    out: dict[str, Any] = {"count": h.count, "mean": h.mean_ms()}
    for k, p in PERCENTILES:
        out[k] = h.percentile_ms(p)
    out["max"] = h.max_ms()
    if h.overflow_count:
        out["overflow_count"] = h.overflow_count
    if h.count:
        low = [k for k, p in PERCENTILES if h.count < math.ceil(100 / (100 - p))]
        if low:
            out["low_sample_percentiles"] = low
    out["method"] = "hdr"
    return out


class Aggregator:
    """Streaming aggregation of one run's measured requests.

    ``add(record, metrics)`` once per finished request (warm-up records are
    counted apart and excluded from statistics). ``unsent`` is set by the runner.
    Exact samples spill to an unnamed temporary file in ``spill_dir`` (default: the
    system's temporary directory) past 4 Ki values each; see the module docstring.
    """

    def __init__(self, slos: list[SLOTarget] | None = None, spill_dir: str | Path | None = None) -> None:
        self.slos = list(slos or [])
        self.spill = SpillFile(spill_dir)
        log = lambda: SampleLog(self.spill)
        self.samples: dict[str, SampleLog] = {m: log() for m in PER_REQUEST_METRICS}
        self.hist: dict[str, LatencyHistogram] = {m: LatencyHistogram(m) for m in LATENCY_METRICS}
        if any(t.metric == "tbt_deadline" for t in self.slos):  # each token's pace since the first
            self.hist["tbt_pace"] = LatencyHistogram("tbt_pace")
        self.late_tokens = {t.label: [0, 0] for t in self.slos if t.metric == "tbt_deadline"}  # late, judged
        self.requests = 0
        self.completed = 0
        self.failed = 0
        self.zero_output = 0
        self.unsent = 0
        self.lost_with_client = 0  # a lost worker's requests due within its lease (loadgen.spread.lease)
        self.warmup_requests = 0
        self.errors_by_kind: dict[str, int] = {}
        self.retry_after_s = log()
        self.input_tokens = 0
        self.output_tokens = 0
        self.output_tokens_estimated = 0
        self.itl_estimated = 0
        self.reasoning_tokens = 0
        self.length_mismatch = 0
        self.length_checked = 0
        self.pool_queued = 0
        self.conforming = 0
        self.first_scheduled_ns: int | None = None
        self.last_scheduled_ns: int | None = None
        self.last_end_ns: int | None = None
        self.open_loop = True  # closed loop (users) takes another window: set by measurement.build_result
        self.win = WindowLog(log)  # what the measurement window and its counts need (loadgen.core.window)
        self.keepup = KeepUpLog(log)  # did the server keep up? (loadgen.engine.keepup)
        self.first_sent_ns: int | None = None
        self.last_sent_ns: int | None = None
        self.sent = 0
        self.abandoned = 0  # --abandon: measured requests whose user walked away (sent; not in requests)
        self.generator_lag = log()
        # the generator's own send instants (scheduled + generator lag): validity's send-rate check
        self.generator_sends = 0
        self.first_generator_send_ns: int | None = None
        self.last_generator_send_ns: int | None = None
        # per-target exceedance counting for SLO verdicts
        self.slo_values: dict[str, SampleLog] = {t.label: log() for t in self.slos}
        # each measured request's send lag, aligned with every slo_values log: the flip test (slo_flip)
        self.slo_lags: dict[str, SampleLog] = {t.label: log() for t in self.slos}
        # per-token targets of one model of a mix (itl:p99<=50ms@a): that model's own token histograms
        self.model_hist = {
            t.model: token_histograms(pace=any(u.metric == "tbt_deadline" for u in self.slos))
            for t in self.slos
            if t.model is not None and not judged_per_request(t)
        }
        # provider quotas, the client's own cap, the network (see provider_result)
        self.buffered = 0
        self.throttled = 0
        self.throttle_ns = log()
        self.retried = 0
        self.rate_limited_attempts = 0
        self.ratelimit_points: list[tuple[int, dict[str, float]]] = []
        self.cached_input_tokens = 0
        self.cached_reported = 0  # completed requests whose usage reported cached prompt tokens (0 included)
        self.cached_reported_input = 0  # their prompt tokens
        self.connections_new = 0
        self.connections_reused = 0
        self.network_samples: dict[str, SampleLog] = {m: log() for m in NETWORK_METRICS}

    def close(self) -> None:
        """Release the spill file (its descriptor); spilled samples can no longer be read."""
        self.spill.close()

    # ------------------------------------------------------------------ adding

    def add(self, rec: RequestRecord, m: RequestMetrics) -> None:
        """Count one finished request (raw record + its metrics)."""
        s = summarize(rec, m, self.slos)
        self.add_summary(s)
        if s.phase == "measure" and s.ok and not s.zero_output:
            record_token_gaps(self.hist, m)
            if rec.model in self.model_hist:  # a mix's per-token target of this model
                record_token_gaps(self.model_hist[rec.model], m)

    def merge_token_histograms(self, states: dict[str, dict]) -> None:
        """Merge per-token HDR histograms shipped by a worker process (exact bucket merge)."""
        for name, state in states.items():
            self.hist[name].merge(LatencyHistogram.from_state(state))

    def add_summary(self, s: RequestSummary) -> None:
        """Count one request from its summary (what a worker process ships to the parent).

        Per-request metrics stay exact; per-token metrics arrive separately as HDR
        histograms (:meth:`merge_token_histograms`)."""
        self.win.add_tokens(s.token_bins)
        if s.phase != "measure":
            self.warmup_requests += 1
            self.win.add_warmup_end(s.end_ns)
            return
        if self.first_scheduled_ns is None or s.scheduled_ns < self.first_scheduled_ns:
            self.first_scheduled_ns = s.scheduled_ns
        if self.last_scheduled_ns is None or s.scheduled_ns > self.last_scheduled_ns:
            self.last_scheduled_ns = s.scheduled_ns
        if s.error_kind == "abandoned":  # its user walked away (--abandon): its send counts (offered), nothing else
            self.abandoned += 1
            self._add_send(s)
            return
        self.requests += 1
        self.keepup.add(s)
        self._add_provider_facts(s)
        self._log_end(s)
        if s.end_ns is not None and (self.last_end_ns is None or s.end_ns > self.last_end_ns):
            self.last_end_ns = s.end_ns
        self._add_send(s)
        if s.pool_queued:
            self.pool_queued += 1
        if not s.ok:
            self.failed += 1
            kind = s.error_kind or "unknown"
            self.errors_by_kind[kind] = self.errors_by_kind.get(kind, 0) + 1
            if s.retry_after_s is not None:
                self.retry_after_s.append(s.retry_after_s)
            if s.error_e2e_ns is not None:
                self._sample("error_e2e", s.error_e2e_ns)
            self._slo_miss(s)
            return
        self.completed += 1
        self.output_tokens += s.output_tokens
        self.output_tokens_estimated += int(s.output_tokens_estimated)
        if s.reasoning_tokens:
            self.reasoning_tokens += s.reasoning_tokens
        if s.input_tokens:
            self.input_tokens += s.input_tokens
        if s.cached_input_tokens:
            self.cached_input_tokens += s.cached_input_tokens
        if s.cached_input_tokens is not None and s.input_tokens:
            self.cached_reported += 1
            self.cached_reported_input += s.input_tokens
        if s.requested_output_tokens is not None and not s.output_tokens_estimated:
            self.length_checked += 1
            if s.output_tokens != s.requested_output_tokens:
                self.length_mismatch += 1
        if s.zero_output:
            self.zero_output += 1
            self._slo_miss(s)
            return
        if s.itl_estimated:
            self.itl_estimated += 1
        for name, v in (
            ("ttft", s.ttft_ns),
            ("time_to_first_answer_token", s.ttfat_ns),
            ("tpot", s.tpot_ns),
            ("e2e", s.e2e_ns),
        ):
            if v is not None:
                self._sample(name, v)
        if self.slos:
            ok = True
            for t, v in zip(self.slos, s.slo_values):
                if not t.applies(s.model):  # a target of another model of the mix
                    continue
                self.slo_values[t.label].append(v)
                self.slo_lags[t.label].append(s.schedule_lag_ns or 0)  # aligned with the values: the flip test
                if exceeds(t, v):
                    ok = False
            for label, (late, judged) in zip(self.late_tokens, s.late_tokens):
                self.late_tokens[label][0] += late
                self.late_tokens[label][1] += judged
            if ok:
                self.conforming += 1
        else:
            self.conforming += 1

    def _add_send(self, s: RequestSummary) -> None:
        """A measured request's send: the sends and the generator's lag (abandoned requests too: sent on time)."""
        if s.sent_ns is not None:
            self.sent += 1
            if self.first_sent_ns is None or s.sent_ns < self.first_sent_ns:
                self.first_sent_ns = s.sent_ns
            if self.last_sent_ns is None or s.sent_ns > self.last_sent_ns:
                self.last_sent_ns = s.sent_ns
        if s.schedule_lag_ns is not None:
            self._sample("schedule_lag", s.schedule_lag_ns)
            # a slow handshake is not a slow generator, but only its part after the scheduled
            # time delayed the send (a prepared request connects before it)
            g = s.scheduled_ns + max(s.schedule_lag_ns - s.connect_late_ns - s.throttle_ns, 0)
            self.generator_lag.append(g - s.scheduled_ns)
            self._generator_send(g)
        elif s.error_kind == "connect":
            # refused, reset, a connect timeout: a send the server failed, never the client's shortfall (issue 34:
            # a dead replica's refused connects read "limited by client"); its own lag is unknown, counted on time
            self._generator_send(s.scheduled_ns)

    def _generator_send(self, g: int) -> None:
        self.generator_sends += 1
        if self.first_generator_send_ns is None or g < self.first_generator_send_ns:
            self.first_generator_send_ns = g
        if self.last_generator_send_ns is None or g > self.last_generator_send_ns:
            self.last_generator_send_ns = g

    def _log_end(self, s: RequestSummary) -> None:
        """Keep what the window needs of a measured request: its end, kind and tokens."""
        if s.end_ns is None:
            return
        if not s.ok:
            kind = END_FAILED
        elif s.zero_output or any(exceeds(t, v) for t, v in zip(self.slos, s.slo_values)):
            kind = END_OK
        else:
            kind = END_CONFORMING
        self.win.add_end(s.end_ns, kind, s.output_tokens if s.ok else 0, (s.input_tokens or 0) if s.ok else 0)

    def _add_provider_facts(self, s: RequestSummary) -> None:
        if s.buffered:
            self.buffered += 1
        if s.throttle_ns:
            self.throttled += 1
            self.throttle_ns.append(s.throttle_ns)
        if s.attempts_429:
            self.retried += 1
            self.rate_limited_attempts += s.attempts_429
        if s.error_kind == "rate_limited":
            self.rate_limited_attempts += 1
        for t, rl in s.ratelimit_points:
            if len(self.ratelimit_points) < RATELIMIT_POINTS_KEPT:
                self.ratelimit_points.append((t, rl))
        if s.connection_reused is True:
            self.connections_reused += 1
        elif s.connection_reused is False:
            self.connections_new += 1
        for name, v in zip(NETWORK_METRICS, s.network_ns):
            if v is not None:
                self.network_samples[name].append(v)

    def _sample(self, name: str, v: float) -> None:
        self.samples[name].append(v)
        self.hist[name].record_ns(v)

    def _slo_miss(self, s: RequestSummary) -> None:
        for t in self.slos:
            if t.applies(s.model):
                self.slo_values[t.label].append(MISS)
                self.slo_lags[t.label].append(s.schedule_lag_ns or 0)

    # ------------------------------------------------------------------ results

    @property
    def duration_s(self) -> float:
        """First measured scheduled send to last measured completion (drain included), in seconds.

        The run's whole span, not the denominator of any headline rate (see :meth:`window`)."""
        if self.first_scheduled_ns is None or self.last_end_ns is None:
            return 0.0
        return max(self.last_end_ns - self.first_scheduled_ns, 0) / 1e9

    def latency_ms(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name in LATENCY_METRICS:
            if name in PER_TOKEN_METRICS:
                out[name] = summarize_hdr(self.hist[name])
            else:
                out[name] = summarize_exact(self.samples[name])
        return out

    def window(self) -> Window | None:
        """The measurement window (:mod:`loadgen.core.window`); None without a measured request."""
        if self.first_scheduled_ns is None or self.last_scheduled_ns is None:
            return None
        e2e = self.samples["e2e"]
        return self.win.window(
            self.open_loop,
            self.first_scheduled_ns,
            self.last_scheduled_ns,
            self.requests + self.abandoned,  # the sends scheduled (offered), walked away from or not
            median_e2e_ns=float(np.median(e2e.values())) if len(e2e) else None,
            last_end_ns=self.last_end_ns,
        )

    def kept_up(self) -> dict[str, Any] | None:
        """``result.json`` ``server_kept_up`` (:mod:`loadgen.engine.keepup`), judged over the open-loop window
        of scheduled sends (its end: the last measured send plus one mean gap) even where the rates fell back
        to another window because the median E2E outlasted the schedule (a server that fell behind); None
        for closed loop and for sends at one instant (``--rate inf``)."""
        first, last, n = self.first_scheduled_ns, self.last_scheduled_ns, self.requests + self.abandoned
        if not self.open_loop or first is None or last is None or n < 2 or last <= first:
            return None
        return self.keepup.judge(open_loop_window(first, last, n, median_e2e_ns=None, last_end_ns=None).end_ns)

    def throughput(self, w: Window | None = None) -> dict[str, Any]:
        """``result.json`` ``throughput``: rates over the measurement window ``w`` (default :meth:`window`).

        Definitions and sources in :mod:`loadgen.core.window` (``request_rps`` = ``completion_rps``,
        its older name); ``achieved_send_rps`` = (sent - 1) / (last send - first send), the
        convention of ``offered_rps``. Only ``*_incl_drain`` divide the measured totals by
        ``duration_s`` (to the last completion): they move with the tail, never the headline.
        """
        if w is None:
            w = self.window()
        achieved = None
        if self.sent >= 2 and self.last_sent_ns and self.first_sent_ns and self.last_sent_ns > self.first_sent_ns:
            achieved = (self.sent - 1) / ((self.last_sent_ns - self.first_sent_ns) / 1e9)
        c = self.win.counts(w) if w is not None else {}
        out_tps = rate(c.get("output_tokens"), w)
        in_tps = rate(c.get("input_tokens"), w)
        d = self.duration_s
        drain = (lambda x: x / d) if d > 0 else (lambda x: None)
        completion = rate(c.get("completions"), w)
        return {
            "offered_rps": w.offered_rps if w is not None else None,
            "achieved_send_rps": achieved,
            "completion_rps": completion,
            "request_rps": completion,
            "goodput_rps": rate(c.get("conforming"), w) if self.slos else None,
            "output_tps": out_tps,
            "demanded_output_tps": rate(c.get("demanded_output_tokens"), w),
            "input_tps": in_tps,
            "total_tps": (in_tps + out_tps) if (in_tps is not None and out_tps is not None) else None,
            "request_rps_incl_drain": drain(self.completed),
            "output_tps_incl_drain": drain(self.output_tokens),
            "goodput_rps_incl_drain": drain(self.conforming) if self.slos else None,
        }

    def slo_result(self) -> dict[str, Any] | None:
        if not self.slos:
            return None
        total = self.requests
        targets = []
        all_met = True
        for t in self.slos:
            vals = np.sort(self.slo_values[t.label].values())
            entry = run_target_verdict(t, vals, self._pooled_ms(t))
            if t.label in self.late_tokens:
                late, judged = self.late_tokens[t.label]
                entry["late_tokens"] = late
                entry["judged_tokens"] = judged
                entry["late_token_share"] = late / judged if judged else None
            all_met &= entry["met"]
            targets.append(entry)
        return {
            "met": all_met,
            "targets": targets,
            "conforming_requests": self.conforming,
            "denominator": total,
            "attainment": (self.conforming / total) if total else None,
            "goodput_rps": self.throughput()["goodput_rps"],
            "note": "failed and zero-output requests count as non-conforming; thresholds inclusive; "
            "goodput_rps over the measurement window (result.json window)",
        }

    def slo_flip(self, e_ms: float | None, from_schedule: bool) -> dict[str, Any]:
        """The flip test of this run's SLO targets (:func:`loadgen.core.timing_error.run_flip`):
        ``validity.verdict_stands``.

        ``e_ms``: the bound on one stamp's lateness (:func:`loadgen.engine.validity.timing_error_bound_ms`);
        ``from_schedule``: latency counts from the scheduled time (``latency_origin: scheduled``), so each
        request's send lag is part of its TTFT/E2E and is taken out when its value is moved down (from the
        send, it is not in the value and nothing is taken out). The values are the ones :meth:`slo_result`
        judges, in the order the requests were counted, with their send lags (``slo_lags``)."""
        targets = []
        for t in self.slos:
            vals = np.asarray(self.slo_values[t.label].values(), dtype=np.float64)
            lags = np.asarray(self.slo_lags[t.label].values(), dtype=np.float64)
            if not from_schedule:
                lags = np.zeros_like(lags)
            targets.append((t, vals, lags, self._pooled_ms(t)))
        return run_flip(targets, e_ms)

    def _pooled_ms(self, t: SLOTarget) -> float | None:
        """A per-token target's pooled percentile (ITL: the gaps; token deadline: the paces); None for others."""
        name = POOLED_HISTOGRAM.get(t.metric)
        hist = self.model_hist[t.model] if t.model is not None and t.model in self.model_hist else self.hist
        return hist[name].percentile_ms(t.percentile) if name in hist else None

    def provider_result(self, t0_ns: int | None = None) -> dict[str, Any]:
        """Quota, client-cap and network facts of the run (empty parts left out).

        ``rate_limit``: 429 counts, the Retry-After values seen, requests retried
        (``--retry-429``) and a time series of the quota headers (``t_s`` from ``t0_ns``,
        default the first scheduled request; at most :data:`RATELIMIT_SERIES_POINTS`
        points, evenly thinned, the lowest ``remaining_*`` always kept).
        ``client_rate_cap``: requests that waited for ``--max-rpm``/``--max-tpm`` and
        how long. ``network_ms``: per-request DNS, TCP connect, TLS (new connections
        only), time to response headers (from the send) and TTFT from the send, and
        how many requests opened a connection.
        """
        out: dict[str, Any] = {}
        origin = t0_ns if t0_ns is not None else (self.first_scheduled_ns or 0)
        rl_count = self.errors_by_kind.get("rate_limited", 0)
        if rl_count or self.rate_limited_attempts or self.ratelimit_points or self.retried:
            ra = self.retry_after_s.values()
            out["rate_limit"] = {
                "rate_limited_requests": rl_count,
                "rate_limited_attempts": self.rate_limited_attempts,
                "retried_requests": self.retried,
                "rate_limited_fraction": (rl_count / self.requests) if self.requests else None,
                "retry_after_s": {
                    "count": int(ra.size),
                    "min": float(ra.min()) if ra.size else None,
                    "median": float(np.median(ra)) if ra.size else None,
                    "max": float(ra.max()) if ra.size else None,
                },
                "series": ratelimit_series(self.ratelimit_points, origin),
            }
        if self.throttled:
            out["client_rate_cap"] = {
                "throttled_requests": self.throttled,
                "wait_ms": summarize_exact(self.throttle_ns),
            }
        if any(len(v) for v in self.network_samples.values()) or self.connections_new or self.connections_reused:
            out["network_ms"] = {
                "new_connections": self.connections_new,
                "reused_connections": self.connections_reused,
                **{name: summarize_exact(v) for name, v in self.network_samples.items()},
            }
        return out

    def counts(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "completed": self.completed,
            "failed": self.failed,
            "zero_output": self.zero_output,
            "unsent": self.unsent,
            **({"lost_with_client": self.lost_with_client} if self.lost_with_client else {}),
            "warmup": self.warmup_requests,
            "errors_by_kind": {k: self.errors_by_kind[k] for k in sorted(self.errors_by_kind)},
            **({"buffered": self.buffered} if self.buffered else {}),
            **({"abandoned": self.abandoned} if self.abandoned else {}),
        }

    def tokens(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "input": self.input_tokens,
            "output": self.output_tokens,
            "output_estimated_requests": self.output_tokens_estimated,
            "itl_estimated_requests": self.itl_estimated,
        }
        if self.cached_input_tokens:
            out["cached_input"] = self.cached_input_tokens
        # the prefix-cache hit share the server reported: Σ cached / Σ prompt tokens of the completed requests
        # whose usage said (usage.prompt_tokens_details.cached_tokens, 0 included); None: none said
        out["cached_input_reported_requests"] = self.cached_reported
        out["cached_input_rate"] = (
            round(self.cached_input_tokens / self.cached_reported_input, 4) if self.cached_reported_input else None
        )
        if self.reasoning_tokens:
            out["reasoning"] = self.reasoning_tokens
            out["note"] = "output includes hidden reasoning tokens reported in usage.completion_tokens_details"
        return out


def ratelimit_series(points: list[tuple[int, dict[str, float]]], origin_ns: int) -> dict[str, Any]:
    """Columns of the quota headers over time: ``t_s`` (from ``origin_ns``) and one list per key.

    Sorted by time; thinned evenly to at most :data:`RATELIMIT_SERIES_POINTS` points,
    always keeping the point of each key's lowest ``remaining_*`` value. A key absent
    from a point is None there.
    """
    pts = sorted(points, key=lambda p: p[0])
    n = len(pts)
    keep = set(range(n))
    if n > RATELIMIT_SERIES_POINTS:
        step = n / RATELIMIT_SERIES_POINTS
        keep = {int(i * step) for i in range(RATELIMIT_SERIES_POINTS)}
        for key in {k for _, d in pts for k in d if k.startswith("remaining_")}:
            vals = [(d.get(key, math.inf), i) for i, (_, d) in enumerate(pts)]
            keep.add(min(vals)[1])
    chosen = [pts[i] for i in sorted(keep)]
    keys = sorted({k for _, d in chosen for k in d})
    out: dict[str, Any] = {"points": len(chosen), "of": n, "t_s": [round((t - origin_ns) / 1e9, 6) for t, _ in chosen]}
    for k in keys:
        out[k] = [d.get(k) for _, d in chosen]
    return out
