"""Load stepped within one run (``--stages 10:60s,20:60s``): each stage its own window, figures and verdict.

A warm server is stepped through levels without restarts, as GuideLLM's and inference-perf's
multi-stage runs do. A stage is ``RATE:DURATION`` (open loop: RATE req/s offered for DURATION) or
``c=N:DURATION`` (closed loop: N users for DURATION); one run's stages are all of one kind.

* Open loop: stage s offers exactly ``round(rate_s x duration_s)`` sends over its span, drawn from the
  run's arrival process (``--arrival``, ``--burstiness``) and conditioned on realizing ``rate_s``
  (:func:`loadgen.workload.arrivals.condition_on_rate`), starting where the previous stage ended;
  ``--warmup T`` runs before the first stage at its rate.
* Closed loop: the run holds as many users as its largest stage; user ``u`` sends only in the stages
  with more than ``u`` users (it waits for its next one, or ends), so a stage of N users has N
  requests in flight; users joining at a stage start staggered as the first ones do at t0 (the
  start-up ramp, :func:`loadgen.engine.closed_loop.ramp_ns`).

Stage s spans ``[t0 + lead + S_s, t0 + lead + S_s + duration_s)`` (``S_s`` the durations before it; the
lead is the warm-up, and in closed loop the start-up ramp before it); a measured request belongs to the stage its scheduled time (its due time in closed loop) falls in,
and is counted twice: in the run's figures and in its stage's own :class:`~loadgen.engine.results.Aggregator`,
whose window, throughput, latency, SLO verdict and validity checks (:func:`stage_result`) are the stage's
``result.json`` ``stages[]`` entry. The client's checks (its CPU, loop lag, stamp lateness) are the run's:
one client ran every stage; the send-rate check compares each stage with its own schedule.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from loadgen.core.errors import ConfigError
from loadgen.core.metrics import RequestMetrics
from loadgen.core.types import RequestRecord
from loadgen.core.units import parse_duration_ns
from loadgen.engine.results import Aggregator
from loadgen.engine.validity import ValidityBounds, validity
from loadgen.workload.arrivals import Arrivals, arrival_offsets_array, condition_on_rate

if TYPE_CHECKING:
    from loadgen.engine.lifecycle import ClientStats

__all__ = ["Stage", "StageLog", "open_loop_stage_offsets", "parse_stages", "stage_starts_ns"]


@dataclass(frozen=True)
class Stage:
    """One level of a staged run: ``rate_rps`` (open loop) or ``concurrency`` (closed loop) for ``duration_s``."""

    duration_s: float
    rate_rps: float | None = None
    concurrency: int | None = None

    @property
    def label(self) -> str:
        level = f"{self.rate_rps:g} req/s" if self.rate_rps is not None else f"{self.concurrency} users"
        return f"{level} for {self.duration_s:g} s"


_ENTRY = re.compile(r"\s*(?:(c|concurrency)\s*=\s*)?([0-9.eE+]+)\s*:\s*(\S+?)\s*")


def parse_stages(text: str) -> tuple[Stage, ...]:
    """``10:60s,20:60s`` (rates) or ``c=8:30s,c=16:30s`` (users) -> stages. Raises ConfigError naming the entry."""
    stages: list[Stage] = []
    for i, raw in enumerate((text or "").split(","), 1):
        m = _ENTRY.fullmatch(raw)
        if not m:
            raise ConfigError(
                f"--stages entry {i} {raw.strip()!r}: expected RATE:DURATION or c=USERS:DURATION (10:60s)"
            )
        try:
            dur_s = parse_duration_ns(m.group(3), what=f"--stages entry {i} duration") / 1e9
            level = float(m.group(2))
        except ValueError:
            raise ConfigError(f"--stages entry {i} {raw.strip()!r}: {m.group(2)!r} is not a number") from None
        if not dur_s > 0:
            raise ConfigError(f"--stages entry {i} {raw.strip()!r}: the duration must be > 0")
        if m.group(1):
            if level != int(level) or level < 1:
                raise ConfigError(f"--stages entry {i} {raw.strip()!r}: users must be a whole number >= 1")
            stages.append(Stage(dur_s, concurrency=int(level)))
        else:
            if not (0 < level < float("inf")):
                raise ConfigError(f"--stages entry {i} {raw.strip()!r}: the rate must be > 0 and finite")
            stages.append(Stage(dur_s, rate_rps=level))
    if len({s.rate_rps is None for s in stages}) > 1:
        raise ConfigError("--stages: give every stage a rate (open loop) or every stage users (c=N), not both")
    return tuple(stages)


def stage_starts_ns(stages: tuple[Stage, ...], lead_s: float) -> list[int]:
    """Each stage's start, ns after t0 (``lead_s`` first: the warm-up), and the last one's end at the list's end."""
    out = [round(lead_s * 1e9)]
    for s in stages:
        out.append(out[-1] + round(s.duration_s * 1e9))
    return out


