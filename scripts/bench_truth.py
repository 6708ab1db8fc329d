"""A run's reported TTFT and ITL against the simulated endpoint's truth log, and the verdict grid.

The simulated endpoint (``loadgen sim --truth-log``) writes one line per request with the
CLOCK_MONOTONIC times it wrote the first token and every chunk; the client writes
``requests.jsonl`` with its own stamps. Same machine, same clock: for each measured, successful
request, paired by the ``X-Request-Id`` index,

* true TTFT = the server's first-token write - the client's latency origin (its send, or its
  scheduled time under ``latency_origin: scheduled``): what the reported TTFT would be were the
  client's stamp of the first token on time;
* true ITLs = the gaps between the server's chunk writes (one token a chunk).

The errors are the differences of the percentiles (what a user reads): TTFT p50, TTFT p99, ITL
p99, in ms, reported - true. Used by ``scripts/bench_client`` and the truth-grid tests.

Run as a script, the verdict grid (issue 22 item 3): ``loadgen run`` at each level against a
simulator with a truth log (TTFT 10 ms, ``--itl-ms``, ``--tokens`` a stream, slots for every
stream: it queues nothing), closed loop at C = ``--concurrency`` and open loop at ``--rates``
(constant arrivals) from the lowest up to saturation (the first rate whose delivered output is
under 90 % of the offered, or ``--rates``' end), client and simulator on CPUs of their own
(``taskset``; the simulator on the last CPU). Printed per level: delivered output tok/s, the
three errors, the stamp lateness and the users' idle share the verdict judges, the verdict and
whether it *agrees* with the truth (:func:`agreement`: VALID required where all three errors
are <= 2 ms, INVALID where any is > 5 ms, either in between), and the failing checks.

    .venv/bin/python scripts/bench_truth.py --concurrency 8,32,64,128,256 --rates 50,100,200,400,800
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from loadgen.sim.truth import read_jsonl as _jsonl
from loadgen.sim.truth import truth_errors, worst_error_ms


def true_stamp_lateness_ms(run_dir: Path, truth_log: Path) -> np.ndarray:
    """Every paired token's true stamp lateness in ms: the client's stamp (latency origin + TTFT, then
    + each ITL) - the server's write of that token (its truth-log chunk time; loopback delivery, tens of
    µs, included). Token-weighted, as :mod:`loadgen.engine.stamp_lateness` estimates it."""
    res = json.loads((run_dir / "result.json").read_text())
    t0 = res["conditions"]["t0_monotonic_ns"]
    sent_origin = res["conditions"].get("latency_origin") == "sent"
    truth = {str(t["request_id"]).rsplit("-", 1)[-1]: t for t in _jsonl(truth_log) if t.get("request_id")}
    out: list[np.ndarray] = []
    for r in _jsonl(run_dir / "requests.jsonl"):
        t = truth.get(str(r["index"]))
        if r["phase"] != "measure" or r["status"] != "ok" or r.get("ttft_ms") is None or t is None:
            continue
        w = np.asarray([c[0] for c in t["chunks"]], dtype=np.float64)
        itl = r.get("itl_ms") or []
        if w.size != len(itl) + 1:
            continue
        origin_ns = t0 + (r["sent_s"] if sent_origin else r["scheduled_s"]) * 1e9
        stamps = origin_ns + np.cumsum([r["ttft_ms"] * 1e6, *(x * 1e6 for x in itl)])
        out.append((stamps - w) / 1e6)
    return np.concatenate(out) if out else np.zeros(0)


AGREE_VALID_MS = 2.0
"""VALID is required where every error is within this..."""
AGREE_INVALID_MS = 5.0
"""...and INVALID where any is over this (issue 22's rule); in between either verdict agrees."""


def agreement(valid: bool, e: dict[str, float]) -> str:
    """``yes``/``NO`` (the verdict agrees with the truth or not), ``either`` between the bounds, ``?`` unmeasured."""
    worst = worst_error_ms(e)
    if not np.isfinite(worst):
        return "?"
    if worst <= AGREE_VALID_MS:
        return "yes" if valid else "NO"
    if worst > AGREE_INVALID_MS:
        return "no" if valid else "yes"
    return "either"


def _run_level(load: list[str], a: Any, d: Path, client_cpu: str | None, sim_cpu: str | None) -> dict[str, Any]:
    """One ``loadgen run`` against a fresh simulator with a truth log: its result and the truth errors."""
    import os
    import subprocess
    import sys
    import time

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_common import SimProcess

    repo = Path(__file__).resolve().parents[1]
    truth = d / "truth.jsonl"
    sim_args = ["--slots", "8192", "--ttft-ms", "10", "--itl-ms", str(a.itl_ms), "--truth-log", str(truth)]
    if sim_cpu is not None:
        sim_args += ["--cpus", sim_cpu]
    pin = ["taskset", "-c", client_cpu] if client_cpu is not None else []
    with SimProcess(sim_args) as sim:
        cmd = [*pin, sys.executable, "-m", "loadgen.cli", "run", "--endpoint", sim.url or "", *load,
               "--duration", f"{a.duration}s", "--warmup", "2s", "--input-tokens", "16",
               "--output-tokens", str(a.tokens), "--out", str(d / "run")]  # fmt: skip
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=a.duration * 8 + 180, cwd=repo,
                           env=dict(os.environ, PYTHONPATH=str(repo)))  # fmt: skip
    time.sleep(0.3)  # the simulator's last truth lines
    if not (d / "run" / "result.json").exists():
        raise SystemExit(f"exit {p.returncode}\n{p.stderr[-2000:]}")
    late = true_stamp_lateness_ms(d / "run", truth)
    return {
        "res": json.loads((d / "run" / "result.json").read_text()),
        "e": truth_errors(d / "run", truth),
        "true_late": float(np.percentile(late, 99)) if late.size else None,
    }


