"""A sweep on the simulated endpoint's model, on a virtual clock: the coverage benchmark's fast mode.

``scripts/bench_capacity_ci --virtual`` runs the sweep's search (calibrate, start at half the
calibrated capacity, double to the first FAIL, geometric bisection to ``--precision``:
:meth:`loadgen.sweep.search.Sweep.search`) with each probe run on
:func:`loadgen.sim.model.simulate` instead of real time, and judged by the sweep's own code:
the counts and the dependence rule (:class:`loadgen.sweep.evidence.DependenceLog`,
:func:`~loadgen.sweep.evidence.dependent_verdict`, :func:`loadgen.sweep.verdict.target_verdict`),
the stability test (:func:`loadgen.core.stability.backlog_trend`), the early stop
(:func:`loadgen.core.slo.fail_count` over the largest possible probe) and the extension rule
(:func:`~loadgen.sweep.evidence.extension_verdict`: extended while undecided, up to
``max_extensions`` segments of the first one's size, each after the previous one drained). Left out: the client's timing (no INVALID), the tail-length rule
(E2E here is under 1 s against windows of 10 s and more) and the calibration run (the model's
capacity, :func:`loadgen.sim.model.capacity_rps`, stands in for the closed-loop measure).
``raw=True`` judges on the raw counts, as the sweep did before the dependence rule.
It writes a ``sweep.json`` that :func:`loadgen.capacity.load_sweep` reads.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from loadgen.core.slo import SLOTarget, TargetJudge, fail_count, judge_counts
from loadgen.core.stability import backlog_trend
from loadgen.core.stats import min_requests
from loadgen.sim.fifo import new_model
from loadgen.sim.model import SimParams, capacity_rps, simulate
from loadgen.sweep.evidence import DependenceLog, dependent_verdict, extension_verdict
from loadgen.sweep.verdict import target_verdict
from loadgen.workload.arrivals import arrival_offsets_array, condition_on_rate


@dataclass
class VirtualSweep:
    params: SimParams
    target: SLOTarget
    confidence: float
    precision: float
    probe_duration_s: float
    input_tokens: int = 32
    output_tokens: int = 1
    max_extensions: int = 2
    max_probes: int = 30
    raw: bool = False
    effective_extension: bool = False  # extend on effective counts (evidence.extension_verdict), not as the sweep does

    def warmup_s(self) -> float:
        return min(5.0, 0.1 * self.probe_duration_s)  # SweepConfig.warmup_s

    def _segment(self, rate: float, n: int, warm: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(scheduled_ns, first_token_ns, measured) of one segment run from an empty server."""
        offs = arrival_offsets_array("poisson", rate, count=warm + n, seed=seed)
        meas = np.arange(warm + n) >= warm
        offs = condition_on_rate(offs, meas, rate)
        res = simulate([(int(o), self.input_tokens, self.output_tokens) for o in offs], self.params,
                       model=new_model(self.params))  # fmt: skip
        by_arrival = sorted(res, key=lambda r: r.arrival_ns)
        first = np.asarray([r.first_token_ns for r in by_arrival], dtype=np.float64)
        return np.asarray([r.arrival_ns for r in by_arrival], dtype=np.int64), first, meas

    def probe(self, rate: float, seed: int, index: int) -> dict[str, Any]:
        """One probe at ``rate``: a ``sweep.json`` probe entry (verdict, targets, reasons)."""
        t = self.target
        need = min_requests(t.percentile, self.confidence)
        per_segment = max(need, math.ceil(rate * self.probe_duration_s))
        fail_k = fail_count(per_segment * (1 + self.max_extensions), t, self.confidence)
        dep = DependenceLog({0: t.threshold_ns})
        tj = TargetJudge(t)
        reasons: list[str] = []
        stopped = unstable = False
        segments = 0
        while True:
            warm = math.ceil(self.warmup_s() * rate) if segments == 0 else 0
            sched, first, meas = self._segment(rate, per_segment, warm, seed * 100_003 + 1000 * index + segments)
            segments += 1
            vals = (first - sched)[meas]
            over = np.cumsum(vals > t.threshold_ns) + tj.k
            hit = np.flatnonzero(over >= fail_k)
            cut = int(hit[0]) + 1 if hit.size else len(vals)  # the early stop: FAIL certain
            for j in range(cut):
                dep.add(0, int(sched[meas][j]), float(vals[j]))
            tj.n += cut
            tj.k += int((vals[:cut] > t.threshold_ns).sum())
            dep.end_segment()
            if hit.size:
                stopped = True
                break
            trends = backlog_trend(sched, first, np.full(len(sched), np.nan), meas)
            if any(x.growing for x in trends):
                unstable = True
                reasons.append("unstable: backlog growing")
                break
            if self.raw or not self.effective_extension:  # the sweep extends on raw counts (loadgen.sweep.probe)
                v = judge_counts(tj.k, tj.n, t, self.confidence)[0]
            else:
                v = extension_verdict(dep, 0, tj, self.confidence, segments, self.max_extensions)
            if segments > self.max_extensions or v != "undecided":
                break
        eff = None if self.raw else dep.effective(0, tj)
        v, low, *_ = dependent_verdict(tj, eff or tj, self.confidence, stopped)
        tv, point, text = target_verdict(tj.k, tj.n, t, self.confidence, stopped_early=stopped,
                                         fail_k=fail_k, eff=eff)  # fmt: skip
        verdict = "fail" if (unstable or v == "fail") else "pass"
        entry: dict[str, Any] = {"target": t.label, "verdict": tv, "verdict_text": text, "exceedances": tj.k,
                                 "requests": tj.n, "point_estimate": point}  # fmt: skip
        if eff is not None:
            entry.update(dep.facts(0, tj))
        return {"offered_rps": rate, "verdict": verdict, "low_confidence": bool(low and not stopped),
                "stopped_early": stopped, "targets": [entry], "reasons": reasons, "segments": segments,
                "virtual_s": tj.n / rate, "dir": None}  # fmt: skip

    def run(self, seed: int) -> dict[str, Any]:
        """The search of :meth:`loadgen.sweep.search.Sweep.search` (no INVALID probes): a ``sweep.json`` document."""
        cap = capacity_rps(self.params, self.input_tokens, self.output_tokens)
        r, r_min = cap / 2, cap / 128
        last_pass: float | None = None
        first_fail: float | None = None
        probes: list[dict[str, Any]] = []
        while len(probes) < self.max_probes:
            p = self.probe(r, seed, len(probes) + 1)
            probes.append(p)
            if p["verdict"] == "pass":
                last_pass = r if last_pass is None else max(last_pass, r)
                if first_fail is None:
                    r *= 2
                    continue
            else:
                first_fail = r if first_fail is None else min(first_fail, r)
                if last_pass is None:
                    if r <= r_min * 1.0001:
                        break
                    r = max(r / 2, r_min)
                    continue
            assert last_pass is not None and first_fail is not None
            if (first_fail - last_pass) / last_pass <= self.precision:
                break
            r = math.sqrt(last_pass * first_fail)
        answer_probe = next((p for p in probes if p["verdict"] == "pass" and p["offered_rps"] == last_pass), None)
        return {
            "answer": {
                "max_rate_rps": last_pass,
                "bracket_rps": [last_pass, first_fail],
                "point_estimate": bool(answer_probe and answer_probe["low_confidence"]),
            },  # fmt: skip
            "probes": probes,
            "slo": [{"target": self.target.label}],
            "settings": {
                "confidence": self.confidence,
                "precision": self.precision,
                "probe_duration_s": self.probe_duration_s,
                "min_requests_per_probe": min_requests(self.target.percentile, self.confidence),
                "virtual_clock": True,
                "evidence": "raw counts" if self.raw else "effective counts",
            },  # fmt: skip
            "virtual_s": sum(p["virtual_s"] for p in probes),
        }
