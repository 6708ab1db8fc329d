"""What a command measures: an external endpoint, a launched server (``--serve``) or the embedded sim.

:class:`Target` starts and stops the system under test for one command; :class:`ClusterOption`
holds a ``--cluster`` connection; :func:`endpoint_from_options` builds the client endpoint
(OpenAI-compatible, managed providers, Triton) and registers its secrets with the redactor;
:func:`confirm_remote` asks before load goes to a non-loopback address; :func:`adopt_endpoint_path`
takes the API from an ``--endpoint`` pasted with its path.
"""

from __future__ import annotations

import os
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import click
from rich.console import Console

from loadgen.cli.load_options import slo_targets
from loadgen.cli.options import (
    duration_s,
    parse_extra_body,
    positive_duration_s,
    resolve_headers,
    usage_errors,
)
from loadgen.cli.target_options import EndpointOptions, ServerOptions
from loadgen.core.redact import Redactor, find_body_secrets, is_sensitive_name, redact_url, split_url_secrets

if TYPE_CHECKING:
    from loadgen.endpoints import Endpoint
    from loadgen.endpoints.triton import TritonEndpoint
    from loadgen.serve import ServerObserver
    from loadgen.sim.launch import SimProcess
    from loadgen.spread.cluster import Cluster

__all__ = [
    "ClusterOption",
    "Target",
    "adopt_endpoint_path",
    "balanced_endpoint",
    "confirm_remote",
    "endpoint_from_options",
    "endpoint_replicas",
    "endpoints_from_options",
    "header_timeout_s",
    "resolve_endpoint_url",
]


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


def _start_sim(sim_args: str) -> SimProcess:
    """The embedded simulated endpoint; a usage error naming --sim-args when it refuses them."""
    from loadgen.sim.launch import SimProcess

    try:
        return SimProcess(sim_args.split() if sim_args else [])  # started by __init__
    except RuntimeError as exc:
        lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
        errors = [ln[len("Error: ") :] for ln in lines if ln.startswith("Error: ")]
        why = errors[-1] if errors else (lines[-1] if lines else "")
        raise click.UsageError(f"--sim-args {sim_args!r}: the simulated endpoint did not start: {why}") from None


class Estimate(Protocol):
    """What a run will send, shown before a non-loopback endpoint is loaded (its ``text()``)."""

    def text(self) -> str: ...


class ClusterOption:
    """``--cluster ADDRESS``: a connected :class:`loadgen.spread.cluster.Cluster` for the command's life (or None)."""

    def __init__(self, address: str | None, err: Console) -> None:
        self.cluster: Cluster | None = None
        if address:
            from loadgen.spread.cluster import Cluster

            self.cluster = Cluster(address, progress=err.print)
            err.print(f"--cluster: connected to the Ray cluster at {address} ({self.cluster.cpus()} CPUs)")

    def __enter__(self) -> Cluster | None:
        return self.cluster

    def __exit__(self, *exc: object) -> None:
        if self.cluster is not None:
            self.cluster.close()


_API_PATHS = (("/v1/chat/completions", "chat"), ("/v1/completions", "completions"), ("/v1/responses", "responses"))


def adopt_endpoint_path(kw: dict[str, Any]) -> str | None:
    """An ``--endpoint`` pasted with its API path (``http://h:8000/v1/chat/completions``, as AIPerf and
    vLLM users write it): strip the path to ``.../v1``, take ``--api`` from it and say so on stderr.

    Returns the API taken (None: nothing to take). Changes the options ``kw`` in place, so the typed
    options built from it after (:class:`~loadgen.cli.target_options.EndpointOptions`) and the record
    say what is sent (a second call finds nothing to do); an explicit ``--api`` that names the other
    API is a usage error. Must run before the workload is built: chat prompts differ.
    """
    from urllib.parse import urlsplit, urlunsplit

    opts = EndpointOptions.from_kw(kw)
    url = opts.endpoint
    if not url or opts.triton or opts.provider != "openai-compatible":
        return None
    try:
        parts = urlsplit(url)
    except ValueError:
        return None  # _check_endpoint names it
    path = parts.path.rstrip("/")
    for suffix, api in _API_PATHS:
        if not path.endswith(suffix):
            continue
        if opts.api_given and opts.api != api:
            raise click.UsageError(f"--endpoint ends in {suffix} (the {api} API): it clashes with --api {opts.api}")
        stripped = urlunsplit(parts._replace(path=path[: -len(suffix)] + "/v1"))
        kw["endpoint"], kw["api"] = stripped, api  # the record (config.used.toml, result.json) says what was sent
        click.echo(
            f"--endpoint: took the path {suffix} as --api {api}; sending to {redact_url(stripped)}{suffix[3:]}",
            err=True,
        )
        return api
    return None


