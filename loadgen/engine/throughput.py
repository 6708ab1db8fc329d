"""Max-throughput mode (``--rate inf``, ``--profile throughput``) and its batch-inference scorecard.

**The mode.** vLLM's ``bench serve --request-rate inf`` and GuideLLM's ``throughput`` profile:
every request is due at once, at the start; with ``--max-concurrency B`` at most B are in
flight and the rest wait for a slot. That is exactly B closed-loop users sharing the request
count (a user sends the next waiting request the moment its own ends), so the plan is the
runner's closed loop (:func:`loadgen.engine.runplan.build_plan`): B users, ``--requests`` requests
in all (or ``--duration``); without a cap, one user per request (the whole batch at t0).
There is no schedule to honour: latency counts from the send (``latency_origin: sent``) and
the schedule checks (schedule lag, send rate) are "not applicable" in the verdict; the
generator's own health is still judged (:func:`loadgen.engine.validity.validity`: event-loop lag,
client CPU, and the send path: a request's send - the moment its user handed it over).
The run's rates (``result.json`` ``throughput``) use the measurement window of
:mod:`loadgen.core.window` (here its closed-loop window, or its fallback).

**Sustained** (the steady part of the batch, not its ramp-up and tail). With B the batch
(the cap, or every request when uncapped) and a_1 <= ... <= a_M the send times of all M
requests (warm-up included: the server's batch holds them too):

* start = the first instant B requests are in flight (the B-th send, a_B, when nothing
  ended before it), or the end of the last warm-up request when that is later;
* end = the first completion after the last send a_M: from then on an ending request has
  no successor, so in flight falls below B for good (the batch drains).

Between the two the batch is full, except for the send-path moments between a completion
and its slot's next send (which the ``send_path`` check bounds). MLPerf's "tail
cut-off" idea, as :mod:`loadgen.core.window` uses for closed loop; the same idea as GuideLLM's
and vLLM's steady-state cuts, with the edges at the in-flight count instead of a fraction.

* ``sustained_output_tps`` = output tokens that arrived in [start, end] (any request;
  token-arrival bins of :class:`loadgen.core.window.TokenBins`, edges pro rata) / (end - start);
* ``sustained_output_tps_per_slot`` = sustained_output_tps / B;
* ``sustained_completion_rps`` = successful completions ending in [start, end] / (end - start);
* ``output_tps_incl_drain`` = the measured requests' output tokens / (first measured send
  to last completion): ramp and drain included (``vllm bench serve``'s "output token
  throughput" at an infinite rate), named as such, never the headline.

Cost and energy per million output tokens (over the sustained rate):

* cost = cost_per_hour / (sustained_output_tps * 3600) * 1e6
  (:func:`loadgen.core.pricing.hourly_cost_per_million_tokens_usd`); per-token prices give
  ``result.json`` ``cost.per_million_output_tokens_usd`` (rate-independent), shown beside it;
* energy = P / sustained_output_tps * 1e6 joules (kWh = J / 3.6e6), P the mean power of the
  accelerators' energy meter over its window (NVML: ``result.json`` ``energy.joules`` /
  ``server.window_s``) or, without a meter, the ``--power-w`` the user gives; else "not measured".
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import orjson

from loadgen.core.errors import ConfigError
from loadgen.core.pricing import hourly_cost_per_million_tokens_usd

if TYPE_CHECKING:
    from loadgen.core.window import TokenBins

__all__ = [
    "NOT_APPLICABLE",
    "batch_size",
    "batch_window",
    "check_max_throughput",
    "energy_per_million_j",
    "max_throughput_checks",
    "scorecard",
]

NOT_APPLICABLE = "not applicable: max-throughput mode"
"""The verdict's words for a schedule check in max-throughput mode (no schedule to honour)."""

SEND_PATH_IDLE_MAX = 0.02
"""The send-path bound: the share of the slots' time spent waiting for the client's sends.
Each slot cycles through a send-path delay (sent - handed over to send) and the request's E2E
from its send, so idle = sum(send path) / (sum(send path) + sum(E2E)) is the throughput the
client's sends cost the batch: at most 2 % here (the sweep's 2 % rule for lag, in throughput)."""

WINDOW_RULE = (
    "from the first instant the batch is full (B requests in flight: the B-th send, or the last warm-up "
    "end if later) to the first completion after the last send (in flight then falls below B for good)"
)


RUN_WINDOW = (
    "the run's rates (result.json throughput) are over loadgen.core.window's closed-loop window: a max-throughput run "
    "is B users sharing the requests, its window from the end of their ramp to the first user's stop"
)


def batch_size(max_concurrency: int | None, requests: int | None) -> int:
    """B: the cap, or every request when uncapped (at most the request count)."""
    if max_concurrency is None:
        return max(requests or 1, 1)
    return max(min(max_concurrency, requests) if requests is not None else max_concurrency, 1)


