"""Token-length distributions for ``--input-tokens`` / ``--output-tokens``.

Spec forms (lengths are integers, rounded to nearest and clipped to >= 1):

* ``N``: always N.
* ``uniform:A,B``: uniform integers in [A, B], both ends included.
* ``normal:MEAN,SD``: normal with that mean and standard deviation.
* ``lognormal:MEAN,SD``: log-normal whose *lengths* have that mean and SD
  (not the mean/SD of the log): sigma**2 = ln(1 + SD**2 / MEAN**2),
  mu = ln(MEAN) - sigma**2 / 2.
* ``empirical:FILE``: lengths drawn with replacement from a trace file's column
  (the input column for input lengths, the output column for output lengths;
  any trace format, up to its first 1,000,000 rows).

Sampling is seeded and independent of the request order: request ``i``'s length
comes from block ``i // 4096`` of a generator seeded with (seed, stream, block),
so open- and closed-loop runs with one seed give request ``i`` the same length.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass, field

import numpy as np

from loadgen.core.errors import ConfigError

__all__ = ["MAX_LENGTH_TOKENS", "LengthSpec", "parse_length_spec"]

_BLOCK = 4096
EMPIRICAL_MAX_ROWS = 1_000_000
MAX_LENGTH_TOKENS = 10_000_000
"""The longest length a spec may ask for (10 M tokens, past the longest context served today): a
typo such as ``--input-tokens 2000000000`` is refused at once instead of building a prompt that
exhausts memory. Against a server that says its ``max_model_len``, the run checks that too."""


def _bounded(text: str, n: float) -> None:
    if n > MAX_LENGTH_TOKENS:
        raise ConfigError(f"length spec {text!r}: {n:,.0f} tokens is over the limit of {MAX_LENGTH_TOKENS:,}")


@dataclass
class LengthSpec:
    """A parsed length distribution; :meth:`at` gives request ``i``'s length."""

    kind: str
    a: float = 0.0
    b: float = 0.0
    text: str = ""
    values: np.ndarray | None = None
    _cache: dict[tuple[int, int, int], np.ndarray] = field(default_factory=dict, repr=False)

    @property
    def mean(self) -> float:
        """The distribution's nominal mean (before rounding and clipping)."""
        if self.kind == "fixed":
            return self.a
        if self.kind == "uniform":
            return (self.a + self.b) / 2
        if self.kind in ("normal", "lognormal"):
            return self.a
        assert self.values is not None
        return float(self.values.mean())

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` lengths (int64, >= 1) from ``rng``."""
        if self.kind == "fixed":
            x = np.full(n, self.a)
        elif self.kind == "uniform":
            return rng.integers(int(self.a), int(self.b), n, endpoint=True).astype(np.int64)
        elif self.kind == "normal":
            x = rng.normal(self.a, self.b, n)
        elif self.kind == "lognormal":
            if self.b == 0:
                x = np.full(n, self.a)
            else:
                s2 = math.log1p((self.b / self.a) ** 2)
                x = rng.lognormal(math.log(self.a) - s2 / 2, math.sqrt(s2), n)
        else:
            assert self.values is not None
            return self.values[rng.integers(0, self.values.size, n)].copy()
        return np.maximum(np.rint(x), 1).astype(np.int64)

    def at(self, i: int, seed: int, stream: str) -> int:
        """Request ``i``'s length for ``seed``; ``stream`` separates input from output."""
        if self.kind == "fixed":
            return max(int(round(self.a)), 1)
        key = (seed, zlib.crc32(stream.encode()), i // _BLOCK)
        block = self._cache.get(key)
        if block is None:
            rng = np.random.default_rng([seed & 0xFFFFFFFF, key[1], key[2]])
            block = self.sample(_BLOCK, rng)
            if len(self._cache) > 64:
                self._cache.clear()
            self._cache[key] = block
        return int(block[i % _BLOCK])

    def describe(self) -> str:
        return self.text


def _numbers(spec: str, body: str, n: int) -> list[float]:
    parts = [p.strip() for p in body.split(",")]
    if len(parts) != n:
        raise ConfigError(f"length spec {spec!r}: expected {n} comma-separated numbers")
    try:
        vals = [float(p) for p in parts]
    except ValueError:
        raise ConfigError(f"length spec {spec!r}: not a number") from None
    if not all(math.isfinite(v) for v in vals):
        raise ConfigError(f"length spec {spec!r}: numbers must be finite")
    return vals


def parse_length_spec(spec: str | int, *, column: str = "input") -> LengthSpec:
    """Parse a length spec (module doc). ``column`` (input/output) picks an empirical column.

    Raises ConfigError for a malformed spec; InputFileError from an empirical file.
    """
    text = str(spec).strip()
    kind, sep, body = text.partition(":")
    if not sep:
        try:
            n = int(text)
        except ValueError:
            raise ConfigError(
                f"length spec {text!r}: expected N, uniform:A,B, normal:MEAN,SD, lognormal:MEAN,SD or empirical:FILE"
            ) from None
        if n < 1:
            raise ConfigError(f"length spec {text!r}: a length must be >= 1")
        _bounded(text, n)
        return LengthSpec("fixed", float(n), text=text)
    kind = kind.strip().lower()
    if kind == "uniform":
        lo, hi = _numbers(text, body, 2)
        if lo != int(lo) or hi != int(hi) or lo < 1 or hi < lo:
            raise ConfigError(f"length spec {text!r}: need integers 1 <= A <= B")
        _bounded(text, hi)
        return LengthSpec("uniform", lo, hi, text=text)
    if kind in ("normal", "lognormal"):
        mean, sd = _numbers(text, body, 2)
        if mean <= 0 or sd < 0:
            raise ConfigError(f"length spec {text!r}: need MEAN > 0 and SD >= 0")
        _bounded(text, mean + 10 * sd)
        return LengthSpec(kind, mean, sd, text=text)
    if kind == "empirical":
        from loadgen.workload.traces import read_trace

        if column not in ("input", "output"):
            raise ConfigError(f"empirical column must be input or output, not {column!r}")
        tr = read_trace(body.strip(), max_requests=EMPIRICAL_MAX_ROWS)
        vals = tr.input_tokens if column == "input" else tr.output_tokens
        vals = vals[vals >= 1]
        if vals.size == 0:
            raise ConfigError(f"length spec {text!r}: the file has no {column} lengths")
        return LengthSpec("empirical", text=text, values=vals.astype(np.int64))
    raise ConfigError(f"length spec {text!r}: unknown kind {kind!r}")
