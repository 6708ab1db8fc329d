"""Interactivity: throughput per accelerator against speed per user, the Pareto front, and prices on it.

One point per probe of a sweep (rate or concurrency) or per run: x = output tokens/s per
accelerator (the run's ``throughput.output_tps`` over its measurement window / accelerators),
y = output tokens/s per user = 1000 / TPOT p50 (ms), the speed one stream is read at (as
InferenceX and ``vllm bench sweep plot_pareto`` draw it). Probes stopped early, INVALID or
rate limited measured no steady load and give no point.

The **Pareto front** keeps the points no other point beats on both axes (more tok/s per
accelerator *and* more tok/s per user). Read off at a target speed per user y_t, the
throughput is interpolated linearly in y between the two front points around y_t (the front
is monotone: x falls as y rises, so the interpolation is monotone too); outside the front's
range there is no answer (None), never an extrapolation. At that throughput x_t:

* cost per million output tokens = hourly price per accelerator / (x_t x 3600) x 1e6
  (:func:`loadgen.core.pricing.hourly_cost_per_million_tokens_usd`);
* output tokens per joule = x_t / W per accelerator, W interpolated the same way between the
  two points' measured power (energy J / window s / accelerators), or a stated power.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loadgen.capacity.source import load_result
from loadgen.core.errors import InputFileError
from loadgen.core.pricing import hourly_cost_per_million_tokens_usd

__all__ = ["InteractivityPoint", "at_target", "pareto_front", "points_of"]


@dataclass(frozen=True)
class InteractivityPoint:
    label: str
    load: str  # "12.5 req/s" or "c16"
    tps_per_accelerator: float
    tps_per_user: float
    power_w_per_accelerator: float | None
    meets_slo: bool | None

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _point(label: str, load: str, res: dict[str, Any], acc: int, meets: bool | None) -> InteractivityPoint | None:
    out_tps = (res.get("throughput") or {}).get("output_tps")
    tpot = ((res.get("latency_ms") or {}).get("tpot") or {}).get("p50")
    if not out_tps or not tpot:
        return None
    joules = (res.get("energy") or {}).get("joules")
    window_s = (res.get("server") or {}).get("window_s")
    power = (joules / window_s / acc) if (joules and window_s) else None
    return InteractivityPoint(label, load, out_tps / acc, 1000.0 / tpot, power, meets)


def points_of(path: str, label: str, accelerators: int = 1) -> list[InteractivityPoint]:
    """The points of a sweep directory (one per probe with a steady load) or of a run directory.

    Raises InputFileError when the directory holds neither sweep.json nor result.json.
    """
    p = Path(path)
    if (p / "sweep.json").is_file() or p.name == "sweep.json":
        from loadgen.capacity.source import load_sweep

        cap = load_sweep(path, label)
        base = Path(cap.path).parent
        pts = []
        for pr, raw in zip(cap.probes, cap.doc.get("probes") or [], strict=False):
            if pr.stopped_early or pr.verdict not in ("pass", "fail") or not pr.dir:
                continue
            res = load_result(base / Path(pr.dir).name / "result.json")
            if res is None:
                continue
            load = f"c{pr.concurrency}" if pr.concurrency is not None else f"{raw.get('offered_rps') or 0:.2f} req/s"
            pt = _point(label, load, res, accelerators, pr.verdict == "pass")
            if pt is not None:
                pts.append(pt)
        return pts
    res = load_result(p / "result.json" if p.is_dir() else p)
    if res is None:
        raise InputFileError(path, None, None, "holds neither sweep.json nor result.json")
    slo = res.get("slo")
    pt = _point(label, "run", res, accelerators, bool(slo.get("met")) if slo else None)
    return [pt] if pt else []


def pareto_front(points: list[InteractivityPoint]) -> list[InteractivityPoint]:
    """The points not dominated on (tps_per_accelerator, tps_per_user), by rising tps_per_user."""
    front = []
    for p in points:
        dominated = any(
            q.tps_per_accelerator >= p.tps_per_accelerator
            and q.tps_per_user >= p.tps_per_user
            and (q.tps_per_accelerator > p.tps_per_accelerator or q.tps_per_user > p.tps_per_user)
            for q in points
        )
        if not dominated:
            front.append(p)
    return sorted(front, key=lambda p: (p.tps_per_user, -p.tps_per_accelerator))


def at_target(
    front: list[InteractivityPoint],
    target_tps_per_user: float,
    *,
    price_per_accelerator_hour: float | None = None,
    power_w_per_accelerator: float | None = None,
) -> dict[str, Any]:
    """Throughput per accelerator, cost per million output tokens and tokens per joule at a speed per user.

    ``front`` from :func:`pareto_front`; interpolation as in the module docstring. Values are
    None outside the front's range or without a price or power.
    """
    out: dict[str, Any] = {"target_tps_per_user": target_tps_per_user, "tps_per_accelerator": None,
                           "cost_per_million_output_tokens_usd": None, "output_tokens_per_joule": None,
                           "between": None}  # fmt: skip
    for a, b in zip(front, front[1:], strict=False):
        if a.tps_per_user <= target_tps_per_user <= b.tps_per_user:
            span = b.tps_per_user - a.tps_per_user
            f = (target_tps_per_user - a.tps_per_user) / span if span else 0.0
            x = a.tps_per_accelerator + f * (b.tps_per_accelerator - a.tps_per_accelerator)
            w = power_w_per_accelerator
            if w is None and a.power_w_per_accelerator is not None and b.power_w_per_accelerator is not None:
                w = a.power_w_per_accelerator + f * (b.power_w_per_accelerator - a.power_w_per_accelerator)
            out.update(tps_per_accelerator=x, between=[a.load, b.load], power_w_per_accelerator=w)
            break
    else:
        if len(front) == 1 and front[0].tps_per_user == target_tps_per_user:
            out.update(tps_per_accelerator=front[0].tps_per_accelerator, between=[front[0].load, front[0].load])
    x = out["tps_per_accelerator"]
    if x:
        out["cost_per_million_output_tokens_usd"] = hourly_cost_per_million_tokens_usd(price_per_accelerator_hour, x)
        w = out.get("power_w_per_accelerator") or power_w_per_accelerator
        out["output_tokens_per_joule"] = (x / w) if w else None
    return out
