"""Demand for a plan: intervals of a rate CSV, or a trace binned into intervals.

Two inputs, chosen by the file's header:

* **A rate CSV**: a header with ``start_s`` and one of ``rate_rps`` (requests/s) or
  ``output_tps`` (output tokens/s); optional ``duration_s`` (default: the next row's start
  minus this one's; the last row repeats the previous row's length, and a one-row file needs
  it), optional ``output_tokens_per_request`` and ``input_tokens_per_request`` (default: the
  sweep's own mix at its answer). Starts strictly increasing.
* **Any trace loadgen reads** (:func:`loadgen.workload.traces.read_trace`: Azure, BurstGPT,
  Mooncake, loadgen JSONL, ``builtin:NAME``): rows counted in bins of ``interval_s`` from the
  first row; rate_rps = rows in the bin / interval_s (every bin a full interval, the last
  one included), tokens summed per bin.

Rates are each interval's mean: bursts inside an interval are not seen (choose the interval
to match how fast the fleet can change). ``scale`` multiplies every rate and token count
(growth, or a busier day than the excerpt).
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from loadgen.core.errors import ConfigError, InputFileError
from loadgen.workload.traces import read_trace, resolve_trace_path

__all__ = ["Demand", "DemandInterval", "read_demand"]


@dataclass(frozen=True)
class DemandInterval:
    """[start_s, start_s + duration_s): ``rate_rps`` requests/s or ``output_tps`` tokens/s (the unit
    of the demand); token counts per request None where the input does not give them."""

    start_s: float
    duration_s: float
    rate_rps: float | None
    output_tps: float | None
    output_tokens_per_request: float | None
    input_tokens_per_request: float | None


@dataclass(frozen=True)
class Demand:
    source: str
    kind: str  # "rate_csv" or "trace:<format>"
    unit: str  # "rate_rps" or "output_tps": what capacity is matched against
    intervals: list[DemandInterval]

    @property
    def duration_s(self) -> float:
        return sum(i.duration_s for i in self.intervals)


def _float(text: str, path: str, line: int, field: str, *, positive: bool = False) -> float:
    try:
        v = float(text)
    except (TypeError, ValueError):
        raise InputFileError(path, line, field, f"not a number: {text!r}") from None
    if not math.isfinite(v) or v < 0 or (positive and v == 0):
        raise InputFileError(path, line, field, f"must be a finite number {'> 0' if positive else '>= 0'}: {text!r}")
    return v


def _rate_csv(path: str, header: list[str], scale: float) -> Demand:
    unit = "rate_rps" if "rate_rps" in header else "output_tps"
    rows: list[tuple[int, dict[str, str]]] = []
    with open(path, newline="") as fh:
        rd = csv.DictReader(fh, skipinitialspace=True)
        for row in rd:
            if any(v and v.strip() for v in row.values()):
                rows.append((rd.line_num, row))
    if not rows:
        raise InputFileError(path, 2, None, "no rows under the header")
    starts = [_float(r.get("start_s") or "", path, ln, "start_s") for ln, r in rows]
    for i in range(1, len(starts)):
        if starts[i] <= starts[i - 1]:
            raise InputFileError(path, rows[i][0], "start_s", "starts must be strictly increasing")
    out = []
    for i, (ln, r) in enumerate(rows):
        if r.get("duration_s"):
            dur = _float(r["duration_s"], path, ln, "duration_s", positive=True)
        elif i + 1 < len(rows):
            dur = starts[i + 1] - starts[i]
        elif i > 0:
            dur = starts[i] - starts[i - 1]
        else:
            raise InputFileError(path, ln, "duration_s", "a one-row demand needs duration_s")
        val = _float(r.get(unit) or "", path, ln, unit) * scale
        opr = _float(r["output_tokens_per_request"], path, ln, "output_tokens_per_request", positive=True) if r.get(
            "output_tokens_per_request") else None  # fmt: skip
        ipr = _float(r["input_tokens_per_request"], path, ln, "input_tokens_per_request") if r.get(
            "input_tokens_per_request") else None  # fmt: skip
        out.append(DemandInterval(starts[i], dur, val if unit == "rate_rps" else None,
                                  val if unit == "output_tps" else None, opr, ipr))  # fmt: skip
    return Demand(path, "rate_csv", unit, out)


def _trace(path: str, interval_s: float, scale: float) -> Demand:
    tr = read_trace(path)
    off_s = tr.offset_ns.astype(np.float64) / 1e9
    out_tok = tr.output_tokens.astype(np.float64)
    in_tok = tr.input_tokens.astype(np.float64)
    fmt = tr.format
    if off_s.size == 0:
        raise InputFileError(path, None, None, "the trace has no rows")
    off_s = off_s - off_s[0]
    bins = int(off_s[-1] // interval_s) + 1
    idx = np.minimum((off_s // interval_s).astype(np.int64), bins - 1)
    count = np.bincount(idx, minlength=bins)
    has_out = bool((out_tok >= 0).all())
    has_in = bool((in_tok >= 0).all())
    out_sum = np.bincount(idx, weights=out_tok, minlength=bins) if has_out else None
    in_sum = np.bincount(idx, weights=in_tok, minlength=bins) if has_in else None
    ivs = []
    for b in range(bins):
        n = int(count[b])
        ivs.append(DemandInterval(
            start_s=b * interval_s, duration_s=interval_s, rate_rps=n / interval_s * scale, output_tps=None,
            output_tokens_per_request=(float(out_sum[b]) / n) if (out_sum is not None and n) else None,
            input_tokens_per_request=(float(in_sum[b]) / n) if (in_sum is not None and n) else None))  # fmt: skip
    return Demand(path, f"trace:{fmt}", "rate_rps", ivs)


def read_demand(spec: str, *, interval_s: float = 60.0, scale: float = 1.0) -> Demand:
    """The demand intervals of ``spec`` (a rate CSV or a trace; see the module docstring).

    Raises InputFileError (file, line, field) for bad rows, ConfigError for bad options.
    """
    if not interval_s > 0 or not math.isfinite(interval_s):
        raise ConfigError("--interval must be > 0")
    if not scale > 0 or not math.isfinite(scale):
        raise ConfigError("--demand-scale must be > 0")
    path = resolve_trace_path(spec)
    if not spec.startswith("builtin:") and Path(path).suffix.lower() in (".csv", ""):
        with open(path, newline="") as fh:
            header = [h.strip() for h in (fh.readline().strip().split(","))]
        if "start_s" in header or "rate_rps" in header or "output_tps" in header:
            if "start_s" not in header:
                raise InputFileError(path, 1, "start_s", "a rate CSV needs a start_s column")
            if "rate_rps" in header and "output_tps" in header:
                raise InputFileError(path, 1, "output_tps", "give rate_rps or output_tps, not both")
            if "rate_rps" not in header and "output_tps" not in header:
                raise InputFileError(path, 1, "rate_rps", "a rate CSV needs rate_rps or output_tps")
            return _rate_csv(path, header, scale)
    return _trace(path, interval_s, scale)
