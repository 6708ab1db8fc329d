"""The capacity plan: replicas per demand interval at the measured capacity, and what they cost.

**Capacity of one replica** (one measured system, ``accelerators_per_replica`` accelerators):
c = the sweep's max SLO load (``answer.max_rate_rps``, the highest offered rate whose probe
met every target; for a demand in output tokens/s the output_tps measured at that rate).
The model between measured points is the sweep's own: the SLO is known to hold at the
highest passing probe and not above it, so no interpolation upward; below it the SLO holds
(the search assumes exceedances non-decreasing in rate). N replicas behind a balancer that
splits the load evenly carry N x c (independent replicas; an even split of a Poisson stream
is no burstier than the stream a probe sent, so this is not optimistic).

**Per interval** i of the demand (rate d_i over duration t_i):

* usable capacity per replica c_h = c x (1 - headroom);
* replicas needed n_i = ceil(d_i / c_h) (0 when d_i = 0);
* utilisation u_i = d_i / (n_i x c): the share of the provisioned SLO capacity in use.

**Costs** over the demand's whole span T = sum t_i, A accelerators per replica, peak N = max n_i:

* cloud on-demand, fleet for the peak: N x A x p_od x T / 3600;
* cloud reserved (and spot), fleet for the peak: N x A x p x T / 3600;
* cloud autoscaled (on-demand price): interval i is provisioned m_i = max(min_replicas,
  max n_j over the intervals j that overlap [start_i, end_i + scale_up_delay_s)) -- a replica
  is started (and paid) the scale-up delay before the interval that needs it, and released at
  the end of the last interval that does; at interval granularity (an interval that holds part
  of a delay is paid whole, so the figure errs high); cost = sum m_i x A x p_od x t_i / 3600;
* on-premises, N replicas owned: fixed = N x A x F x T / 3600, F the owned accelerator's cost
  per hour without power (:meth:`~loadgen.capacity.prices.OnPremPrices.fixed_per_accelerator_hour`);
  energy = sum over i of A x (n_i x P(u_i) + (N - n_i) x P_idle) x t_i / 3600 / 1000 x PUE
  kWh at the electricity price, P(u) = P_idle + (P - P_idle) x u per accelerator, P the draw at
  the measured capacity (the prices file's ``power_w``, else the sweep's measured energy /
  window / accelerators), P_idle ``idle_power_w`` (default P).

**Per unit**: cost per million output tokens = cost / output tokens of the demand x 1e6 (tokens
from the trace, or rate x duration x output tokens per request, the CSV's or else the sweep's
own mix); cost per successful request = cost / the demand's requests (the plan is sized so that
every request meets the SLO).

**Break-even utilisation** (cloud on-demand against on-premises): an owned accelerator costs
F + P x PUE / 1000 x electricity per hour (at full draw) whether busy or not; renting costs
p_od per hour used. Owning is cheaper when the fraction of owned hours that would be rented
exceeds u* = (F + P x PUE / 1000 x e) / p_od. The plan's own figure to set against it is the
fleet's duty = sum n_i t_i / (N T).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from loadgen.capacity.demand import Demand
from loadgen.capacity.prices import Prices
from loadgen.capacity.source import SweepCapacity
from loadgen.core.errors import ConfigError

__all__ = ["CapacityPlan", "make_plan", "replicas_needed"]


def replicas_needed(demand: float, capacity: float, headroom: float) -> int:
    """ceil(demand / (capacity x (1 - headroom))); 0 for no demand. Float noise below 1e-9 is not a replica."""
    if demand <= 0:
        return 0
    x = demand / (capacity * (1.0 - headroom))
    return max(1, math.ceil(x - 1e-9))


@dataclass
class CapacityPlan:
    label: str
    unit: str
    capacity_per_replica: float
    headroom: float
    rows: list[dict[str, Any]]
    costs: dict[str, Any]
    summary: dict[str, Any]
    notes: list[str]

    def to_json(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "unit": self.unit,
            "capacity_per_replica": self.capacity_per_replica,
            "headroom": self.headroom,
            "intervals": self.rows,
            "costs": self.costs,
            "summary": self.summary,
            "notes": self.notes,
        }


def _capacity(cap: SweepCapacity, unit: str) -> float:
    if cap.max_rate_rps is None:
        raise ConfigError(f"{cap.path}: no rate met the SLO in this sweep: it has no capacity to plan with")
    if unit == "rate_rps":
        return float(cap.max_rate_rps)
    if not cap.output_tps:
        raise ConfigError(f"{cap.path}: the answer has no output_tps: plan in rate_rps instead")
    return float(cap.output_tps)


def make_plan(cap: SweepCapacity, demand: Demand, prices: Prices | None, headroom: float) -> CapacityPlan:
    """The plan of the module docstring for one measured system. Raises ConfigError for unusable inputs."""
    if not 0 <= headroom < 1:
        raise ConfigError("--headroom must be in [0 %, 100 %)")
    c = _capacity(cap, demand.unit)
    acc = prices.accelerators_per_replica if prices else (cap.accelerators or 1)
    notes = []
    if cap.limited_by == "client":
        notes.append("the sweep's answer is a lower bound (client limited): replicas may be over-counted")
    if cap.point_estimate:
        notes.append("the sweep's answer is a point estimate (thin evidence)")
    if any(pr.concurrency is not None for pr in cap.probes):
        notes.append("capacity from a concurrency sweep: the request rate its users achieved at the answer; "
                     "open-loop arrivals at that rate are burstier, so the plan may be optimistic")  # fmt: skip
    rows: list[dict[str, Any]] = []
    out_tokens = 0.0
    requests = 0.0
    for iv in demand.intervals:
        d = iv.rate_rps if demand.unit == "rate_rps" else iv.output_tps
        assert d is not None
        n = replicas_needed(d, c, headroom)
        opr = iv.output_tokens_per_request or cap.output_tokens_per_request
        if demand.unit == "rate_rps":
            req = d * iv.duration_s
            tok = req * opr if opr else math.nan
        else:
            tok = d * iv.duration_s
            req = tok / opr if opr else math.nan
        out_tokens += tok
        requests += req
        rows.append({"start_s": iv.start_s, "duration_s": iv.duration_s, "demand": d, "replicas": n,
                     "accelerators": n * acc, "utilisation": (d / (n * c)) if n else None,
                     "provisioned_capacity": n * c, "output_tokens": tok, "requests": req})  # fmt: skip
    ipr = [iv.input_tokens_per_request for iv in demand.intervals if iv.input_tokens_per_request]
    if ipr and cap.input_tokens_per_request and cap.output_tokens_per_request:
        opr_all = [iv.output_tokens_per_request for iv in demand.intervals if iv.output_tokens_per_request]
        mi, mo = sum(ipr) / len(ipr), (sum(opr_all) / len(opr_all)) if opr_all else cap.output_tokens_per_request
        if abs(mi / cap.input_tokens_per_request - 1) > 0.2 or abs(mo / cap.output_tokens_per_request - 1) > 0.2:
            notes.append(
                f"the demand's mean request ({mi:.0f} in / {mo:.0f} out tokens) differs by over 20 % from the "
                f"sweep's ({cap.input_tokens_per_request:.0f} / {cap.output_tokens_per_request:.0f}): its "
                "capacity was measured on another mix; sweep with the trace's lengths for a true figure"
            )
    peak = max((r["replicas"] for r in rows), default=0)
    span_s = demand.duration_s
    duty = sum(r["replicas"] * r["duration_s"] for r in rows) / (peak * span_s) if peak and span_s else None
    costs = _costs(rows, prices, cap, acc, peak, span_s, c) if prices else {}
    for model in costs.values():
        total = model["total_usd"]
        model["per_million_output_tokens_usd"] = (total / out_tokens * 1e6) if out_tokens > 0 else None
        model["per_successful_request_usd"] = (total / requests) if requests > 0 else None
    summary = {
        "peak_replicas": peak,
        "peak_accelerators": peak * acc,
        "accelerators_per_replica": acc,
        "replica_hours": sum(r["replicas"] * r["duration_s"] for r in rows) / 3600.0,
        "fleet_duty": duty,
        "mean_utilisation": _mean_util(rows),
        "span_s": span_s,
        "output_tokens": out_tokens,
        "requests": requests,
        "break_even_utilisation": _break_even(prices, cap, acc),
    }
    return CapacityPlan(cap.label, demand.unit, c, headroom, rows, costs, summary, notes)


def _mean_util(rows: list[dict[str, Any]]) -> float | None:
    """Time-weighted utilisation over the intervals with demand."""
    w = [(r["utilisation"], r["duration_s"]) for r in rows if r["utilisation"] is not None]
    tot = sum(d for _, d in w)
    return sum(u * d for u, d in w) / tot if tot else None


def _power(prices: Prices, cap: SweepCapacity, acc: int) -> tuple[float, float, str]:
    """(P, P_idle, source) per accelerator in W."""
    op = prices.on_prem
    assert op is not None
    if op.power_w is not None:
        p, src = op.power_w, f"{prices.path}: on_prem.power_w"
    elif cap.power_w is not None:
        p, src = cap.power_w / (cap.accelerators or acc), f"{cap.path}: measured energy / window"
    else:
        raise ConfigError(f"{prices.path}: on_prem.power_w is needed: the sweep {cap.path} measured no energy")
    return p, (op.idle_power_w if op.idle_power_w is not None else p), src


def _break_even(prices: Prices | None, cap: SweepCapacity, acc: int) -> float | None:
    if prices is None or prices.cloud is None or prices.on_prem is None:
        return None
    p, _, _ = _power(prices, cap, acc)
    op = prices.on_prem
    owned = op.fixed_per_accelerator_hour() + p * op.pue / 1000.0 * op.electricity_per_kwh
    return owned / prices.cloud.on_demand_per_accelerator_hour if prices.cloud.on_demand_per_accelerator_hour else None


def _costs(rows: list[dict[str, Any]], prices: Prices, cap: SweepCapacity, acc: int, peak: int, span_s: float,
           c: float) -> dict[str, Any]:  # fmt: skip
    out: dict[str, Any] = {}
    h = span_s / 3600.0
    cl = prices.cloud
    if cl is not None:
        out["cloud_on_demand"] = {"total_usd": peak * acc * cl.on_demand_per_accelerator_hour * h,
                                  "how": "fleet for the peak, every hour, at the on-demand price"}  # fmt: skip
        if cl.reserved_per_accelerator_hour is not None:
            out["cloud_reserved"] = {"total_usd": peak * acc * cl.reserved_per_accelerator_hour * h,
                                     "how": "fleet for the peak, every hour, at the reserved price"}  # fmt: skip
        if cl.spot_per_accelerator_hour is not None:
            out["cloud_spot"] = {"total_usd": peak * acc * cl.spot_per_accelerator_hour * h,
                                 "how": "fleet for the peak at the spot price (preemption not modelled)"}  # fmt: skip
        total = 0.0
        for r in rows:
            end = r["start_s"] + r["duration_s"] + cl.scale_up_delay_s
            need = max((x["replicas"] for x in rows if x["start_s"] < end and x["start_s"] + x["duration_s"] > r["start_s"]),
                       default=0)  # fmt: skip
            r["autoscaled_replicas"] = max(cl.min_replicas, need)
            total += r["autoscaled_replicas"] * acc * cl.on_demand_per_accelerator_hour * r["duration_s"] / 3600.0
        out["cloud_autoscaled"] = {"total_usd": total, "how": f"per interval, replicas started {cl.scale_up_delay_s:g} s "
                                   f"before they serve (min {cl.min_replicas}), on-demand price"}  # fmt: skip
    op = prices.on_prem
    if op is not None:
        p, p_idle, src = _power(prices, cap, acc)
        fixed = peak * acc * op.fixed_per_accelerator_hour() * h
        kwh = 0.0
        for r in rows:
            u = r["utilisation"] or 0.0
            watts = acc * (r["replicas"] * (p_idle + (p - p_idle) * u) + (peak - r["replicas"]) * p_idle)
            kwh += watts * r["duration_s"] / 3600.0 / 1000.0 * op.pue
        out["on_prem"] = {"total_usd": fixed + kwh * op.electricity_per_kwh, "fixed_usd": fixed, "energy_kwh": kwh,
                          "energy_usd": kwh * op.electricity_per_kwh, "power_w_per_accelerator": p,
                          "idle_power_w_per_accelerator": p_idle, "power_source": src,
                          "how": "fleet for the peak owned (capex amortised, support, networking, ops hours), "
                          "power by utilisation x PUE"}  # fmt: skip
    return out


MODEL_TEXT = (
    "replica capacity = the sweep's highest passing rate (no interpolation above it); N replicas carry N x that "
    "(even split); replicas = ceil(demand / (capacity x (1 - headroom))) per interval at the interval's mean demand"
)


def plan_document(
    caps: list[SweepCapacity], demand: Demand, prices: Prices | None, headroom: float, confidence: float | None = None
) -> dict[str, Any]:
    """``plan.json``: the demand, one plan per measured system (with its capacity interval), and the model.

    Raises ConfigError when a system has no capacity or the systems were judged on different SLOs.
    """
    from loadgen.capacity.confidence import capacity_interval

    if len({tuple(c.slo_labels) for c in caps}) > 1:
        raise ConfigError("the sweeps were judged on different SLOs (" + "; ".join(
            f"{c.label}: {', '.join(c.slo_labels)}" for c in caps) + "): one plan holds one SLO")  # fmt: skip
    plans = []
    for cap in caps:
        p = make_plan(cap, demand, prices, headroom).to_json()
        ci = capacity_interval(cap, confidence)
        p["capacity_interval"] = {**ci.to_json(), "text": ci.text()}
        p["source"] = cap.path
        p["slo"] = cap.slo_labels
        plans.append(p)
    return {
        "demand": {
            "source": demand.source,
            "kind": demand.kind,
            "unit": demand.unit,
            "span_s": demand.duration_s,
            "intervals": [dict(iv.__dict__) for iv in demand.intervals],
        },
        "headroom": headroom,
        "model": MODEL_TEXT,
        "prices": prices.describe() if prices else None,
        "plans": plans,
    }
