"""Coverage of the confidence interval on a sweep's max SLO load (issue 19, must-show 4).

For each seed: ``loadgen sweep`` (the CLI, embedded simulated endpoint, ``--seed`` s) on a
FIFO profile whose answer the simulated endpoint's own model gives on a virtual clock
(:func:`loadgen.sim.reference.reference_max_rate`), then :func:`loadgen.capacity.capacity_interval`
on its directory; the interval covers when L <= reference < U. The sweeps run at
``--confidence 97.5%`` so that the default interval is a 95 % one (each end one-sided at
97.5 %). The bar: at least 17 of 20 seeds covered (``--seeds 20``, ~15-20 min on a quiet
2-core machine); ``--seeds 2`` is the smoke run. Consecutive groups of ``--group`` seeds also give
replicated intervals (:func:`loadgen.capacity.confidence.replicated_interval`), whose coverage
is printed beside.

``--virtual``: each sweep runs on the model's virtual clock (``scripts/capacity_virtual.py``: the
sweep's search and its probe-judging code, probes simulated instead of sent), so the sweep's own
probe length (``--probe-duration``, 60 s by default there) costs seconds; ``--raw`` judges those
probes as the sweep did before the dependence rule (requests taken as independent), to compare.

The reference is the steady state (:func:`loadgen.sim.reference.reference_max_rate` over
``--reference-requests`` x ``--reference-runs`` pooled requests).

Profile: 2 FIFO servers, 40 ms a request (one output token), SLO ttft:p99<=200ms, 32 input
tokens. One output token keeps each probe under 1,000 token stamps, so a busy shared client is
judged on its event-loop lag (``--max-loop-lag``), which this script relaxes along with the
schedule-lag bound (``--lag-bound-ms``, recorded in the output): the interval is about the
server, and a client stall is not what is measured here.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from loadgen.capacity import capacity_interval, load_sweep  # noqa: E402
from loadgen.capacity.confidence import replicated_interval  # noqa: E402
from loadgen.core.slo import parse_slo  # noqa: E402
from loadgen.sim.model import SimParams  # noqa: E402
from loadgen.sim.reference import reference_max_rate  # noqa: E402
from scripts.capacity_virtual import VirtualSweep  # noqa: E402

SLO = "ttft:p99<=200ms"
SIM_ARGS = "--fifo --slots 2 --ttft-ms 40 --itl-ms 2"
PARAMS = SimParams(slots=2, ttft_ms=40.0, itl_ms=2.0, fifo=True)


def probe_length_reference(requests: int, warmup: int, seeds: int = 40) -> float:
    """The rate whose p99 TTFT, over runs as long as a probe (``warmup`` + ``requests`` from an empty
    queue, median over ``seeds``), is the threshold: what a sweep of such probes converges to."""
    import statistics

    from loadgen.sim.reference import percentile_at

    t = parse_slo(SLO)

    def median_p99(r: float) -> float:
        return statistics.median(
            percentile_at(
                PARAMS,
                r,
                t,
                input_tokens=32,
                output_tokens=1,
                requests=warmup + requests,
                seed=s,
                warmup_fraction=warmup / (warmup + requests),
            )  # fmt: skip
            for s in range(seeds)
        )

    lo, hi = 20.0, 49.0
    while hi - lo > 0.05:
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if median_p99(mid) <= t.threshold_ns else (lo, mid)
    return lo


def reanalyse(out: Path, group: int) -> None:
    """Coverage of every seed-* sweep under ``out`` with the code as it is now, against both references."""
    dirs = sorted(out.glob("seed-*"), key=lambda d: int(d.name.split("-")[1]))
    caps = [load_sweep(str(d)) for d in dirs if (d / "sweep.json").is_file()]
    ref = steady_reference(50_000, 4)
    n = caps[0].doc["settings"]["min_requests_per_probe"]
    ref_probe = probe_length_reference(n, 8)
    print(f"steady-state reference {ref:.2f} req/s; probe-length reference ({n} + 8 requests) {ref_probe:.2f} req/s")
    for name, r in (("steady-state", ref), ("probe-length", ref_probe)):
        cov = [(ci.lower_rps or 0.0) <= r and (ci.upper_rps is None or r < ci.upper_rps)
               for ci in map(capacity_interval, caps)]  # fmt: skip
        reps = [replicated_interval(caps[i : i + group]) for i in range(0, len(caps) - group + 1, group)]
        rc = [(x.lower_rps or 0.0) <= r <= (x.upper_rps or 0.0) for x in reps]
        print(
            f"{name}: per-sweep interval covers in {sum(cov)} of {len(cov)}; replicated ({group} a group) "
            f"in {sum(rc)} of {len(rc)}"
        )
    # the gate's false alarms: every ordered pair of sweeps of this one system is a "no change"
    from loadgen.capacity import regression_gate

    k = len(caps)
    groups = [caps[i : i + group] for i in range(0, k - group + 1, group)]
    for tol in (0.0, 0.05, 0.10):
        single = sum(regression_gate(caps[i], caps[j], tol)["regressed"] for i in range(k) for j in range(k) if i != j)
        rep = sum(regression_gate(groups[i], groups[j], tol)["regressed"]
                  for i in range(len(groups)) for j in range(len(groups)) if i != j)  # fmt: skip
        print(
            f"gate --fail-if-regress {tol:.0%}: false alarms {single} of {k * (k - 1)} single-sweep pairs, "
            f"{rep} of {len(groups) * (len(groups) - 1)} replicated pairs"
        )
    answers = sorted(c.max_rate_rps or 0.0 for c in caps)
    print("answers: " + ", ".join(f"{a:.2f}" for a in answers))


def steady_reference(requests: int, runs: int) -> float:
    """The steady-state max SLO load of the profile (module docstring)."""
    return reference_max_rate(PARAMS, parse_slo(SLO), input_tokens=32, output_tokens=1, requests=requests,
                              replications=runs)  # fmt: skip


def run_sweep(a: argparse.Namespace, seed: int, d: Path) -> tuple[int, float | None]:
    """One sweep into ``d`` (real time through the CLI, or virtual): (exit code, virtual seconds or None)."""
    if a.virtual:
        vs = VirtualSweep(PARAMS, parse_slo(SLO), 0.975, float(a.precision.rstrip("%")) / 100,
                          float(a.probe_duration.rstrip("s")), raw=a.raw)  # fmt: skip
        doc = vs.run(seed)
        d.mkdir(parents=True, exist_ok=True)
        (d / "sweep.json").write_text(json.dumps(doc, indent=1))
        return 0, doc["virtual_s"]
    p = subprocess.run([sys.executable, "-m", "loadgen.cli", "sweep", "--slo", SLO, "--confidence", "97.5%",
                        "--precision", a.precision, "--probe-duration", a.probe_duration, "--calibration", "2s",
                        "--input-tokens", "32", "--output-tokens", "1", "--seed", str(seed),
                        "--max-loop-lag", f"{a.lag_bound_ms}ms", "--max-schedule-lag", f"{a.lag_bound_ms}ms",
                        "--sim-args", SIM_ARGS, "--out", str(d)], cwd=ROOT, capture_output=True, text=True)  # fmt: skip
    if not (d / "sweep.json").is_file():
        print(f"seed {seed}: no sweep.json (exit {p.returncode}): {p.stderr[-500:]}")
    return p.returncode, None


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--first-seed", type=int, default=1)
    ap.add_argument("--precision", default="10%")
    ap.add_argument("--probe-duration", help="Probe length (default 2s real time, 60s --virtual).")
    ap.add_argument("--virtual", action="store_true", help="Sweeps on the model's virtual clock (module docstring).")
    ap.add_argument("--raw", action="store_true", help="--virtual: judge on raw counts (before the dependence rule).")
    ap.add_argument("--reference-requests", type=int, default=50_000)
    ap.add_argument("--reference-runs", type=int, default=4)
    ap.add_argument("--lag-bound-ms", type=float, default=50.0)
    ap.add_argument("--group", type=int, default=5, help="Seeds per replicated interval.")
    ap.add_argument("--out", type=Path, help="Keep the sweeps and write coverage.json here (default: a temp dir).")
    ap.add_argument("--reanalyse", action="store_true", help="Only recompute the coverage of the sweeps in --out.")
    a = ap.parse_args(argv)
    a.probe_duration = a.probe_duration or ("60s" if a.virtual else "2s")
    if a.reanalyse:
        reanalyse(a.out, a.group)
        return {}
    ref = steady_reference(a.reference_requests, a.reference_runs)
    print(f"virtual-clock steady-state reference: {ref:.2f} req/s ({SIM_ARGS}; {SLO}; "
          f"{a.reference_runs} x {a.reference_requests} requests)")  # fmt: skip
    out = a.out or Path(tempfile.mkdtemp(prefix="bench-capacity-ci-"))
    rows = []
    for seed in range(a.first_seed, a.first_seed + a.seeds):
        d = out / f"seed-{seed}"
        t0 = time.monotonic()
        rc, virtual_s = run_sweep(a, seed, d)
        if not (d / "sweep.json").is_file():
            continue
        ci = capacity_interval(load_sweep(str(d)))
        covered = (ci.lower_rps or 0.0) <= ref and (ci.upper_rps is None or ref < ci.upper_rps)
        rows.append({"seed": seed, **ci.to_json(), "reference_rps": ref, "covered": covered,
                     "sweep_exit": rc, "wall_s": round(time.monotonic() - t0, 1), "virtual_s": virtual_s})  # fmt: skip
        took = (
            f"{virtual_s:.0f} s of probes on the virtual clock" if virtual_s is not None else f"{rows[-1]['wall_s']} s"
        )
        print(
            f"seed {seed}: {ci.text()}; reference {ref:.2f}: {'covered' if covered else 'MISSED'} (exit {rc}, {took})"
        )
    n_cov = sum(r["covered"] for r in rows)
    widths = sorted((r["ci_upper_rps"] or math.inf) / r["ci_lower_rps"] for r in rows if r["ci_lower_rps"])
    mode = ("virtual clock, " + ("raw counts" if a.raw else "effective counts")) if a.virtual else "real time"
    print(f"covered in {n_cov} of {len(rows)} seeds (bar: 17 of 20 at 95 %; {mode}, probes {a.probe_duration}); "
          f"U/L median {widths[len(widths) // 2] if widths else math.nan:.2f}, {len(rows) - len(widths)} with L = 0; "
          f"lag bounds {a.lag_bound_ms} ms")  # fmt: skip
    # replicated intervals (loadgen capacity ci --replicates) over consecutive groups of --group seeds
    groups = []
    for i in range(0, len(rows) - a.group + 1, a.group) if a.group > 1 else []:
        seeds = [r["seed"] for r in rows[i : i + a.group]]
        ri = replicated_interval([load_sweep(str(out / f"seed-{s}")) for s in seeds])
        ok = (ri.lower_rps or 0.0) <= ref <= (ri.upper_rps or 0.0)
        groups.append({"seeds": seeds, **ri.to_json(), "covered": ok})
        print(f"replicates {seeds}: {ri.text()}: {'covered' if ok else 'MISSED'}")
    doc = {"reference_rps": ref, "slo": SLO, "sim_args": SIM_ARGS, "mode": mode, "probe_duration": a.probe_duration,
           "lag_bound_ms": a.lag_bound_ms, "covered": n_cov, "rows": rows, "replicated": groups}  # fmt: skip
    (out / "coverage.json").write_text(json.dumps(doc, indent=1))
    print(f"details in {out / 'coverage.json'}")
    return doc


if __name__ == "__main__":
    main()
