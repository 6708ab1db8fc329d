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

Bounded (issue 35): a plan holds at most :data:`MAX_INTERVALS` intervals. A rate CSV with more rows is
read twice, streaming, and resampled to ``interval_s`` (each bin's rate the time-weighted mean of the rows
in it, token counts per request weighted by requests); a trace's bins likewise; more bins than that
even then is a one-line refusal naming ``--interval``. A rate over :data:`MAX_RATE_RPS` (tokens:
:data:`MAX_OUTPUT_TPS`) is refused with its row: no plan sizes a fleet for it. A file that is not UTF-8
text is one line too.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterator
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


MAX_INTERVALS = 100_000
"""The most intervals a demand holds (a minute each: 69 days); more rows are resampled to ``--interval``."""
MAX_RATE_RPS = 1e9
"""A demand rate above this (requests/s) is refused: no fleet is planned for it (1e308 overflowed the plan)."""
MAX_OUTPUT_TPS = 1e12
MAX_TOKENS_PER_REQUEST = 1e8


def _float(text: str, path: str, line: int, field: str, *, positive: bool = False, most: float = math.inf) -> float:
    try:
        v = float(text)
    except (TypeError, ValueError):
        raise InputFileError(path, line, field, f"not a number: {text!r}") from None
    if not math.isfinite(v) or v < 0 or (positive and v == 0):
        raise InputFileError(path, line, field, f"must be a finite number {'> 0' if positive else '>= 0'}: {text!r}")
    if v > most:
        raise InputFileError(path, line, field, f"{text} is over the limit of {most:g}: not a demand a plan sizes")
    return v


def _rows(path: str) -> Iterator[tuple[int, dict[str, str]]]:
    """The non-blank rows of a rate CSV with their line numbers, streamed (never all in memory)."""
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            rd = csv.DictReader(fh, skipinitialspace=True)
            for row in rd:
                if any(v and v.strip() for v in row.values() if isinstance(v, str)):
                    yield rd.line_num, row
    except UnicodeDecodeError as exc:
        raise InputFileError(path, None, None, f"not UTF-8 text (byte {exc.start}): not a demand CSV") from None


def _limit(unit: str) -> float:
    return MAX_RATE_RPS if unit == "rate_rps" else MAX_OUTPUT_TPS


def _rate_csv(path: str, header: list[str], scale: float, interval_s: float) -> Demand:
    unit = "rate_rps" if "rate_rps" in header else "output_tps"
    n = sum(1 for _ in _rows(path))
    if n > MAX_INTERVALS:
        return _resampled(path, unit, scale, interval_s)
    rows = list(_rows(path))
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
        val = _float(r.get(unit) or "", path, ln, unit, most=_limit(unit)) * scale
        opr, ipr = _per_request(r, path, ln)
        out.append(DemandInterval(starts[i], dur, val if unit == "rate_rps" else None,
                                  val if unit == "output_tps" else None, opr, ipr))  # fmt: skip
    return Demand(path, "rate_csv", unit, out)


def _per_request(r: dict[str, str], path: str, ln: int) -> tuple[float | None, float | None]:
    o, i = r.get("output_tokens_per_request"), r.get("input_tokens_per_request")
    opr = _float(o, path, ln, "output_tokens_per_request", positive=True, most=MAX_TOKENS_PER_REQUEST) if o else None
    ipr = _float(i, path, ln, "input_tokens_per_request", most=MAX_TOKENS_PER_REQUEST) if i else None
    return opr, ipr


@dataclass(frozen=True, slots=True)
class _Row:
    start: float
    dur: float | None
    val: float
    opr: float | None
    ipr: float | None


def _resampled(path: str, unit: str, scale: float, interval_s: float) -> Demand:
    """A rate CSV of more than :data:`MAX_INTERVALS` rows in bins of ``interval_s`` (module doc), streamed."""
    acc: dict[int, list[float]] = {}  # bin -> [Σ value x s, Σ s, Σ requests x opr, Σ requests (opr), same for ipr]
    prev: _Row | None = None
    gap: float | None = None

    def add(start: float, dur: float, val: float, opr: float | None, ipr: float | None) -> None:
        t, end = start, start + dur
        while t < end:  # a row that spans bins is split at their edges
            b = int(t // interval_s)
            cut = min(end, (b + 1) * interval_s)
            a = acc.setdefault(b, [0.0] * 6)
            if len(acc) > MAX_INTERVALS:
                raise InputFileError(path, None, None, f"over {MAX_INTERVALS:,} intervals of {interval_s:g} s even "
                                     "resampled: give a longer --interval")  # fmt: skip
            w = cut - t
            a[0] += val * w
            a[1] += w
            for k, per in ((2, opr), (4, ipr)):
                if per is not None:
                    a[k] += val * w * per
                    a[k + 1] += val * w
            t = cut

    for ln, r in _rows(path):
        start = _float(r.get("start_s") or "", path, ln, "start_s")
        if prev is not None:
            if start <= prev.start:
                raise InputFileError(path, ln, "start_s", "starts must be strictly increasing")
            gap = start - prev.start
            add(prev.start, prev.dur if prev.dur is not None else gap, prev.val, prev.opr, prev.ipr)
        dur = _float(r["duration_s"], path, ln, "duration_s", positive=True) if r.get("duration_s") else None
        val = _float(r.get(unit) or "", path, ln, unit, most=_limit(unit)) * scale
        prev = _Row(start, dur, val, *_per_request(r, path, ln))
    if prev is not None:  # the last row: its duration_s, or the row before's length (as an unresampled file)
        add(prev.start, prev.dur if prev.dur is not None else gap or interval_s, prev.val, prev.opr, prev.ipr)
    out = []
    for b in sorted(acc):
        v, secs, so, no, si, ni = acc[b]  # a bin the rows cover in part is that part (its mean over it)
        out.append(DemandInterval(b * interval_s, secs, v / secs if unit == "rate_rps" else None,
                                  v / secs if unit == "output_tps" else None, so / no if no else None,
                                  si / ni if ni else None))  # fmt: skip
    return Demand(path, "rate_csv:resampled", unit, out)


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
    if bins > MAX_INTERVALS:
        raise InputFileError(path, None, None, f"{bins:,} intervals of {interval_s:g} s is over the limit of "
                             f"{MAX_INTERVALS:,}: give a longer --interval")  # fmt: skip
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
        try:
            with open(path, newline="", encoding="utf-8") as fh:
                header = [h.strip() for h in (fh.readline(1 << 16).strip().split(","))]
        except UnicodeDecodeError as exc:
            raise InputFileError(path, 1, None, f"not UTF-8 text (byte {exc.start}): not a demand CSV") from None
        except OSError as exc:
            raise InputFileError(path, None, None, exc.strerror or str(exc)) from None
        if "start_s" in header or "rate_rps" in header or "output_tps" in header:
            if "start_s" not in header:
                raise InputFileError(path, 1, "start_s", "a rate CSV needs a start_s column")
            if "rate_rps" in header and "output_tps" in header:
                raise InputFileError(path, 1, "output_tps", "give rate_rps or output_tps, not both")
            if "rate_rps" not in header and "output_tps" not in header:
                raise InputFileError(path, 1, "rate_rps", "a rate CSV needs rate_rps or output_tps")
            return _rate_csv(path, header, scale, interval_s)
    return _trace(path, interval_s, scale)
