"""Command line: parse -> config -> one library call -> render -> exit code.

The only module that maps errors to exit codes:
0 done (and SLO met if given), 1 SLO missed or run INVALID, 2 usage error,
3 endpoint unreachable, 4 a launched server failed to start (--serve), 5 a sweep's answer
is only a lower bound (client limited), 6 every measured request of a run failed,
130 interrupted.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from loadgen import __version__
from loadgen.errors import ConfigError, EndpointUnreachable, LoadgenError
from loadgen.recordlog import default_out_dir
from loadgen.redact import Redactor, find_body_secrets, is_sensitive_name, redact_body, redact_url, split_url_secrets
from loadgen.slo import parse_slo
from loadgen.units import parse_duration_s, parse_percent

EXIT_OK, EXIT_FAIL, EXIT_USAGE, EXIT_UNREACHABLE, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
EXIT_ALL_FAILED = 6  # a run whose measured requests all failed: nothing was measured


def _duration_s(value: str | None, what: str) -> float | None:
    try:
        return parse_duration_s(value, what)
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from None


def _positive_duration_s(value: str | None, what: str, default: float) -> float:
    """A duration that must be > 0 when given (0 is a mistake, not "use the default")."""
    s = _duration_s(value, what)
    if s is None:
        return default
    if not s > 0:
        raise click.UsageError(f"{what} must be > 0")
    return s


def _check_endpoint(url: str) -> None:
    """An http:// or https:// URL with a host and a valid port, or a usage error (nothing is sent)."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number in 0-65535
        ok = parts.scheme in ("http", "https") and bool(parts.hostname)
    except ValueError:
        ok = False
    if not ok:
        raise click.UsageError(
            f"--endpoint {split_url_secrets(url)[0]!r}: expected an http:// or https:// URL with a host "
            "(and a port in 1-65535), e.g. http://127.0.0.1:8000"
        )


def _start_sim(sim_args: str):  # type: ignore[no-untyped-def]
    """The embedded simulated endpoint; a usage error naming --sim-args when it refuses them."""
    from loadgen.sim.launch import SimProcess

    try:
        return SimProcess(sim_args.split() if sim_args else [])  # started by __init__
    except RuntimeError as exc:
        lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
        errors = [ln[len("Error: "):] for ln in lines if ln.startswith("Error: ")]
        why = errors[-1] if errors else (lines[-1] if lines else "")
        raise click.UsageError(f"--sim-args {sim_args!r}: the simulated endpoint did not start: {why}") from None


def _make_out_dir(out_dir: Path) -> None:
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise click.UsageError(f"--out {str(out_dir)!r}: cannot create it: {exc.strerror or exc}") from None


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


def _workers(text: str, cluster: Any = None) -> int:
    if text == "auto":
        if cluster is not None:
            return cluster.auto_workers()
        from loadgen.workers import auto_workers

        return auto_workers()
    if not text.isdigit() or int(text) < 1:
        raise click.UsageError(f"--workers {text!r}: expected a positive integer or 'auto'")
    return int(text)


class _ClusterOption:
    """``--cluster ADDRESS``: a connected :class:`loadgen.cluster.Cluster` for the command's life (or None)."""

    def __init__(self, address: str | None, err: Console) -> None:
        self.cluster: Any = None
        if address:
            from loadgen.cluster import Cluster

            self.cluster = Cluster(address, progress=err.print)
            err.print(f"--cluster: connected to the Ray cluster at {address} ({self.cluster.cpus()} CPUs)")

    def __enter__(self) -> Any:
        return self.cluster

    def __exit__(self, *exc: Any) -> None:
        if self.cluster is not None:
            self.cluster.close()


def _parse_headers(values: tuple[str, ...]) -> dict[str, str]:
    out: dict[str, str] = {}
    for v in values:
        name, sep, val = v.partition(":")
        if not sep or not name.strip():
            raise click.UsageError(f"--header {name.strip()!r}...: expected 'Name: value'")
        out[name.strip()] = val.strip()
    return out


def _parse_extra_body(text: str | None) -> dict[str, Any]:
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


def _cpus_option(kw: dict[str, Any]) -> set[int] | None:
    """``--cpus`` parsed (checked before anything starts)."""
    if kw.get("cpus") is None:
        return None
    from loadgen.affinity import check_cpus, parse_cpus

    cpus = parse_cpus(kw["cpus"])
    check_cpus(cpus)
    return cpus


def _pin_client(cpus: set[int] | None) -> None:
    """``--cpus``: restrict this process (and the workers it starts) to those CPUs."""
    if cpus is not None:
        from loadgen.affinity import pin_process

        pin_process(cpus)


def _use_uvloop() -> None:
    try:
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    except ImportError:
        pass


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="loadgen")
def main() -> None:
    """Realistic load on LLM inference endpoints, with numbers you can trust."""


