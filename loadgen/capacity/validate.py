"""Validation by replay: the plan's claim checked, not assumed (``loadgen plan --validate``).

**The slice.** A time-compressed slice of the demand: by default the peak interval (the most
replicas, then the highest demand), ``time_scale`` K trace seconds replayed per second so that
it lasts ``seconds`` (K = the interval's duration / ``seconds`` unless given); or from a stated
trace time ``start_s`` for ``seconds`` x K trace seconds. Compression shortens the intervals and
keeps their rates: each interval i in the slice is replayed for its share of the slice / K at its
own mean rate d_i (requests/s; a demand in output tokens/s divided by its tokens per request), so
every replica sees the load the plan sized it for. Arrivals are the capacity sweep's own process
(``arrival``, Poisson by default) and lengths its own specs (``input_tokens``, ``output_tokens``),
drawn with a fixed seed and written as a loadgen trace (``replay.jsonl``), so the run is the
sweep's workload at the demand's rates. The replay starts from idle replicas and every request is
measured: a slice too short for queues to build flatters the fleet (an overloaded one still fails
within seconds: its queue grows by the excess rate every second).

**The fleet.** N replicas behind the client's balancer (:mod:`loadgen.endpoints.balance`): N the
most replicas the plan provisions in any interval of the slice (the replay does not autoscale
inside the slice), or a stated N. Replicas are the capacity sweep's simulated endpoint profile
(its ``--sim-args``, started by the command) or real endpoints given by the user.

**The verdict** (the run's own rules: :func:`loadgen.core.slo.run_target_verdict` per target over every
measured request, failures as misses; the client's validity from :mod:`loadgen.engine.validity`):

* ``held``: every target met and the client kept its schedule (VALID);
* ``not held``: a target missed in a VALID run; or, in a run the client could not keep (INVALID),
  a TTFT/E2E target still missed when each request's own schedule lag is taken off its value
  (a send late by L adds at most L to its latency, so those misses are the server's);
* ``invalid``: the client could not keep the schedule and its lag may explain the misses (or
  the SLO was met on a schedule not kept): no claim either way (re-run with ``--cpus``, a shorter
  slice, or on a quieter machine).

The client's bounds are the capacity sweep's own (``--max-schedule-lag``, ``--max-loop-lag``,
``--max-error-rate`` as it recorded them), so the plan is checked as its capacity was measured.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from loadgen.capacity.source import SweepCapacity
from loadgen.core.errors import ConfigError

__all__ = ["ReplaySlice", "judge_replay", "replay_load", "replay_slice", "sim_profile"]

DEFAULT_SEED = 19


@dataclass(frozen=True)
class Segment:
    """One demand interval's part of the slice: trace time [start_s, start_s + duration_s), replayed
    from ``replay_start_s`` for ``replay_s`` seconds at ``rate_rps``; ``replicas`` as planned."""

    start_s: float
    duration_s: float
    replay_start_s: float
    replay_s: float
    rate_rps: float
    replicas: int


@dataclass
class ReplaySlice:
    """The slice replayed (module docstring): trace start, K, replay seconds, its segments, the fleet."""

    start_s: float
    time_scale: float
    replay_s: float
    peak: bool
    segments: list[Segment] = field(default_factory=list)

    @property
    def planned_replicas(self) -> int:
        return max((s.replicas for s in self.segments), default=0)

    @property
    def expected_requests(self) -> float:
        return sum(s.rate_rps * s.replay_s for s in self.segments)

    def to_json(self) -> dict[str, Any]:
        return {
            "start_s": self.start_s,
            "trace_span_s": self.replay_s * self.time_scale,
            "time_scale": self.time_scale,
            "replay_s": self.replay_s,
            "peak_interval": self.peak,
            "planned_replicas": self.planned_replicas,
            "expected_requests": self.expected_requests,
            "segments": [dict(s.__dict__) for s in self.segments],
        }

    def text(self) -> str:
        what = "the peak interval" if self.peak else f"from {self.start_s:,.0f} s"
        rates = ", ".join(f"{s.rate_rps:,.2f}" for s in self.segments)
        return (f"{what} of the demand ({self.replay_s * self.time_scale:,.0f} trace s, {self.time_scale:g}x compressed "
                f"into {self.replay_s:g} s) at {rates} req/s")  # fmt: skip


def replay_slice(
    plan: dict[str, Any], *, seconds: float, time_scale: float | None = None, start_s: float | None = None
) -> ReplaySlice:
    """The slice of one system's plan (``plan.json`` ``plans[i]``: its ``intervals``) to replay.

    ``seconds``: wall seconds of the replay; ``time_scale``: trace seconds per replayed second
    (default: the chosen interval's duration / ``seconds``); ``start_s``: trace time where the slice
    starts (default: the peak interval's start). Raises ConfigError for a slice outside the demand.
    """
    rows = plan["intervals"]
    if not seconds > 0 or not math.isfinite(seconds):
        raise ConfigError("--validate-seconds must be > 0")
    if time_scale is not None and not (time_scale > 0 and math.isfinite(time_scale)):
        raise ConfigError("--validate-time-scale must be > 0")
    if not rows:
        raise ConfigError("the demand has no intervals: nothing to validate")
    if start_s is None:
        first = max(rows, key=lambda r: (r["replicas"], r["demand"]))
    else:
        inside = [r for r in rows if r["start_s"] <= start_s < r["start_s"] + r["duration_s"]]
        if not inside:
            end = rows[-1]["start_s"] + rows[-1]["duration_s"]
            raise ConfigError(
                f"--validate-start {start_s:g} s is outside the demand ({rows[0]['start_s']:g} to {end:g} s)"
            )
        first = inside[0]
    t0 = first["start_s"] if start_s is None else start_s
    k = time_scale if time_scale is not None else first["duration_s"] / seconds
    end = t0 + seconds * k
    sl = ReplaySlice(start_s=t0, time_scale=k, replay_s=seconds, peak=start_s is None)
    for r in rows:
        a, b = max(t0, r["start_s"]), min(end, r["start_s"] + r["duration_s"])
        if b <= a:
            continue
        rate = r["requests"] / r["duration_s"] if r["duration_s"] else 0.0
        if not math.isfinite(rate):
            raise ConfigError("the demand gives output tokens/s but no tokens per request: replay needs a request rate")
        sl.segments.append(Segment(a, b - a, (a - t0) / k, (b - a) / k, rate, int(r["replicas"])))
    sl.replay_s = sum(s.replay_s for s in sl.segments)  # a slice cut by the demand's end is shorter
    return sl


def sim_profile(cap: SweepCapacity) -> list[str] | None:
    """The ``loadgen sim`` flags of the capacity sweep's system, when it measured the embedded simulated
    endpoint (``config.embedded_simulated_endpoint`` and ``config.sim_args``); else None."""
    cfg = cap.doc.get("config") or {}
    if not cfg.get("embedded_simulated_endpoint"):
        return None
    return str(cfg.get("sim_args") or "").split()


def _lengths(spec: Any, mean: float | None, n: int, rng: np.random.Generator, what: str) -> np.ndarray:
    """``n`` lengths from the sweep's spec; its mean per request where the spec cannot be read here."""
    from loadgen.workload.lengths import parse_length_spec

    try:
        return parse_length_spec(spec if spec is not None else "", column=what).sample(n, rng)
    except Exception:  # an empirical:FILE of another machine, an unset spec: the measured mean
        if not mean:
            raise ConfigError(f"the capacity sweep's {what} lengths ({spec!r}) cannot be drawn here") from None
        return np.full(n, max(1, round(mean)), dtype=np.int64)


def replay_load(cap: SweepCapacity, sl: ReplaySlice, trace_path: Path, *, seed: int = DEFAULT_SEED) -> Any:
    """Write the slice's requests to ``trace_path`` (loadgen JSONL trace) and return the
    :class:`~loadgen.engine.runplan.LoadConfig` that replays it under the sweep's SLO and client bounds."""
    from loadgen.core.units import parse_duration_s
    from loadgen.engine.runplan import LoadConfig, WorkloadOptions
    from loadgen.engine.validity import ValidityBounds
    from loadgen.workload.arrivals import arrival_offsets_array

    cfg = cap.doc.get("config") or {}
    settings = cap.doc.get("settings") or {}
    kind = str(cfg.get("arrival") or "poisson")
    parts = []
    for i, s in enumerate(sl.segments):
        if s.rate_rps > 0 and s.replay_s > 0:
            off = arrival_offsets_array(kind, s.rate_rps, duration_s=s.replay_s, seed=seed + i,
                                        burstiness=float(cfg.get("burstiness") or 1.0))  # fmt: skip
            parts.append(off + round(s.replay_start_s * 1e9))
    offsets = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
    if offsets.size < 2:
        raise ConfigError(f"the slice ({sl.text()}) holds {offsets.size} requests: give a longer --validate-seconds")
    rng = np.random.default_rng(seed)
    ins = _lengths(cfg.get("input_tokens"), cap.input_tokens_per_request, offsets.size, rng, "input")
    outs = _lengths(cfg.get("output_tokens"), cap.output_tokens_per_request, offsets.size, rng, "output")
    trace_path.parent.mkdir(parents=True, exist_ok=True)
    with open(trace_path, "wb") as fh:
        for t, a, b in zip(offsets.tolist(), ins.tolist(), outs.tolist(), strict=True):
            fh.write(orjson.dumps({"timestamp_ms": t / 1e6, "input_tokens": a, "output_tokens": b}) + b"\n")

    def dur_ms(key: str, default_ms: float) -> float:
        v = cfg.get(key)
        s = parse_duration_s(str(v), key) if v else None
        return s * 1e3 if s is not None else default_ms

    lag_ms = settings.get("max_schedule_lag_ms")
    bounds = ValidityBounds(
        max_schedule_lag_p99_ms=float(lag_ms) if lag_ms else dur_ms("max_schedule_lag", 5.0),
        max_loop_lag_p99_ms=dur_ms("max_loop_lag", 10.0),
    )
    api = str(cfg.get("api") or "completions")
    wl = WorkloadOptions(input_tokens=str(cfg.get("input_tokens") or 128), output_tokens=cfg.get("output_tokens"),
                         trace=str(trace_path), trace_format="loadgen", api=api)  # fmt: skip
    return LoadConfig(bounds=bounds, input_tokens=wl.input_tokens, output_tokens=wl.output_tokens, seed=seed,
                      workload=wl, slos=list(cap.slos), drain_grace_s=30.0)  # fmt: skip


def _lag_free_values(requests_jsonl: Path, metric: str) -> np.ndarray:
    """Each measured request's ``metric`` (ttft or e2e) less its own schedule lag, in ns; +inf for a failure."""
    out: list[float] = []
    with open(requests_jsonl, "rb") as fh:
        for line in fh:
            if not line.strip():
                continue
            d = orjson.loads(line)
            if d.get("phase") != "measure":
                continue
            v = d.get(f"{metric}_ms")
            ok = d.get("status") == "ok" and (d.get("output_tokens") or 0) > 0 and v is not None
            out.append((float(v) - float(d.get("schedule_lag_ms") or 0.0)) * 1e6 if ok else math.inf)
    return np.sort(np.asarray(out, dtype=float))  # ns, as slo.run_target_verdict takes them


def judge_replay(result: dict[str, Any], run_dir: Path, cap: SweepCapacity) -> dict[str, Any]:
    """The replay's verdict (module docstring): ``{"verdict": "held"|"not held"|"invalid", "text",
    "valid", "targets"}``, targets as the run's ``slo.targets``."""
    from loadgen.core.slo import run_target_verdict

    slo = result.get("slo") or {}
    valid = bool((result.get("validity") or {}).get("valid"))
    met = bool(slo.get("met"))
    targets = slo.get("targets") or []
    missed = [t for t in targets if not t.get("met")]
    lag_proof: list[str] = []
    if not valid and missed:
        for t in cap.slos:
            if t.metric in ("ttft", "e2e"):
                entry = run_target_verdict(t, _lag_free_values(run_dir / "requests.jsonl", t.metric))
                if not entry["met"]:
                    lag_proof.append(t.label)
    words = "; ".join(_target_words(t) for t in targets)
    if valid and met:
        verdict, text = "held", f"the SLO held ({words})"
    elif valid or lag_proof:
        why = "" if valid else f" (with each request's schedule lag taken off: {', '.join(lag_proof)} still missed)"
        verdict, text = "not held", f"the SLO did not hold{why} ({words})"
    else:
        verdict = "invalid"
        text = ("the client could not keep the schedule, so the replay proves nothing either way "
                f"({words}); re-run with --cpus, a shorter --validate-seconds or on a quieter machine")  # fmt: skip
    return {"verdict": verdict, "text": text, "valid": valid, "slo_met": met, "targets": targets,
            "lag_free_misses": lag_proof}  # fmt: skip


def _target_words(t: dict[str, Any]) -> str:
    """``ttft:p99<=200ms: 1,043.2 ms, 512 of 700 over`` from a ``slo.targets`` entry."""
    v = t.get("value_ms")
    value = "no value" if v is None else f"{v:,.1f} ms"
    return f"{t.get('target')}: {value}, {t.get('exceedances')} of {t.get('denominator')} over"
