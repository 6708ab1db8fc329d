"""Provider dialects: URL shape, authentication and stream format per platform.

=====================  ==========================================================  ==========================
provider               URL                                                         credentials
=====================  ==========================================================  ==========================
``openai-compatible``  ``--endpoint`` + ``/v1/completions`` or ``/chat/completions``  ``Authorization: Bearer``
``openai``             ``https://api.openai.com/v1/chat/completions`` (default)     ``Authorization: Bearer``
``azure``              ``{endpoint}/openai/deployments/{deployment}/chat/completions  ``api-key`` (or an Entra
                       ?api-version=V``; ``--api-version v1``:                      token as Bearer)
                       ``{endpoint}/openai/v1/chat/completions``
``anthropic``          ``https://api.anthropic.com/v1/messages`` (default)          ``x-api-key`` +
                                                                                   ``anthropic-version``
=====================  ==========================================================  ==========================

OpenAI, Azure and compatible hosts share :class:`~loadgen.endpoints.openai.OpenAIEndpoint`
(``stream_options.include_usage``; Azure's content-filter chunks carry no token);
Anthropic has its own :class:`~loadgen.endpoints.anthropic.AnthropicEndpoint`.
On managed platforms (``openai``, ``azure``) the vLLM-only fields (``ignore_eos``,
``min_tokens``, ``continuous_usage_stats``) are not sent at all: the output length
cannot be forced there, and the result's length check reports it.

Credentials: redirects are never followed, so a key sent to one origin never
reaches another; every key is registered with the run's :class:`~loadgen.core.redact.Redactor`.
"""

from __future__ import annotations

import ipaddress
import socket
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from loadgen.core.errors import ConfigError
from loadgen.core.redact import Redactor
from loadgen.endpoints.anthropic import ANTHROPIC_VERSION, AnthropicConfig, AnthropicEndpoint
from loadgen.endpoints.base import Endpoint
from loadgen.endpoints.openai import OpenAIConfig, OpenAIEndpoint
from loadgen.endpoints.triton import TritonConfig, TritonEndpoint

PROVIDERS = ("openai-compatible", "openai", "azure", "anthropic")
DEFAULT_PROVIDER = "openai-compatible"
DEFAULT_BASE_URLS = {"openai": "https://api.openai.com/v1", "anthropic": "https://api.anthropic.com"}
DEFAULT_KEY_ENV = {
    "openai-compatible": "OPENAI_API_KEY",
    "openai": "OPENAI_API_KEY",
    "azure": "AZURE_OPENAI_API_KEY",
    "anthropic": "ANTHROPIC_API_KEY",
}
"""The environment variable read for the key when ``--api-key-env`` is not given (if set)."""
AZURE_DEFAULT_API_VERSION = "2024-10-21"
MANAGED_ACCEPTED = {"continuous_usage_stats": False, "ignore_eos": False, "min_tokens": False, "include_usage": True}

# fields of OpenAIConfig / AnthropicConfig a caller may pass through make_endpoint
_COMMON = (
    "stream",
    "headers",
    "extra_body",
    "timeout_s",
    "connect_timeout_s",
    "pool_limit",
    "verify_tls",
    "request_id_prefix",
    "max_event_bytes",
    "idle_timeout_s",
    "header_timeout_s",
    "ca_file",
    "connection_reuse",
    "network_baseline",
    "retry_429",
    "retry_429_max_wait_s",
    "max_rpm",
    "max_tpm",
)
_OPENAI_ONLY = ("preflight", "discover", "accepted", "session_header", "mix_models", "probe_image", "http_client")


def azure_url(endpoint: str, *, deployment: str | None, api_version: str | None, api: str = "chat") -> str:
    """The Azure OpenAI request URL.

    ``endpoint`` is the resource (``https://NAME.openai.azure.com``); a URL that
    already names ``/openai/deployments/...`` or ``/openai/v1`` is kept (``api-version``
    added when missing). With ``api_version="v1"`` (the v1 API: no deployment in the
    path, the model in the body) the URL is ``{endpoint}/openai/v1/chat/completions``;
    else ``deployment`` is required. Raises :class:`ConfigError`.
    """
    parts = urlsplit(endpoint)
    path = parts.path.rstrip("/")
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    tail = "/chat/completions" if api == "chat" else "/completions"
    if "/openai/deployments/" in path or "/openai/v1" in path:
        if not path.endswith(("/completions",)):
            path += tail
        if "/openai/deployments/" in path and "api-version" not in query:
            query["api-version"] = api_version or AZURE_DEFAULT_API_VERSION
        return urlunsplit((parts.scheme, parts.netloc, path, urlencode(query), ""))
    if path.endswith("/openai"):
        path = path[: -len("/openai")]
    if api_version == "v1":
        return urlunsplit((parts.scheme, parts.netloc, f"{path}/openai/v1{tail}", urlencode(query), ""))
    if not deployment:
        raise ConfigError("--provider azure needs --deployment NAME (or --api-version v1 with --model)")
    query["api-version"] = api_version or AZURE_DEFAULT_API_VERSION
    return urlunsplit(
        (parts.scheme, parts.netloc, f"{path}/openai/deployments/{deployment}{tail}", urlencode(query), "")
    )


