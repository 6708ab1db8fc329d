"""A run's reported TTFT and ITL against the simulated endpoint's truth log.

The simulated endpoint (``loadgen sim --truth-log``, and its ``--fast`` mode) writes one line per
request with the CLOCK_MONOTONIC times it wrote the first token and every chunk; the client writes
``requests.jsonl`` with its own stamps. Same machine, same clock: for each measured, successful
request, paired by the ``X-Request-Id`` index,

* true TTFT = the server's first-token write - the client's latency origin (its send, or its
  scheduled time under ``latency_origin: scheduled``): what the reported TTFT would be were the
  client's stamp of the first token on time;
* true ITLs = the gaps between the server's chunk writes (one token a chunk).

The errors are the differences of the percentiles (what a user reads): TTFT p50, TTFT p99, ITL
p99, in ms, reported - true. Used by ``loadgen selftest`` (:mod:`loadgen.sim.selftest`), the bench
scripts and the truth-grid tests.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["read_jsonl", "truth_errors", "worst_error_ms"]


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def truth_errors(run_dir: Path, truth_log: Path) -> dict[str, float]:
    """``ttft_p50_err_ms``, ``ttft_p99_err_ms``, ``itl_p99_err_ms`` (reported - true), ``requests``
    paired and ``valid`` (the run's verdict: 1.0 or 0.0) of the run in ``run_dir``."""
    res = json.loads((run_dir / "result.json").read_text())
    t0 = res["conditions"]["t0_monotonic_ns"]
    sent_origin = res["conditions"].get("latency_origin") == "sent"
    truth = {str(t["request_id"]).rsplit("-", 1)[-1]: t for t in read_jsonl(truth_log) if t.get("request_id")}
    rep_ttft: list[float] = []
    true_ttft: list[float] = []
    rep_itl: list[float] = []
    true_itl: list[float] = []
    for r in read_jsonl(run_dir / "requests.jsonl"):
        if r["phase"] != "measure" or r["status"] != "ok" or r.get("ttft_ms") is None:
            continue
        t = truth.get(str(r["index"]))
        if t is None or t.get("first_token_ns") is None:
            continue
        origin_s = r["sent_s"] if sent_origin else r["scheduled_s"]
        rep_ttft.append(r["ttft_ms"])
        true_ttft.append((t["first_token_ns"] - (t0 + round(origin_s * 1e9))) / 1e6)
        w = [c[0] for c in t["chunks"]]
        gaps = [(b - a) / 1e6 for a, b in zip(w, w[1:])]
        itl = r.get("itl_ms") or []
        if len(gaps) == len(itl):
            rep_itl.extend(itl)
            true_itl.extend(gaps)
    nan = float("nan")

    def p(v: list[float], q: float) -> float:
        return float(np.percentile(np.asarray(v), q)) if v else nan

    return {
        "requests": float(len(rep_ttft)),
        "ttft_p50_err_ms": p(rep_ttft, 50) - p(true_ttft, 50),
        "ttft_p99_err_ms": p(rep_ttft, 99) - p(true_ttft, 99),
        "itl_p99_err_ms": p(rep_itl, 99) - p(true_itl, 99),
        "valid": float(bool(res["validity"]["valid"])),
    }


def worst_error_ms(e: dict[str, float]) -> float:
    """The largest absolute error of the three that could be measured (nan when none could: no request
    paired; the ITL is not when the server's chunks do not pair one to one with the client's ITLs)."""
    vals = [abs(e[k]) for k in ("ttft_p50_err_ms", "ttft_p99_err_ms", "itl_p99_err_ms") if np.isfinite(e[k])]
    return max(vals) if vals else float("nan")