def _host_url(url: str) -> str:
    """``url`` with a scheme, so its host can be read: Triton's gRPC form is a bare ``host:port``."""
    return url if "://" in url else "grpc://" + url


def resolve_endpoint_url(opts: EndpointOptions) -> str | None:
    """The URL to load: --endpoint, else the provider's public API; None starts the embedded sim."""
    from loadgen.endpoints.providers import DEFAULT_BASE_URLS

    if opts.endpoint:
        if not opts.triton:  # Triton also takes host:port
            _check_endpoint(opts.endpoint)
        return opts.endpoint
    if opts.provider == "azure":
        raise click.UsageError("--provider azure needs --endpoint https://RESOURCE.openai.azure.com")
    return DEFAULT_BASE_URLS.get(opts.provider)


def _provider_api(opts: EndpointOptions) -> str:
    """--api, where managed providers default to chat (their only streaming API that matters)."""
    if opts.provider == "openai-compatible":
        return opts.api
    if opts.provider == "anthropic" and opts.api_given and opts.api != "chat":
        raise click.UsageError("--provider anthropic speaks the Messages API: leave out --api or give --api chat")
    return opts.api if opts.api_given else "chat"


def header_timeout_s(opts: EndpointOptions) -> float | None:
    """``--header-timeout`` in seconds: the value given, else max(30 s, 10x the TTFT target) when an SLO
    (``--slo``, or ``--slo-p99`` of ``--slo-metric``) targets TTFT, else 60 s (the rule of
    :func:`loadgen.endpoints.header_wait.default_header_timeout_s`). None (off) with ``--no-stream``: a
    whole answer's headers come with its last byte (``--timeout`` bounds it); giving both is a usage error."""
    from loadgen.endpoints.header_wait import default_header_timeout_s

    given = opts.header_timeout
    if opts.no_stream:
        if given is not None:
            raise click.UsageError(
                "--header-timeout bounds the wait for a streamed answer's headers: with --no-stream they come "
                "with the whole answer (--timeout bounds it)"
            )
        return None
    if given is not None:
        return positive_duration_s(given, "--header-timeout", 0.0)
    return default_header_timeout_s(slo_targets(opts.slo_p99, opts.slo_metric, opts.slos))


def model_mix_names(text: str | None) -> tuple[str, ...]:
    """The models of a ``--model`` mix (``a=0.7,b=0.3``), empty for one model; a bad mix is a usage error."""
    from loadgen.workload.models import parse_model_mix

    with usage_errors():
        mix = parse_model_mix(text)
    return mix.names if mix is not None else ()


