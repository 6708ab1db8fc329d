"""The target's options as typed values: what the client endpoint is built from, and what loadgen starts.

:class:`EndpointOptions` (``--endpoint``, ``--api``, ``--model``, credentials, headers, timeouts, the
client's caps) and :class:`ServerOptions` (``--serve*``, ``--sim-args``) are frozen and built once
per command from click's values (``--config`` already merged into them: it fills click's
``default_map``) by their ``from_kw``; :mod:`loadgen.cli.target` takes them, never click's dict. A
front end that passes a subset (``loadgen locust``, ``plan --validate``, a test) gets the defaults
of the fields it leaves out. Values that hold or may hold secrets (URLs, headers, ``--extra-body``)
stay out of the repr. Durations stay as written: each is parsed where it is used, so a bad one is
the same usage error at the same point as before.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Self

from loadgen.cli.load_options import given, picked

__all__ = ["EndpointOptions", "ServerOptions"]


@dataclass(frozen=True, slots=True)
class EndpointOptions:
    """What the client endpoint is built from (:func:`loadgen.cli.target.endpoint_from_options`)."""

    endpoint: str | None = field(default=None, repr=False)
    """``--endpoint`` (the first when given several times: :func:`loadgen.cli.target.endpoint_replicas`)."""
    api: str = "completions"
    api_given: bool = False
    """Whether ``--api`` was given (on the command line or in ``--config``), not its default."""
    model: str | None = None
    """``--model``: one name, or a mix ``a=0.7,b=0.3``."""
    provider: str = "openai-compatible"
    deployment: str | None = None
    api_version: str | None = None
    anthropic_version: str | None = None
    api_key_env: str | None = None
    """The name of the environment variable holding the API key (never the key)."""
    azure_ad_token_env: str | None = None
    headers: tuple[str, ...] = field(default=(), repr=False)
    """``--header 'Name: value'`` as written (values may be secrets)."""
    header_envs: tuple[str, ...] = ()
    """``--header-env NAME=ENVVAR``."""
    extra_body: str | None = field(default=None, repr=False)
    """``--extra-body`` JSON as written (may hold credentials)."""
    tools_file: str | None = None
    timeout: str | None = "600s"
    connect_timeout: str | None = "10s"
    idle_timeout: str | None = None
    header_timeout: str | None = None
    slos: tuple[str, ...] = ()
    """``--slo`` texts (the header timeout's default follows a TTFT target)."""
    slo_p99: str | None = None
    slo_metric: str | None = None
    no_stream: bool = False
    insecure: bool = False
    no_preflight: bool = False
    ca_file: str | None = None
    connection_reuse: str = "keep-alive"
    http_client: str = "auto"
    """``--http-client auto|aiohttp|lean``: the library the load's requests go through (auto: lean for
    OpenAI-compatible endpoints, aiohttp for Anthropic and Triton)."""
    network_baseline: str = "auto"
    retry_429: int = 0
    max_rpm: float | None = None
    max_tpm: float | None = None
    images: str | None = None
    """``--images``: the pre-flight then carries one."""
    session_header: str | None = None
    balance: str | None = None
    workers: str | None = None
    cluster: str | None = None
    yes: bool = False
    """``--yes``: send to a non-loopback endpoint without asking."""

    @classmethod
    def from_kw(cls, kw: dict[str, Any]) -> Self:
        """The options of ``kw`` (click's values, or a front end's subset); ``api_given`` from the current
        click context's source of ``--api`` when ``kw`` does not say it."""
        values = picked(cls, kw)
        values.setdefault("api_given", given("api"))
        return cls(**values)

    @property
    def triton(self) -> bool:
        """``--api triton-http`` / ``triton-grpc``: Triton's own protocol (a URL may be a bare host:port)."""
        return str(self.api or "").startswith("triton")


@dataclass(frozen=True, slots=True)
class ServerOptions:
    """What loadgen starts when no ``--endpoint`` is given: a server (``--serve``) or the embedded sim."""

    serve: str | None = None
    """``--serve vllm|triton``."""
    serve_model: str | None = None
    served_model_name: str | None = None
    model_repository: str | None = None
    pytriton: str | None = None
    server_python: str | None = None
    server_port: int | None = None
    serve_args: str | None = None
    serve_timeout: str | None = "600s"
    sim_args: str = ""
    """``--sim-args``: the embedded simulated endpoint's flags."""

    @classmethod
    def from_kw(cls, kw: dict[str, Any]) -> Self:
        """The options of ``kw`` (click's values)."""
        return cls(**picked(cls, kw))
