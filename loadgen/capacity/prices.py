"""The prices file of ``loadgen plan``: a small TOML file, every bad value named by file, line and field.

Format (USD; every key optional unless said; at least one of ``[cloud]`` / ``[on_prem]``)::

    accelerators_per_replica = 1          # accelerators one measured system (replica) uses

    [cloud]
    on_demand_per_accelerator_hour = 4.00 # required in [cloud]
    reserved_per_accelerator_hour = 2.60  # a 1- or 3-year commitment, paid every hour
    spot_per_accelerator_hour = 1.40      # preemption not modelled
    scale_up_delay_s = 300                # autoscaled: a replica is paid from this long before it serves
    min_replicas = 1                      # autoscaled: never fewer

    [on_prem]
    capex_per_accelerator = 30000         # required in [on_prem]: purchase price incl. its server share
    lifetime_years = 4                    # straight-line amortisation (8766 h a year)
    power_w = 700                         # per accelerator at the measured capacity; default: the sweep's
                                          #   measured draw / accelerators (an error when it measured none)
    idle_power_w = 100                    # per accelerator with no load; default power_w (constant draw)
    electricity_per_kwh = 0.12
    pue = 1.3                             # facility power / IT power, >= 1
    support_per_accelerator_year = 2000
    networking_per_accelerator_year = 500
    ops_hours_per_accelerator_month = 2   # engineering hours
    ops_hour_usd = 120

Unknown keys and tables are refused (a typo would silently drop a cost), as are negative
or non-numeric values; :class:`loadgen.core.errors.InputFileError` names the file, the line of the
key and the field (``on_prem.pue``). TOML syntax errors keep tomllib's line.
"""

from __future__ import annotations

import math
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loadgen.core.errors import InputFileError

__all__ = ["HOURS_PER_YEAR", "CloudPrices", "OnPremPrices", "Prices", "load_prices"]

HOURS_PER_YEAR = 8766.0  # 365.25 days

_TOP = {"accelerators_per_replica"}
_CLOUD = {"on_demand_per_accelerator_hour", "reserved_per_accelerator_hour", "spot_per_accelerator_hour",
          "scale_up_delay_s", "min_replicas"}  # fmt: skip
_ON_PREM = {"capex_per_accelerator", "lifetime_years", "power_w", "idle_power_w", "electricity_per_kwh", "pue",
            "support_per_accelerator_year", "networking_per_accelerator_year", "ops_hours_per_accelerator_month",
            "ops_hour_usd"}  # fmt: skip


@dataclass(frozen=True)
class CloudPrices:
    on_demand_per_accelerator_hour: float
    reserved_per_accelerator_hour: float | None = None
    spot_per_accelerator_hour: float | None = None
    scale_up_delay_s: float = 0.0
    min_replicas: int = 1


@dataclass(frozen=True)
class OnPremPrices:
    capex_per_accelerator: float
    lifetime_years: float = 4.0
    power_w: float | None = None
    idle_power_w: float | None = None
    electricity_per_kwh: float = 0.0
    pue: float = 1.0
    support_per_accelerator_year: float = 0.0
    networking_per_accelerator_year: float = 0.0
    ops_hours_per_accelerator_month: float = 0.0
    ops_hour_usd: float = 0.0

    def fixed_per_accelerator_hour(self) -> float:
        """Owned-accelerator cost per hour without power: capex / (lifetime_years * 8766)
        + (support + networking) / 8766 + ops_hours_per_month * 12 * ops_hour_usd / 8766."""
        return (
            self.capex_per_accelerator / (self.lifetime_years * HOURS_PER_YEAR)
            + (self.support_per_accelerator_year + self.networking_per_accelerator_year) / HOURS_PER_YEAR
            + self.ops_hours_per_accelerator_month * 12 * self.ops_hour_usd / HOURS_PER_YEAR
        )