def _common_endpoint_options(f):  # type: ignore[no-untyped-def]
    opts = [
        click.option("--endpoint", help="Base URL of an OpenAI-compatible server (default: start the embedded simulated endpoint)."),
        click.option("--api", type=click.Choice(["completions", "chat", "triton-http", "triton-grpc"]), default="completions", show_default=True),
        click.option("--model", help="Model name sent in requests (default: the first model the endpoint lists)."),
        click.option("--header", "headers", multiple=True, help="Extra request header 'Name: value' (repeatable)."),
        click.option("--api-key-env", help="Environment variable holding the API key (default OPENAI_API_KEY when set)."),
        click.option("--timeout", "timeout", default="600s", show_default=True, help="Total per-request deadline."),
        click.option("--connect-timeout", default="10s", show_default=True),
        click.option("--extra-body", help="JSON object merged into every request body (sampling parameters, ...)."),
        click.option("--no-preflight", is_flag=True, help="Skip the pre-flight request that detects optional fields."),
        click.option("--no-stream", is_flag=True, help="Non-streaming requests (only E2E is measurable)."),
        click.option("--insecure", is_flag=True, help="Do not verify TLS certificates (recorded in the result)."),
        click.option("--provider", type=click.Choice(["openai-compatible", "openai", "azure", "anthropic"]), default="openai-compatible", show_default=True, help="URL shape, credentials and stream format (openai/anthropic default to their public API when --endpoint is not given)."),
        click.option("--deployment", help="Azure OpenAI deployment name."),
        click.option("--api-version", help="Azure OpenAI api-version (default 2024-10-21; 'v1' for the v1 API)."),
        click.option("--azure-ad-token-env", help="Environment variable holding an Entra ID token (Azure, instead of an api-key)."),
        click.option("--anthropic-version", help="anthropic-version header (default 2023-06-01)."),
        click.option("--ca-file", type=click.Path(exists=True, dir_okay=False), help="Extra trusted CA bundle (private or self-signed certificates)."),
        click.option("--connection-reuse", type=click.Choice(["keep-alive", "none"]), default="keep-alive", show_default=True, help="none: a new connection (DNS, TCP, TLS) for every request."),
        click.option("--network-baseline", type=click.Choice(["auto", "on", "off"]), default="auto", show_default=True, help="Resolve the host, time a few TCP connects and a cheap request before the run (auto: for non-loopback endpoints)."),
        click.option("--retry-429", type=click.IntRange(min=0), default=0, show_default=True, help="Retry a 429 up to N times after its advised wait (the wait counts in latency)."),
        click.option("--max-rpm", type=float, help="Cap the client at this many requests per minute (the run is then no longer the offered load)."),
        click.option("--max-tpm", type=float, help="Cap the client at this many tokens (prompt + max_tokens) per minute."),
        click.option("--price-input-per-million", type=float, help="USD per million input tokens (cost per request and per million output tokens)."),
        click.option("--price-output-per-million", type=float, help="USD per million output tokens."),
        click.option("--price-cached-input-per-million", type=float, help="USD per million cached input tokens, where the platform has a price for them."),
        click.option("--yes", is_flag=True, help="Do not ask before sending to a non-loopback endpoint (for scripts)."),
        click.option("--sim-args", default="", help="Extra flags for the embedded simulated endpoint, e.g. '--itl-ms 10'."),
        click.option("--serve", type=click.Choice(["vllm", "triton"]), help="Launch this server on the accelerator under test, measure, tear it down."),
        click.option("--serve-model", help="--serve vllm: model directory or name to serve."),
        click.option("--served-model-name", help="--serve vllm: the model name requests use."),
        click.option("--server-python", help="Interpreter whose environment has the server (or LOADGEN_VLLM_PYTHON / LOADGEN_TRITON_PYTHON)."),
        click.option("--server-port", type=int, help="Server port on 127.0.0.1 (default: a free one)."),
        click.option("--serve-args", help="Extra server options, one string (e.g. '--max-model-len 1024')."),
        click.option("--model-repository", help="--serve triton: a Triton model repository."),
        click.option("--pytriton", help="--serve triton: a PyTriton module file."),
        click.option("--serve-timeout", default="600s", show_default=True, help="How long to wait for the server to be ready."),
    ]
    for o in reversed(opts):
        f = o(f)
    return f


def _run_only_options(f):  # type: ignore[no-untyped-def]
    opts = [
        click.option("--rate", type=float, help="Open loop: offered load in requests per second."),
        click.option("--concurrency", type=int, help="Closed loop: number of concurrent users."),
        click.option("--requests", "n_requests", type=int, help="Measured requests (after warm-up)."),
        click.option("--duration", help="Measured duration, e.g. 60s, 5m (default 60s when --requests is not given)."),
        click.option("--warmup", help="Warm-up: a request count (N) or a time (10s); excluded from statistics."),
        click.option("--slo", "slos", multiple=True, help="SLO target METRIC:pNN<=VALUE, e.g. ttft:p99<=300ms (repeatable)."),
        click.option("--out", "out_dir", type=click.Path(file_okay=False), help="Output directory (default results/<UTC time>/)."),
        click.option("--workers", default="1", show_default=True, help="Client processes sharing the schedule (N or auto)."),
        click.option("--cluster", help="Ray cluster address (host:port, auto, ray://...): the --workers shards run as its actors."),
        click.option("--dry-run", is_flag=True, help="Build the schedule, write schedule.jsonl, send nothing."),
        click.option("--cpus", help="Run the client on these CPUs only (e.g. 0 or 0-3): keeps it off a local server's cores."),
    ]
    for o in reversed(opts):
        f = o(f)
    return f


