"""``loadgen serve vllm|triton``: run a real server in the foreground until Ctrl-C (or --duration).

Exit codes (decided by :func:`loadgen.cli.serve_exit_code` and the CLI's error mapping):
0 stopped on request, 1 the server died after it was ready (:class:`ServeOutcome`),
2 usage error (a ConfigError), 4 the server failed to start (a ServerStartError: one-line
error, then the log's tail, :func:`report_start_error`).
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import click

from loadgen.core.units import parse_duration_s
from loadgen.serve.launch import server_process
from loadgen.serve.observe import ServerObserver
from loadgen.serve.process import ServerProcess, ServerStartError

__all__ = ["ServeOutcome", "report_start_error", "serve_group"]


@dataclass(frozen=True)
class ServeOutcome:
    """How ``loadgen serve`` ended: ``server_exit`` is the server's exit code when it died after it
    was ready, None when it was stopped on request (Ctrl-C, SIGTERM, --duration)."""

    server_exit: int | None = None


def report_start_error(exc: ServerStartError) -> None:
    """Print a start failure as the CLI does: ``error: <one line>``, then the log's tail, indented."""
    click.echo(f"error: {exc}", err=True)
    if exc.log_tail:
        click.echo("  last lines of the server log:", err=True)
        for line in exc.log_tail.splitlines()[-15:]:
            click.echo("  | " + line[:240], err=True)


def _common(f: Callable[..., Any]) -> Callable[..., Any]:
    opts = [
        click.option("--server-python", help="Interpreter whose environment has the server "
                     "(default: $LOADGEN_<KIND>_PYTHON, $LOADGEN_SERVER_PYTHON, .venv-<kind>/bin/python)."),
        click.option("--host", default="127.0.0.1", show_default=True, help="Address the server binds."),
        click.option("--serve-timeout", "ready_timeout", default=None,
                     help="How long to wait for the server to be ready (default 600s vLLM, 300s Triton)."),
        click.option("--ready-timeout", "ready_timeout_old", hidden=True, help="The old spelling of --serve-timeout."),
        click.option("--log-dir", type=click.Path(file_okay=False), help="Where the server log goes (default: a new temp dir)."),
        click.option("--duration", help="Stop after this long (default: run until Ctrl-C or SIGTERM)."),
        click.option("--conditions-out", type=click.Path(dir_okay=False), help="Write the conditions block (JSON) here."),
        click.argument("server_args", nargs=-1, type=click.UNPROCESSED),
    ]  # fmt: skip
    for o in reversed(opts):
        f = o(f)
    return f


@click.group("serve", context_settings={"help_option_names": ["-h", "--help"]})
def serve_group() -> None:
    """Run a real inference server (vLLM, Triton) on this machine, for loadgen to measure."""


@serve_group.command("vllm", context_settings={"ignore_unknown_options": True})
@click.option("--serve-model", required=True, help="Model directory or hub name for vLLM to load.")
@click.option("--served-model-name", help="Name requests use (default: --serve-model).")
@click.option("--server-port", type=int, help="Port (default: a free port on 127.0.0.1).")
@_common
def serve_vllm(**kw: Any) -> ServeOutcome:
    """vLLM's OpenAI-compatible server; options after `--` go to vLLM unchanged.

    Example: loadgen serve vllm --serve-model ./tiny --served-model-name tiny -- --max-model-len 1024
    """
    proc = _build(
        "vllm", kw, serve_model=kw["serve_model"], served_model_name=kw["served_model_name"], port=kw["server_port"]
    )
    return _run_foreground(proc, kw, model=proc.info.get("served_model_name"))