def endpoint_from_options(opts: EndpointOptions, endpoint_url: str, embedded: bool, redactor: Redactor) -> Endpoint:
    """The endpoint for parsed options (other front ends, e.g. ``loadgen locust``, pass a subset)."""
    from loadgen.endpoints.providers import DEFAULT_KEY_ENV, is_loopback_url, make_endpoint
    from loadgen.engine.recordlog import new_run_id

    mix = model_mix_names(opts.model)
    if opts.triton:
        if opts.http_client == "lean":
            raise click.UsageError(f"--http-client lean: OpenAI-compatible endpoints only (not --api {opts.api})")
        if mix:
            raise click.UsageError("--model with several models: not with Triton (a model is its URL)")
        if opts.provider != "openai-compatible":
            raise click.UsageError(f"--api {opts.api} is Triton's protocol: it clashes with --provider {opts.provider}")
        return _triton_endpoint(opts, endpoint_url, redactor)
    provider = opts.provider
    headers, env_secrets = resolve_headers(opts.headers, opts.header_envs)
    for v in env_secrets:
        redactor.add(v)
    extra = parse_extra_body(opts.extra_body)
    if opts.tools_file:
        if "tools" in extra:
            raise click.UsageError('--tools and a "tools" key in --extra-body clash: give one')
        from loadgen.endpoints.toolcalls import read_tools_file

        extra["tools"] = read_tools_file(opts.tools_file)  # a bad file: one line naming it (InputFileError)
    api_key = None
    bearer = None
    if not embedded:
        default_env = DEFAULT_KEY_ENV[provider]
        env_name = opts.api_key_env or (default_env if os.environ.get(default_env) else None)
        if env_name:
            api_key = os.environ.get(env_name)
            if api_key is None and opts.api_key_env:
                raise click.UsageError(f"--api-key-env {env_name}: that environment variable is not set")
        if opts.azure_ad_token_env:
            bearer = os.environ.get(opts.azure_ad_token_env)
            if bearer is None:
                raise click.UsageError(
                    f"--azure-ad-token-env {opts.azure_ad_token_env}: that environment variable is not set"
                )
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
    baseline = {"on": True, "off": False}.get(opts.network_baseline, not embedded and not is_loopback_url(endpoint_url))
    options: dict[str, Any] = dict(
        stream=not opts.no_stream,
        headers=headers,
        extra_body=extra,
        timeout_s=positive_duration_s(opts.timeout, "--timeout", 600.0),
        connect_timeout_s=positive_duration_s(opts.connect_timeout, "--connect-timeout", 10.0),
        idle_timeout_s=positive_duration_s(opts.idle_timeout, "--idle-timeout", 120.0),
        header_timeout_s=header_timeout_s(opts),
        verify_tls=not opts.insecure,
        ca_file=opts.ca_file,
        request_id_prefix=new_run_id(),
        connection_reuse=opts.connection_reuse,
        network_baseline=baseline,
        retry_429=opts.retry_429,
        max_rpm=opts.max_rpm,
        max_tpm=opts.max_tpm,
    )
    if provider != "anthropic":
        options["preflight"] = not opts.no_preflight
    if opts.images and provider != "anthropic":
        options["probe_image"] = True  # --images: the pre-flight carries one (a text-only model refuses before load)
    if mix and provider != "anthropic":  # --model a=0.7,b=0.3: each names its own; the pre-flight uses the first
        options["mix_models"] = mix
    if provider != "anthropic":  # --http-client: the OpenAI-compatible endpoint's load (auto: lean)
        options["http_client"] = opts.http_client
    elif opts.http_client == "lean":
        raise click.UsageError("--http-client lean: OpenAI-compatible endpoints only (not --provider anthropic)")
    if opts.session_header:  # issue 17: session affinity for routers, on each session turn
        if provider == "anthropic":
            raise click.UsageError("--session-header is for OpenAI-compatible endpoints (routers in front of them)")
        options["session_header"] = opts.session_header
    with usage_errors():
        return make_endpoint(
            provider,
            base_url=endpoint_url,
            api=_provider_api(opts),
            model=mix[0] if mix else opts.model,
            api_key=api_key,
            bearer_token=bearer,
            deployment=opts.deployment,
            api_version=opts.api_version,
            anthropic_version=opts.anthropic_version,
            redactor=redactor,
            **options,
        )


