"""Long prompts against `vllm bench serve` (issue 31 item 1): prompts prepared before the clock, side by side.

For each prompt length (``--lengths``, default 4096,32768,131072 tokens) and repetition (``--reps``),
loadgen and ``vllm bench serve`` run one after the other (interleaved, so drift hits both), each
against a fresh ``loadgen sim --fast`` (TTFT ``--ttft-ms``, ITL ``--itl-ms``, 16 output tokens,
unlimited slots) with a truth log: closed loop at ``--concurrency`` (16) users, ``--requests``
requests a run, ``--output-tokens`` (16) each (vLLM: ``--max-concurrency 16 --request-rate inf --num-prompts N``; loadgen:
``--concurrency 16 --requests N``). With two CPUs or more the server has the last one and the client
the others (``taskset``).

From the server's truth log, the same for both clients:

* **window**: the first request's arrival to the last answer's end;
* **req/s**: requests / window;
* **client CPU ms/req**: the client process's CPU time inside the window (``/proc/PID/stat``
  sampled every 50 ms) / requests: what building, sending and reading cost while the clock ran
  (a client that prepares before the clock pays nothing for prompts here);
* **server cores** over the window (near 1.0: the server is the limit, not the client);
* **words**: the prompt's median length as the server counts it (white-space words): both clients
  build exact-length prompts of the same tokenizer (loadgen ``--tokenizer``), so both send the same bytes;
* **TTFT p50 error**: the client's TTFT p50 less the truth's (first token written - request
  arrived) p50, in ms: a distribution-level error, the same for both (vLLM's per-request detail
  carries no request id to pair). It holds the upload of the prompt (the truth's TTFT starts when the
  server has read the body): at 128k tokens, tens of ms. For loadgen also the *paired* error
  (``loadgen.sim.truth.truth_errors``: each request's true TTFT from its own send), the one its
  verdict is about.

Printed per length: the medians of each client's figures and loadgen / vLLM for req/s and CPU, output
tok/s and client CPU a token (``--lengths 16 --concurrency 128 --output-tokens 256 --requests 2000``: the
raw-throughput comparison of must-show 3).
Needs ``.venv-vllm`` (vLLM's CPU build; ``--vllm-python``) and a tokenizer directory for vLLM's
random prompts (``--tokenizer``; default: the tests' byte-level BPE, built into a temp dir).

    scripts/bench_prepare --lengths 32768,131072 --reps 3
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_client import ServerCPU
from bench_common import SimProcess, cpu_split, median, read_jsonl

from loadgen.sim.truth import truth_errors

REPO = Path(__file__).resolve().parent.parent

VLLM_MAIN = """
import argparse, sys
from vllm.benchmarks import serve
ap = argparse.ArgumentParser()
serve.add_cli_args(ap)
serve.main(ap.parse_args(sys.argv[1:]))
"""


def truth_window(truth: Path, n: int) -> tuple[int, int, list[float], int, float]:
    """(first arrival ns, last end ns, true TTFTs ms, requests, median prompt words) of the truth log's
    last ``n`` ok requests: the run's own (each client's probes and test request come before it)."""
    rows = sorted((r for r in read_jsonl(truth) if r.get("first_token_ns") and r.get("end_ns")),
                  key=lambda r: r["arrival_ns"])[-n:]  # fmt: skip
    a = min(r["arrival_ns"] for r in rows)
    b = max(r["end_ns"] for r in rows)
    ttft = [(r["first_token_ns"] - r["arrival_ns"]) / 1e6 for r in rows]
    words = float(np.median([r.get("prompt_tokens") or 0 for r in rows]))
    return a, b, ttft, len(rows), words


def taskset(cpus: list[str]) -> list[str]:
    return ["taskset", "-c", cpus[1]] if cpus else []


def run_client(kind: str, n_tokens: int, a: argparse.Namespace, sim_cpus: list[str], client_cpus: list[str],
               tok: Path, work: Path) -> dict[str, Any]:  # fmt: skip
    truth = work / f"truth-{kind}.jsonl"
    sim_args = ["--fast", "--slots", "4096", "--ttft-ms", str(a.ttft_ms), "--itl-ms", str(a.itl_ms),
                "--truth-log", str(truth), *sim_cpus]  # fmt: skip
    with SimProcess(sim_args) as sim:
        assert sim.proc is not None and sim.url
        srv = ServerCPU(sim.proc.pid)
        if kind == "loadgen":
            out = work / "lg"
            cmd = [sys.executable, "-m", "loadgen.cli", "run", "--endpoint", sim.url, "--concurrency",
                   str(a.concurrency), "--requests", str(a.requests), "--input-tokens", str(n_tokens),
                   "--output-tokens", str(a.output_tokens), "--tokenizer", str(tok), "--out", str(out), *client_cpus]  # fmt: skip
        else:
            out = work / "vllm"
            out.mkdir()
            cmd = [*taskset(client_cpus), a.vllm_python, "-c", VLLM_MAIN, "--backend", "openai", "--base-url",
                   sim.url, "--endpoint", "/v1/completions", "--model", "sim-model", "--tokenizer", str(tok),
                   "--dataset-name", "random", "--random-input-len", str(n_tokens), "--random-output-len", str(a.output_tokens),
                   "--num-prompts", str(a.requests), "--max-concurrency", str(a.concurrency), "--request-rate",
                   "inf", "--ignore-eos", "--disable-tqdm", "--num-warmups", "0", "--save-result",
                   "--save-detailed", "--result-dir", str(out), "--result-filename", "r.json"]  # fmt: skip
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        p = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        cli = ServerCPU(p.pid)
        text, _ = p.communicate(timeout=a.timeout_s)
        cli.stop()
        srv.stop()
    if p.returncode not in (0, 5):  # loadgen exits 5 on INVALID: its figures are still measured
        raise SystemExit(f"{kind} failed ({p.returncode}):\n{text.decode(errors='replace')[-3000:]}")
    w0, w1, true_ttft, n, words = truth_window(truth, a.requests)
    win_s = (w1 - w0) / 1e9
    cores = cli.cores(w0, w1)
    if kind == "loadgen":
        rows = [r for r in read_jsonl(out / "requests.jsonl") if r["status"] == "ok" and r.get("ttft_ms") is not None]
        ttft = [r["ttft_ms"] for r in rows]
        res = json.loads((out / "result.json").read_text())
        paired = truth_errors(out, truth)["ttft_p50_err_ms"]
        prep = res["client"].get("preparation") or {}
        prompt_bytes = (prep.get("bytes") or 0) / max(prep.get("requests") or 1, 1)
    else:
        det = json.loads((out / "r.json").read_text())
        ttft = [t * 1e3 for t in det["ttfts"] if t]
        prompt_bytes = float("nan")
        paired = float("nan")  # vLLM's per-request detail carries no request id
    return {
        "rps": n / win_s,
        "tps": n * a.output_tokens / win_s,
        "cpu_us_per_token": cores * win_s * 1e6 / (n * a.output_tokens),
        "cpu_ms": cores * win_s * 1e3 / n,
        "client_cores": cores,
        "srv": srv.cores(w0, w1),
        "ttft_p50_err_ms": float(np.percentile(ttft, 50) - np.percentile(true_ttft, 50)),
        "paired_ttft_p50_err_ms": paired,
        "requests": n,
        "prompt_bytes": prompt_bytes,
        "words": words,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lengths", default="4096,32768,131072")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--requests", type=int, default=400)
    ap.add_argument("--output-tokens", type=int, default=16)
    ap.add_argument("--ttft-ms", type=float, default=10.0)
    ap.add_argument("--itl-ms", type=float, default=1.0)
    ap.add_argument("--vllm-python", default=str(REPO / ".venv-vllm" / "bin" / "python"))
    ap.add_argument("--tokenizer", default=None, help="a tokenizer directory for vLLM's random prompts")
    ap.add_argument("--timeout-s", type=float, default=600.0)
    ap.add_argument("--no-cpus", action="store_true", help="do not pin server and client to separate CPUs")
    a = ap.parse_args()
    sim_cpus, client_cpus = cpu_split(1, not a.no_cpus)
    tmp = Path(tempfile.mkdtemp(prefix="bench-prepare-"))
    tok = Path(a.tokenizer) if a.tokenizer else tmp / "tok"
    if not a.tokenizer:
        sys.path.insert(0, str(REPO))
        from tests.fixtures.tokenizer import build_test_tokenizer

        build_test_tokenizer(tok)
    print(f"== closed loop, {a.concurrency} users, {a.requests} requests a run, {a.output_tokens} output tokens; fast sim TTFT "
          f"{a.ttft_ms:g} ms, ITL {a.itl_ms:g} ms; {'pinned: ' + ' '.join(sim_cpus + client_cpus) if sim_cpus else 'not pinned'}")  # fmt: skip
    print(f"{'tokens':>7s} {'client':>8s} {'req/s':>8s} {'CPU ms/req':>10s} {'client cores':>12s} {'srv cores':>9s} "
          f"{'TTFT50 err':>10s} {'paired':>7s} {'words':>7s}")  # fmt: skip
    for n_tok in [int(x) for x in a.lengths.split(",")]:
        runs: dict[str, list[dict[str, Any]]] = {"loadgen": [], "vllm": []}
        for rep in range(a.reps):
            for kind in ("loadgen", "vllm") if rep % 2 == 0 else ("vllm", "loadgen"):
                work = tmp / f"{n_tok}-{rep}-{kind}"
                work.mkdir()
                t = time.monotonic()
                r = run_client(kind, n_tok, a, sim_cpus, client_cpus, tok, work)
                runs[kind].append(r)
                print(f"{n_tok:7d} {kind:>8s} {r['rps']:8.1f} {r['cpu_ms']:10.2f} {r['client_cores']:12.2f} "
                      f"{r['srv']:9.2f} {r['ttft_p50_err_ms']:10.2f} {r['paired_ttft_p50_err_ms']:7.2f} {r['words']:7.0f}   ({time.monotonic() - t:.0f} s)", flush=True)  # fmt: skip
        fields = ("rps", "tps", "cpu_ms", "cpu_us_per_token", "ttft_p50_err_ms", "paired_ttft_p50_err_ms", "srv")
        med = {k: {f: median([r[f] for r in v]) for f in fields} for k, v in runs.items()}
        lg, vl = med["loadgen"], med["vllm"]
        print(f"{n_tok:7d} medians: loadgen {lg['rps']:.1f} req/s, {lg['cpu_ms']:.2f} ms CPU/req, TTFT p50 err "
              f"{lg['ttft_p50_err_ms']:.2f} ms (paired {lg['paired_ttft_p50_err_ms']:.2f}); vLLM {vl['rps']:.1f} req/s, {vl['cpu_ms']:.2f} ms CPU/req, TTFT p50 err "
              f"{vl['ttft_p50_err_ms']:.2f} ms; loadgen/vLLM req/s {lg['rps'] / vl['rps']:.2f}, CPU/req "
              f"{lg['cpu_ms'] / vl['cpu_ms']:.2f}; server cores {lg['srv']:.2f} / {vl['srv']:.2f}; output tok/s "
              f"{lg['tps']:,.0f} / {vl['tps']:,.0f} ({lg['tps'] / vl['tps']:.2f}x), client CPU a token "
              f"{lg['cpu_us_per_token']:.1f} / {vl['cpu_us_per_token']:.1f} us ({lg['cpu_us_per_token'] / vl['cpu_us_per_token']:.2f}x)")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
