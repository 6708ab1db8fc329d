"""Shared option groups and option parsing of the commands (usage errors, exit 2, come from here).

``common_endpoint_options`` (what to send to and how), ``run_only_options`` (``loadgen run``),
``workload_options`` (what is sent, shared by ``run`` and ``sweep``); parsers for headers,
``--extra-body``, ``--cpus``, ``--workers``, durations and percentages (:mod:`loadgen.core.units`).
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import click

from loadgen.cli.helpfmt import OPTION_HELP, AliasOption, api_help
from loadgen.cli.runfile import config_file_option, label_option, merge_file_headers
from loadgen.cli.url_options import URL
from loadgen.core.errors import ConfigError
from loadgen.core.units import parse_duration_s, parse_percent
from loadgen.workload.traces import BUILTIN_TRACES

if TYPE_CHECKING:
    from loadgen.spread.cluster import Cluster

__all__ = [
    "common_endpoint_options",
    "cpus_option",
    "duration_s",
    "make_out_dir",
    "resolve_headers",
    "parse_extra_body",
    "parse_headers",
    "parse_ratio",
    "parse_workers",
    "pin_client",
    "positive_duration_s",
    "run_only_options",
    "usage_errors",
    "use_uvloop",
    "workload_options",
]

F = TypeVar("F", bound=Callable[..., Any])


@contextmanager
def usage_errors(prefix: str = "") -> Iterator[None]:
    """Turn a :class:`~loadgen.core.errors.ConfigError` raised inside into a ``click.UsageError`` (exit 2).

    The one helper that does: an option value the library refuses is a usage error,
    its message optionally prefixed with the flag (``"--slo: "``).
    """
    try:
        yield
    except ConfigError as exc:
        raise click.UsageError(f"{prefix}{exc}") from None


def duration_s(value: str | None, what: str) -> float | None:
    """A duration flag in seconds (:func:`loadgen.core.units.parse_duration_s`); None stays None."""
    with usage_errors():
        return parse_duration_s(value, what)


def positive_duration_s(value: str | None, what: str, default: float) -> float:
    """A duration that must be > 0 when given (0 is a mistake, not "use the default")."""
    s = duration_s(value, what)
    if s is None:
        return default
    if not s > 0:
        raise click.UsageError(f"{what} must be > 0")
    return s


def make_out_dir(out_dir: Path) -> None:
    """Create ``--out`` and prove it writable before any load (a usage error in one line, exit 2)."""
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise click.UsageError(f"--out {str(out_dir)!r}: cannot create it: {exc.strerror or exc}") from None
    probe = out_dir / f".loadgen-write-test-{os.getpid()}"
    try:
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise click.UsageError(f"--out {str(out_dir)!r}: cannot write there: {exc.strerror or exc}") from None


def _reject_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not a JSON value")


def parse_workers(text: str, cluster: Cluster | None = None) -> int:
    if text == "auto":
        if cluster is not None:
            return cluster.auto_workers()
        from loadgen.spread.workers import auto_workers

        return auto_workers()
    if not text.isdigit() or int(text) < 1:
        raise click.UsageError(f"--workers {text!r}: expected a positive integer or 'auto'")
    return int(text)


def _header_name(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """An HTTP header name (RFC 9110 token), or a usage error naming the option."""
    if value is not None and (not value or any(c not in _TCHAR for c in value)):
        raise click.BadParameter(f"{value!r} is not an HTTP header name (letters, digits, -, _ and the like)")
    return value


_TCHAR = frozenset("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


def parse_headers(values: tuple[str, ...]) -> dict[str, str]:
    out: dict[str, str] = {}
    for v in values:
        name, sep, val = v.partition(":")
        if not sep or not name.strip():
            first = (name.split() or [""])[0][:40]  # never echo what may be the value (a missing colon)
            raise click.UsageError(f"--header {first!r}...: expected 'Name: value' (the value is not shown)")
        if any(ord(c) < 32 and c != "\t" or ord(c) == 127 for c in v):
            first = (name.split() or [""])[0][:40]
            raise click.UsageError(f"--header {first!r}: a control character (CR, LF, ...) in a header is refused")
        out[name.strip()] = val.strip()
    return out


def resolve_headers(headers: tuple[str, ...], header_envs: tuple[str, ...]) -> tuple[dict[str, str], list[str]]:
    """``--header`` then ``--header-env NAME=ENVVAR`` (values from the environment): (headers, the values
    read from the environment, every one a secret whatever its name). Raises click.UsageError."""
    out = parse_headers(headers or ())
    secrets: list[str] = []
    for spec in header_envs or ():
        name, sep, var = spec.partition("=")
        if not sep or not name.strip() or not var.strip():
            raise click.UsageError(f"--header-env {spec!r}: expected NAME=ENVVAR")
        value = os.environ.get(var.strip())
        if value is None:
            raise click.UsageError(f"--header-env {name.strip()}={var.strip()}: that environment variable is not set")
        if any(ord(c) < 32 and c != "\t" or ord(c) == 127 for c in value):
            raise click.UsageError(f"--header-env {name.strip()}: a control character in its value is refused")
        out[name.strip()] = value.strip()
        secrets.append(value.strip())
    return out, secrets


def parse_extra_body(text: str | None) -> dict[str, Any]:
    if not text:
        return {}
    try:
        obj = json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise click.UsageError(f"--extra-body is not valid JSON (column {exc.colno}): {exc.msg}") from None
    except ValueError as exc:  # NaN, Infinity: Python's extensions, not JSON
        raise click.UsageError(f"--extra-body is not valid JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise click.UsageError("--extra-body must be a JSON object")
    return obj


def cpus_option(text: str | None) -> set[int] | None:
    """``--cpus`` parsed (checked before anything starts)."""
    if text is None:
        return None
    from loadgen.core.affinity import check_cpus, parse_cpus

    cpus = parse_cpus(text)
    check_cpus(cpus)
    return cpus


def pin_client(cpus: set[int] | None) -> None:
    """``--cpus``: restrict this process (and the workers it starts) to those CPUs."""
    if cpus is not None:
        from loadgen.core.affinity import pin_process

        pin_process(cpus)


def use_uvloop() -> None:
    try:
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    except ImportError:
        pass


def parse_ratio(text: str, what: str) -> float:
    """A percentage: ``5%`` or ``5`` -> 0.05 (ratio flags are always percentages)."""
    with usage_errors():
        return parse_percent(text, what)


def _endpoint_replicas(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> str | None:
    """``--endpoint`` (repeatable): the first URL is the option's value; two or more are replicas of one
    model balanced by the client, kept in ``ctx.meta`` (:func:`loadgen.cli.target.endpoint_replicas`)."""
    ctx.meta["loadgen.endpoint_replicas"] = tuple(value) if len(value) > 1 else ()
    return value[0] if value else None


def common_endpoint_options(f: F) -> F:
    """What to send to and how (``run``, ``sweep``), with the run-file options ``--config`` and ``--label``."""
    opts = [
        config_file_option,
        label_option,
        click.option(
            "--endpoint",
            type=URL,
            multiple=True,
            callback=_endpoint_replicas,
            help="Base URL of an OpenAI-compatible server (default: start the embedded simulated endpoint). "
            "Given several times: replicas of one model, each with its own connection pool, a replica "
            "picked per request by the client (--balance).",
        ),
        click.option(
            "--balance",
            type=click.Choice(["round-robin", "least-outstanding"]),
            default="round-robin",
            show_default=True,
            help="How requests are spread over several --endpoint replicas: in turn, or to the one with the "
            "fewest requests in flight.",
        ),
        click.option(
            "--api",
            type=click.Choice(["completions", "chat", "responses", "triton-http", "triton-grpc"]),
            default="completions",
            show_default=True,
            help=api_help(["completions", "chat", "responses", "triton-http", "triton-grpc"]),
        ),
        click.option("--model", help="Model name sent in requests (default: the first model the endpoint lists)."),
        click.option(
            "--header",
            "headers",
            multiple=True,
            callback=merge_file_headers,
            help="Extra request header 'Name: value' (repeatable; adds to a --config file's).",
        ),
        click.option(
            "--header-env",
            "header_envs",
            multiple=True,
            metavar="NAME=ENVVAR",
            help="Request header NAME whose value is read from environment variable ENVVAR (repeatable). "
            "A --header value, URL userinfo or --extra-body is visible to every local user in `ps`: give "
            "secrets with --header-env, --api-key-env or a chmod-600 --config file.",
        ),
        click.option(
            "--api-key-env", help="Environment variable holding the API key (default OPENAI_API_KEY when set)."
        ),
        click.option(
            "--timeout",
            "timeout",
            default="600s",
            show_default=True,
            help="Total per-request deadline, e.g. 600s, 10m.",
        ),
        click.option("--connect-timeout", default="10s", show_default=True, help=OPTION_HELP["connect_timeout"]),
        click.option(
            "--idle-timeout",
            default="120s",
            show_default=True,
            help="No byte of an answer's body for this long (a stalled stream) ends the request as a timeout.",
        ),
        click.option(
            "--header-timeout",
            help="No response headers this long after the send ends the request as header_timeout (the server's "
            "failure) [default: max(30s, 10x the TTFT target) with a --slo on ttft, else 60s; off with --no-stream].",
        ),
        click.option("--extra-body", help="JSON object merged into every request body (sampling parameters, ...)."),
        click.option(
            "--tools",
            "tools_file",
            metavar="FILE",
            help="JSON list of tool schemas sent with every chat "
            "request (OpenAI form; sessions carry the replies' tool calls back).",
        ),  # fmt: skip
        click.option("--no-preflight", is_flag=True, help="Skip the pre-flight request that detects optional fields."),
        click.option("--no-stream", is_flag=True, help="Non-streaming requests (only E2E is measurable)."),
        click.option("--insecure", is_flag=True, help="Do not verify TLS certificates (recorded in the result)."),
        click.option(
            "--provider",
            type=click.Choice(["openai-compatible", "openai", "azure", "anthropic"]),
            default="openai-compatible",
            show_default=True,
            help="URL shape, credentials and stream format (openai/anthropic default to their public API when --endpoint is not given).",
        ),
        click.option("--deployment", help="Azure OpenAI deployment name."),
        click.option("--api-version", help="Azure OpenAI api-version (default 2024-10-21; 'v1' for the v1 API)."),
        click.option(
            "--azure-ad-token-env",
            help="Environment variable holding an Entra ID token (Azure, instead of an api-key).",
        ),
        click.option("--anthropic-version", help="anthropic-version header (default 2023-06-01)."),
        click.option(
            "--ca-file",
            type=click.Path(exists=True, dir_okay=False),
            help="Extra trusted CA bundle (private or self-signed certificates).",
        ),
        click.option(
            "--connection-reuse",
            type=click.Choice(["keep-alive", "none"]),
            default="keep-alive",
            show_default=True,
            help="none: a new connection (DNS, TCP, TLS) for every request.",
        ),
        click.option(
            "--http-client",
            type=click.Choice(["auto", "aiohttp", "lean"]),
            default="auto",
            show_default=True,
            help="The load's HTTP client: lean is loadgen's own HTTP/1.1 on asyncio (less CPU a request; "
            "OpenAI-compatible endpoints only); auto: lean where it can, aiohttp for Anthropic and Triton. "
            "Recorded as conditions.endpoint.client.library.",
        ),
        click.option(
            "--network-baseline",
            type=click.Choice(["auto", "on", "off"]),
            default="auto",
            show_default=True,
            help="Resolve the host, time a few TCP connects and a cheap request before the run (auto: for non-loopback endpoints).",
        ),
        click.option(
            "--retry-429",
            type=click.IntRange(min=0),
            default=0,
            show_default=True,
            help="Retry a 429 up to N times after its advised wait (the wait counts in latency).",
        ),
        click.option(
            "--max-rpm",
            type=float,
            help="Cap the client at this many requests per minute (the run is then no longer the offered load).",
        ),
        click.option(
            "--max-tpm", type=float, help="Cap the client at this many tokens (prompt + max_tokens) per minute."
        ),
        click.option(
            "--price-input-per-million",
            type=float,
            help="USD per million input tokens (cost per request and per million output tokens).",
        ),
        click.option("--price-output-per-million", type=float, help="USD per million output tokens."),
        click.option(
            "--price-cached-input-per-million",
            type=float,
            help="USD per million cached input tokens, where the platform has a price for them.",
        ),
        click.option("--yes", is_flag=True, help="Do not ask before sending to a non-loopback endpoint (for scripts)."),
        click.option(
            "--sim-args",
            default="",
            help="Extra flags for the embedded simulated endpoint, e.g. '--itl-ms 10'. sweep: a brace list, e.g. "
            "'--fifo --slots {1,2,4}', runs one sweep per size (the values as accelerator counts).",
        ),
        click.option(
            "--serve",
            type=click.Choice(["vllm", "triton"]),
            help="Launch this server on the accelerator under test, measure, tear it down.",
        ),
        click.option("--serve-model", help="--serve vllm: model directory or name to serve."),
        click.option("--served-model-name", help="--serve vllm: the model name requests use."),
        click.option(
            "--server-python",
            help="Interpreter whose environment has the server (or LOADGEN_VLLM_PYTHON / LOADGEN_TRITON_PYTHON).",
        ),
        click.option("--server-port", type=int, help="Server port on 127.0.0.1 (default: a free one)."),
        click.option(
            "--serve-args",
            help="Extra server options, one string (e.g. '--max-model-len 1024'). sweep: a brace list, e.g. "
            "'--tensor-parallel-size {1,2,4}', runs one sweep per size and tables the scaling (loadgen.cli.scale).",
        ),
        click.option("--model-repository", help="--serve triton: a Triton model repository."),
        click.option("--pytriton", help="--serve triton: a PyTriton module file."),
        click.option(
            "--serve-timeout",
            "--ready-timeout",
            "serve_timeout",
            cls=AliasOption,
            hidden_aliases=("--ready-timeout",),
            default="600s",
            show_default=True,
            help="How long to wait for the server to be ready.",
        ),
    ]
    for o in reversed(opts):
        f = o(f)
    return f


def run_only_options(f: F) -> F:
    opts = [
        click.option(
            "--rate",
            "--request-rate",
            "rate",
            type=float,
            help="Open loop: offered load in requests per second; inf: max-throughput mode (every request at once, "
            "at most --max-concurrency in flight; latency from the send).",
        ),
        click.option(
            "--profile",
            type=click.Choice(["throughput"]),
            help="throughput: max-throughput mode, the same as --rate inf (GuideLLM's profile name); with "
            "--max-concurrency N, the batch scorecard at N in flight.",
        ),
        click.option("--concurrency", type=int, help="Closed loop: number of concurrent users."),
        click.option("--requests", "--num-prompts", "n_requests", type=int, help="Measured requests (after warm-up)."),
        click.option("--duration", help="Measured duration, e.g. 60s, 5m (default 60s when --requests is not given)."),
        click.option("--warmup", help="Warm-up: a request count (N) or a time (10s); excluded from statistics."),
        click.option(
            "--stages",
            help="Load stepped within one run, each stage with its own window, figures and verdict: RATE:DURATION "
            "(open loop, e.g. 10:60s,20:60s) or c=USERS:DURATION (closed loop, c=8:60s,c=16:60s).",
        ),
        click.option(
            "--abandon",
            help="Users who walk away: SHARE,AFTER cancels that share of requests AFTER a time from their "
            "scheduled send (10%,2s) or a token count (10%,20tok); counted apart as abandoned, not failed.",
        ),
        click.option(
            "--cache-hit-target",
            help="Prompts whose share F (0.6 or 60%) the server's prefix cache can "
            "serve (block-aligned shared prefixes), primed before the run; the result says if it held.",
        ),
        click.option(
            "--cache-block-size",
            type=click.IntRange(min=1),
            help="KV block size for --cache-hit-target [default: the server's (vLLM /metrics), else 16].",
        ),  # fmt: skip
        click.option(
            "--slo", "slos", multiple=True, help="SLO target METRIC:pNN<=VALUE, e.g. ttft:p99<=300ms (repeatable)."
        ),
        click.option(
            "--out", "out_dir", type=click.Path(file_okay=False), help="Output directory (default results/<UTC time>/)."
        ),
        click.option(
            "--workers", default="1", show_default=True, help="Client processes sharing the schedule (N or auto)."
        ),
        click.option(
            "--cluster",
            type=URL,
            help="Ray cluster address (host:port, auto, ray://...): the --workers shards run as its actors.",
        ),
        click.option("--dry-run", is_flag=True, help="Build the schedule, write schedule.jsonl, send nothing."),
        click.option(
            "--cpus", help="Run the client on these CPUs only (e.g. 0 or 0-3): keeps it off a local server's cores."
        ),
        click.option(
            "--cost-per-hour", type=float, help="USD per hour of the system under test (max-throughput scorecard)."
        ),
        click.option(
            "--power-w",
            type=float,
            help="Power of the system under test in watts, when no energy meter reads it (max-throughput scorecard).",
        ),
    ]
    for o in reversed(opts):
        f = o(f)
    return f


def workload_options(f: F) -> F:
    opts = [
        click.option(
            "--arrival",
            type=click.Choice(["poisson", "constant", "gamma"]),
            default="poisson",
            show_default=True,
            help=OPTION_HELP["arrival"],
        ),
        click.option("--burstiness", type=float, default=1.0, show_default=True, help="Gamma shape (1.0 = Poisson)."),
        click.option("--max-concurrency", type=int, help="Cap on in-flight requests of an open-loop run."),
        click.option(
            "--input-tokens",
            default="128",
            show_default=True,
            help="Prompt length: N, uniform:A,B, normal:M,SD, lognormal:M,SD or empirical:FILE.",
        ),
        click.option(
            "--output-tokens",
            default="64",
            show_default=True,
            help="Output length (same forms); overrides a trace's lengths when given.",
        ),
        click.option(
            "--images",
            help="Chat requests carry N generated images of W x H pixels each (N or N,WxH; default 512x512), every "
            "one distinct, as base64 PNG data URLs; N,WxH,url[=ADDR]: as URLs the server fetches from this client.",
        ),
        click.option(
            "--trace",
            help="Replay a trace's timestamps and lengths (Azure, Mooncake, BurstGPT, loadgen JSONL), or a shipped "
            f"excerpt: {', '.join('builtin:' + n for n in sorted(BUILTIN_TRACES))}.",
        ),
        click.option(
            "--trace-format",
            type=click.Choice(["auto", "azure", "mooncake", "burstgpt", "loadgen", "jsonl"]),
            default="auto",
            show_default=True,
            help=OPTION_HELP["trace_format"],
        ),
        click.option(
            "--trace-spread",
            type=click.Choice(["literal", "uniform"]),
            default="literal",
            show_default=True,
            help="Rows sharing one timestamp: sent together, or spread over the step.",
        ),
        click.option(
            "--trace-time-scale",
            "--time-scale",
            "time_scale",
            cls=AliasOption,
            hidden_aliases=("--time-scale",),
            type=float,
            help="Replay speed: 10 sends the trace 10x faster.",
        ),
        click.option("--trace-start", help="Start of the trace window (a duration into the trace), e.g. 10m."),
        click.option("--trace-duration", help="Length of the trace window, e.g. 10m."),
        click.option(
            "--loop", "trace_loop", is_flag=True, help="Repeat the trace window to fill --requests or --duration."
        ),
        click.option(
            "--trace-keep-zero-output",
            is_flag=True,
            help="Replay trace rows with 0 output tokens (failed requests in the original log, e.g. BurstGPT) "
            "asking for 1 token; by default they are skipped and counted.",
        ),
        click.option("--dataset", help="Prompts from a ShareGPT JSON or a loadgen JSONL file."),
        click.option(
            "--sessions",
            help="Multi-turn sessions: 'synthetic,turns=10,input=64,output=32,delay=1s' or a session file "
            "[,key=value...]; --rate is then sessions/s, --requests a session count (loadgen.workload.session_sources).",
        ),
        click.option(
            "--session-header",
            callback=_header_name,
            help="Session affinity for routers: send this header (e.g. X-Session-ID, or the name your router's "
            "session routing reads) with the session's id on every turn of a --sessions run. Default: none.",
        ),
        click.option("--tokenizer", help="Hugging Face tokenizer directory or tokenizer.json: exact input lengths."),
        click.option(
            "--prompt-format",
            type=click.Choice(["text", "token-ids"]),
            default="text",
            show_default=True,
            help=OPTION_HELP["prompt_format"],
        ),
        click.option(
            "--shared-prefix-tokens",
            type=int,
            default=0,
            show_default=True,
            help=OPTION_HELP["shared_prefix_tokens"],
        ),
        click.option("--prefix-groups", type=int, default=1, show_default=True, help=OPTION_HELP["prefix_groups"]),
        click.option("--salt", help="Prompt salt (default: fresh per run, so caches cannot flatter a rerun)."),
        click.option("--seed", type=int, default=0, show_default=True, help=OPTION_HELP["seed"]),
        click.option("--save-text", is_flag=True, help="Keep each request's output text in requests.jsonl."),
        click.option("--no-token-lists", is_flag=True, help="Leave per-token ITL lists out of requests.jsonl."),
        click.option(
            "--latency-origin",
            type=click.Choice(["scheduled", "sent"]),
            default="scheduled",
            show_default=True,
            help=OPTION_HELP["latency_origin"],
        ),
        click.option(
            "--drain-grace", default="30s", show_default=True, help="Time in-flight requests get after a stop."
        ),
        click.option(
            "--max-schedule-lag",
            default="5ms",
            show_default=True,
            help="Validity: p99 schedule lag bound (generator check).",
        ),
        click.option(
            "--max-loop-lag",
            default="10ms",
            show_default=True,
            help="Validity: p99 event-loop lag bound (generator check).",
        ),
        click.option(
            "--max-error-rate", default="1%", show_default=True, help="Validity: error-rate bound (a warning)."
        ),
    ]
    for o in reversed(opts):
        f = o(f)
    return f