def _workload_options(f):  # type: ignore[no-untyped-def]
    opts = [
        click.option("--arrival", type=click.Choice(["poisson", "constant", "gamma"]), default="poisson", show_default=True),
        click.option("--burstiness", type=float, default=1.0, show_default=True, help="Gamma shape (1.0 = Poisson)."),
        click.option("--max-concurrency", type=int, help="Cap on in-flight requests of an open-loop run."),
        click.option("--input-tokens", default="128", show_default=True, help="Prompt length: N, uniform:A,B, normal:M,SD, lognormal:M,SD or empirical:FILE."),
        click.option("--output-tokens", default="64", show_default=True, help="Output length (same forms); overrides a trace's lengths when given."),
        click.option("--trace", help="Replay a trace's timestamps and lengths (Azure, Mooncake, BurstGPT, loadgen JSONL; builtin:NAME for a shipped excerpt)."),
        click.option("--trace-format", type=click.Choice(["auto", "azure", "mooncake", "burstgpt", "loadgen", "jsonl"]), default="auto", show_default=True),
        click.option("--trace-spread", type=click.Choice(["literal", "uniform"]), default="literal", show_default=True, help="Rows sharing one timestamp: sent together, or spread over the step."),
        click.option("--time-scale", type=float, help="Replay speed: 10 sends the trace 10x faster."),
        click.option("--trace-start", help="Start of the trace window, e.g. 10m."),
        click.option("--trace-duration", help="Length of the trace window, e.g. 10m."),
        click.option("--loop", "trace_loop", is_flag=True, help="Repeat the trace window to fill --requests or --duration."),
        click.option("--dataset", help="Prompts from a ShareGPT JSON or a loadgen JSONL file."),
        click.option("--tokenizer", help="Hugging Face tokenizer directory or tokenizer.json: exact input lengths."),
        click.option("--prompt-format", type=click.Choice(["text", "token-ids"]), default="text", show_default=True),
        click.option("--shared-prefix-tokens", type=int, default=0, show_default=True, help="Tokens of a shared prefix per group."),
        click.option("--prefix-groups", type=int, default=1, show_default=True),
        click.option("--salt", help="Prompt salt (default: fresh per run, so caches cannot flatter a rerun)."),
        click.option("--seed", type=int, default=0, show_default=True),
        click.option("--save-text", is_flag=True, help="Keep each request's output text in requests.jsonl."),
        click.option("--no-token-lists", is_flag=True, help="Leave per-token ITL lists out of requests.jsonl."),
        click.option("--latency-origin", type=click.Choice(["scheduled", "sent"]), default="scheduled", show_default=True),
        click.option("--drain-grace", default="30s", show_default=True, help="Time in-flight requests get after a stop."),
        click.option("--max-schedule-lag", default="5ms", show_default=True, help="Validity: p99 schedule lag bound (generator check)."),
        click.option("--max-loop-lag", default="10ms", show_default=True, help="Validity: p99 event-loop lag bound (generator check)."),
        click.option("--max-error-rate", default="1%", show_default=True, help="Validity: error-rate bound (a warning)."),
    ]
    for o in reversed(opts):
        f = o(f)
    return f


@main.command("run")
@_common_endpoint_options
@_run_only_options
@_workload_options
def run_cmd(**kw: Any) -> None:
    """One sustained run (open loop with --rate, closed loop with --concurrency)."""
    _exit_with(_run, kw)


def _exit_with(command: Any, kw: dict[str, Any]) -> None:
    """Run a command body and map loadgen's errors to exit codes (the one place that does)."""
    console = Console()
    err = Console(stderr=True, soft_wrap=True)
    try:
        code = command(kw, console, err)
    except click.UsageError:
        raise
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from None
    except EndpointUnreachable as exc:
        err.print(f"[red]error:[/] {exc}")
        sys.exit(EXIT_UNREACHABLE)
    except LoadgenError as exc:
        err.print(f"[red]error:[/] {exc}")
        sys.exit(EXIT_FAIL)
    sys.exit(code)


def build_load_config(kw: dict[str, Any]):  # type: ignore[no-untyped-def]
    if kw["rate"] is not None and kw["concurrency"] is not None:
        raise click.UsageError("--rate (open loop) and --concurrency (closed loop) clash: give one")
    if kw["rate"] is None and kw["concurrency"] is None and not kw["trace"]:
        raise click.UsageError("give --rate R (open loop), --concurrency N (closed loop) or --trace FILE")
    if kw["n_requests"] is not None and kw["duration"] is not None:
        raise click.UsageError("--requests and --duration clash: give one")
    if kw["concurrency"] is not None and kw["max_concurrency"] is not None:
        raise click.UsageError("--max-concurrency caps open-loop runs; it clashes with --concurrency")
    if kw["rate"] is not None and not kw["rate"] > 0:  # NaN too
        raise click.UsageError("--rate must be > 0")
    if kw["rate"] is not None and kw["rate"] == float("inf"):
        raise click.UsageError("--rate must be finite")
    warm_n, warm_s = 0, 0.0
    if kw["warmup"]:
        if kw["warmup"].isdigit():
            warm_n = int(kw["warmup"])
        else:
            warm_s = _duration_s(kw["warmup"], "--warmup") or 0.0
    duration = _duration_s(kw["duration"], "--duration")
    if duration is not None and not duration > 0:
        raise click.UsageError("--duration must be > 0")
    if kw["n_requests"] is None and duration is None and not (kw["trace"] and kw["concurrency"] is None):
        duration = 60.0
    slos = []
    for s in kw["slos"]:
        try:
            slos.append(parse_slo(s))
        except ConfigError as exc:
            raise click.UsageError(f"--slo: {exc}") from None
    base = base_load_config(kw)
    base.rate_rps = kw["rate"]
    base.concurrency = kw["concurrency"]
    base.requests = kw["n_requests"]
    base.duration_s = duration
    base.warmup_requests = warm_n
    base.warmup_s = warm_s
    base.slos = slos
    return base


