"""Per-model figures and SLO verdicts of a run over a model mix (``--model a=0.7,b=0.3``).

Each measured request is counted in the run's figures and in its model's own
:class:`~loadgen.engine.results.Aggregator`; ``result.json`` ``by_model`` gives each model its share of
the requests, counts, throughput (over the run's window: the models share one schedule), latency and
SLO verdict, and ``slo_every_model`` whether every model met every target (what a mix's answer is
judged on: a model that misses its SLO is not hidden by the others' requests).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from loadgen.core.metrics import RequestMetrics
from loadgen.core.slo import SLOTarget
from loadgen.core.types import RequestRecord
from loadgen.core.window import Window
from loadgen.engine.results import Aggregator
from loadgen.workload.models import ModelMix

__all__ = ["ModelLog"]


def _own(slos: list[SLOTarget], model: str) -> list[SLOTarget]:
    """The targets a model's requests are judged on, as that model's own run would state them (no ``@model``)."""
    own = {t.label: t for t in (SLOTarget(u.metric, u.percentile, u.threshold_ns) for u in slos if u.applies(model))}
    return list(own.values())


class ModelLog:
    """Each model's own aggregator, fed the measured requests that went to it."""

    def __init__(self, mix: ModelMix, slos: list[SLOTarget], spill_dir: Path | None) -> None:
        self.mix = mix
        self.aggs = {name: Aggregator(_own(slos, name), spill_dir) for name in mix.names}

    def add(self, rec: RequestRecord, m: RequestMetrics) -> None:
        agg = self.aggs.get(rec.model or "")
        if agg is not None and rec.phase == "measure":
            agg.add(rec, m)

    def close(self) -> None:
        for a in self.aggs.values():
            a.close()

    def results(self, window: Window | None, open_loop: bool) -> dict[str, Any]:
        """``result.json`` ``by_model``: per model its weight, counts, rates over the run's ``window``, latency
        and SLO verdict; ``slo_every_model``: every model met every target (None without targets)."""
        out: dict[str, Any] = {}
        every: bool | None = None
        for (name, agg), w in zip(self.aggs.items(), self.mix.weights):
            agg.open_loop = open_loop
            entry: dict[str, Any] = {
                "weight": w,
                "counts": agg.counts(),
                "tokens": agg.tokens(),
                "throughput": agg.throughput(window),
                "latency_ms": agg.latency_ms(),
            }
            slo = agg.slo_result()
            if slo is not None:
                entry["slo"] = slo
                every = bool(slo["met"]) if every is None else every and bool(slo["met"])
            out[name] = entry
        return {"models": out, "slo_every_model": every}