def check_max_throughput(cfg: Any) -> None:
    """What a max-throughput :class:`~loadgen.engine.runplan.LoadConfig` must hold. Raises ConfigError."""
    if cfg.concurrency is not None:
        raise ConfigError("--rate inf (max-throughput mode) and --concurrency clash: use --max-concurrency N")
    if cfg.has_trace:
        raise ConfigError("--rate inf sends every request at once: it clashes with a trace's timestamps")
    if cfg.requests is None and cfg.max_concurrency is None:
        raise ConfigError(
            "--rate inf without --max-concurrency sends every request at once: give --requests N (the batch), "
            "or --max-concurrency N with --requests or --duration"
        )
    if cfg.origin != "sent":
        raise ConfigError(
            "--rate inf (max-throughput mode) has no schedule: latency counts from the send "
            "(--latency-origin sent, its default here)"
        )
    for name, v in (("--cost-per-hour", cfg.cost_per_hour_usd), ("--power-w", cfg.power_w)):
        if v is not None and not (np.isfinite(v) and v > 0):
            raise ConfigError(f"{name} must be a finite number > 0")


def max_throughput_checks(
    generator_lag_ns: Any, e2e_ns: Any, max_idle: float = SEND_PATH_IDLE_MAX
) -> list[tuple[str, bool, str]]:
    """The generator checks of max-throughput mode, (name, ok, detail) each, for :func:`loadgen.engine.validity.validity`.

    The schedule checks do not apply, and the verdict says so (never a silent pass); the
    send path is judged: each request's send - the moment its user handed it over (the
    generator lag of :mod:`loadgen.engine.results`: connection set-up excluded), as the share of
    the slots' time it left them idle (:data:`SEND_PATH_IDLE_MAX`). ``generator_lag_ns``,
    ``e2e_ns``: sample logs (ns; E2E from the send) or None.
    """
    lags = np.asarray(generator_lag_ns if generator_lag_ns is not None else [], dtype=np.float64)
    e2e = np.asarray(e2e_ns.values() if e2e_ns is not None else [], dtype=np.float64)
    busy = float(lags.sum()) + float(e2e.sum())
    idle = float(lags.sum()) / busy if busy > 0 else 0.0
    p99 = float(np.percentile(lags, 99)) / 1e6 if lags.size else 0.0
    mean = float(lags.mean()) / 1e6 if lags.size else 0.0
    return [
        ("schedule_lag_p99", True, f"{NOT_APPLICABLE} (no schedule to honour; latency counts from the send)"),
        ("send_rate", True, f"{NOT_APPLICABLE} (every request is due at once)"),
        (
            "send_path",
            idle <= max_idle,
            f"slots idle {idle * 100:.2f} % of their time waiting for the client's sends (bound {max_idle * 100:g} %: "
            f"the throughput it costs); send path mean {mean:.3f} ms, p99 {p99:.3f} ms (handed over to sent, "
            "connection set-up excluded)",
        ),
    ]


def batch_window(
    sends_ns: Iterable[int], ends_ns: Iterable[int | None], batch: int, last_warmup_end_ns: int | None = None
) -> tuple[int, int] | str:
    """The sustained window (module docstring) as (start_ns, end_ns), or why there is none.

    ``sends_ns`` and ``ends_ns`` pair up per request (an end of None: not known, left out
    of the in-flight count).
    """
    sends = np.asarray(list(sends_ns), dtype=np.int64)
    ends_list = list(ends_ns)
    if sends.size < batch or batch < 1:
        return f"{sends.size} requests sent: the batch of {batch} was never full"
    known = np.asarray([e for e in ends_list if e is not None], dtype=np.int64)
    # in-flight count after each event, sends before ends at the same instant (a slot reused at once)
    times = np.concatenate([sends, known])
    steps = np.concatenate([np.ones(sends.size, np.int64), -np.ones(known.size, np.int64)])
    order = np.lexsort((-steps, times))
    level = np.cumsum(steps[order])
    full = np.flatnonzero(level >= batch)
    if full.size == 0:
        return f"the batch of {batch} was never full (requests ended before the last of the first {batch} was sent)"
    start = int(times[order][full[0]])
    if last_warmup_end_ns is not None:
        start = max(start, last_warmup_end_ns)
    last_send = int(sends.max())
    after = known[known > last_send]
    if after.size == 0:
        return "no request ended after the last send"
    end = int(after.min())
    if end <= start:
        return "the first request ended before the batch was full: no span in which it was"
    return start, end