def _row(level: str, r: dict[str, Any]) -> tuple[str, bool]:
    res, e = r["res"], r["e"]
    valid = bool(res["validity"]["valid"])
    checks = {c["name"]: c for c in res["validity"]["checks"]}
    bad = [n for n, c in checks.items() if c["group"] == "generator" and not c["ok"]]
    stamp = (res.get("client") or {}).get("stamp_lateness_p99_ms")
    idle = checks.get("send_lag", {}).get("detail", "")
    idle_pct = idle.split("idle ", 1)[1].split(" %", 1)[0] if "idle " in idle else "-"
    moved = checks.get("stamp_error", {}).get("detail", "")
    est = max((abs(float(x.split(" ms", 1)[0])) for x in moved.split(" by ")[1:]), default=float("nan"))
    true_late = r.get("true_late")
    agree = agreement(valid, e)
    tps = res["throughput"].get("output_tps") or 0.0
    return (
        f"{level:>6s} {tps:9.0f} {e['ttft_p50_err_ms']:8.2f} {e['ttft_p99_err_ms']:8.2f} {e['itl_p99_err_ms']:8.2f} "
        f"{(f'{stamp:.1f}' if stamp is not None else '-'):>6s} "
        f"{(f'{true_late:.1f}' if true_late is not None else '-'):>6s} {est:6.2f} {idle_pct:>6s} "
        f"{'VALID' if valid else 'INVALID':>8s} "
        f"{agree:>7s}  {','.join(bad)}",
        agree in ("yes", "either"),
    )


def main() -> int:
    import argparse
    import os
    import tempfile

    ap = argparse.ArgumentParser(description="The verdict grid against the simulator's truth log (issue 22).")
    ap.add_argument("--concurrency", default="8,32,64,128,256", help="closed-loop levels (users)")
    ap.add_argument("--rates", default="50,100,200,400,800", help="open-loop rates (req/s), up to saturation")
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--itl-ms", type=float, default=1.0)
    ap.add_argument("--duration", type=float, default=5.0)
    ap.add_argument("--no-pin", action="store_true", help="no taskset: client and simulator share every CPU")
    a = ap.parse_args()
    cpus = sorted(os.sched_getaffinity(0))
    client_cpu = sim_cpu = None
    if not a.no_pin and len(cpus) >= 2:
        sim_cpu, client_cpu = str(cpus[-1]), ",".join(map(str, cpus[:-1]))
    print(
        f"== verdict grid: {a.tokens} tokens a stream, TTFT 10 ms, ITL {a.itl_ms:g} ms; {a.duration:g} s measured "
        f"after 2 s warm-up; "
        + (f"client on CPU {client_cpu}, simulator on CPU {sim_cpu}" if sim_cpu else "no pinning")
    )
    print(
        f"{'level':>6s} {'out tok/s':>9s} {'TTFT50':>8s} {'TTFT99':>8s} {'ITL99':>8s} {'stamp':>6s} {'true':>6s} "
        f"{'est':>6s} {'idle%':>6s} {'verdict':>8s} {'agrees':>7s}  failing checks"
    )
    print(
        "  (errors: reported - true, ms; stamp: the estimated p99 stamp lateness and true: the truth log's, ms; "
        "est: the largest estimated error (stamp_error); idle%: the users' idle share (send_lag))"
    )
    agreed = total = 0
    levels = [(c, ["--concurrency", c]) for c in a.concurrency.split(",") if c]
    levels += [(f"r{r}", ["--rate", r, "--arrival", "constant"]) for r in a.rates.split(",") if r]
    for name, load in levels:
        d = Path(tempfile.mkdtemp(prefix=f"bench-truth-{name}-"))
        r = _run_level(load, a, d, client_cpu, sim_cpu)
        line, ok = _row(name, r)
        print(line, flush=True)
        total += 1
        agreed += ok
        if name.startswith("r"):
            offered = float(name[1:]) * a.tokens
            if (r["res"]["throughput"].get("output_tps") or 0.0) < 0.9 * offered:
                print(
                    f"{'':>6s} saturated: delivered under 90 % of the offered {offered:.0f} tok/s; higher rates not run"
                )
                break
    print(f"agrees on {agreed} of {total} levels")
    return 0 if agreed == total else 1


if __name__ == "__main__":
    raise SystemExit(main())