def _triton_endpoint(opts: EndpointOptions, endpoint_url: str, redactor: Redactor) -> TritonEndpoint:
    from loadgen.endpoints.triton import TritonConfig, TritonEndpoint
    from loadgen.engine.recordlog import new_run_id

    headers, env_secrets = resolve_headers(opts.headers, opts.header_envs)
    for v in env_secrets:
        redactor.add(v)
    for name, value in headers.items():
        if is_sensitive_name(name):
            redactor.add(value)
    return TritonEndpoint(
        TritonConfig(
            url=endpoint_url,
            protocol="grpc" if opts.api == "triton-grpc" else "http",
            model=opts.model,
            headers=headers,
            sampling_parameters=parse_extra_body(opts.extra_body),
            timeout_s=duration_s(opts.timeout, "--timeout") or 600.0,
            connect_timeout_s=duration_s(opts.connect_timeout, "--connect-timeout") or 10.0,
            header_timeout_s=header_timeout_s(opts),
            request_id_prefix=new_run_id(),
        ),
        redactor,
    )


def confirm_remote(yes: bool, endpoint_url: str, embedded: bool, estimate: Estimate, err: Console) -> None:
    """Before sending to a non-loopback endpoint: show the estimate, ask on a terminal, refuse without ``yes``
    (``--yes``) elsewhere."""
    from loadgen.endpoints.providers import is_loopback_url

    if embedded or is_loopback_url(_host_url(endpoint_url)):
        return
    err.print(f"{redact_url(endpoint_url)} is not a loopback address: {estimate.text()}")
    if yes:
        return
    if not sys.stdin.isatty():
        raise click.UsageError("not on a terminal: pass --yes to send to a non-loopback endpoint")
    if not click.confirm("send?", default=False, err=True):
        raise click.Abort()


def endpoint_replicas() -> list[str]:
    """The URLs of ``--endpoint`` given two or more times (replicas of one model), in order; [] for one."""
    ctx = click.get_current_context(silent=True)
    return list(ctx.meta.get("loadgen.endpoint_replicas") or ()) if ctx is not None else []


def balanced_endpoint(opts: EndpointOptions, urls: list[str], redactor: Redactor) -> Endpoint:
    """One endpoint over ``urls`` (:class:`loadgen.endpoints.balance.BalancedEndpoint`, policy
    ``opts.balance``): each replica built from the same options but its URL (its own pool, its URL's
    credentials its own), every secret registered with ``redactor``. Usage errors: a bad URL, workers."""
    from loadgen.endpoints.balance import BalancedEndpoint

    if opts.workers not in (None, "1") or opts.cluster:
        raise click.UsageError(
            "--endpoint given several times balances in one process: not with --workers or --cluster"
        )
    if not opts.triton:
        for url in urls:
            _check_endpoint(url)
    n = len(urls)  # the client's own caps are the run's: each replica enforces its share (as workers do)
    opts = replace(
        opts,
        max_rpm=opts.max_rpm / n if opts.max_rpm else opts.max_rpm,
        max_tpm=opts.max_tpm / n if opts.max_tpm else opts.max_tpm,
    )
    with usage_errors():
        return BalancedEndpoint(
            [endpoint_from_options(opts, u, False, redactor) for u in urls], opts.balance or "round-robin"
        )


def endpoints_from_options(
    opts: EndpointOptions, target: Target, redactor: Redactor, estimate: Estimate, err: Console
) -> Endpoint:
    """``run``/``sweep``'s endpoint: the target's, or with ``--endpoint`` given several times the replicas
    balanced by the client; each further non-loopback replica is confirmed as the first was."""
    opts = replace(opts, model=target.model)  # --serve: the served model's name when --model is not given
    urls = endpoint_replicas()
    if len(urls) < 2 or target.embedded:
        return endpoint_from_options(opts, target.url, target.embedded, redactor)
    urls[0] = target.url  # as adopt_endpoint_path left it
    for url in urls[1:]:
        confirm_remote(opts.yes, url, False, estimate, err)
    return balanced_endpoint(opts, urls, redactor)