def open_loop_stage_offsets(
    stages: tuple[Stage, ...], arrivals: Arrivals, *, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """(send offsets ns after t0, warm-up flags) of a staged open-loop run (module docstring): the arrival
    process and warm-up span of ``arrivals``, each stage at its own rate (``arrivals``' rate and bounds unused)."""
    arrival, burstiness, warmup_s = arrivals.arrival, arrivals.burstiness, arrivals.warmup_s
    starts = stage_starts_ns(stages, warmup_s)
    parts: list[np.ndarray] = []
    warm: list[np.ndarray] = []
    first = stages[0]
    assert first.rate_rps is not None
    n_warm = round(first.rate_rps * warmup_s)
    if n_warm:
        w = arrival_offsets_array(arrival, first.rate_rps, count=n_warm, seed=seed + 1_000_003, burstiness=burstiness)
        parts.append(condition_on_rate(w, np.ones(n_warm, dtype=bool), first.rate_rps))  # within the warm-up
        warm.append(np.ones(w.size, dtype=bool))
    for k, s in enumerate(stages):
        assert s.rate_rps is not None
        n = max(1, round(s.rate_rps * s.duration_s))
        offs = arrival_offsets_array(arrival, s.rate_rps, count=n, seed=seed + k, burstiness=burstiness)
        offs = condition_on_rate(offs, np.ones(n, dtype=bool), s.rate_rps)
        parts.append(offs + starts[k])
        warm.append(np.zeros(n, dtype=bool))
    return np.concatenate(parts), np.concatenate(warm)


class StageLog:
    """Each stage's own aggregator: measured requests added by the stage their scheduled time falls in."""

    def __init__(self, stages: tuple[Stage, ...], lead_s: float, slos: list[Any], spill_dir: Path | None) -> None:
        self.stages = stages
        self.starts = stage_starts_ns(stages, lead_s)
        self.aggs = [Aggregator(slos, spill_dir) for _ in stages]
        self.t0_ns: int | None = None  # set when the run fixes t0
        self.schedule_rps: list[float | None] = [s.rate_rps for s in stages]  # each stage's own schedule rate

    def stage_of(self, scheduled_ns: int) -> int | None:
        """The stage a request scheduled at ``scheduled_ns`` belongs to (None: warm-up, or past the last)."""
        if self.t0_ns is None:
            return None
        k = int(np.searchsorted(self.starts, scheduled_ns - self.t0_ns, side="right")) - 1
        return k if 0 <= k < len(self.stages) else None

    def add(self, rec: RequestRecord, m: RequestMetrics) -> None:
        if rec.phase != "measure":
            return
        k = self.stage_of(rec.scheduled_ns)
        if k is not None:
            self.aggs[k].add(rec, m)

    def close(self) -> None:
        for a in self.aggs:
            a.close()

    def results(self, client: ClientStats, bounds: ValidityBounds) -> list[dict[str, Any]]:
        """The ``result.json`` ``stages`` entries (:func:`stage_result`), in order."""
        assert self.t0_ns is not None
        return [
            stage_result(k, s, agg, client, bounds, self.t0_ns, self.starts[k], self.schedule_rps[k])
            for k, (s, agg) in enumerate(zip(self.stages, self.aggs))
        ]


def stage_result(
    k: int,
    stage: Stage,
    agg: Aggregator,
    client: ClientStats,
    bounds: ValidityBounds,
    t0_ns: int,
    start_ns: int,
    schedule_rps: float | None,
) -> dict[str, Any]:
    """One stage's figures and verdict: its window (times from t0), counts, throughput over that window,
    latency, SLO verdict, and its validity (the run's client checks, its own schedule's send rate)."""
    agg.open_loop = client.open_loop
    window = agg.window()
    v = validity(agg, replace(client, schedule_realized_rps=schedule_rps), bounds)
    failed = [c["name"] for c in v["checks"] if c["group"] == "generator" and not c["ok"]]
    out: dict[str, Any] = {
        "stage": k + 1,
        "rate_rps": stage.rate_rps,
        "concurrency": stage.concurrency,
        "start_s": start_ns / 1e9,
        "end_s": (start_ns + round(stage.duration_s * 1e9)) / 1e9,
        "window": window.to_json(t0_ns) if window is not None else None,
        "counts": agg.counts(),
        "throughput": agg.throughput(window),
        "latency_ms": agg.latency_ms(),
        "valid": bool(v["valid"]),
        "failed_checks": failed,
        "warnings": v["warnings"],
    }
    if client.open_loop:  # did the server keep up with this stage's offer? (loadgen.engine.keepup)
        out["server_kept_up"] = agg.kept_up()
    slo = agg.slo_result()
    if slo is not None:
        out["slo"] = slo
    return out