def base_load_config(kw: dict[str, Any]):  # type: ignore[no-untyped-def]
    """The workload part of the options shared by run and sweep."""
    from loadgen.runplan import LoadConfig
    from loadgen.workload.spec import WorkloadOptions

    if kw["arrival"] != "gamma" and kw["burstiness"] != 1.0:
        raise click.UsageError("--burstiness needs --arrival gamma")
    if kw["max_concurrency"] is not None and kw["max_concurrency"] < 1:
        raise click.UsageError("--max-concurrency must be at least 1")
    ctx = click.get_current_context()
    explicit_out = ctx.get_parameter_source("output_tokens") != click.core.ParameterSource.DEFAULT
    if kw["prompt_format"] == "token-ids" and kw["api"] == "chat":
        raise click.UsageError("--prompt-format token-ids works with --api completions only")
    wl = WorkloadOptions(
        trace=kw["trace"],
        trace_format="loadgen" if kw["trace_format"] == "jsonl" else kw["trace_format"],
        trace_spread=kw["trace_spread"],
        trace_time_scale=kw["time_scale"],
        trace_start_s=_duration_s(kw["trace_start"], "--trace-start") or 0.0,
        trace_duration_s=_duration_s(kw["trace_duration"], "--trace-duration"),
        trace_loop=kw["trace_loop"],
        output_tokens_override=explicit_out,
        dataset=kw["dataset"],
        tokenizer=kw["tokenizer"],
        prompt_format=kw["prompt_format"],
        api=kw["api"],
        shared_prefix_tokens=kw["shared_prefix_tokens"],
        prefix_groups=kw["prefix_groups"],
    )
    from loadgen.results import ValidityBounds

    bounds = ValidityBounds(
        max_schedule_lag_p99_ms=(_duration_s(kw["max_schedule_lag"], "--max-schedule-lag") or 0.0) * 1e3,
        max_loop_lag_p99_ms=(_duration_s(kw["max_loop_lag"], "--max-loop-lag") or 0.0) * 1e3,
        max_error_rate=_parse_ratio(kw["max_error_rate"], "--max-error-rate"),
    )
    return LoadConfig(
        bounds=bounds,
        arrival=kw["arrival"],
        burstiness=kw["burstiness"],
        max_concurrency=kw["max_concurrency"],
        input_tokens=kw["input_tokens"],
        output_tokens=kw["output_tokens"],
        seed=kw["seed"],
        salt=kw["salt"],
        workload=wl,
        save_text=kw["save_text"],
        token_lists=not kw["no_token_lists"],
        origin=kw["latency_origin"],
        drain_grace_s=_duration_s(kw["drain_grace"], "--drain-grace") or 0.0,
    )


def _dry_run(load: Any, out_dir: Path, console: Console) -> int:
    from dataclasses import replace as _replace

    from loadgen.runplan import build_plan, build_workload
    from loadgen.workload.prompts import new_salt
    from loadgen.workload.spec import write_schedule

    if load.concurrency is not None:
        raise click.UsageError("--dry-run writes an open-loop schedule; it clashes with --concurrency")
    if load.salt is None:
        load = _replace(load, salt=new_salt())
    wl = build_workload(load)
    plan = build_plan(load, wl)
    out_dir.mkdir(parents=True, exist_ok=True)
    write_schedule(out_dir / "schedule.jsonl", plan.schedule, wl)
    n = len(plan.schedule)
    span = (plan.schedule[-1].offset_ns / 1e9) if n else 0.0
    console.print(f"dry run: {n} requests over {span:.3f} s written to {out_dir / 'schedule.jsonl'}; nothing sent")
    return EXIT_OK


def config_record(kw: dict[str, Any], endpoint_url: str, embedded: bool) -> dict[str, Any]:
    """The resolved configuration as recorded in result.json: no secret values."""
    rec = {k: v for k, v in kw.items() if k not in ("headers", "extra_body", "endpoint")}
    rec["endpoint"] = redact_url(endpoint_url)
    rec["embedded_simulated_endpoint"] = embedded
    rec["header_names"] = sorted(_parse_headers(kw.get("headers") or ()))
    if kw.get("extra_body"):
        rec["extra_body"] = redact_body(_parse_extra_body(kw["extra_body"]))
    rec["slos"] = list(kw.get("slos") or [])
    return rec


def resolve_endpoint_url(kw: dict[str, Any]) -> str | None:
    """The URL to load: --endpoint, else the provider's public API; None starts the embedded sim."""
    from loadgen.endpoints.providers import DEFAULT_BASE_URLS

    if kw["endpoint"]:
        if not str(kw.get("api") or "").startswith("triton"):  # Triton also takes host:port
            _check_endpoint(kw["endpoint"])
        return kw["endpoint"]
    if kw["provider"] == "azure":
        raise click.UsageError("--provider azure needs --endpoint https://RESOURCE.openai.azure.com")
    return DEFAULT_BASE_URLS.get(kw["provider"])


def _provider_api(kw: dict[str, Any]) -> str:
    """--api, where managed providers default to chat (their only streaming API that matters)."""
    if kw["provider"] == "openai-compatible":
        return kw["api"]
    explicit = click.get_current_context().get_parameter_source("api") != click.core.ParameterSource.DEFAULT
    if kw["provider"] == "anthropic" and explicit and kw["api"] != "chat":
        raise click.UsageError("--provider anthropic speaks the Messages API: leave out --api or give --api chat")
    return kw["api"] if explicit else "chat"


_ENDPOINT_DEFAULTS: dict[str, Any] = {
    "provider": "openai-compatible",
    "deployment": None,
    "api_version": None,
    "azure_ad_token_env": None,
    "anthropic_version": None,
    "ca_file": None,
    "connection_reuse": "keep-alive",
    "network_baseline": "auto",
    "retry_429": 0,
    "max_rpm": None,
    "max_tpm": None,
    "no_stream": False,
    "insecure": False,
    "no_preflight": False,
}


