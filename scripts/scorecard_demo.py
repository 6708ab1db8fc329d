"""A scorecard of three systems on this machine, from real sweeps (issue: the fair comparison).

Systems (all served on 127.0.0.1, all measured with the same workload: prompts of exactly 32
tokens of the tiny model's tokenizer, 16 output tokens, streaming completions):

* ``sim-wide``: the simulated endpoint, illustrative profile 16 slots, 20 ms prefill,
  8 ms + 0.5 ms/sequence decode step;
* ``sim-narrow``: the simulated endpoint, 4 slots, 40 ms prefill, 15 ms + 2 ms/sequence;
* ``vllm-tiny``: the real vLLM (CPU build, ``.venv-vllm``) serving the tiny random Llama of
  ``tests/fixtures/tiny_model.py``.

Per system: a closed-loop concurrency sweep (levels 1, 2, 4, 8; short probes; SLO
``ttft:p99<=250ms``; validity jitter bounds raised because the server shares this machine's
cores with the client), then ``loadgen check`` of the shipped questions at light load (the
reference) and again open loop at 20 req/s against it, written next to the sweep so that
``loadgen compare`` shows the quality rows. Then ``loadgen compare --force`` (the simulated
endpoint serves no real model, so "model" differs by construction; the ranking is forced and
the page says so), and a screenshot of the HTML with headless Chromium.

Prices are illustrative (``--cost-per-hour``), not quotes. No power meter here: energy rows
say "not measured". A few minutes in all (vLLM on CPU is slow to start).

Usage: python scripts/scorecard_demo.py [--out DIR] [--probe-duration 4s] [--skip-vllm]
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PROFILES = {
    "sim-wide": ("--slots 16 --ttft-ms 20 --itl-ms 8 --itl-per-seq-ms 0.5", 2.00),
    "sim-narrow": ("--slots 4 --ttft-ms 40 --itl-ms 15 --itl-per-seq-ms 2", 1.00),
}
VLLM_COST_PER_HOUR = 0.10
SLO = "ttft:p99<=250ms"
LEVELS = "1,2,4,8"
# --dtype float32: vLLM's CPU attention picks its AMX kernel for bfloat16 when the CPU reports AMX; on
# machines whose kernel does not grant AMX tile state to the worker it dies of SIGILL (seen here on a
# Xeon with amx_tile). The tiny model is float32 anyway.
CPU_ARGS = [
    "--max-model-len",
    "1024",
    "--enforce-eager",
    "--kv-cache-memory-bytes",
    str(64 << 20),
    "--dtype",
    "float32",
]


def loadgen(*args: str, check: bool = False) -> int:
    cmd = [sys.executable, "-m", "loadgen.cli", *args]
    print("$ loadgen " + " ".join(args), flush=True)
    rc = subprocess.run(cmd, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}).returncode
    if check and rc != 0:
        raise SystemExit(f"loadgen {args[0]} failed with exit code {rc}")
    return rc


def measure_system(label: str, url: str, model: str, tokenizer: Path, out: Path, probe: str, cost: float) -> None:
    sweep_dir = out / label
    rc = loadgen("sweep", "--endpoint", url, "--model", model, "--tokenizer", str(tokenizer),
                 "--input-tokens", "32", "--output-tokens", "16", "--concurrency-levels", LEVELS,
                 "--probe-duration", probe, "--calibration", "0", "--slo", SLO, "--cost-per-hour", str(cost),
                 "--max-schedule-lag", "200ms", "--max-loop-lag", "200ms", "--out", str(sweep_dir))  # fmt: skip
    print(f"{label}: sweep exit code {rc}", flush=True)
    loadgen("check", "--endpoint", url, "--model", model, "--max-tokens", "16", "--answers",
            "--out", str(out / f"{label}-check-light"))  # fmt: skip
    loadgen("check", "--endpoint", url, "--model", model, "--max-tokens", "16", "--answers", "--rate", "20",
            "--reference", str(out / f"{label}-check-light" / "check.json"), "--out", str(sweep_dir))  # fmt: skip


def start_sim(args: str, tokenizer: Path, log: Path) -> tuple[subprocess.Popen[bytes], str]:
    port_file = log.with_suffix(".port")
    port_file.unlink(missing_ok=True)
    with open(log, "wb") as fh:  # the child has its own copy of the descriptor: ours is closed here
        p = subprocess.Popen(
            [sys.executable, "-m", "loadgen.sim", "--port", "0", "--port-file", str(port_file), "--tokenizer",
             str(tokenizer), *args.split()],
            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=fh, stderr=subprocess.STDOUT,
        )  # fmt: skip
    deadline = time.monotonic() + 30
    while not (port_file.exists() and port_file.read_text().strip()):
        if p.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"the simulated endpoint did not start (see {log})")
        time.sleep(0.1)
    return p, f"http://127.0.0.1:{port_file.read_text().strip()}"


def stop(p: subprocess.Popen[bytes]) -> None:
    p.terminate()
    try:
        p.wait(10)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--out",
        type=Path,
        default=ROOT / "results" / ("scorecard-demo-" + dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")),
    )
    ap.add_argument("--probe-duration", default="4s")
    ap.add_argument("--skip-vllm", action="store_true", help="Only the two simulated profiles.")
    ap.add_argument(
        "--compare-only", action="store_true", help="Reuse the sweeps already in --out; compare and screenshot."
    )
    a = ap.parse_args()
    out: Path = a.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    if a.compare_only:
        return compare([x for x in [*PROFILES, "vllm-tiny"] if (out / x / "sweep.json").exists()], out)
    from tests.fixtures.tiny_model import build_tiny_model

    model_dir = build_tiny_model(out / "tiny-model")
    labels = []
    for label, (args, cost) in PROFILES.items():
        proc, url = start_sim(args + " --model-name sim-model", model_dir, out / f"{label}-server.log")
        try:
            measure_system(label, url, "sim-model", model_dir, out, a.probe_duration, cost)
        finally:
            stop(proc)
        labels.append(label)
    if not a.skip_vllm:
        from loadgen.serve import launch
        from loadgen.serve.vllm import find_server_python

        py, source = find_server_python("vllm")
        if "no --server-python" in source or not os.path.exists(py):
            print(
                "no vLLM environment (.venv-vllm): scripts/setup_servers vllm; only the simulated systems", flush=True
            )
        else:
            env = {"VLLM_CACHE_ROOT": str(out / "vllm-cache")}
            if (os.cpu_count() or 1) <= 4:
                env["VLLM_CPU_OMP_THREADS_BIND"] = "0"  # keep a core for the load generator
            srv = launch("vllm", serve_model=str(model_dir), served_model_name="tiny", server_python=py,
                         engine_args=CPU_ARGS, env=env, log_dir=str(out / "vllm-log"), ready_timeout_s=300)  # fmt: skip
            print(f"vLLM ready in {srv.ready_s:.1f} s at {srv.base_url}", flush=True)
            try:
                measure_system("vllm-tiny", srv.base_url, "tiny", model_dir, out, a.probe_duration, VLLM_COST_PER_HOUR)
            finally:
                print(f"vLLM stopped: {srv.stop()}", flush=True)
            labels.append("vllm-tiny")
    return compare(labels, out)


def compare(labels: list[str], out: Path) -> int:
    card_dir = out / "scorecard"
    # --force: the simulated endpoint impersonates no real model, so "model" differs by construction
    loadgen("compare", *[str(out / x) for x in labels], *sum((["--label", x] for x in labels), []),
            "--force", "--out", str(card_dir), check=True)  # fmt: skip
    chromium = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    png = card_dir / "scorecard.png"
    if chromium:
        subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                        f"--screenshot={png}", "--window-size=1400,2000", (card_dir / "scorecard.html").resolve().as_uri()],
                       check=False, timeout=120, capture_output=True)  # fmt: skip
    print(
        f"scorecard: {card_dir}/scorecard.html"
        + (f", screenshot {png}" if png.exists() else " (no chromium: no screenshot)")
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
