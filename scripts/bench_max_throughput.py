"""Max-throughput mode (``loadgen run --rate inf``) against the simulated endpoint's truth log.

For each batch B (``--max-concurrency B`` on a B-slot simulated server: no prefill cost, ``--itl``
ms a decode step, T output tokens a request), runs the command a user types and prints: the
sustained output tok/s (``result.json`` ``max_throughput``), the server's own count of tokens
generated inside that window / its length (truth log), their ratio; the model's figure
B x 1000/itl x T/(T+1) (every slot decodes, and idles one step per request while the next one
is admitted at the server's next step) and the ratio to it; the drain-inclusive figure; the
send path's share of slot time; the verdict. Slower than CI allows (thousands of requests);
``tests/integration/test_max_throughput.py`` is its short form.

Usage: scripts/bench_max_throughput [--batches 16,64] [--requests 2000] [--tokens 64] [--itl 20]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from loadgen.sim.launch import SimProcess  # noqa: E402


def truth_tokens(truth: Path, start_ns: int, end_ns: int) -> int:
    n = 0
    for line in truth.read_text().splitlines():
        for t_ns, k in json.loads(line).get("chunks") or ():
            if start_ns <= t_ns <= end_ns:
                n += k
    return n


def one(batch: int, requests: int, tokens: int, itl: float, tmp: Path) -> dict:
    truth = tmp / f"truth-{batch}.jsonl"
    out = tmp / f"run-{batch}"
    sim_args = ["--slots", str(batch), "--ttft-ms", "0", "--itl-ms", str(itl), "--truth-log", str(truth)]
    with SimProcess(sim_args) as sim:
        assert sim.url is not None
        p = subprocess.run(
            [sys.executable, "-m", "loadgen.cli", "run", "--endpoint", sim.url, "--rate", "inf",
             "--requests", str(requests), "--max-concurrency", str(batch), "--input-tokens", "16",
             "--output-tokens", str(tokens), "--out", str(out)],
            capture_output=True, text=True, timeout=1800, cwd=str(ROOT), env=dict(os.environ, PYTHONPATH=str(ROOT)),
        )  # fmt: skip
    if not (out / "result.json").exists():
        raise SystemExit(p.stderr[-3000:])
    res = json.loads((out / "result.json").read_text())
    t0 = res["conditions"]["t0_monotonic_ns"]
    card = res["max_throughput"]
    w = card["sustained_window"]
    tr = truth_tokens(truth, t0 + round(w["start_s"] * 1e9), t0 + round(w["end_s"] * 1e9)) / w["duration_s"]
    model = batch * 1000 / itl * tokens / (tokens + 1)
    checks = {c["name"]: c for c in res["validity"]["checks"]}
    return {
        "batch": batch,
        "sustained_tps": card["sustained_output_tps"],
        "truth_tps": tr,
        "vs_truth": card["sustained_output_tps"] / tr,
        "model_tps": model,
        "vs_model": card["sustained_output_tps"] / model,
        "incl_drain_tps": card["output_tps_incl_drain"],
        "window_s": w["duration_s"],
        "send_path": checks["send_path"]["detail"].split(";")[0],
        "verdict": "VALID"
        if res["validity"]["valid"]
        else "INVALID: "
        + ", ".join(c["name"] for c in res["validity"]["checks"] if c["group"] == "generator" and not c["ok"]),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", default="16,64")
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--itl", type=float, default=20.0)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-max-throughput-") as d:
        for b in (int(x) for x in a.batches.split(",")):
            r = one(b, a.requests, a.tokens, a.itl, Path(d))
            print(
                f"B={r['batch']:>4}: sustained {r['sustained_tps']:,.1f} tok/s over {r['window_s']:.2f} s; truth "
                f"{r['truth_tps']:,.1f} (x{r['vs_truth']:.4f}); model {r['model_tps']:,.1f} (x{r['vs_model']:.4f}); "
                f"incl. drain {r['incl_drain_tps']:,.1f}; {r['send_path']}; {r['verdict']}",
                flush=True,
            )


if __name__ == "__main__":
    main()