def endpoint_from_options(kw: dict[str, Any], endpoint_url: str, embedded: bool, redactor: Redactor):  # type: ignore[no-untyped-def]
    """The endpoint for parsed options (other front ends, e.g. ``loadgen locust``, pass a subset)."""
    kw = {**_ENDPOINT_DEFAULTS, **kw}
    from loadgen.endpoints.providers import DEFAULT_KEY_ENV, is_loopback_url, make_endpoint
    from loadgen.recordlog import new_run_id

    if kw["api"].startswith("triton"):
        if kw["provider"] != "openai-compatible":
            raise click.UsageError(f"--api {kw['api']} is Triton's protocol: it clashes with --provider {kw['provider']}")
        return _triton_endpoint(kw, endpoint_url, redactor)
    provider = kw["provider"]
    headers = _parse_headers(kw["headers"])
    extra = _parse_extra_body(kw["extra_body"])
    api_key = None
    bearer = None
    if not embedded:
        default_env = DEFAULT_KEY_ENV[provider]
        env_name = kw["api_key_env"] or (default_env if os.environ.get(default_env) else None)
        if env_name:
            api_key = os.environ.get(env_name)
            if api_key is None and kw["api_key_env"]:
                raise click.UsageError(f"--api-key-env {env_name}: that environment variable is not set")
        if kw["azure_ad_token_env"]:
            bearer = os.environ.get(kw["azure_ad_token_env"])
            if bearer is None:
                raise click.UsageError(f"--azure-ad-token-env {kw['azure_ad_token_env']}: that environment variable is not set")
    for name, value in headers.items():
        if is_sensitive_name(name):
            redactor.add(value)
            if " " in value:
                redactor.add(value.split(" ", 1)[1])
    for s in find_body_secrets(extra):
        redactor.add(s)
    for s in split_url_secrets(endpoint_url)[1]:
        redactor.add(s)
    redactor.add(api_key)
    redactor.add(bearer)
    baseline = {"on": True, "off": False}.get(kw["network_baseline"], not embedded and not is_loopback_url(endpoint_url))
    options: dict[str, Any] = dict(
        stream=not kw["no_stream"],
        headers=headers,
        extra_body=extra,
        timeout_s=_positive_duration_s(kw["timeout"], "--timeout", 600.0),
        connect_timeout_s=_positive_duration_s(kw["connect_timeout"], "--connect-timeout", 10.0),
        verify_tls=not kw["insecure"],
        ca_file=kw["ca_file"],
        request_id_prefix=new_run_id(),
        connection_reuse=kw["connection_reuse"],
        network_baseline=baseline,
        retry_429=kw["retry_429"],
        max_rpm=kw["max_rpm"],
        max_tpm=kw["max_tpm"],
    )
    if provider != "anthropic":
        options["preflight"] = not kw["no_preflight"]
    try:
        return make_endpoint(
            provider,
            base_url=endpoint_url,
            api=_provider_api(kw),
            model=kw["model"],
            api_key=api_key,
            bearer_token=bearer,
            deployment=kw["deployment"],
            api_version=kw["api_version"],
            anthropic_version=kw["anthropic_version"],
            redactor=redactor,
            **options,
        )
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from None


def _triton_endpoint(kw: dict[str, Any], endpoint_url: str, redactor: Redactor):  # type: ignore[no-untyped-def]
    from loadgen.endpoints.triton import TritonConfig, TritonEndpoint
    from loadgen.recordlog import new_run_id

    headers = _parse_headers(kw["headers"])
    for name, value in headers.items():
        if is_sensitive_name(name):
            redactor.add(value)
    return TritonEndpoint(
        TritonConfig(
            url=endpoint_url,
            protocol="grpc" if kw["api"] == "triton-grpc" else "http",
            model=kw["model"],
            headers=headers,
            sampling_parameters=_parse_extra_body(kw["extra_body"]),
            timeout_s=_duration_s(kw["timeout"], "--timeout") or 600.0,
            connect_timeout_s=_duration_s(kw["connect_timeout"], "--connect-timeout") or 10.0,
            request_id_prefix=new_run_id(),
        ),
        redactor,
    )


def _prices(kw: dict[str, Any]):  # type: ignore[no-untyped-def]
    from loadgen.pricing import token_prices

    try:
        return token_prices(kw["price_input_per_million"], kw["price_output_per_million"], kw["price_cached_input_per_million"])
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from None


def _length_or_none(value: Any) -> int | None:
    text = str(value)
    return int(text) if text.isdigit() else None


def confirm_remote(kw: dict[str, Any], endpoint_url: str, embedded: bool, estimate: Any, err: Console) -> None:
    """Before sending to a non-loopback endpoint: show the estimate, ask on a terminal, refuse without --yes elsewhere."""
    from loadgen.endpoints.providers import is_loopback_url

    if embedded or is_loopback_url(endpoint_url):
        return
    err.print(f"{redact_url(endpoint_url)} is not a loopback address: {estimate.text()}")
    if kw["yes"]:
        return
    if not sys.stdin.isatty():
        raise click.UsageError("not on a terminal: pass --yes to send to a non-loopback endpoint")
    if not click.confirm("send?", default=False, err=True):
        raise click.Abort()


def _run_estimate(kw: dict[str, Any], load: Any):  # type: ignore[no-untyped-def]
    from loadgen.pricing import estimate_run

    n = None
    if load.requests is not None:
        n = load.requests + load.warmup_requests
    elif load.rate_rps is not None and load.duration_s is not None:
        n = round(load.rate_rps * (load.duration_s + load.warmup_s)) + load.warmup_requests
    note = "" if n is not None else "closed loop for a duration: the count depends on the latency"
    return estimate_run(n, _length_or_none(kw["input_tokens"]), _length_or_none(kw["output_tokens"]), _prices(kw), note=note)