def _records(
    path: Path, t0_ns: int, origin: str
) -> tuple[list[int], list[int | None], list[tuple[int, bool]], int | None]:
    """From ``requests.jsonl``: send and end instants (absolute ns) of every sent request,
    (end, ok) of the measured ones, and the last warm-up end. End = origin + e2e (ok) or
    + error_e2e (failed); a zero-output answer has no E2E in the file: its end is unknown."""
    sends: list[int] = []
    ends: list[int | None] = []
    measured: list[tuple[int, bool]] = []
    last_warm: int | None = None
    with open(path, "rb") as fh:
        for line in fh:
            if not line.strip():
                continue
            d = orjson.loads(line)
            sent = d.get("sent_s")
            base = sent if (origin == "sent" and sent is not None) else d.get("scheduled_s")
            dur = d.get("e2e_ms") if d.get("status") == "ok" else d.get("error_e2e_ms")
            end = None if (dur is None or base is None) else t0_ns + round(base * 1e9 + dur * 1e6)
            if sent is not None:
                sends.append(t0_ns + round(sent * 1e9))
                ends.append(end)
            if d.get("phase") == "measure":
                if end is not None:
                    measured.append((end, d.get("status") == "ok"))
            elif end is not None and (last_warm is None or end > last_warm):
                last_warm = end
    return sends, ends, measured, last_warm


def energy_per_million_j(power_w: float | None, tokens_per_s: float | None) -> float | None:
    """Joules per million output tokens: P / tokens_per_s * 1e6; None without either."""
    if not power_w or not tokens_per_s:
        return None
    return power_w / tokens_per_s * 1e6


def _power(result: dict[str, Any], given_w: float | None) -> tuple[float | None, str]:
    """The system's mean power and where it comes from: the energy meter, else ``--power-w``."""
    joules = (result.get("energy") or {}).get("joules")
    window_s = (result.get("server") or {}).get("window_s")
    if joules and window_s:
        return joules / window_s, f"energy meter: {joules:,.0f} J over {window_s:.2f} s (mean over the run)"
    if given_w:
        return given_w, "--power-w (given by the user, not measured)"
    return None, "not measured (no energy meter reading; give --power-w)"


def scorecard(result: dict[str, Any], tokens: TokenBins, cfg: Any, requests_path: Path) -> dict[str, Any]:
    """``result.json`` ``max_throughput``: the batch scorecard of a max-throughput run.

    ``tokens``: the run's token arrivals (:class:`loadgen.core.window.TokenBins`, every request);
    ``cfg``: its :class:`~loadgen.engine.runplan.LoadConfig`. Definitions in the module docstring.
    """
    t0 = int(result["conditions"]["t0_monotonic_ns"])
    sends, ends, measured, last_warm = _records(requests_path, t0, cfg.origin)
    total = (cfg.requests + cfg.warmup_requests) if cfg.requests is not None else None
    batch = batch_size(cfg.max_concurrency, total if total is not None else len(sends))
    win = batch_window(sends, ends, batch, last_warm)
    thr = result.get("throughput") or {}
    out: dict[str, Any] = {
        "mode": "max-throughput: every request due at once"
        + (f", at most {cfg.max_concurrency} in flight" if cfg.max_concurrency else ", all in flight"),
        "max_concurrency": cfg.max_concurrency,
        "batch": batch,
        "latency_origin": "sent",
        "rule": WINDOW_RULE,
        "sustained_window": None,
        "sustained_output_tps": None,
        "sustained_output_tps_per_slot": None,
        "sustained_completion_rps": None,
        "output_tps_incl_drain": thr.get("output_tps_incl_drain"),
        "run_window": RUN_WINDOW,
    }
    if cfg.max_concurrency is None:
        out["note"] = (
            "without --max-concurrency the batch is every request: the sustained window ends at the first "
            "completion (a server with fewer slots than requests: its first wave only); give --max-concurrency N"
        )
    tps = None
    if isinstance(win, str):
        out["sustained_not_measured"] = win
    else:
        start, end = win
        w_s = (end - start) / 1e9
        tps = tokens.between(start, end) / w_s
        done = sum(1 for e, ok in measured if ok and start <= e <= end)
        out["sustained_window"] = {
            "start_s": round((start - t0) / 1e9, 9),
            "end_s": round((end - t0) / 1e9, 9),
            "duration_s": w_s,
            "output_tokens": tokens.between(start, end),
            "completions": done,
        }
        out["sustained_output_tps"] = tps
        out["sustained_output_tps_per_slot"] = tps / batch
        out["sustained_completion_rps"] = done / w_s
    per_hour = cfg.cost_per_hour_usd
    out["cost_per_hour_usd"] = per_hour
    out["cost_per_million_output_tokens_usd"] = hourly_cost_per_million_tokens_usd(per_hour, tps)
    out["token_priced_cost_per_million_output_tokens_usd"] = (result.get("cost") or {}).get(
        "per_million_output_tokens_usd"
    )
    power, source = _power(result, cfg.power_w)
    j = energy_per_million_j(power, tps)
    out["power_w"] = power
    out["power_source"] = source
    out["energy_per_million_output_tokens_j"] = j
    out["energy_per_million_output_tokens_kwh"] = j / 3.6e6 if j is not None else None
    return out
