"""A mix of models or LoRA adapters on one endpoint (``--model a=0.7,b=0.3``).

Each request goes to one model of the mix, drawn by its weight from a hash of the request's index and
the run's seed (the same request to the same model on a rerun, the models interleaved evenly over the
run, not in blocks): one endpoint serving a base model and its adapters, or several models behind one
router, as production traffic does. ``--model a,b`` weighs them equally. The run's figures and SLO
verdicts are given per model as well (:mod:`loadgen.engine.models`, ``result.json`` ``by_model``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from loadgen.core.errors import ConfigError

__all__ = ["ModelMix", "index_unit", "parse_model_mix"]

_MIX = 0x9E3779B97F4A7C15  # the golden-ratio multiplier: consecutive indexes land far apart
_MASK = (1 << 64) - 1
MAX_MODELS = 64


def index_unit(index: int, seed: int) -> float:
    """A uniform number in [0, 1) of request ``index`` and ``seed`` (a splitmix64 finaliser): the same on a
    rerun, independent between neighbouring indexes. Chooses a request's model (here) and its walk-away
    (:mod:`loadgen.engine.abandon`)."""
    h = ((index + 1) * _MIX + seed * 0xBF58476D1CE4E5B9) & _MASK
    h ^= h >> 31
    h = (h * 0x94D049BB133111EB) & _MASK
    h ^= h >> 29
    return h / 2**64


@dataclass(frozen=True)
class ModelMix:
    """``names`` sent with probabilities ``weights`` (summing to 1)."""

    names: tuple[str, ...]
    weights: tuple[float, ...]
    seed: int = 0

    def pick(self, index: int) -> str:
        """The model of request ``index`` (a hash of the index and seed against the cumulative weights)."""
        u = index_unit(index, self.seed + 0x51)  # (another stream than --abandon's)
        acc = 0.0
        for name, w in zip(self.names, self.weights):
            acc += w
            if u < acc:
                return name
        return self.names[-1]

    def describe(self) -> dict[str, Any]:
        return {"models": dict(zip(self.names, self.weights)), "assign": "by weight, hashed from the request index"}


_ENTRY = re.compile(r"\s*([^=,\s][^=,]*?)\s*(?:=\s*([0-9.eE+]+)\s*)?")


def parse_model_mix(text: str | None, seed: int = 0) -> ModelMix | None:
    """``a=0.7,b=0.3`` or ``a,b`` -> :class:`ModelMix`; a single name (no ``,`` and no ``=``) -> None (one model).
    ConfigError names the entry."""
    if not text or ("," not in text and "=" not in text):
        return None
    names: list[str] = []
    weights: list[float] = []
    for i, raw in enumerate(text.split(","), 1):
        m = _ENTRY.fullmatch(raw)
        if not m:
            raise ConfigError(f"--model entry {i} {raw.strip()!r}: expected NAME or NAME=WEIGHT (a=0.7,b=0.3)")
        try:
            w = float(m.group(2)) if m.group(2) is not None else 1.0
        except ValueError:
            raise ConfigError(f"--model entry {i} {raw.strip()!r}: the weight is not a number") from None
        if not (w > 0 and w < float("inf")):
            raise ConfigError(f"--model entry {i} {raw.strip()!r}: the weight must be > 0")
        if m.group(1) in names:
            raise ConfigError(f"--model entry {i}: {m.group(1)!r} is given twice")
        names.append(m.group(1))
        weights.append(w)
    if len(names) > MAX_MODELS:
        raise ConfigError(f"--model: at most {MAX_MODELS} models in a mix")
    total = sum(weights)
    return ModelMix(tuple(names), tuple(w / total for w in weights), seed)