def _sweep_estimate(kw: dict[str, Any], scfg: Any):  # type: ignore[no-untyped-def]
    import math

    from loadgen.pricing import estimate_run

    per_probe = scfg.needed_requests()
    if scfg.max_rate_rps:
        per_probe = max(per_probe, math.ceil(scfg.max_rate_rps * scfg.probe_duration_s))
        n = scfg.max_probes * (1 + scfg.max_extensions) * per_probe
        note = f"an upper bound: {scfg.max_probes} probes of at most {per_probe} requests, extensions included, plus calibration"
    else:
        n = None
        note = f"at least {per_probe} requests per probe, up to {scfg.max_probes} probes, plus calibration; give --max-rate to bound it"
    return estimate_run(n, _length_or_none(kw["input_tokens"]), _length_or_none(kw["output_tokens"]), _prices(kw), note=note)


class _Target:
    """The system under test for one command: an external endpoint, a launched server, or the sim."""

    def __init__(self, kw: dict[str, Any], out_dir: Path, err: Console) -> None:
        self.kw, self.out_dir, self.err = kw, out_dir, err
        self.sim: Any = None
        self.server: Any = None
        self.url = ""
        self.embedded = False

    def __enter__(self) -> _Target:
        kw = self.kw
        if kw.get("serve"):
            import shlex

            from loadgen.serve import EXIT_SERVER_START, ServerStartError, launch
            from loadgen.serve.command import report_start_error

            if kw["endpoint"]:
                raise click.UsageError("--serve and --endpoint clash: loadgen starts the server itself")
            try:
                self.server = launch(
                    kw["serve"],
                    serve_model=kw["serve_model"],
                    served_model_name=kw["served_model_name"] or kw["model"],
                    model_repository=kw["model_repository"],
                    pytriton=kw["pytriton"],
                    triton_model=kw["model"],
                    server_python=kw["server_python"],
                    port=kw["server_port"],
                    engine_args=shlex.split(kw["serve_args"] or ""),
                    log_dir=str(self.out_dir / "server"),
                    ready_timeout_s=_duration_s(kw["serve_timeout"], "--serve-timeout"),
                )
            except ServerStartError as exc:
                report_start_error(exc)
                sys.exit(EXIT_SERVER_START)
            info = self.server.info
            self.url = {"triton-http": info.get("http_url"), "triton-grpc": info.get("grpc_url")}.get(
                kw["api"], self.server.base_url
            )
            kw["model"] = kw["model"] or info.get("served_model_name")
            self.err.print(f"--serve {kw['serve']}: server ready at {self.url} (logs in {self.out_dir / 'server'})")
        elif resolve_endpoint_url(kw) is None:
            if kw["api"].startswith("triton"):
                raise click.UsageError(f"--api {kw['api']} needs --endpoint or --serve triton")
            self.sim = _start_sim(kw["sim_args"])
            self.embedded = True
            self.url = self.sim.url
            self.err.print(
                f"no --endpoint: started the embedded simulated endpoint at {self.url} (a test double, not a real server)"
            )
        else:
            self.url = resolve_endpoint_url(kw) or ""
        return self

    def observer(self):  # type: ignore[no-untyped-def]
        if self.server is None:
            return None
        from loadgen.serve import ServerObserver

        return ServerObserver.for_server(self.server, model=self.kw["model"])

    def __exit__(self, *exc: Any) -> None:
        if self.sim is not None:
            self.sim.stop()
        if self.server is not None:
            self.server.stop()


def _run(kw: dict[str, Any], console: Console, err: Console) -> int:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from loadgen.measure import measure
    from loadgen.report.console import render_run

    load = build_load_config(kw)
    load.validate()
    cpus = _cpus_option(kw)
    out_dir = Path(kw["out_dir"]) if kw["out_dir"] else default_out_dir()
    if kw["dry_run"]:
        return _dry_run(load, out_dir, console)
    load.prices = _prices(kw)
    redactor = Redactor()
    with _ClusterOption(kw["cluster"], err) as cluster, _Target(kw, out_dir, err) as target:
        _pin_client(cpus)  # after the target started: an embedded or launched server keeps every CPU
        if not target.embedded:
            confirm_remote(kw, target.url, target.embedded, _run_estimate(kw, load), err)
        endpoint = endpoint_from_options(kw, target.url, target.embedded, redactor)
        _use_uvloop()

        async def go():  # type: ignore[no-untyped-def]
            observer = target.observer()
            try:
                await endpoint.open()
                extra = {"server": await observer.conditions()} if observer is not None else None
                total = load.requests if load.requests is not None else None
                with Progress(
                    TextColumn("[progress.description]{task.description}"),
                    BarColumn(),
                    MofNCompleteColumn(),
                    TimeElapsedColumn(),
                    console=err,
                    transient=True,
                    disable=not err.is_terminal,
                ) as progress:
                    task = progress.add_task("requests", total=total)
                    _make_out_dir(out_dir)
                    return await measure(
                        endpoint,
                        load,
                        out_dir,
                        config_record=config_record(kw, target.url, target.embedded),
                        redactor=redactor,
                        on_record=lambda rec, m: progress.advance(task),
                        workers=_workers(kw["workers"], cluster),
                        server_observer=observer,
                        conditions_extra=extra,
                        cluster=cluster,
                    )
            finally:
                await endpoint.close()
                if observer is not None:
                    await observer.close()

        run = asyncio.run(go())
    render_run(run.result, console, str(out_dir))
    if run.result["interrupted"]:
        return EXIT_INTERRUPTED
    counts = run.result["counts"]
    if counts["requests"] and not counts["completed"]:
        kinds = ", ".join(f"{k} {v}" for k, v in counts["errors_by_kind"].items())
        err.print(f"[red]error:[/] all {counts['requests']} measured requests failed ({kinds}): nothing was measured")
        return EXIT_ALL_FAILED
    if not run.result["validity"]["valid"]:
        return EXIT_FAIL
    if run.result.get("slo") and not run.result["slo"]["met"]:
        return EXIT_FAIL
    return EXIT_OK


