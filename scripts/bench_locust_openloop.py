"""Open loop against closed loop inside Locust, while the endpoint slows down (Locust issue, check 4).

The simulated endpoint gets a slow profile (4 slots, 50 ms prefill, 20 ms per token, 32 output
tokens: it serves at most ~5.8 req/s), so a load of 10 req/s makes its queue, and every
latency, grow for the whole run. Two headless ``loadgen locust`` runs of the same length:

* open loop, ``--rate 10 --arrival constant``: sends follow the schedule whatever the endpoint
  does (bar: achieved send rate within 2 % of 10 req/s);
* closed loop, 7 Locust users (what sustains 10 req/s while the endpoint is fast): each user
  waits for its answer, so the offered load falls as the endpoint slows.

Prints both side by side (send rate, completions, TTFT early against late, in flight at the stop).
Run: ``scripts/bench_locust_openloop.py [--duration 20]`` (needs ``pip install 'loadgen[locust]'``).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from loadgen.sim.launch import SimProcess  # noqa: E402

SLOW = ["--slots", "4", "--ttft-ms", "50", "--itl-ms", "20"]
RATE = 10.0
USERS = 7


def run(mode: str, duration_s: int, out: Path) -> dict[str, Any]:
    args = (
        ["--rate", str(RATE), "--arrival", "constant", "-u", "0"] if mode == "open" else ["-u", str(USERS), "-r", "100"]
    )
    with SimProcess(SLOW) as sim:
        assert sim.url is not None
        cmd = [sys.executable, "-m", "loadgen.cli", "locust", "--endpoint", sim.url, "--input-tokens", "32",
               "--output-tokens", "32", "--out", str(out), "--headless", "-t", f"{duration_s}s",
               "--stop-timeout", "0", *args]  # fmt: skip
        subprocess.run(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=duration_s + 120)
    res = json.loads((out / "result.json").read_text())
    recs = [json.loads(x) for x in (out / "requests.jsonl").read_text().splitlines() if x]
    recs.sort(key=lambda r: r["scheduled_s"])
    ttft = [r["ttft_ms"] for r in recs if r["ttft_ms"] is not None]
    k = max(len(ttft) // 5, 1)
    return {
        "mode": "open loop (schedule)" if mode == "open" else f"closed loop ({USERS} users)",
        "target_rps": RATE if mode == "open" else None,
        "achieved_send_rps": res["throughput"]["achieved_send_rps"],
        "sent": res["counts"]["requests"],
        "completed": res["counts"]["completed"],
        "completed_rps": res["throughput"]["request_rps"],
        "cancelled_at_stop": res["counts"]["errors_by_kind"].get("cancelled", 0),
        "ttft_first_fifth_ms": float(np.median(ttft[:k])) if ttft else None,
        "ttft_last_fifth_ms": float(np.median(ttft[-k:])) if ttft else None,
        "valid": res["validity"]["valid"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration", type=int, default=20, help="seconds per run (Locust -t)")
    a = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="bench-locust-openloop-"))
    rows = [run(m, a.duration, base / m) for m in ("open", "closed")]
    keys = list(rows[0])
    w = max(len(k) for k in keys)
    print(f"{'':{w}}  {rows[0]['mode']:>24}  {rows[1]['mode']:>24}")
    for key in keys[1:]:
        cells = []
        for r in rows:
            v = r[key]
            cells.append(f"{v:24.3f}" if isinstance(v, float) else f"{str(v):>24}")
        print(f"{key:{w}}  " + "  ".join(cells))
    err = abs(rows[0]["achieved_send_rps"] - RATE) / RATE * 100
    print(f"\nopen loop: send rate {err:.2f} % off {RATE:g} req/s (bar 2 %); files in {base}")


if __name__ == "__main__":
    main()
