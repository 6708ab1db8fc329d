"""Launch NVIDIA Triton Inference Server: a model repository, or a PyTriton module.

Two ways, both ending in a real ``tritonserver`` bound to 127.0.0.1 with HTTP, gRPC
and metrics ports of their own (free ports unless given); ready when
``GET /v2/health/ready`` answers 200:

* ``model_repository=DIR``: ``tritonserver --model-repository DIR ...``. The binary is
  ``tritonserver`` (argument, ``$LOADGEN_TRITONSERVER``, or ``PATH`` — a Triton
  container has it); failing those, the one bundled with ``nvidia-pytriton`` in the
  server interpreter's environment, prepared as PyTriton prepares it (the Python
  backend stub for that interpreter copied in, its libraries on ``LD_LIBRARY_PATH``),
  which serves Python-backend models (not the vLLM or TensorRT-LLM backends).
* ``pytriton=MODULE``: ``PY MODULE --http-port H --grpc-port G --metrics-port M`` where
  MODULE is a file path or ``-m dotted.name``; the module binds its models with
  PyTriton and serves until SIGTERM (``servers/pytriton/tiny_llm.py`` is one).
  ``LD_LIBRARY_PATH`` starts with the interpreter's own lib directory, otherwise the
  backend stub may load another libpython and model loading fails.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence

from loadgen.serve.process import ServerProcess, ServerStartError, free_port, server_env
from loadgen.serve.vllm import find_server_python

__all__ = ["python_libdir", "triton_process"]

# Run under the server interpreter: prepare PyTriton's bundled tritonserver and exec it.
_BUNDLED = r"""
import os, pathlib, shutil, sys, sysconfig
from pytriton.utils.distribution import get_libs_path, get_root_module_path, get_stub_path
work = pathlib.Path(sys.argv[1])
src = get_root_module_path() / "tritonserver"
dst = work / "tritonserver"
if not dst.exists():
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("python_backend_stubs"))
    v = f"{sys.version_info.major}.{sys.version_info.minor}"
    shutil.copy(get_stub_path(v), dst / "backends" / "python" / "triton_python_backend_stub")
env = dict(os.environ)
libdir = sysconfig.get_config_var("LIBDIR") or ""
env["LD_LIBRARY_PATH"] = ":".join(p for p in (libdir, env.get("LD_LIBRARY_PATH", ""), str(get_libs_path())) if p)
env["PATH"] = str(pathlib.Path(sys.executable).parent) + ":" + env.get("PATH", "")
binary = str(dst / "bin" / "tritonserver")
args = [binary, "--backend-directory", str(dst / "backends"), *sys.argv[2:]]
sys.stdout.flush()
os.execve(binary, args, env)
"""


def python_libdir(py: str) -> str | None:
    """The interpreter's ``LIBDIR`` (where its libpython lives); None if it cannot be asked."""
    try:
        out = subprocess.run(
            [py, "-c", "import sysconfig; print(sysconfig.get_config_var('LIBDIR') or '')"],
            capture_output=True, text=True, timeout=30, env=server_env(),
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def _find_tritonserver(given: str | None) -> str | None:
    for cand in (given, os.environ.get("LOADGEN_TRITONSERVER"), shutil.which("tritonserver")):
        if cand:
            return cand
    return None


def triton_process(
    *,
    model_repository: str | None = None,
    pytriton: str | None = None,
    server_python: str | None = None,
    tritonserver: str | None = None,
    host: str = "127.0.0.1",
    http_port: int | None = None,
    grpc_port: int | None = None,
    metrics_port: int | None = None,
    extra_args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    log_dir: str | None = None,
    ready_timeout_s: float = 300.0,
    model: str | None = None,
) -> ServerProcess:
    """A :class:`ServerProcess` (not started) for Triton; give exactly one of
    ``model_repository`` and ``pytriton``. ``info`` holds ``http_url``, ``grpc_url``
    (``host:port``) and ``metrics_url``. With ``model``, readiness also waits for
    ``/v2/models/MODEL/ready`` (PyTriton binds its models after the server is up). Raises ServerStartError when nothing can run it."""
    if (model_repository is None) == (pytriton is None):
        raise ValueError("give exactly one of model_repository and pytriton")
    http_port = http_port or free_port(host)
    grpc_port = grpc_port or free_port(host)
    metrics_port = metrics_port or free_port(host)
    url_host = "127.0.0.1" if host in ("0.0.0.0", "") else host
    info: dict[str, object] = {
        "http_url": f"http://{url_host}:{http_port}",
        "grpc_url": f"{url_host}:{grpc_port}",
        "metrics_url": f"http://{url_host}:{metrics_port}/metrics",
        "extra_args": list(extra_args),
        "host": host,
    }
    extra_env: dict[str, str] = {}
    py = None
    if model_repository is not None:
        repo = os.path.abspath(os.path.expanduser(model_repository))
        info["model_repository"] = repo
        ports = [
            "--model-repository", repo,
            "--http-address", host, "--http-port", str(http_port),
            "--grpc-address", host, "--grpc-port", str(grpc_port),
            "--metrics-address", host, "--metrics-port", str(metrics_port),
            "--allow-metrics", "true",
        ]  # fmt: skip
        binary = _find_tritonserver(tritonserver)
        if binary is not None:
            cmd = [binary, *ports, *extra_args]
            info["tritonserver"] = binary
        else:
            py, src = find_server_python("triton", server_python)
            info["server_python"], info["server_python_source"] = py, src
            info["tritonserver"] = "bundled with nvidia-pytriton (Python backend only)"
            work = log_dir or None
            cmd = [py, "-c", _BUNDLED, os.path.join(work or "/tmp", "pytriton-triton"), *ports, *extra_args]
    else:
        if pytriton is None:
            raise ServerStartError("triton server: give a model repository or a PyTriton module")
        py, src = find_server_python("triton", server_python)
        info["server_python"], info["server_python_source"] = py, src
        info["pytriton_module"] = pytriton
        target = ["-m", pytriton[3:].strip()] if pytriton.startswith("-m ") else [os.path.abspath(pytriton)]
        if not pytriton.startswith("-m ") and not os.path.exists(target[0]):
            raise ServerStartError(f"triton server failed to start: no such PyTriton module file: {pytriton}")
        cmd = [
            py, *target,
            "--host", host,
            "--http-port", str(http_port), "--grpc-port", str(grpc_port), "--metrics-port", str(metrics_port),
            *extra_args,
        ]  # fmt: skip
    if py is not None:
        libdir = python_libdir(py)
        if libdir:
            extra_env["LD_LIBRARY_PATH"] = ":".join(p for p in (libdir, os.environ.get("LD_LIBRARY_PATH", "")) if p)
    proc = ServerProcess(
        kind="triton",
        command=cmd,
        ready_url=f"{info['http_url']}/v2/health/ready",
        base_url=str(info["http_url"]),
        env=server_env({**extra_env, **(env or {})}),
        log_dir=log_dir,
        ready_timeout_s=ready_timeout_s,
        info=info,
        also_ready=[f"{info['http_url']}/v2/models/{model}/ready"] if model else [],
    )
    if model is not None:
        info["model"] = model
    if model_repository is not None and "server_python" in info:
        # the bundled server's working copy goes next to the log
        proc.command[3] = os.path.join(proc.log_dir or "/tmp", "pytriton-triton")
    return proc