@dataclass(frozen=True)
class Prices:
    path: str
    accelerators_per_replica: int = 1
    cloud: CloudPrices | None = None
    on_prem: OnPremPrices | None = None

    def describe(self) -> dict[str, Any]:
        return {
            "file": self.path,
            "accelerators_per_replica": self.accelerators_per_replica,
            "cloud": None if self.cloud is None else dict(self.cloud.__dict__),
            "on_prem": None if self.on_prem is None else dict(self.on_prem.__dict__),
        }


def _key_lines(text: str) -> dict[str, int]:
    """``table.key`` (or ``key`` at the top) -> its 1-based line, for messages."""
    out: dict[str, int] = {}
    table = ""
    for i, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        m = re.match(r"^\[\s*([A-Za-z0-9_.\-]+)\s*\]", s)
        if m:
            table = m.group(1)
            out.setdefault(table, i)
            continue
        m = re.match(r"^([A-Za-z0-9_\-]+)\s*=", s)
        if m:
            out.setdefault(f"{table}.{m.group(1)}" if table else m.group(1), i)
    return out


def load_prices(path: str) -> Prices:
    """Read and check a prices file (format in the module docstring). Raises InputFileError."""
    p = Path(path)
    try:
        text = p.read_text()
    except FileNotFoundError:
        raise InputFileError(path, None, None, "no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputFileError(path, None, None, f"cannot read it ({exc})") from None
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        m = re.search(r"line (\d+)", str(exc))
        raise InputFileError(path, int(m.group(1)) if m else None, None, f"not valid TOML ({exc})") from None
    lines = _key_lines(text)

    def bad(key: str, message: str) -> InputFileError:
        return InputFileError(path, lines.get(key), key, message)

    def num(table: dict[str, Any], prefix: str, key: str, *, minimum: float = 0.0, integer: bool = False) -> Any:
        full = f"{prefix}.{key}" if prefix else key
        v = table[key]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise bad(full, f"must be a number, not {v!r}")
        if integer and v != int(v):
            raise bad(full, f"must be a whole number, not {v!r}")
        if v < minimum:
            raise bad(full, f"must be >= {minimum:g}, not {v!r}")
        return int(v) if integer else float(v)

    def fields(table: Any, prefix: str, allowed: set[str], ints: set[str], minima: dict[str, float]) -> dict[str, Any]:
        if not isinstance(table, dict):
            raise bad(prefix, "must be a table ([" + prefix + "])")
        out = {}
        for key in table:
            full = f"{prefix}.{key}"
            if key not in allowed:
                raise bad(full, f"unknown key; known keys of [{prefix}]: {', '.join(sorted(allowed))}")
            out[key] = num(table, prefix, key, integer=key in ints, minimum=minima.get(key, 0.0))
        return out

    for key in doc:
        if key not in _TOP | {"cloud", "on_prem"}:
            raise bad(key, "unknown key or table; known: accelerators_per_replica, [cloud], [on_prem]")
    acc = num(doc, "", "accelerators_per_replica", minimum=1, integer=True) if "accelerators_per_replica" in doc else 1
    cloud = on_prem = None
    if "cloud" in doc:
        c = fields(doc["cloud"], "cloud", _CLOUD, {"min_replicas"}, {})
        if "on_demand_per_accelerator_hour" not in c:
            raise bad("cloud", "[cloud] needs on_demand_per_accelerator_hour")
        cloud = CloudPrices(**c)
    if "on_prem" in doc:
        o = fields(doc["on_prem"], "on_prem", _ON_PREM, set(), {"pue": 1.0})
        if "capex_per_accelerator" not in o:
            raise bad("on_prem", "[on_prem] needs capex_per_accelerator")
        if o.get("lifetime_years", 1.0) <= 0:
            raise bad("on_prem.lifetime_years", "must be > 0")
        on_prem = OnPremPrices(**o)
    if cloud is None and on_prem is None:
        raise InputFileError(path, None, None, "no [cloud] or [on_prem] table: nothing to price")
    return Prices(path=path, accelerators_per_replica=acc, cloud=cloud, on_prem=on_prem)
