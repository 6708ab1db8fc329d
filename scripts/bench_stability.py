"""The stability check's long form: an overloaded probe whose percentile passes must FAIL ``unstable``.

``tests/integration/test_sweep_stability.py`` runs the short CI form (SLO p90 TTFT <= 5 s, a 12 s
probe at 11 req/s, seed 3). This is the long form it replaced, and more: one FIFO slot (TTFT 50 ms,
ITL 2 ms, 26 output tokens: 10 req/s of capacity), SLO p99 TTFT <= 5 s, 20 s probes (a p99 probe
needs 299 requests: 27 s at 11 req/s), at 105 %, 110 % and 120 % of capacity, several seeds. Each
row: the verdict, its reason, the exceedance fraction (the percentile passes) and the Mann-Kendall
p-value of the first-token delay's trend. Bar: every row FAIL with ``unstable: backlog growing``
while its p99 passes. ``loadgen sweep`` as the user types it, against the embedded simulated
endpoint (127.0.0.1). About 40 s a row.

Usage: ``scripts/bench_stability [--seeds 3,4,5] [--rates 10.5,11,12] [--probe-duration 20]``
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SIM_ARGS = "--slots 1 --ttft-ms 50 --itl-ms 2"


def one(rate: float, seed: int, slo: str, probe_s: float, out: Path) -> dict[str, object]:
    env = dict(os.environ, COLUMNS="250")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    args = ["--slo", slo, "--probe-duration", f"{probe_s:g}s", "--calibration", "0", "--seed", str(seed),
            "--start-rate", f"{rate:g}", "--min-rate", f"{rate:g}", "--max-rate", f"{rate:g}", "--input-tokens", "16",
            "--output-tokens", "26", "--sim-args", SIM_ARGS, "--out", str(out)]  # fmt: skip
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "loadgen.cli", "sweep", *args], cwd=REPO, env=env,
                       capture_output=True, text=True, timeout=600)  # fmt: skip
    res = json.loads((out / "sweep.json").read_text())
    q = [q for q in res["probes"] if q["verdict"] != "invalid"][-1]
    reason = q["reasons"][0] if q["reasons"] else ""
    m = re.search(r"p=([0-9.]+)", reason)
    exc = next(iter(q["exceedance_fraction"].values()))
    ok = q["verdict"] == "fail" and reason.startswith("unstable: backlog growing") and exc < 0.01
    return {"rate": rate, "seed": seed, "rc": p.returncode, "verdict": q["verdict"], "exceedance": exc,
            "mk_p": float(m.group(1)) if m else None, "seconds": round(time.monotonic() - t0, 1), "ok": ok}  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="3,4,5", help="sweep seeds (default 3,4,5)")
    ap.add_argument("--rates", default="10.5,11,12", help="offered req/s; capacity is 10 (default 10.5,11,12)")
    ap.add_argument("--probe-duration", type=float, default=20.0, help="seconds (default 20)")
    ap.add_argument("--slo", default="ttft:p99<=5s", help="SLO (default ttft:p99<=5s)")
    a = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for rate in (float(r) for r in a.rates.split(",")):
            for seed in (int(s) for s in a.seeds.split(",")):
                row = one(rate, seed, a.slo, a.probe_duration, Path(tmp) / f"r{rate:g}-s{seed}")
                rows.append(row)
                print(f"{rate:5g} req/s seed {seed}: {row['verdict']} (exit {row['rc']}), exceedance "
                      f"{row['exceedance']:.4f}, Mann-Kendall p {row['mk_p']}, {row['seconds']} s", flush=True)  # fmt: skip
    ok = all(r["ok"] for r in rows)
    print(f"bar: every overloaded probe FAILs unstable while its percentile passes: {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
