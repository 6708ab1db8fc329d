"""The unloaded check: a few requests at concurrency 1 before the search, and an impossible SLO named at once.

An SLO below what the server does with a single request (p99 TTFT <= 5 ms against a server
whose lone request takes 30 ms) cannot be met at any load, yet a search finds that out only
after its lowest probe, minutes later. Before calibration the sweep sends ``unloaded_requests``
measured requests (after one warm-up request) one at a time. For each target with a percentile
of 50 or more, if the median of its metric over those requests already exceeds the threshold,
the target's percentile at any load does too (a percentile at or above the median, of a
metric that only grows with queueing), and the sweep stops with one line naming the measured
value and the threshold. Fewer than :data:`MIN_COMPLETED` successful requests decide nothing
(a server failing every request is left to the probes, whose FAILs say why).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from loadgen.engine.runner import Runner
from loadgen.measurement import measure
from loadgen.sweep.config import SweepConfig, SweepContext
from loadgen.sweep.session_search import measure_load, session_turns

MIN_COMPLETED = 3


async def unloaded_check(
    ctx: SweepContext,
    out_dir: Path,
    *,
    runner_hook: Callable[[Runner], None] | None = None,
) -> dict[str, Any]:
    """Run the check (``out_dir``/unloaded) and judge it: the ``sweep.json`` ``unloaded`` block.

    Keys: ``requests``, ``completed``, ``dir``, ``median_ms`` (per target label), ``e2e_p50_ms``,
    ``e2e_max_ms``, and ``over``: one line per target the server misses with one request.
    """
    base, scfg = ctx.base, ctx.scfg
    n = scfg.unloaded_requests
    load = replace(
        base,
        rate_rps=None,
        concurrency=1,
        requests=n if base.sessions is None else math.ceil(n / session_turns(base)[0]),  # whole sessions
        duration_s=None,
        warmup_requests=1 if base.sessions is None else 0,
        warmup_s=0.0,
        max_concurrency=None,
        salt="unl-",
        slos=scfg.slos,
    )
    run = await measure_load(
        measure,
        ctx.endpoint,
        load,
        out_dir / "unloaded",
        config_record={**ctx.config_record, "unloaded_check": True},
        redactor=ctx.redactor,
        install_signal_handlers=False,
        runner_hook=runner_hook,
    )
    return judge_unloaded(run.result.to_dict(), scfg, n)


def judge_unloaded(result: dict[str, Any], scfg: SweepConfig, n: int) -> dict[str, Any]:
    """The check's verdict from its ``result.json`` (module docstring)."""
    lat = result.get("latency_ms") or {}
    completed = (result.get("counts") or {}).get("completed") or 0
    e2e = lat.get("e2e") or {}
    out: dict[str, Any] = {
        "requests": n,
        "concurrency": 1,
        "completed": completed,
        "dir": "unloaded",
        "median_ms": {},
        "e2e_p50_ms": e2e.get("p50"),
        "e2e_max_ms": e2e.get("max"),
        "over": [],
    }
    if completed < MIN_COMPLETED:
        return out
    for t in scfg.slos:
        v = (lat.get(t.metric) or {}).get("p50")
        out["median_ms"][t.label] = v
        thr_ms = t.threshold_ns / 1e6
        if t.percentile >= 50 and v is not None and v > thr_ms:
            out["over"].append(
                f"{t.label} is below what the server does with one request: at concurrency 1 its {t.metric} "
                f"median was {v:.1f} ms over {completed} requests, above the {thr_ms:g} ms threshold"
            )
    return out
