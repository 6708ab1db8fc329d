"""Client-timing validity of a run: could the generator keep to its schedule?

Not an SLO verdict (those live in :mod:`loadgen.core.slo`): these checks say whether a
run's numbers are the server's at all. :func:`validity` reads an aggregator's counts
(:class:`loadgen.engine.results.Aggregator`, through the :class:`RunCounts` protocol) and the
client's own statistics (:class:`loadgen.engine.runner.ClientStats`) against
:class:`ValidityBounds`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from loadgen.core.samples import SampleLog
from loadgen.core.timing_error import timing_only
from loadgen.engine.lifecycle import LOOP_PROBE_S
from loadgen.engine.runner import ClientStats
from loadgen.engine.stamp_lateness import PROBE_S
from loadgen.engine.throughput import max_throughput_checks

RATE_LIMIT_DOMINATED = 0.5
"""A run whose requests end rate-limited more often than this is ``limited_by: rate_limit``."""


@dataclass
class ValidityBounds:
    """Bounds of the validity checks (MLPerf LoadGen style)."""

    max_schedule_lag_p99_ms: float = 5.0
    send_rate_tolerance: float = 0.01
    max_client_cpu: float = 0.95
    max_loop_lag_p99_ms: float = 10.0  # raised above 10 ms (--max-loop-lag), it loosens the stamp bound too
    max_stamp_lateness_p99_ms: float = (
        5.0  # token-weighted (loadgen.engine.stamp_lateness); judged instead of the loop lag
    )
    min_stamp_tokens: int = 1000  # fewer token stamps: the event-loop lag is judged instead
    min_requests: int = 100
    min_duration_s: float = 10.0
    max_error_rate: float = 0.01
    schedule_lag_note: str = ""  # why the lag bound is what it is (a sweep's default rule), printed with it
    max_throughput: bool = (
        False  # --rate inf: no schedule checks, the send path judged instead (loadgen.engine.throughput)
    )
    # a run without SLO targets (its numbers are the answer): each headline percentile's estimated move by late
    # stamps at most this (EDGE_ERROR_MS, issue 31 item 4); None: the stamp-lateness bound above
    max_stamp_error_ms: float | None = None


EDGE_ERROR_MS = 2.0
"""A run without SLO targets is VALID only where the estimated error of each headline percentile (TTFT p50,
TTFT p99, ITL p99) is within this: ``scripts/bench_edge_verdict`` (selftest levels C = 8-128 and 100-800
req/s against the truth log, 3 repetitions on a quiet 2-CPU machine) gave 0 false INVALID of 23 levels
whose true errors were within 2 ms (the issue's bar: at most 5 %)."""


class RunCounts(Protocol):
    """What the validity checks read of a run's aggregate (an :class:`~loadgen.engine.results.Aggregator`)."""

    generator_lag: SampleLog
    generator_sends: int
    first_generator_send_ns: int | None
    last_generator_send_ns: int | None
    errors_by_kind: dict[str, int]
    pool_queued: int
    requests: int
    completed: int
    failed: int
    length_checked: int
    length_mismatch: int
    buffered: int
    throttled: int
    rate_limited_attempts: int

    @property
    def duration_s(self) -> float: ...

    def throughput(self) -> dict[str, Any]: ...


def cpu_wait_note(client: ClientStats) -> str:
    """The client_cpu check's word on the event loop's run-queue wait (``client.cpu_wait_s``), when it
    was over 1 % of the run: the client ran slowly because other processes held the cores, not from
    its own work (``lifecycle.loop_cpu_wait_ns``)."""
    w = client.cpu_wait_s
    if w is None or client.wall_s <= 0 or w <= 0.01 * client.wall_s:
        return ""
    return (
        f"; its event loop waited {w:.2f} s ({w / client.wall_s * 100:.1f} % of the run) for a CPU while "
        "runnable: other processes held the cores"
    )


def generator_send_rps(agg: RunCounts) -> float | None:
    """The rate at which the generator itself sent: (n - 1) / (last - first) generator send instants.

    A request's generator send instant is its scheduled time plus the schedule lag the
    ``schedule_lag_p99`` check charges to the client: sent - scheduled, less the part of a new
    connection's set-up after the scheduled time (``connect_late_ns``: the server's TCP/TLS
    handshake) and any wait for the client's own rate cap (reported apart), never below 0. So
    a server's slow handshake, which delays the first sends and not the last, no longer reads
    as a generator off its rate, while a generator falling behind still stretches the span.
    Compared with the schedule's realized rate (:func:`loadgen.engine.runner.realized_send_rps`),
    MLPerf LoadGen style. None for fewer than two sends or no time between them.
    """
    first, last = agg.first_generator_send_ns, agg.last_generator_send_ns
    if agg.generator_sends < 2 or first is None or last is None or last <= first:
        return None
    return (agg.generator_sends - 1) / ((last - first) / 1e9)


DEFAULT_LOOP_LAG_BOUND_MS = 10.0
"""``ValidityBounds.max_loop_lag_p99_ms``'s default: a caller's larger value also bounds the stamp lateness."""

CLOSED_LOOP_IDLE_SHARE = 0.05
"""Closed loop: the share of the users' time spent idle between a request's due time and its send,
sum(lag) / sum(lag + E2E), at most this. Latency counts from the send there, so the lag enters no latency
(a late send makes no reported number wrong); it idles the user, and the server is offered that much less
concurrency on average (C x (1 - share)). The former rule, p99 lag <= max(5 ms, 1 % of the median E2E),
judged the tail of a quantity whose effect is its mean: at C = 8 on a shared 2-core machine a wave's last
sends went out 15 ms after their users were due (p99) while the users idled 2 % of their time and every
reported TTFT/ITL percentile was within 1.4 ms of the simulator's truth log."""


def closed_loop_idle_share(agg: RunCounts) -> tuple[float, float]:
    """Closed loop: (the users' idle share, the p99 due->send lag in ms) of a run.

    idle share = sum(lag) / (sum(lag) + sum(E2E)) over the measured requests, lag = the generator's
    due->send lag (connection set-up after the due time excluded, as for open loop's schedule lag), E2E
    from the send (failed requests' time to failure included): the share of the users' time spent
    waiting for the generator, so the offered concurrency was C x (1 - share) on average.
    """
    lags = np.asarray(agg.generator_lag, dtype=np.float64)
    samples = getattr(agg, "samples", {})  # an Aggregator's exact samples
    busy = sum(float(np.sum(samples[k].values())) for k in ("e2e", "error_e2e") if k in samples and len(samples[k]))
    total = float(lags.sum())
    share = total / (total + busy) if total + busy > 0 else 0.0
    return share, float(np.percentile(lags, 99)) / 1e6 if lags.size else 0.0


MOSTLY_FAILED = 0.5
"""Over this fraction of failed measured requests a run is a FAIL on the server's errors (exit 1), stated
on its verdict line; at or under it, an error rate over the bound is a warning."""


def timing_error_bound_ms(client: ClientStats) -> float | None:
    """The most one token stamp of this run can be late, in ms: the bound each stamped time is moved by in a
    verdict's flip test (:mod:`loadgen.core.timing_error`; a probe's: :mod:`loadgen.sweep.client_error`).

    Token stamps measured (:mod:`loadgen.engine.stamp_lateness`): the latest stamp's lateness plus one stamp
    probe period (:data:`~loadgen.engine.stamp_lateness.PROBE_S`, 2 ms: a hold is seen from at most that long
    after it began, so that much of it is never charged). Without stamps: the largest event-loop lag plus one
    loop probe period (5 ms). None when neither was measured or a stamp was over 1 s late (not bounded here).
    """
    if client.stamp_tokens > 0 and client.stamp_lateness_max_ms is not None:
        if not np.isfinite(client.stamp_lateness_max_ms):
            return None
        return float(client.stamp_lateness_max_ms) + PROBE_S * 1e3
    if len(client.loop_lag_ms):
        return float(max(0.0, max(client.loop_lag_ms))) + LOOP_PROBE_S * 1e3
    return None


def validity(agg: RunCounts, client: ClientStats, bounds: ValidityBounds) -> dict[str, Any]:
    """The run's validity checks (``result.json`` ``validity``), one line per check with its reason.

    Generator checks (group ``generator``): failing any makes the run INVALID
    (``limited_by: client``): the client could not keep to the schedule, so its
    latencies are not the server's (a run with SLO targets that failed only timing
    checks is then judged by the verdict they could change: :func:`verdict_stands`). Measurement checks (group ``measurement``) are
    warnings. ``limited_by: rate_limit`` when more than :data:`RATE_LIMIT_DOMINATED`
    of the requests ended rate-limited. MLPerf LoadGen style (``Result is: VALID``).
    """
    checks: list[dict[str, Any]] = []

    def check(name: str, group: str, ok: bool, detail: str) -> None:
        checks.append({"name": name, "group": group, "ok": bool(ok), "detail": detail})

    # generator checks: failing any makes the run INVALID (limited_by: client)
    waited = cpu_wait_note(client)  # said where the generator fell behind: was it the machine?
    if client.aborted_reason:
        check("generator_kept_up", "generator", False, client.aborted_reason + waited)
    if bounds.max_throughput:  # no schedule checks (said so), the send path judged (loadgen.engine.throughput)
        e2e = getattr(agg, "samples", {}).get("e2e")  # an Aggregator's exact E2E samples
        for name, ok, detail in max_throughput_checks(agg.generator_lag, e2e):
            check(name, "generator", ok, detail)
    elif client.open_loop:
        lag = np.percentile(np.asarray(agg.generator_lag), 99) / 1e6 if len(agg.generator_lag) else 0.0
        check(
            "schedule_lag_p99",
            "generator",
            lag <= bounds.max_schedule_lag_p99_ms,
            f"p99 schedule lag {lag:.3f} ms (excluding connection set-up after the scheduled time) "
            f"<= {bounds.max_schedule_lag_p99_ms:g} ms"
            + (f" ({bounds.schedule_lag_note})" if bounds.schedule_lag_note else "")
            + (waited if lag > bounds.max_schedule_lag_p99_ms else ""),
        )
        gen = generator_send_rps(agg)
        want = client.schedule_realized_rps
        if gen is not None and want:
            err = abs(gen - want) / want
            check(
                "send_rate",
                "generator",
                err <= bounds.send_rate_tolerance,
                f"generator send rate {gen:.3f} req/s (sends less connection set-up after the scheduled time) "
                f"vs the schedule's realized {want:.3f} req/s ({err * 100:.2f} % off, bound "
                f"{bounds.send_rate_tolerance * 100:g} %)",
            )
    elif len(agg.generator_lag):  # closed loop: a request is due when its user's previous one is done
        share, lag = closed_loop_idle_share(agg)
        check(
            "send_lag",
            "generator",
            share <= CLOSED_LOOP_IDLE_SHARE,
            f"users idle {share * 100:.2f} % of their time between due and send (closed loop: sum of due->send "
            f"lags / sum of lags and E2E; p99 lag {lag:.3f} ms, connection set-up excluded) <= "
            f"{CLOSED_LOOP_IDLE_SHARE:.0%}: the load offered was at least {1 - CLOSED_LOOP_IDLE_SHARE:.0%} of the "
            "users' (latency counts from the send: the lag enters no latency)",
        )
    cpu = client.cpu_s / client.wall_s if client.wall_s > 0 else 0.0
    # the busy share: less the idle passes of the loop while a sender spun to its deadline (RunEngine._spin),
    # CPU spent waiting on purpose, not working; the check judges it, the raw share is printed beside it
    busy = max(client.cpu_s - client.spin_idle_s, 0.0) / client.wall_s if client.wall_s > 0 else 0.0
    spun = f", {cpu * 100:.1f} % with the senders' idle spin to their deadlines" if cpu - busy >= 0.005 else ""
    if client.worker_cpu_fractions:
        busiest = max(client.worker_cpu_fractions)
        check(
            "client_cpu",
            "generator",
            busiest <= bounds.max_client_cpu,
            f"busiest of {len(client.worker_cpu_fractions)} worker processes used {busiest * 100:.1f} % "
            f"of one core (bound {bounds.max_client_cpu * 100:g} %)",
        )
    else:
        check(
            "client_cpu",
            "generator",
            busy <= bounds.max_client_cpu,
            f"client process CPU {busy * 100:.1f} % of one core busy{spun} (bound {bounds.max_client_cpu * 100:g} %)"
            + waited,
        )
    if client.worker_failures:
        check("workers", "generator", False, "; ".join(client.worker_failures))
    ll = None
    stamped = client.stamp_lateness_p99_ms is not None and client.stamp_tokens >= bounds.min_stamp_tokens
    moved = client.stamps.moves_ms() if stamped and client.stamps is not None else None
    if moved:
        # what the numbers carry: how far the late stamps moved the reported percentiles (estimated)
        looser = bounds.max_loop_lag_p99_ms > DEFAULT_LOOP_LAG_BOUND_MS
        sl_bound = max(bounds.max_stamp_lateness_p99_ms, bounds.max_loop_lag_p99_ms if looser else 0.0)
        edge_ms = None if looser else bounds.max_stamp_error_ms
        edge = edge_ms is not None
        if edge_ms is not None:
            sl_bound = min(sl_bound, edge_ms)
        worst = max(abs(v) for v in moved.values())
        check(
            "stamp_error",
            "generator",
            worst <= sl_bound,
            "late stamps moved "
            + ", ".join(f"{k.replace('_', ' ')} by {v:+.2f} ms" for k, v in moved.items())
            + f" (estimated: each stamp less its lateness; |each| <= {sl_bound:g} ms"
            + (" (--max-loop-lag)" if looser else "")
            + (": a run without SLO targets, its percentiles are the answer" if edge else "")
            + f"; p99 stamp lateness {client.stamp_lateness_p99_ms:.1f} ms over {client.stamp_tokens} token stamps)",
        )
    elif stamped:
        # what the numbers carry: how late the token stamps were (token-weighted), not the loop at any moment
        sl = client.stamp_lateness_p99_ms or 0.0
        # a caller that loosened the loop-lag bound (--max-loop-lag) tolerates that much lateness of the stamps
        looser = bounds.max_loop_lag_p99_ms > DEFAULT_LOOP_LAG_BOUND_MS
        sl_bound = max(bounds.max_stamp_lateness_p99_ms, bounds.max_loop_lag_p99_ms if looser else 0.0)
        check(
            "stamp_lateness_p99",
            "generator",
            sl <= sl_bound,
            f"p99 stamp lateness {sl:.1f} ms over {client.stamp_tokens} token stamps (the event loop's lag "
            f"where tokens arrived, token-weighted) <= {sl_bound:g} ms" + (" (--max-loop-lag)" if looser else ""),
        )
    if client.loop_lag_ms:
        ll = float(np.percentile(np.asarray(client.loop_lag_ms), 99))
        check(
            "event_loop_lag_p99",
            "measurement" if stamped else "generator",
            ll <= bounds.max_loop_lag_p99_ms,
            f"p99 event-loop lag {ll:.3f} ms (bound {bounds.max_loop_lag_p99_ms:g} ms)"
            + (" (the stamps' own lateness is judged: stamp_lateness_p99)" if stamped else ""),
        )
    cl = agg.errors_by_kind.get("client_limit", 0)
    check("client_resources", "generator", cl == 0, f"{cl} requests hit a descriptor limit")
    # measurement checks: warnings, not client limits
    check(
        "min_requests",
        "measurement",
        agg.requests >= bounds.min_requests,
        f"{agg.requests} measured requests (minimum {bounds.min_requests})",
    )
    check(
        "min_duration",
        "measurement",
        agg.duration_s >= bounds.min_duration_s,
        f"{agg.duration_s:.2f} s measured (minimum {bounds.min_duration_s:g} s)",
    )
    er = agg.failed / agg.requests if agg.requests else 0.0
    check(
        "error_rate",
        "measurement",
        er <= bounds.max_error_rate,
        f"{agg.failed} of {agg.requests} requests failed ({er * 100:.2f} %, bound {bounds.max_error_rate * 100:g} %)",
    )
    if agg.length_checked:
        check(
            "output_lengths",
            "measurement",
            agg.length_mismatch == 0,
            f"{agg.length_mismatch} of {agg.length_checked} completed requests delivered a different "
            "output length than requested (does the server honour ignore_eos/min_tokens?)",
        )
    if agg.buffered:
        check(
            "streaming_not_buffered",
            "measurement",
            False,
            f"{agg.buffered} of {agg.completed} completed requests delivered their tokens in one burst (a "
            "buffering proxy or a batching server?): their TPOT/ITL are not measurable (metrics.is_buffered)",
        )
    if agg.pool_queued:
        # every pooled connection held a request the server had not answered: the server's backlog,
        # not a slow client (the verdict table: server-caused, a warning here and FAIL in a probe's SLO)
        check(
            "server_saturated",
            "measurement",
            False,
            f"{agg.pool_queued} of {agg.requests} requests waited for a connection: every pooled connection "
            "held a request in flight at the server (a saturated server, not a slow client)",
        )
    if agg.throttled:
        check(
            "offered_load_not_capped",
            "measurement",
            False,
            f"{agg.throttled} of {agg.requests} requests waited for the client's own cap (--max-concurrency: "
            "that many requests were in flight at the server; --max-rpm/--max-tpm): the load sent is not the "
            "offered load (the wait counts in their latency, not in the generator's lag)",
        )
    rl = agg.errors_by_kind.get("rate_limited", 0)
    if rl or agg.rate_limited_attempts:
        check(
            "rate_limits",
            "measurement",
            False,
            f"{rl} of {agg.requests} requests ended rate-limited (HTTP 429), {agg.rate_limited_attempts} "
            "attempts answered 429 in all: the provider's quota, not the server's latency",
        )
    gen_ok = all(c["ok"] for c in checks if c["group"] == "generator")
    out: dict[str, Any] = {
        "valid": gen_ok,
        "limited_by": None if gen_ok else "client",
        "checks": checks,
        "warnings": [c["detail"] for c in checks if c["group"] == "measurement" and not c["ok"]],
        "client_cpu_fraction": cpu,
        "client_busy_cpu_fraction": busy,
        "loop_lag_p99_ms": ll,
    }
    if gen_ok and agg.requests and rl / agg.requests > RATE_LIMIT_DOMINATED:
        out["limited_by"] = "rate_limit"
    if agg.requests and agg.failed / agg.requests > MOSTLY_FAILED:
        # server-caused (the verdict table): the run is not INVALID, and it is not a success either
        out["server_failed"] = (
            f"{agg.failed} of {agg.requests} measured requests failed ({er * 100:.0f} %): "
            "the server's errors, not the client's timing"
        )
    if agg.throttled:
        out["offered_load"] = "capped by the client (--max-rpm/--max-tpm)"
    if not gen_ok:
        out["remedy"] = (
            "the load generator could not keep to the schedule: lower the rate, use --workers, "
            "or run the client on a machine with more free CPU"
        )
        if bounds.max_throughput:  # no schedule here: the client could not feed the batch
            out["remedy"] = out["remedy"].replace(
                "keep to the schedule: lower the rate", "feed the batch: lower --max-concurrency"
            )
        if {c["name"] for c in checks if c["group"] == "generator" and not c["ok"]} == {"workers"}:
            out["remedy"] = (
                "a worker process or actor failed (the workers check says why): remove its cause and run again"
            )
    return out


def verdict_stands(v: dict[str, Any], flip: dict[str, Any], agg: RunCounts) -> dict[str, Any]:
    """A run with SLO targets that failed only timing checks, judged by the verdict they could change.

    ``v``: the run's :func:`validity`, which must have failed only checks of
    :data:`~loadgen.core.timing_error.TIMING_CHECKS` (:func:`needs_flip_test`); ``flip``: the flip test of its
    SLO targets (:func:`loadgen.core.timing_error.run_flip`). Every check is kept with its figure and
    ``validity.verdict_stands`` is ``flip``. When no target's met/not met can change with every value moved
    by its error both ways, the run is VALID for its SLO verdict (``valid: true``, ``limited_by: null``, or
    ``rate_limit`` as :func:`validity` says it, no remedy); otherwise it stays INVALID (``limited_by:
    client``). Runs without SLO targets keep the strict rule (any failed generator check is INVALID) and
    carry :func:`latency_error_ms` instead. The rule's row: the verdict table of docs/measurement.md.
    """
    out = dict(v, verdict_stands=flip)
    if flip["stands"]:
        rl = agg.errors_by_kind.get("rate_limited", 0)
        dominated = bool(agg.requests) and rl / agg.requests > RATE_LIMIT_DOMINATED
        out.update(valid=True, limited_by="rate_limit" if dominated else None)
        out.pop("remedy", None)
    return out


def needs_flip_test(v: dict[str, Any]) -> bool:
    """Did this run's :func:`validity` fail only checks of the client's timing (then a verdict may stand)?"""
    return timing_only(v)


def latency_error_ms(client: ClientStats, bounds: ValidityBounds) -> dict[str, Any]:
    """How far the client's timing can have moved a run's latency percentiles (``result.json`` ``latency_error_ms``).

    ``bound_ms``: :func:`timing_error_bound_ms`, the most one stamp can be late. It bounds every reported
    latency percentile both ways: each request's TTFT, E2E, TPOT or ITL is off by at most that much (a
    difference of two stamps too), and moving every value by at most ``e`` moves any percentile by at most
    ``e`` (None: not bounded). ``estimated_moves_ms``: the stamp-lateness estimate of how far late stamps
    actually moved TTFT p50, TTFT p99 and ITL p99 (reported - corrected,
    :meth:`loadgen.engine.stamp_lateness.StampLateness.moves_ms`), given where the ``stamp_error`` check
    reads it (at least ``bounds.min_stamp_tokens`` token stamps), else None. A latency from the scheduled
    time holds the send lag by definition (it is not an error there). The console prints the bound, and
    the estimate where there is one, beside each headline percentile of a run without SLO targets.
    """
    stamped = client.stamps is not None and client.stamp_tokens >= bounds.min_stamp_tokens
    moves = client.stamps.moves_ms() if stamped and client.stamps is not None else None
    return {"bound_ms": timing_error_bound_ms(client), "estimated_moves_ms": moves or None}
