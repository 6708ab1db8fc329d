"""Scaling efficiency across accelerator counts, from one sweep per size.

For sweeps of the same model and workload on N = 1, 2, 4, 8 accelerators (tensor or data
parallel), capacity(N) = the sweep's max SLO load (``answer.max_rate_rps``; req/s):

* capacity per accelerator = capacity(N) / N;
* efficiency(N) = capacity(N) / ((N / N0) x capacity(N0)), N0 the smallest size given (the
  textbook capacity(N) / (N x capacity(1)) when a 1-accelerator sweep is given); 1.0 is
  linear scaling;
* step efficiency from the next smaller size M: (capacity(N) / capacity(M)) / (N / M).

Each capacity carries its confidence interval [L, U) (:mod:`loadgen.capacity.confidence`);
the efficiency's bounds are L_N / ((N / N0) x U_N0) and U_N / ((N / N0) x L_N0) (None where an
end is unbounded), so an efficiency below 1 that its interval still covers is not a finding;
the base's own interval is [1, 1] (itself over itself).

A capacity that is only a bound (the sweep stopped at ``--max-rate``, at the client's limit or at the
provider's quota: ``limited_by`` ``max_rate`` / ``client`` / ``rate_limit``; the server may carry more) gives
no efficiency: a ratio with a censored capacity in it is "not measurable", its reason in the row's
``note`` (issue 35: "efficiency 50.0 %" was printed from two ``--max-rate`` caps).

:func:`scaling_table` wants an answer from every sweep (``loadgen capacity scaling``);
:func:`scaling_document` tables a series that may lack some (``loadgen sweep`` over a brace
list of sizes, :mod:`loadgen.cli.scale`), with notes, the rule in words and N0 the smallest
size that has an answer.
"""

from __future__ import annotations

from typing import Any

from loadgen.capacity.confidence import capacity_interval
from loadgen.capacity.source import SweepCapacity
from loadgen.core.errors import ConfigError

__all__ = ["EFFICIENCY_RULE", "scaling_document", "scaling_table"]

EFFICIENCY_RULE = (
    "efficiency(N) = capacity(N) / ((N / N0) x capacity(N0)), capacity = the sweep's max SLO load, N0 the smallest "
    "size with an answer; interval [L_N / ((N / N0) x U_N0), U_N / ((N / N0) x L_N0)] from the capacity intervals"
)


def scaling_table(sized: list[tuple[int, SweepCapacity]], confidence: float | None = None) -> list[dict[str, Any]]:
    """One row per size, smallest first (formulas in the module docstring). Raises ConfigError
    for a repeated size, a size < 1, a sweep without an answer or sweeps under different SLOs."""
    ordered = _checked(sized)
    c0 = ordered[0][1]
    if c0.max_rate_rps is None:
        raise ConfigError(f"{c0.path}: no rate met the SLO: no base capacity")
    for _, c in ordered:
        if c.max_rate_rps is None:
            raise ConfigError(f"{c.path}: no rate met the SLO")
    return _rows(ordered, confidence)


def _checked(sized: list[tuple[int, SweepCapacity]]) -> list[tuple[int, SweepCapacity]]:
    """``sized`` smallest first; ConfigError for none, a repeated size, a size < 1 or different SLOs."""
    if not sized:
        raise ConfigError("give at least one sweep with its accelerator count")
    sizes = [n for n, _ in sized]
    if len(set(sizes)) != len(sizes) or min(sizes) < 1:
        raise ConfigError(f"accelerator counts must be distinct and >= 1: {sizes}")
    slos = {tuple(c.slo_labels) for _, c in sized}
    if len(slos) > 1:
        raise ConfigError("the sweeps were judged on different SLOs: " + "; ".join(", ".join(s) for s in slos))
    return sorted(sized, key=lambda x: x[0])


