"""One call to start a vLLM or Triton server: :func:`launch`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from loadgen.core.errors import ConfigError
from loadgen.serve.process import ServerProcess
from loadgen.serve.triton import triton_process
from loadgen.serve.vllm import vllm_process

__all__ = ["SERVER_KINDS", "launch", "server_process"]

SERVER_KINDS = ("vllm", "triton")


def server_process(
    kind: str,
    *,
    serve_model: str | None = None,
    served_model_name: str | None = None,
    model_repository: str | None = None,
    pytriton: str | None = None,
    triton_model: str | None = None,
    server_python: str | None = None,
    tritonserver: str | None = None,
    host: str = "127.0.0.1",
    port: int | None = None,
    grpc_port: int | None = None,
    metrics_port: int | None = None,
    engine_args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    log_dir: str | None = None,
    ready_timeout_s: float | None = None,
) -> ServerProcess:
    """The (unstarted) :class:`ServerProcess` for ``kind``; see :func:`launch`. Raises ConfigError
    for a bad combination of options."""
    if kind == "vllm":
        if not serve_model:
            raise ConfigError("--serve vllm needs --serve-model PATH_OR_NAME")
        if model_repository or pytriton:
            raise ConfigError("--model-repository and --pytriton are for --serve triton")
        return vllm_process(
            serve_model, served_model_name=served_model_name, server_python=server_python, host=host,
            port=port, engine_args=engine_args, env=env, log_dir=log_dir,
            ready_timeout_s=ready_timeout_s or 600.0,
        )  # fmt: skip
    if kind == "triton":
        if (model_repository is None) == (pytriton is None):
            raise ConfigError("--serve triton needs exactly one of --model-repository DIR and --pytriton MODULE")
        if serve_model:
            raise ConfigError("--serve-model is for --serve vllm (Triton serves what its repository holds)")
        return triton_process(
            model_repository=model_repository, pytriton=pytriton, server_python=server_python,
            tritonserver=tritonserver, host=host, http_port=port, grpc_port=grpc_port,
            metrics_port=metrics_port, extra_args=engine_args, env=env, log_dir=log_dir,
            ready_timeout_s=ready_timeout_s or 300.0, model=triton_model,
        )  # fmt: skip
    raise ConfigError(f"unknown server kind {kind!r} (expected one of {', '.join(SERVER_KINDS)})")


def launch(kind: str, **kw: object) -> ServerProcess:
    """Start a server and wait until it is ready; returns the running :class:`ServerProcess`.

    ``kind="vllm"``: ``serve_model`` (a local directory or hub name),
    ``served_model_name`` (the name requests use), ``engine_args`` (vLLM options,
    passed through). ``kind="triton"``: ``model_repository`` or ``pytriton`` (a
    module file), ``triton_model`` (the model to wait for), ``engine_args`` (extra
    ``tritonserver`` or module arguments). Both: ``server_python`` (the interpreter
    whose environment has the server), ``port`` (default: a free port on 127.0.0.1),
    ``log_dir``, ``ready_timeout_s``. Call ``stop()`` on the result (or use it as a
    context manager) — it is also stopped at interpreter exit.

    Raises :class:`loadgen.serve.ServerStartError` (exit 4 in the CLI) when the server
    exits or is not ready in time, after stopping its whole process group.
    """
    return server_process(kind, **kw).start()  # type: ignore[arg-type]  # kind is checked by server_process at run time