@main.command("compare")
@click.argument("results", nargs=-1, required=True)
@click.option("--label", "labels", multiple=True, help="Column label for each result, in order.")
@click.option("--force", is_flag=True, help="Rank even when the conditions differ (the scorecard says so).")
@click.option("--check", "checks", multiple=True,
              help="check.json for each result, in order ('-' for none); default: a check.json next to the result.")  # fmt: skip
@click.option("--out", "out_dir", type=click.Path(file_okay=False), help="Output directory (default results/<UTC time>-compare/).")
def compare_cmd(results: tuple[str, ...], labels: tuple[str, ...], force: bool, checks: tuple[str, ...], out_dir: str | None) -> None:
    """Scorecard of several sweeps or runs, ranked only where the comparison is fair."""
    from loadgen.report.compare import _fmt, load_system, scorecard, write_outputs

    if labels and len(labels) != len(results):
        raise click.UsageError(f"--label given {len(labels)} times for {len(results)} results")
    if checks and len(checks) != len(results):
        raise click.UsageError(f"--check given {len(checks)} times for {len(results)} results")
    try:
        systems = [load_system(r, labels[i] if labels else None, checks[i] if checks and checks[i] != "-" else None)
                   for i, r in enumerate(results)]  # fmt: skip
    except LoadgenError as exc:
        raise click.UsageError(str(exc)) from None
    card = scorecard(systems, force=force)
    out = Path(out_dir) if out_dir else default_out_dir("compare")
    write_outputs(card, systems, out)
    console = Console()
    from rich.table import Table

    t = Table(title="scorecard")
    t.add_column("metric")
    for s in systems:
        t.add_column(s.label, justify="right")
    for r in card["rows"]:
        t.add_row(r["label"], *[("* " if r["best"] == s.label else "") + _fmt(r["values"][s.label], r["key"]) for s in systems])
    console.print(t)
    if not card["comparable"]:
        console.print("[yellow]not comparable:[/] " + "; ".join(card["reasons"]))
        console.print(f"ranking {card['ranking']}")
    for w in card["warnings"]:
        console.print(f"[yellow]drift:[/] {w}")
    console.print(f"scorecard.json, scorecard.csv, scorecard.html in {out}")


def _parse_ratio(text: str, what: str) -> float:
    """A percentage: ``5%`` or ``5`` -> 0.05 (ratio flags are always percentages)."""
    try:
        return parse_percent(text, what)
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from None