class Target:
    """The system under test for one command: an external endpoint, a launched server, or the sim.

    ``record``: the command's options as they are recorded (``config.used.toml``, written on the way out
    when a result was; ``--serve`` writes the served model's name into it when ``--model`` is not given)."""

    def __init__(
        self,
        endpoint: EndpointOptions,
        server: ServerOptions,
        record: dict[str, Any],
        out_dir: Path,
        err: Console,
        *,
        out_existed: bool | None = None,
    ) -> None:
        self.opts, self.server_opts, self.record = endpoint, server, record
        self.out_dir, self.err = out_dir, err
        self.sim: Any = None
        self.server: Any = None
        self.url = ""
        self.embedded = False
        self.model = endpoint.model
        """``--model``, or with ``--serve`` and no ``--model`` the served model's name."""
        # an --out this command made (``out_existed``: whether it was there before the command made it; by
        # default, whether it is there now) and left without a result is removed when the command fails
        self.out_existed = True if out_existed is None else out_existed
        if out_existed is None:
            try:
                self.out_existed = out_dir.exists()
            except OSError:  # not traversable: its usage error comes where it is made
                pass

    def __enter__(self) -> Target:
        opts, so = self.opts, self.server_opts
        if so.serve:
            import shlex

            from loadgen.serve import launch

            if opts.endpoint:
                raise click.UsageError("--serve and --endpoint clash: loadgen starts the server itself")
            # a ServerStartError goes up to the command's exit-code mapping (exit 4)
            self.server = launch(
                so.serve,
                serve_model=so.serve_model,
                served_model_name=so.served_model_name or opts.model,
                model_repository=so.model_repository,
                pytriton=so.pytriton,
                triton_model=opts.model,
                server_python=so.server_python,
                port=so.server_port,
                engine_args=shlex.split(so.serve_args or ""),
                log_dir=str(self.out_dir / "server"),
                ready_timeout_s=duration_s(so.serve_timeout, "--serve-timeout"),
            )
            info = self.server.info
            self.url = {"triton-http": info.get("http_url"), "triton-grpc": info.get("grpc_url")}.get(
                opts.api, self.server.base_url
            )
            self.model = opts.model or info.get("served_model_name")
            self.record["model"] = self.model
            self.err.print(f"--serve {so.serve}: server ready at {self.url} (logs in {self.out_dir / 'server'})")
        elif resolve_endpoint_url(opts) is None:
            if opts.triton:
                raise click.UsageError(f"--api {opts.api} needs --endpoint or --serve triton")
            self.sim = _start_sim(so.sim_args)
            self.embedded = True
            self.url = self.sim.url
            self.err.print(
                f"no --endpoint: started the embedded simulated endpoint at {self.url} (a test double, not a real server)"
            )
        else:
            self.url = resolve_endpoint_url(opts) or ""
        return self

    def observer(self) -> ServerObserver | None:
        if self.server is None:
            return None
        from loadgen.serve import ServerObserver

        return ServerObserver.for_server(self.server, model=self.model)

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        from loadgen.cli.runfile import USED_CONFIG_NAME, write_used_config

        # something was written (a result, a probe): the options that made it, beside it
        try:  # an --out that could not be made (a name too long, a directory not traversable) has nothing
            written = self.out_dir.is_dir() and any(p.name != USED_CONFIG_NAME for p in self.out_dir.iterdir())
        except OSError:  # its usage error is already on its way: never a traceback over it
            written = False
        if written:
            try:
                write_used_config(self.record, self.out_dir)
            except OSError as e:
                self.err.print(f"[yellow]warning:[/] {self.out_dir}: config.used.toml not written: {e.strerror or e}")
        elif not self.out_existed and exc_type is not None:  # failed before any result: no empty results/<time>
            try:
                (self.out_dir / USED_CONFIG_NAME).unlink(missing_ok=True)  # a sweep's, written after its pre-flight
                self.out_dir.rmdir()
            except OSError:
                pass
        if self.sim is not None:
            self.sim.stop()
        if self.server is not None:
            self.server.stop()
