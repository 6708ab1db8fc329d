"""Simulated OpenAI-compatible endpoint: a test double and demo server.

:mod:`loadgen.sim.model` is the pure continuous-batching model,
:mod:`loadgen.sim.server` serves it over HTTP with real timers
(:mod:`loadgen.sim.protocol`: request parsing and body shapes;
:mod:`loadgen.sim.faults`: fault injection),
:mod:`loadgen.sim.command` is the ``sim`` CLI command and
:mod:`loadgen.sim.launch` starts it in the background for tools and tests.
"""

from loadgen.sim.launch import SimProcess
from loadgen.sim.model import BatchModel, SimParams, simulate

__all__ = ["BatchModel", "SimParams", "SimProcess", "simulate"]
