"""One finished request as the aggregator needs it: :class:`RequestSummary`, built by :func:`summarize`.

The same summary for every path a record takes: in one process (:class:`loadgen.engine.results.Aggregator`
``.add`` and a sweep probe's judge) and shipped, pickled, by a worker process or a cluster actor
(:mod:`loadgen.spread.workers`). Its instants are on the sender's monotonic clock (the fields
:data:`loadgen.spread.workers.SUMMARY_INSTANTS` names), its durations clock-free.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from loadgen.core.clock import now_ns
from loadgen.core.metrics import RequestMetrics
from loadgen.core.slo import SLOTarget, cancelled_state, late_tokens, request_value
from loadgen.core.types import RequestRecord
from loadgen.core.window import token_bins

__all__ = ["NETWORK_METRICS", "RequestSummary", "last_sent_ns", "network_ns", "summarize"]

NETWORK_METRICS = ("dns", "tcp_connect", "tls", "time_to_headers", "ttft_from_sent")
"""Per-request network timings kept apart from the latency metrics (see :func:`network_ns`)."""


@dataclass(slots=True)
class RequestSummary:
    """What the aggregator needs of one request (picklable; shipped by worker processes)."""

    phase: str
    ok: bool
    error_kind: str | None
    retry_after_s: float | None
    scheduled_ns: int
    sent_ns: int | None
    end_ns: int | None
    connect_ns: int
    pool_queued: bool
    output_tokens: int
    output_tokens_estimated: bool
    itl_estimated: bool
    reasoning_tokens: int | None
    input_tokens: int | None
    requested_output_tokens: int | None
    zero_output: bool
    ttft_ns: int | None
    ttfat_ns: int | None
    tpot_ns: float | None
    e2e_ns: int | None
    error_e2e_ns: int | None
    schedule_lag_ns: int | None
    slo_values: tuple[float, ...]
    # provider quotas, client cap, network (defaults: nothing observed)
    buffered: bool = False
    throttle_ns: int = 0
    connect_late_ns: int = 0  # the part of connect_ns after the scheduled time
    attempts_429: int = 0
    ratelimit_points: tuple[tuple[int, dict[str, float]], ...] = ()
    connection_reused: bool | None = None
    network_ns: tuple[float | None, ...] = ()  # in NETWORK_METRICS order
    cached_input_tokens: int | None = None
    token_bins: tuple[tuple[int, int], ...] = ()  # (t_ns // window.BIN_NS, output tokens then): window.token_bins
    first_event_ns: int | None = None  # the first token event's stamp (any request that had one)
    cancelled_states: tuple[str, ...] = ()  # a cancelled request: slo.cancelled_state per target
    late_tokens: tuple[tuple[int, int], ...] = ()  # (late, judged) per token-deadline target (slo.late_tokens)
    model: str | None = None  # --model mix: the request's model


def summarize(rec: RequestRecord, m: RequestMetrics, slos: list[SLOTarget]) -> RequestSummary:
    """The :class:`RequestSummary` of a finished request."""
    ok = rec.ok
    zero = ok and m.zero_output
    return RequestSummary(
        phase=rec.phase,
        ok=ok,
        error_kind=rec.error_kind,
        retry_after_s=rec.retry_after_s,
        scheduled_ns=rec.scheduled_ns,
        sent_ns=rec.sent_ns,
        end_ns=rec.end_ns,
        connect_ns=rec.connect_ns,
        connect_late_ns=rec.connect_late_ns,
        pool_queued=rec.pool_queued,
        output_tokens=m.output_tokens,
        output_tokens_estimated=m.output_tokens_estimated,
        itl_estimated=bool(m.itl_ns) and m.itl_estimated,
        reasoning_tokens=rec.reasoning_tokens,
        input_tokens=rec.prompt_tokens if rec.prompt_tokens is not None else rec.requested_input_tokens,
        requested_output_tokens=rec.requested_output_tokens,
        zero_output=zero,
        ttft_ns=m.ttft_ns,
        ttfat_ns=m.time_to_first_answer_token_ns,
        tpot_ns=m.tpot_ns,
        e2e_ns=m.e2e_ns,
        error_e2e_ns=m.error_e2e_ns,
        schedule_lag_ns=m.schedule_lag_ns,
        # a target of another model of a mix: NaN, never over (its judges skip it: SLOTarget.applies)
        slo_values=tuple(request_value(t, m) if t.applies(rec.model) else math.nan for t in slos)
        if (ok and not zero)
        else (),
        late_tokens=tuple(
            late_tokens(t, m) if t.applies(rec.model) else (0, 0) for t in slos if t.metric == "tbt_deadline"
        )
        if (ok and not zero)
        else (),
        model=rec.model,
        buffered=rec.buffered,
        throttle_ns=rec.throttle_ns,
        attempts_429=len(rec.attempts) if rec.attempts else 0,
        ratelimit_points=_ratelimit_points(rec),
        connection_reused=rec.connection_reused,
        network_ns=network_ns(rec),
        cached_input_tokens=rec.cached_prompt_tokens,
        token_bins=token_bins(rec.events, m.output_tokens, rec.end_ns),
        first_event_ns=rec.events[0].t_ns if rec.events else None,
        cancelled_states=tuple(cancelled_state(t, rec, rec.end_ns or now_ns()) for t in slos)
        if rec.error_kind == "cancelled"
        else (),
    )


def last_sent_ns(rec: RequestRecord) -> int | None:
    """When the request's last attempt went out (its first send unless 429s were retried)."""
    if rec.attempts:
        return rec.attempts[-1].get("next_sent_ns")
    return rec.sent_ns


def network_ns(rec: RequestRecord) -> tuple[float | None, ...]:
    """The request's :data:`NETWORK_METRICS` in ns (None where not observed).

    DNS, TCP connect and TLS are those of the connection the request opened
    (None on a reused one); ``time_to_headers`` = response headers - send and
    ``ttft_from_sent`` = first token event - send, both of the last attempt: TTFT
    without the connection set-up (and without any wait before the send).
    """
    sent = last_sent_ns(rec)
    headers = None
    if sent is not None and rec.response_headers_ns is not None:
        headers = rec.response_headers_ns - sent
    ttft = None
    if rec.ok and sent is not None and rec.events:
        ttft = rec.events[0].t_ns - sent
    return (rec.dns_ns, rec.tcp_connect_ns, rec.tls_ns, headers, ttft)


def _ratelimit_points(rec: RequestRecord) -> tuple[tuple[int, dict[str, float]], ...]:
    pts = []
    for a in rec.attempts or ():
        if a.get("ratelimit"):
            pts.append((a.get("response_headers_ns") or a.get("end_ns") or 0, a["ratelimit"]))
    if rec.ratelimit:
        pts.append((rec.response_headers_ns or rec.end_ns or rec.scheduled_ns, rec.ratelimit))
    return tuple(pts)
