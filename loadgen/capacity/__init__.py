"""From measured capacity to a decision: capacity plans, costs, interactivity, scaling, confidence.

Reads what sweeps and runs wrote (``sweep.json``, ``result.json``); measures nothing.
:mod:`~loadgen.capacity.source` reads a sweep dir, :mod:`~loadgen.capacity.demand` a demand
(rate CSV or trace), :mod:`~loadgen.capacity.prices` the prices file,
:mod:`~loadgen.capacity.plan` the replicas per interval and their costs,
:mod:`~loadgen.capacity.confidence` the interval on the max SLO load and the regression gate,
:mod:`~loadgen.capacity.interactivity` the Pareto front, :mod:`~loadgen.capacity.scaling`
scaling efficiency, :mod:`~loadgen.capacity.render` the files.
"""

from loadgen.capacity.confidence import (
    CapacityInterval,
    capacity_interval,
    regression_gate,
    replicated_interval,
)
from loadgen.capacity.demand import Demand, read_demand
from loadgen.capacity.interactivity import at_target, pareto_front, points_of
from loadgen.capacity.plan import make_plan, plan_document, replicas_needed
from loadgen.capacity.prices import Prices, load_prices
from loadgen.capacity.scaling import scaling_table
from loadgen.capacity.source import SweepCapacity, load_sweep

__all__ = [
    "CapacityInterval",
    "Demand",
    "Prices",
    "SweepCapacity",
    "at_target",
    "capacity_interval",
    "load_prices",
    "load_sweep",
    "make_plan",
    "pareto_front",
    "plan_document",
    "points_of",
    "read_demand",
    "regression_gate",
    "replicated_interval",
    "replicas_needed",
    "scaling_table",
]
