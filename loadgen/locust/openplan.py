"""The open-loop schedule of a Locust test, as every process computes it: the send offsets from t0.

Each process keeps the entries ``shard, shard + shards, ...`` of it (:meth:`loadgen.locust.dispatch.LoadProcess._entries`);
the master computes the same offsets for a worker it lost, to split what that worker never delivered by the
last lease it granted (:func:`loadgen.spread.lease.split_by_lease`). Pure: imports neither Locust nor gevent.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from loadgen.workload.arrivals import Arrivals
from loadgen.workload.replay import loop_offsets, replay_offsets
from loadgen.workload.spec import Workload, WorkloadOptions


def workload_options(cfg: dict[str, Any], salt: str) -> WorkloadOptions:
    """The workload options of a test's configuration (every process's, with the plan's prompt salt)."""
    return WorkloadOptions(**{**cfg["workload"], "api": cfg["api"], "salt": salt})


def arrivals(cfg: dict[str, Any]) -> Arrivals:
    """The arrival settings of a test's configuration (no warm-up: a Locust test measures every send)."""
    return Arrivals(
        rate_rps=cfg["rate"], arrival=cfg["arrival"], burstiness=cfg["burstiness"], requests=cfg["requests"],
        duration_s=cfg["duration_s"] if cfg["requests"] is None else None,
    )  # fmt: skip


def open_offsets(cfg: dict[str, Any], wl: Workload) -> tuple[np.ndarray, np.ndarray | None]:
    """``(offsets_ns, trace rows)`` of the whole test (rows None without a trace): the arrival process of
    ``cfg``, or the trace's replay plan, over ``--requests`` or ``--duration``."""
    o = wl.opts
    a = arrivals(cfg)
    if wl.trace is not None:
        target = o.trace_rate_rps if o.trace_rate_rps is not None else a.rate_rps
        plan = replay_offsets(wl.trace, spread=o.trace_spread, time_scale=o.trace_time_scale, rate_rps=target)
        until = None if a.duration_s is None else round(a.duration_s * 1e9)
        offs, rows = loop_offsets(plan, count=a.requests, until_ns=until, loop=o.trace_loop)
        return np.asarray(offs, dtype=np.int64), np.asarray(rows)
    return a.offsets_array(o.seed), None