def _rows(ordered: list[tuple[int, SweepCapacity]], confidence: float | None) -> list[dict[str, Any]]:
    """The table's rows for sizes ``ordered`` smallest first, every one with an answer."""
    rows: list[dict[str, Any]] = []
    n0, c0 = ordered[0]
    assert c0.max_rate_rps is not None
    ci0 = capacity_interval(c0, confidence)
    prev: tuple[int, float] | None = None
    prev_censored: str | None = None
    for n, c in ordered:
        assert c.max_rate_rps is not None
        ci = capacity_interval(c, confidence)
        k = n / n0
        eff = c.max_rate_rps / (k * c0.max_rate_rps)
        lo = (ci.lower_rps / (k * ci0.upper_rps)) if (ci.lower_rps is not None and ci0.upper_rps) else None
        hi = (ci.upper_rps / (k * ci0.lower_rps)) if (ci.upper_rps is not None and ci0.lower_rps) else None
        if n == n0:  # the base against itself: 1 by definition, not a ratio of two uncertain capacities
            lo = hi = 1.0
        step = (c.max_rate_rps / prev[1]) / (n / prev[0]) if prev else None
        row = {"accelerators": n, "label": c.label, "capacity_rps": c.max_rate_rps,
               "capacity_per_accelerator_rps": c.max_rate_rps / n, "efficiency": eff,
               "efficiency_ci": [lo, hi], "step_efficiency": step, "ci_rps": [ci.lower_rps, ci.upper_rps],
               "output_tps_per_accelerator": (c.output_tps / n) if c.output_tps else None}  # fmt: skip
        why = [] if n == n0 else [w for w in (_censored(c), _censored(c0)) if w]  # the base over itself: 1
        if why:  # a ratio with a bound in it is no measurement (module doc)
            row.update(efficiency=None, efficiency_ci=[None, None], note="efficiency not measurable: " + "; ".join(why))
        if prev is not None and (why or prev_censored):
            row["step_efficiency"] = None
        rows.append(row)
        prev, prev_censored = (n, c.max_rate_rps), _censored(c)
    return rows


_CENSOR = {"max_rate": "reached --max-rate", "client": "the client was the limit",
           "rate_limit": "the provider's quota (HTTP 429) was the limit"}  # fmt: skip


def _censored(c: SweepCapacity) -> str | None:
    """Why ``c``'s capacity is only a lower bound, or None when the sweep found where the SLO stops holding."""
    why = _CENSOR.get(c.limited_by or "")
    return f"{c.label}'s capacity is a lower bound ({why})" if why else None


def scaling_document(sized: list[tuple[int, SweepCapacity]], confidence: float | None = None) -> dict[str, Any]:
    """The scaling table of a series that may be incomplete (``loadgen sweep`` over sizes).

    As :func:`scaling_table`, but a size whose sweep has no answer (no rate met the SLO, or it
    was interrupted before one) gets a row with ``capacity_rps`` None and a note instead of an
    error, and the base N0 is the smallest size *with* an answer (said in ``notes``). A client-
    limited answer (``limited_by: client``) is a lower bound: noted. Raises ConfigError as
    :func:`scaling_table` for repeated sizes or different SLOs.
    """
    ordered = _checked(sized)
    answered = [(n, c) for n, c in ordered if c.max_rate_rps is not None]
    rows = {r["accelerators"]: r for r in (_rows(answered, confidence) if answered else [])}
    notes: list[str] = []
    out: list[dict[str, Any]] = []
    for n, c in ordered:
        if n in rows:
            r = rows[n]
            r["label"] = c.label
            out.append(r)
            continue
        out.append({"accelerators": n, "label": c.label, "capacity_rps": None, "capacity_per_accelerator_rps": None,
                    "efficiency": None, "efficiency_ci": [None, None], "step_efficiency": None, "ci_rps": [None, None],
                    "output_tps_per_accelerator": None, "note": "no rate met the SLO"})  # fmt: skip
        notes.append(f"{c.label} ({n} accelerators): no rate met the SLO: no capacity, no efficiency")
    if answered and answered[0][0] != ordered[0][0]:
        notes.append(f"efficiency is relative to {answered[0][0]} accelerators, the smallest size with an answer")
    if not answered:
        notes.append("no size has an answer: no scaling table")
    if any(_censored(c) for _, c in answered):
        notes.append("a capacity that is only a lower bound (--max-rate, the client or a quota stopped the sweep) "
                     "gives no efficiency: not measurable")  # fmt: skip
    return {"rule": EFFICIENCY_RULE, "base_accelerators": answered[0][0] if answered else None, "rows": out,
            "notes": notes}  # fmt: skip
