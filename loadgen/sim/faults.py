"""Fault injection of the simulated endpoint: which faults exist, how likely, and the draw.

A request gets at most one fault, drawn when it arrives (:func:`draw_fault`): one
uniform per kind in :data:`FAULT_KINDS` order, always, so a seeded run faults the
same requests whatever the probabilities of the kinds before. :class:`SimServer`
(:mod:`loadgen.sim.server`) plays the drawn fault: ``429`` and ``500`` answer at once;
``drop``, ``stall``, ``malformed`` and ``inband_error`` strike half-way through the
response.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

__all__ = ["FAULT_KINDS", "FaultConfig", "draw_fault"]

FAULT_KINDS: tuple[str, ...] = ("429", "500", "drop", "stall", "malformed", "inband_error")
"""Fault kinds, in the order they are drawn; a request gets at most the first that hits."""


@dataclass(frozen=True, slots=True)
class FaultConfig:
    """Fault injection: each ``p_*`` is a per-request probability in [0, 1].

    ``stall_ms`` is the mid-stream pause of a stall fault; ``slow_ms`` is extra
    latency added to every request before its first byte (not a probability).
    """

    p_429: float = 0.0
    p_500: float = 0.0
    p_drop: float = 0.0
    p_stall: float = 0.0
    p_malformed: float = 0.0
    p_inband_error: float = 0.0
    stall_ms: float = 1000.0
    slow_ms: float = 0.0

    def __post_init__(self) -> None:
        for kind in FAULT_KINDS:
            p = getattr(self, f"p_{kind}")
            if not 0.0 <= p <= 1.0:
                raise ValueError(f"fault probability for {kind} must be in [0, 1], got {p}")
        if not self.stall_ms >= 0.0 or not self.slow_ms >= 0.0:
            raise ValueError("stall_ms and slow_ms must be >= 0")

    def probabilities(self) -> tuple[float, ...]:
        """Probabilities in :data:`FAULT_KINDS` order."""
        return tuple(getattr(self, f"p_{kind}") for kind in FAULT_KINDS)


def draw_fault(rng: random.Random, probabilities: tuple[float, ...]) -> str | None:
    """Draw one request's fault: the first kind whose uniform falls under its probability.

    ``probabilities`` is :meth:`FaultConfig.probabilities`. Draws one uniform per kind,
    always (for reproducibility); returns the kind from :data:`FAULT_KINDS` or None.
    """
    hit = None
    for kind, p in zip(FAULT_KINDS, probabilities):
        u = rng.random()
        if hit is None and u < p:
            hit = kind
    return hit
