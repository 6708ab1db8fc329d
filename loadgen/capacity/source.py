"""A sweep directory read as measured capacity: the answer, its probes' evidence, its rates and power.

:func:`load_sweep` reads ``sweep.json`` (and the answer probe's ``result.json`` for its
power draw and token mix) into a :class:`SweepCapacity`. Nothing is re-measured or
re-judged here: every number is the sweep's own (``answer``, ``probes[i].targets``),
so a plan or an interval computed from it can be checked by hand against the file.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loadgen.core.contract import load_versioned
from loadgen.core.errors import InputFileError
from loadgen.core.slo import SLOTarget, parse_slo

_REASON = re.compile(r"^(\S+): (\d+) of (\d+) over")

__all__ = ["ProbeEvidence", "SweepCapacity", "load_result", "load_sweep"]


@dataclass(frozen=True)
class ProbeEvidence:
    """One probe's load and its per-target exceedance counts (``sweep.json`` ``probes[i]``).

    ``counts``: target label -> (k exceedances, n judged requests); only targets judged
    request by request (not ITL) carry counts.
    """

    rate_rps: float | None
    concurrency: int | None
    verdict: str
    low_confidence: bool
    stopped_early: bool
    counts: dict[str, tuple[int, int]]
    dir: str | None


@dataclass
class SweepCapacity:
    """What one sweep measured, in the terms a plan needs.

    * ``max_rate_rps``: the highest offered rate that met every target (``answer.max_rate_rps``;
      a concurrency sweep: the request rate achieved at its answer).
    * ``output_tps``: output tokens/s measured at that rate (the answer probe's window).
    * ``output_tokens_per_request`` / ``input_tokens_per_request``: the answer probe's token mix,
      output_tps / request_rps and input_tps / request_rps (``throughput``, same window).
    * ``power_w``: the answer probe's mean server power, energy J / energy window s (all
      accelerators together), or None when the run measured no energy.
    """

    label: str
    path: str
    slos: list[SLOTarget]
    confidence: float
    max_rate_rps: float | None
    bracket_rps: tuple[float | None, float | None]
    output_tps: float | None
    request_rps: float | None
    output_tokens_per_request: float | None
    input_tokens_per_request: float | None
    power_w: float | None
    accelerators: int | None
    point_estimate: bool
    limited_by: str | None
    probes: list[ProbeEvidence] = field(default_factory=list)
    doc: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def slo_labels(self) -> list[str]:
        return sorted(t.label for t in self.slos)


def load_result(path: Path) -> dict[str, Any] | None:
    """A probe's ``result.json``, or None when it is not there (a sweep copied without its probes)."""
    if not path.is_file():
        return None
    return load_versioned(path, "result")  # loadgen.core.contract: a newer result.json is refused in one line


def _power_w(res: dict[str, Any] | None) -> float | None:
    """Mean server power over a run: ``energy.joules`` / ``server.window_s`` (W), None unmeasured."""
    if not res:
        return None
    joules = (res.get("energy") or {}).get("joules")
    window_s = (res.get("server") or {}).get("window_s")
    return joules / window_s if joules and window_s else None


def load_sweep(path: str, label: str | None = None) -> SweepCapacity:
    """Read a sweep directory (or its ``sweep.json``). Raises InputFileError naming the file and field."""
    p = Path(path)
    f = p / "sweep.json" if p.is_dir() else p
    doc = load_versioned(f, "sweep")  # loadgen.core.contract: a newer sweep.json is refused in one line
    if "answer" not in doc or "probes" not in doc:
        raise InputFileError(str(f), None, "answer", "not a sweep.json (no answer or probes): give a sweep directory")
    try:
        slos = [parse_slo(t["target"]) for t in doc.get("slo") or []]
    except Exception as exc:
        raise InputFileError(str(f), None, "slo", f"unreadable SLO target ({exc})") from None
    a = doc["answer"] or {}
    settings = doc.get("settings") or {}
    probes = []
    at = None
    for i, pr in enumerate(doc["probes"]):
        if not isinstance(pr, dict) or "verdict" not in pr:
            raise InputFileError(str(f), None, f"probes[{i}]", "a probe without a verdict")
        counts = {t["target"]: (int(t["exceedances"]), int(t["requests"]))
                  for t in pr.get("targets") or [] if t.get("exceedances") is not None and t.get("requests")}  # fmt: skip
        if not pr.get("targets"):  # sweeps before per-target entries: "ttft:p99<=120ms: 0 of 299 over (...)"
            for text in pr.get("reasons") or []:
                m = _REASON.match(str(text))
                if m:
                    counts[m.group(1)] = (int(m.group(2)), int(m.group(3)))
        ev = ProbeEvidence(
            rate_rps=pr.get("offered_rps") if pr.get("concurrency") is None else pr.get("request_rps"),
            concurrency=pr.get("concurrency"),
            verdict=str(pr["verdict"]),
            low_confidence=bool(pr.get("low_confidence")),
            stopped_early=bool(pr.get("stopped_early")),
            counts=counts,
            dir=pr.get("dir"),
        )
        probes.append(ev)
        if ev.verdict == "pass" and (
            (a.get("max_rate_rps") is not None and pr.get("offered_rps") == a["max_rate_rps"])
            or (a.get("concurrency") is not None and pr.get("concurrency") == a["concurrency"])
        ):
            at = pr
    res = load_result(f.parent / Path(at["dir"]).name / "result.json") if at and at.get("dir") else None
    thr = (res or {}).get("throughput") or {}
    req_rps = thr.get("request_rps") or a.get("request_rps")
    out_tps = thr.get("output_tps") or a.get("output_tps")
    in_tps = thr.get("input_tps")
    if in_tps is None and a.get("total_tps") is not None and a.get("output_tps") is not None:
        in_tps = a["total_tps"] - a["output_tps"]
    max_rate = a.get("max_rate_rps")
    if max_rate is None and a.get("concurrency") is not None:
        max_rate = a.get("request_rps")
    bracket = a.get("bracket_rps") or [max_rate, None]
    cfg = doc.get("config") or {}
    return SweepCapacity(
        label=label or cfg.get("label") or (p.resolve().name if p.is_dir() else p.resolve().parent.name),
        path=str(f),
        slos=slos,
        confidence=float(settings.get("confidence") or 0.95),
        max_rate_rps=max_rate,
        bracket_rps=(bracket[0], bracket[1] if len(bracket) > 1 else None),
        output_tps=out_tps,
        request_rps=req_rps,
        output_tokens_per_request=(out_tps / req_rps) if (out_tps and req_rps) else None,
        input_tokens_per_request=(in_tps / req_rps) if (in_tps is not None and req_rps) else None,
        power_w=_power_w(res),
        accelerators=settings.get("accelerators"),
        point_estimate=bool(a.get("point_estimate")),
        limited_by=a.get("limited_by"),
        probes=probes,
        doc=doc,
    )