def is_loopback_url(url: str, *, resolve: bool = True) -> bool:
    """True when every address ``url``'s host names is a loopback address (127/8, ::1).

    ``localhost`` counts; other names are resolved when ``resolve`` (a name that
    cannot be resolved is not loopback). Used to decide whether a run must show its
    cost estimate and ask before sending.
    """
    host = urlsplit(url).hostname or ""
    if not host:
        return False
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    if host == "localhost" or host.endswith(".localhost"):
        return True
    if not resolve:
        return False
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except OSError:
        return False
    addrs = {info[4][0] for info in infos}
    return bool(addrs) and all(ipaddress.ip_address(str(a).split("%")[0]).is_loopback for a in addrs)


def make_endpoint(
    provider: str = DEFAULT_PROVIDER,
    *,
    base_url: str | None = None,
    api: str = "chat",
    model: str | None = None,
    api_key: str | None = None,
    bearer_token: str | None = None,
    deployment: str | None = None,
    api_version: str | None = None,
    anthropic_version: str | None = None,
    redactor: Redactor | None = None,
    **options: Any,
) -> Endpoint:
    """An unopened endpoint speaking ``provider``'s dialect.

    ``base_url`` defaults per provider (required for ``openai-compatible`` and
    ``azure``). ``api_key`` goes where the provider wants it (Bearer, ``api-key``,
    ``x-api-key``); ``bearer_token`` is an Azure Entra ID token (sent as Bearer
    when no ``api_key`` is given). ``options`` are fields of
    :class:`~loadgen.endpoints.openai.OpenAIConfig` /
    :class:`~loadgen.endpoints.anthropic.AnthropicConfig` (timeouts, TLS, reuse,
    retries, caps ...). Raises :class:`ConfigError` on a bad combination.
    """
    if provider not in PROVIDERS:
        raise ConfigError(f"--provider {provider!r}: expected one of {', '.join(PROVIDERS)}")
    redactor = redactor if redactor is not None else Redactor()
    redactor.add(api_key)
    redactor.add(bearer_token)
    unknown = set(options) - set(_COMMON) - set(_OPENAI_ONLY)
    if unknown:
        raise ConfigError(f"make_endpoint: unknown options {sorted(unknown)}")
    if provider != "azure" and (deployment or api_version):
        raise ConfigError("--deployment and --api-version are for --provider azure")
    if provider != "anthropic" and anthropic_version:
        raise ConfigError("--anthropic-version is for --provider anthropic")
    if bearer_token and provider != "azure":
        raise ConfigError("an Entra ID token is for --provider azure; other providers take the key")
    url = base_url or DEFAULT_BASE_URLS.get(provider)
    if not url:
        raise ConfigError(f"--provider {provider} needs --endpoint URL")

    if provider == "anthropic":
        common = {k: v for k, v in options.items() if k in _COMMON}
        if options.get("discover") is not None:
            common["discover"] = options["discover"]
        if api != "chat":
            raise ConfigError("--provider anthropic speaks the Messages API: use --api chat")
        cfg = AnthropicConfig(
            base_url=url,
            model=model,
            api_key=api_key,
            anthropic_version=anthropic_version or ANTHROPIC_VERSION,
            **common,
        )
        return AnthropicEndpoint(cfg, redactor)

    fields: dict[str, Any] = dict(options)
    fields["provider"] = provider
    if provider == "azure":
        url = azure_url(url, deployment=deployment, api_version=api_version, api=api)
        if api_version == "v1" and not model:
            raise ConfigError("--provider azure --api-version v1 needs --model")
        model = model or deployment
        fields.setdefault("discover", False)
        fields.setdefault("accepted", dict(MANAGED_ACCEPTED))
        if api_key:
            fields["api_key_header"] = "api-key"
        elif bearer_token:
            api_key = bearer_token
    elif provider == "openai":
        if not model:
            raise ConfigError("--provider openai needs --model")
        fields.setdefault("discover", False)
        fields.setdefault("accepted", dict(MANAGED_ACCEPTED))
        if api == "chat":
            fields["max_tokens_field"] = "max_completion_tokens"
    cfg_o = OpenAIConfig(base_url=url, api=api, model=model, api_key=api_key, **fields)  # type: ignore[arg-type]  # fields hold only OpenAIConfig optional fields
    return OpenAIEndpoint(cfg_o, redactor)


def from_config(config: object, redactor: Redactor | None = None) -> Endpoint:
    """An unopened endpoint from its configuration dataclass: :class:`OpenAIConfig`,
    :class:`AnthropicConfig` or :class:`~loadgen.endpoints.triton.TritonConfig`.

    How a worker process rebuilds the parent's endpoint from
    :meth:`~loadgen.endpoints.base.Endpoint.worker_config`. Raises :class:`ConfigError`
    for any other object.
    """
    if isinstance(config, OpenAIConfig):
        return OpenAIEndpoint(config, redactor)
    if isinstance(config, AnthropicConfig):
        return AnthropicEndpoint(config, redactor)
    if isinstance(config, TritonConfig):
        return TritonEndpoint(config, redactor)
    raise ConfigError(f"no endpoint is built from a {type(config).__name__}")
