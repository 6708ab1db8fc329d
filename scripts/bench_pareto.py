"""The interactivity Pareto plot of two simulated profiles, and its price checked by a run (issue 19, must-show 3).

1. ``loadgen sweep --concurrency-levels`` on two profiles of the embedded simulated endpoint
   (continuous batching; decode step = itl + per-sequence cost x running sequences, so more users
   buy throughput with speed per user: a real front);
2. ``loadgen compare`` over both: scorecard.html with the Pareto figure
   (:mod:`loadgen.report.compare_pareto`), screenshotted in headless Chromium
   (``scripts/screenshot_reports.py``'s :func:`screenshot`; skipped with ``--no-screenshot``);
3. ``loadgen run --concurrency C`` on the first profile at a level the sweep did not probe (between
   two front points), and ``loadgen capacity pareto`` of both sweeps at that run's own measured
   speed per user (``--target-tps-per-user``): the front's interpolated cost per million output
   tokens against the run's own, price / (output tok/s per accelerator x 3600) x 1e6. The bar:
   within 5 %.

Usage: scripts/bench_pareto [--out DIR] [--no-screenshot] [--probe-duration 3s]
Prints the figures and writes ``pareto_check.json`` under ``--out``; exit 1 when off by more than 5 %.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PROFILES = {
    # label: sim args (illustrative profiles, not measurements)
    "quick-decode": "--slots 16 --ttft-ms 10 --itl-ms 8 --itl-per-seq-ms 0.5",
    "big-batch": "--slots 32 --ttft-ms 20 --itl-ms 12 --itl-per-seq-ms 0.25",
}
LEVELS = "2,4,16"
RUN_AT = 8  # between the front points c4 and c16
TOKENS = ["--input-tokens", "64", "--output-tokens", "64"]
SLO = "tpot:p50<=40ms"
RELAXED = ["--max-schedule-lag", "100ms", "--max-loop-lag", "100ms"]
PRICE = 2.0  # USD per accelerator-hour, illustrative
TOLERANCE = 0.05


def loadgen(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    print("$ loadgen " + " ".join(args), flush=True)
    return subprocess.run([sys.executable, "-m", "loadgen.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)  # fmt: skip


def check(out: Path, probe_duration: str = "3s") -> dict:
    """Steps 1-3 of the module docstring under ``out``; returns the figures (``pareto_check.json``)."""
    for label, sim in PROFILES.items():
        p = loadgen("sweep", "--slo", SLO, "--concurrency-levels", LEVELS, "--probe-duration", probe_duration,
                    "--accelerators", "1", *TOKENS, *RELAXED, "--sim-args", sim, "--out", str(out / label))  # fmt: skip
        if not (out / label / "sweep.json").is_file():
            raise SystemExit(f"{label}: sweep failed (exit {p.returncode}): {p.stderr[-800:]}")
    labels = list(PROFILES)
    p = loadgen("compare", *[str(out / x) for x in labels], *sum((["--label", x] for x in labels), []),
                "--out", str(out / "scorecard"))  # fmt: skip
    if p.returncode != 0:
        raise SystemExit(f"compare failed (exit {p.returncode}): {p.stderr[-800:]}")
    first = labels[0]
    p = loadgen("run", "--concurrency", str(RUN_AT), "--duration", probe_duration, "--warmup", "1s", *TOKENS,
                *RELAXED, "--sim-args", PROFILES[first], "--out", str(out / "run"))  # fmt: skip
    res = json.loads((out / "run" / "result.json").read_text())
    run_x = res["throughput"]["output_tps"]  # 1 accelerator
    run_y = 1000.0 / res["latency_ms"]["tpot"]["p50"]
    p = loadgen("capacity", "pareto", *[str(out / x) for x in labels], *sum((["--label", x] for x in labels), []),
                "--target-tps-per-user", f"{run_y:.6f}", "--price-per-accelerator-hour", str(PRICE),
                "--out", str(out / "pareto"))  # fmt: skip
    if p.returncode != 0:
        raise SystemExit(f"capacity pareto failed (exit {p.returncode}): {p.stderr[-800:]}")
    doc = json.loads((out / "pareto" / "pareto.json").read_text())
    at = next(s for s in doc["systems"] if s["label"] == first)["at_target"]
    run_cost = PRICE / (run_x * 3600) * 1e6
    interp_cost = at["cost_per_million_output_tokens_usd"]
    err = (interp_cost / run_cost - 1) if interp_cost else None
    figures = {
        "profile": first, "sim_args": PROFILES[first], "run_concurrency": RUN_AT,
        "run_output_tps_per_accelerator": run_x, "run_tps_per_user": run_y, "run_cost_per_million_usd": run_cost,
        "front_between": at["between"], "front_tps_per_accelerator": at["tps_per_accelerator"],
        "front_cost_per_million_usd": interp_cost, "relative_error": err, "tolerance": TOLERANCE,
        "within": err is not None and abs(err) <= TOLERANCE, "scorecard": str(out / "scorecard" / "scorecard.html"),
    }  # fmt: skip
    (out / "pareto_check.json").write_text(json.dumps(figures, indent=1))
    return figures


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path)
    ap.add_argument("--probe-duration", default="3s")
    ap.add_argument("--no-screenshot", action="store_true")
    a = ap.parse_args()
    out = (a.out or Path(tempfile.mkdtemp(prefix="bench-pareto-"))).resolve()
    f = check(out, a.probe_duration)
    print(f"{f['profile']}: run at c{f['run_concurrency']}: {f['run_output_tps_per_accelerator']:.1f} tok/s per "
          f"accelerator at {f['run_tps_per_user']:.2f} tok/s per user -> ${f['run_cost_per_million_usd']:.4f} per "
          f"million output tokens; the front ({' .. '.join(f['front_between'] or [])}) at that speed: "
          f"{f['front_tps_per_accelerator'] or 0:.1f} tok/s -> ${f['front_cost_per_million_usd'] or 0:.4f}; "
          f"error {f['relative_error'] if f['relative_error'] is not None else float('nan'):+.2%} "
          f"({'within' if f['within'] else 'OUTSIDE'} {TOLERANCE:.0%})")  # fmt: skip
    if not a.no_screenshot:
        from scripts.screenshot_reports import screenshot

        png = out / "scorecard.png"
        foreign = screenshot(Path(f["scorecard"]), png)
        print(f"{png}: {png.stat().st_size:,} bytes; requests beyond the page itself: {foreign or 'none'}")
    print(f"figures in {out / 'pareto_check.json'}")
    return 0 if f["within"] else 1


if __name__ == "__main__":
    sys.exit(main())