@main.command("sweep")
@_common_endpoint_options
@_workload_options
@click.option("--slo-p99", help="Shorthand: p99 of --slo-metric (TTFT by default) at most this, e.g. 300ms.")
@click.option("--slo-metric", type=click.Choice(["ttft", "e2e", "tpot", "itl", "time_to_first_answer_token"]), default="ttft", show_default=True)
@click.option("--slo", "slos", multiple=True, help="SLO target METRIC:pNN<=VALUE (repeatable; all must hold).")
@click.option("--probe-duration", default="60s", show_default=True, help="Minimum measured time of each probe.")
@click.option("--probe-warmup", help="Warm-up before each probe (default 10 % of the probe, at most 5 s).")
@click.option("--confidence", default="95%", show_default=True, help="Confidence of the probe verdicts.")
@click.option("--precision", default="5%", show_default=True, help="Stop when (fail - pass) / pass is at most this.")
@click.option("--repeats", type=int, default=1, show_default=True, help="A rate passes only if all K probes pass.")
@click.option("--max-rate", type=float, help="Never offer more than this (req/s).")
@click.option("--min-rate", type=float, help="Lowest rate to try (default: the rate that reaches the minimum request count).")
@click.option("--start-rate", type=float, help="First probe's rate (default: half the calibrated capacity).")
@click.option("--calibration", default="10s", show_default=True, help="Closed-loop calibration time (0 to skip).")
@click.option("--calibration-concurrency", type=int, default=32, show_default=True)
@click.option("--max-extensions", type=int, default=2, show_default=True, help="Extra segments for an undecided probe.")
@click.option("--cost-per-hour", type=float, help="USD per hour of the system under test (cost per million tokens).")
@click.option("--accelerators", type=int, help="Accelerators serving the endpoint (throughput per accelerator).")
@click.option("--concurrency-levels", help="Closed-loop sweep over these user counts, e.g. 1,2,4,8,16.")
@click.option("--workers", default="1", show_default=True, help="Client processes per probe (N or auto); no early stop with N > 1.")
@click.option("--cluster", help="Ray cluster address: each probe's --workers shards run as its actors.")
@click.option("--cpus", help="Run the client on these CPUs only (e.g. 0 or 0-3): keeps it off a local server's cores.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), help="Output directory (default results/<UTC time>-sweep/).")
def sweep_cmd(**kw: Any) -> None:
    """Find the highest offered load that still meets the SLO."""
    _exit_with(_sweep, kw)


def build_sweep_config(kw: dict[str, Any]):  # type: ignore[no-untyped-def]
    from loadgen.sweep import SweepConfig

    slos = []
    if kw["slo_p99"]:
        try:
            slos.append(parse_slo(f"{kw['slo_metric']}:p99<={kw['slo_p99']}"))
        except ConfigError as exc:
            raise click.UsageError(f"--slo-p99: {exc}") from None
    for s in kw["slos"]:
        try:
            slos.append(parse_slo(s))
        except ConfigError as exc:
            raise click.UsageError(f"--slo: {exc}") from None
    if not slos:
        raise click.UsageError("give an SLO: --slo-p99 300ms or --slo METRIC:pNN<=VALUE")
    levels = None
    if kw["concurrency_levels"]:
        try:
            levels = [int(x) for x in kw["concurrency_levels"].split(",") if x.strip()]
        except ValueError:
            raise click.UsageError("--concurrency-levels: expected integers such as 1,2,4,8") from None
        if not levels or min(levels) < 1:
            raise click.UsageError("--concurrency-levels: each level must be at least 1")
    conf = _parse_ratio(kw["confidence"], "--confidence")
    if not 0.5 <= conf < 1:
        raise click.UsageError("--confidence must be between 50% and 99.99%")
    prec = _parse_ratio(kw["precision"], "--precision")
    if not 0 < prec < 1:
        raise click.UsageError("--precision must be between 0% and 100%")
    if kw["repeats"] < 1:
        raise click.UsageError("--repeats must be at least 1")
    return SweepConfig(
        slos=slos,
        probe_duration_s=_duration_s(kw["probe_duration"], "--probe-duration") or 60.0,
        probe_warmup_s=_duration_s(kw["probe_warmup"], "--probe-warmup"),
        confidence=conf,
        precision=prec,
        repeats=kw["repeats"],
        max_rate_rps=kw["max_rate"],
        min_rate_rps=kw["min_rate"],
        start_rate_rps=kw["start_rate"],
        calibration_s=_duration_s(kw["calibration"], "--calibration") or 0.0,
        calibration_concurrency=kw["calibration_concurrency"],
        max_extensions=kw["max_extensions"],
        cost_per_hour_usd=kw["cost_per_hour"],
        prices=_prices(kw),
        accelerators=kw["accelerators"],
        concurrency_levels=levels,
        workers=_workers(kw["workers"]),
    )


def _sweep(kw: dict[str, Any], console: Console, err: Console) -> int:
    import signal

    from loadgen.recordlog import write_json
    from loadgen.report.sweep_report import render_sweep, write_report
    from loadgen.sweep import Sweep

    scfg = build_sweep_config(kw)
    base = base_load_config(kw)
    cpus = _cpus_option(kw)
    out_dir = Path(kw["out_dir"]) if kw["out_dir"] else default_out_dir("sweep")
    _make_out_dir(out_dir)
    base.prices = scfg.prices
    redactor = Redactor()
    with _ClusterOption(kw["cluster"], err) as cluster, _Target(kw, out_dir, err) as target:
        _pin_client(cpus)  # after the target started: an embedded or launched server keeps every CPU
        if cluster is not None and kw["workers"] == "auto":
            scfg.workers = cluster.auto_workers()
        if not target.embedded:
            confirm_remote(kw, target.url, target.embedded, _sweep_estimate(kw, scfg), err)
        endpoint = endpoint_from_options(kw, target.url, target.embedded, redactor)
        _use_uvloop()

        async def go():  # type: ignore[no-untyped-def]
            loop = asyncio.get_running_loop()
            observer = target.observer()
            sweep = None
            try:
                await endpoint.open()
                sweep = Sweep(
                    endpoint,
                    base,
                    scfg,
                    out_dir,
                    config_record=config_record(kw, target.url, target.embedded),
                    redactor=redactor,
                    progress=lambda msg: err.print(redactor(msg)),
                    server_observer=observer,
                    cluster=cluster,
                )
                for sig in (signal.SIGINT, signal.SIGTERM):
                    loop.add_signal_handler(sig, sweep.interrupt)
                if scfg.concurrency_levels:
                    out = await sweep.concurrency_sweep()
                else:
                    out = await sweep.search()
                from loadgen.conditions import client_conditions

                cond = client_conditions()
                cond["endpoint"] = endpoint.describe()
                if observer is not None:
                    cond["server"] = await observer.conditions()
                if cluster is not None:
                    cond["workers"] = scfg.workers
                    cond["cluster"] = cluster.last_conditions  # the last probe's; each probe's result.json has its own
                out.result["conditions"] = cond
                out.result["config"] = config_record(kw, target.url, target.embedded)
                return out
            finally:
                for sig in (signal.SIGINT, signal.SIGTERM):
                    loop.remove_signal_handler(sig)
                await endpoint.close()
                if observer is not None:
                    await observer.close()

        out = asyncio.run(go())
    write_json(out_dir / "sweep.json", out.result)
    write_report(out.result, out_dir)
    render_sweep(out.result, console, str(out_dir))
    return out.exit_code


_SUBCOMMANDS = (
    ("loadgen.sim.command", "sim_command"),
    ("loadgen.workload.command", "trace_group"),
    ("loadgen.serve.command", "serve_group"),
    ("loadgen.locust_command", "locust_command"),
    ("loadgen.check", "check_command"),
)


def _register_optional() -> None:
    """Attach sub-commands that live next to their code (sim, trace, serve, locust)."""
    import importlib
    import importlib.util

    for module, attr in _SUBCOMMANDS:
        try:
            if importlib.util.find_spec(module) is None:
                continue
        except ModuleNotFoundError:  # its parent package is not there
            continue
        cmd = getattr(importlib.import_module(module), attr)
        main.add_command(cmd)


_register_optional()

if __name__ == "__main__":  # pragma: no cover
    main()
