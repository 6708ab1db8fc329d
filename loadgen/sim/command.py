"""The ``sim`` command: serve the simulated OpenAI-compatible endpoint.

The main CLI mounts it with ``main.add_command(sim_command)``; ``python -m
loadgen.sim`` runs it standalone. It binds 127.0.0.1 unless told otherwise,
prints ``loadgen-sim listening on http://HOST:PORT`` once listening, and stops
cleanly on SIGTERM or SIGINT.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import Callable
from dataclasses import fields
from typing import TYPE_CHECKING, Any, TypeVar

import click

from loadgen.sim.faults import FAULT_KINDS, FaultConfig
from loadgen.sim.model import SimParams
from loadgen.sim.prefix_cache import PrefixCache

if TYPE_CHECKING:  # the servers (aiohttp.web) load when the command runs: `loadgen run` never pays for them
    from loadgen.sim.fast import FastServer
    from loadgen.sim.server import SimServer

__all__ = ["sim_command"]

_PROB = click.FloatRange(0.0, 1.0)
_NONNEG = click.FloatRange(min=0.0)
_DEFAULTS = SimParams()

# the batching model's options: (option, type, help); each defaults to SimParams' own default
_MODEL_OPTIONS: tuple[tuple[str, click.ParamType, str], ...] = (
    ("--slots", click.IntRange(min=1), "Max concurrent sequences in the batch."),
    ("--ttft-ms", _NONNEG, "Fixed prefill cost per request (ms)."),
    ("--prefill-per-token-ms", _NONNEG, "Extra prefill cost per input token (ms)."),
    ("--itl-ms", _NONNEG, "Decode step time with one running sequence (ms)."),
    ("--itl-per-seq-ms", _NONNEG, "Extra decode step time per additional running sequence (ms)."),
    ("--tokens-per-chunk", click.IntRange(min=1), "Tokens per SSE write."),
    ("--default-max-tokens", click.IntRange(min=1), "Output tokens when a request gives no max_tokens."),
)

# the help of each --fault-KIND option (a probability, 0 by default), in FAULT_KINDS order
_FAULT_HELP: dict[str, str] = {
    "429": "Probability of HTTP 429 (Retry-After: 1).",
    "500": "Probability of HTTP 500.",
    "drop": "Probability of aborting the connection after half the tokens.",
    "stall": "Probability of a mid-stream pause.",
    "malformed": "Probability of one malformed (invalid JSON) SSE event.",
    "inband_error": "Probability of an error event inside the 200 stream, which then ends.",
}

_F = TypeVar("_F", bound=Callable[..., Any])


# the prefix cache's options: (option, type, default, help)
_CACHE_OPTIONS: tuple[tuple[str, click.ParamType, int, str], ...] = (
    ("--prefix-cache-blocks", click.IntRange(min=0), 0, "Model a prefix cache of this many KV blocks (LRU; cached "
     "prefill is free; usage reports prompt_tokens_details.cached_tokens). 0: off."),
    ("--prefix-block-tokens", click.IntRange(min=1), 16, "Tokens per KV block of the prefix cache (vLLM's default "
     "block size)."),
)  # fmt: skip


def _table_options(rows: tuple[tuple[str, click.ParamType, Any, str], ...]) -> Callable[[_F], _F]:
    """A decorator adding an option (name, type, default, help; its default shown) for each of ``rows``, in order."""

    def decorate(f: _F) -> _F:
        for name, kind, default, text in reversed(rows):
            f = click.option(name, type=kind, default=default, show_default=True, help=text)(f)
        return f

    return decorate


# the batching model's, each with SimParams' own default
_model_options = _table_options(
    tuple((name, kind, getattr(_DEFAULTS, name[2:].replace("-", "_")), text) for name, kind, text in _MODEL_OPTIONS)
)


def _fault_options(f: _F) -> _F:
    """Decorate ``f`` with ``--fault-KIND`` for each of :data:`FAULT_KINDS`, ``--stall-ms`` and ``--slow-ms``."""
    opts = [
        click.option(f"--fault-{k.replace('_', '-')}", type=_PROB, default=0.0, help=h) for k, h in _FAULT_HELP.items()
    ]
    stall_ms = click.option(
        "--stall-ms", type=_NONNEG, default=1000.0, show_default=True, help="Length of a stall fault (ms)."
    )
    opts.insert(FAULT_KINDS.index("stall") + 1, stall_ms)
    opts.append(click.option("--slow-ms", type=_NONNEG, default=0.0, help="Extra latency before the first byte (ms)."))
    for o in reversed(opts):
        f = o(f)
    return f


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's loop factory when uvloop is importable, else None (the default loop)."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def _write_port_file(path: str, port: int) -> None:
    """Write the port atomically, so a reader never sees a partial file."""
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="ascii") as fh:
        fh.write(f"{port}\n")
    os.replace(tmp, path)


async def _watch_parent(parent_pid: int, stop: asyncio.Event) -> None:
    """Set ``stop`` once the parent process is gone (we were re-parented)."""
    while os.getppid() == parent_pid:
        await asyncio.sleep(0.5)
    stop.set()


async def _spin() -> None:
    """Yield to the loop forever: it polls I/O without blocking (``--busy-poll``)."""
    while True:
        await asyncio.sleep(0)


async def _serve(
    server: SimServer | FastServer, host: str, port: int, port_file: str | None, parent_pid: int | None = None,
    busy_poll: bool = False,
) -> None:  # fmt: skip
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    spinner = loop.create_task(_spin()) if busy_poll else None
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    watcher = loop.create_task(_watch_parent(parent_pid, stop)) if parent_pid else None
    try:
        bound = await server.start(host, port)
        try:
            shown = f"[{host}]" if ":" in host else host
            click.echo(f"loadgen-sim listening on http://{shown}:{bound}")
            sys.stdout.flush()
            if port_file:
                _write_port_file(port_file, bound)
            await stop.wait()
        finally:
            await server.stop()
    finally:
        if watcher is not None:
            watcher.cancel()
        if spinner is not None:
            spinner.cancel()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)


@click.command("sim")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option(
    "--port", type=click.IntRange(0, 65535), default=8000, show_default=True, help="Port to bind; 0 picks a free port."
)
@click.option(
    "--port-file",
    type=click.Path(dir_okay=False),
    default=None,
    help="Write the bound port to this file once listening.",
)
@click.option(
    "--model-name", default="sim-model", show_default=True,
    help="Model id to serve; a,b serves several (a base model and its adapters: one engine, every name accepted).",
)  # fmt: skip
@_model_options
@click.option(
    "--fifo",
    is_flag=True,
    help="Serve as --slots independent servers behind one FIFO queue (no batching: M/D/c for "
    "fixed lengths), each request TTFT + ITL per further token.",
)
@click.option("--strict", is_flag=True, help="Reject unknown request fields with HTTP 400.")
@_fault_options
@click.option(
    "--truth-log",
    type=click.Path(dir_okay=False),
    default=None,
    help="Append one JSON line per finished request (server-side ground truth).",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the fault draws.")
@click.option(
    "--tokenizer",
    "tokenizer_path",
    type=click.Path(exists=True),
    default=None,
    help="Count prompt tokens with this Hugging Face tokenizer (directory or tokenizer.json) "
    "instead of words; chat prompts get the templated count.",
)
@click.option(
    "--busy-poll",
    is_flag=True,
    help="Keep the event loop polling instead of sleeping (costs a core): arrival stamps in "
    "the truth log then exclude this process's wake-up from an idle CPU (replay-"
    "fidelity benchmarks).",
)
@click.option(
    "--fast",
    is_flag=True,
    help="A lean SSE server for client benchmarks (loadgen.sim.fast): TTFT and ITL as given, "
    "unlimited slots, the same truth log; no batching model, no faults, no prefix cache.",
)
@_table_options(_CACHE_OPTIONS)
@click.option("--cpus", help="Serve on these CPUs only (e.g. 1 or 2-3): keeps the simulator off the client's cores.")
@click.option(
    "--parent-pid",
    type=int,
    default=None,
    hidden=True,
    help="Exit when this process is no longer our parent (used by SimProcess).",
)
def sim_command(**kw: Any) -> None:
    """Serve a simulated OpenAI-compatible LLM endpoint (continuous-batching model)."""
    from loadgen.sim.fast import FastServer
    from loadgen.sim.server import SimServer

    params = SimParams(**{f.name: kw[f.name] for f in fields(SimParams)})
    faults = FaultConfig(
        **{f"p_{kind}": kw[f"fault_{kind}"] for kind in FAULT_KINDS},
        stall_ms=kw["stall_ms"],
        slow_ms=kw["slow_ms"],
    )
    if kw["cpus"] is not None:
        from loadgen.core.affinity import parse_cpus, pin_process
        from loadgen.core.errors import ConfigError

        try:
            pin_process(parse_cpus(kw["cpus"]))
        except ConfigError as exc:
            raise click.UsageError(str(exc)) from exc
    tokenizer = None
    if kw["tokenizer_path"]:
        from loadgen.core.errors import ConfigError
        from loadgen.workload.tokenizer import load_tokenizer

        try:
            tokenizer = load_tokenizer(kw["tokenizer_path"])
        except ConfigError as exc:
            raise click.ClickException(str(exc)) from exc
    server: SimServer | FastServer = (
        FastServer.from_options(kw)
        if kw["fast"]
        else SimServer(
            params,
            model_name=kw["model_name"],
            strict=kw["strict"],
            faults=faults,
            truth_log=kw["truth_log"],
            seed=kw["seed"],
            tokenizer=tokenizer,
            prefix_cache=PrefixCache(kw["prefix_cache_blocks"], kw["prefix_block_tokens"])
            if kw["prefix_cache_blocks"]
            else None,
        )
    )
    try:
        with asyncio.Runner(loop_factory=_loop_factory()) as runner:
            runner.run(_serve(server, kw["host"], kw["port"], kw["port_file"], kw["parent_pid"], kw["busy_poll"]))
    except OSError as exc:
        raise click.ClickException(f"cannot serve on {kw['host']}:{kw['port']}: {exc}") from exc
