"""Durations and percentages as users type them: one parser each.

``parse_duration_ns('300ms')`` -> 300_000_000 (units ns, us, ms, s, m; a bare number takes
``default_unit``); ``parse_percent('5%')`` -> 0.05 (ratio flags are always percentages, a bare
number too). Both raise :class:`~loadgen.core.errors.ConfigError` with the offending text; the CLI
turns that into a usage error.
"""

from __future__ import annotations

import math
import re

from loadgen.core.errors import ConfigError

UNITS_NS = {"ns": 1, "us": 1_000, "ms": 1_000_000, "s": 1_000_000_000, "m": 60_000_000_000}


def parse_duration_ns(text: str, *, default_unit: str | None = None, what: str = "duration") -> int:
    """``'300ms'`` -> 300_000_000. Units: ns, us, ms, s, m. Raises ConfigError."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][-+]?\d+)?)\s*([a-z]*)\s*", text or "")
    if not m:
        raise ConfigError(f"invalid {what} {text!r}: expected a number with a unit, e.g. 300ms, 10s, 2m")
    unit = m.group(2) or default_unit
    if unit not in UNITS_NS:
        raise ConfigError(f"invalid {what} {text!r}: unit must be one of ns, us, ms, s, m")
    value = float(m.group(1)) * UNITS_NS[unit]
    if value < 0 or math.isinf(value):
        raise ConfigError(f"invalid {what} {text!r}")
    return int(round(value))


def parse_duration_s(text: str | None, what: str = "duration") -> float | None:
    """A duration in seconds (a bare number is seconds); ``None`` stays ``None``. Raises ConfigError."""
    if text is None:
        return None
    return parse_duration_ns(text, default_unit="s", what=what) / 1e9


def parse_percent(text: str, what: str = "percentage") -> float:
    """A percentage: ``5%`` or ``5`` -> 0.05, within 0 % .. 100 %. Raises ConfigError."""
    t = text.strip().removesuffix("%").strip()
    try:
        v = float(t)
    except ValueError:
        raise ConfigError(f"{what} {text!r}: expected a percentage such as 5%") from None
    if not 0 <= v <= 100:
        raise ConfigError(f"{what} {text!r}: a percentage between 0% and 100%")
    return v / 100