@serve_group.command("triton", context_settings={"ignore_unknown_options": True})
@click.option("--model-repository", type=click.Path(file_okay=False), help="A Triton model repository to serve.")
@click.option("--pytriton", help="A PyTriton module (file, or '-m dotted.name') that binds models and serves.")
@click.option("--model", "triton_model", help="Triton model to wait for and describe (e.g. tiny_llm).")
@click.option("--tritonserver", help="tritonserver binary (default: $LOADGEN_TRITONSERVER, PATH, or PyTriton's).")
@click.option("--server-port", "--http-port", "server_port", type=int, help="HTTP port (default: free).")
@click.option("--grpc-port", type=int, help="gRPC port (default: free).")
@click.option("--metrics-port", type=int, help="Prometheus metrics port (default: free).")
@_common
def serve_triton(**kw: Any) -> ServeOutcome:
    """NVIDIA Triton Inference Server; options after `--` go to tritonserver (or the module)."""
    if (kw["model_repository"] is None) == (kw["pytriton"] is None):
        raise click.UsageError("give exactly one of --model-repository DIR and --pytriton MODULE")
    proc = _build(
        "triton", kw, model_repository=kw["model_repository"], pytriton=kw["pytriton"],
        triton_model=kw["triton_model"], tritonserver=kw["tritonserver"], port=kw["server_port"],
        grpc_port=kw["grpc_port"], metrics_port=kw["metrics_port"],
    )  # fmt: skip
    return _run_foreground(proc, kw, model=kw["triton_model"])


def _build(kind: str, kw: dict[str, Any], **extra: Any) -> ServerProcess:
    """The server process, not started; ConfigError and ServerStartError go up to the CLI's mapping."""
    args = list(kw["server_args"])
    if args and args[0] == "--":
        args = args[1:]
    return server_process(
        kind, server_python=kw["server_python"], host=kw["host"], engine_args=args, log_dir=kw["log_dir"],
        ready_timeout_s=parse_duration_s(kw["ready_timeout"] or kw["ready_timeout_old"], "--serve-timeout"), **extra,
    )  # fmt: skip


def _run_foreground(proc: ServerProcess, kw: dict[str, Any], model: str | None) -> ServeOutcome:
    duration = parse_duration_s(kw["duration"], "--duration")

    def on_term(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGTERM, on_term)
    try:
        died = _serve(proc, kw, model, duration)
    except KeyboardInterrupt:
        died = None
    finally:
        stopped = proc.stop()
        signal.signal(signal.SIGTERM, old)
    if stopped.get("signal") and proc.ready_s is not None:
        click.echo(f"stopped ({stopped['signal']}, {stopped['stop_s']:.1f} s)")
    return ServeOutcome(died)


def _serve(proc: ServerProcess, kw: dict[str, Any], model: str | None, duration: float | None) -> int | None:
    """Start, describe, and wait (bounded by ``duration`` or a signal).

    Returns the server's exit code when it died after it was ready, None when the wait ended;
    raises ServerStartError when it did not start.
    """
    proc.start()
    urls = {k: v for k, v in proc.info.items() if k.endswith("_url")} or {"url": proc.base_url}
    where = ", ".join(f"{k.removesuffix('_url')} {v}" for k, v in urls.items())
    click.echo(f"{proc.kind} ready in {proc.ready_s:.1f} s: {where}" + (f" (model {model})" if model else ""))
    click.echo(f"log: {proc.log_path}")
    cond = asyncio.run(_conditions(proc, model))
    click.echo("conditions: " + json.dumps(_brief(cond)))
    if kw["conditions_out"]:
        with open(kw["conditions_out"], "w", encoding="utf-8") as fh:
            json.dump(cond, fh, indent=2)
    click.echo("serving; Ctrl-C to stop" if duration is None else f"serving for {duration:g} s")
    deadline = None if duration is None else time.monotonic() + duration
    while deadline is None or time.monotonic() < deadline:
        if proc.proc is not None and proc.proc.poll() is not None:
            click.echo(
                f"error: {proc.kind} server exited with code {proc.proc.returncode} (log: {proc.log_path})", err=True
            )
            return int(proc.proc.returncode)
        time.sleep(0.5)
    return None


async def _conditions(proc: ServerProcess, model: str | None) -> dict[str, Any]:
    obs = ServerObserver.for_server(proc, model=model)
    try:
        return await obs.conditions()
    finally:
        await obs.close()


def _brief(cond: dict[str, Any]) -> dict[str, Any]:
    keys = ("kind", "version", "served_model", "max_model_len", "dtype", "unknown")
    out = {k: cond.get(k) for k in keys}
    acc = cond.get("accelerator") or {}
    out["accelerator"] = acc.get("name") or acc.get("cpu_model")
    return out
