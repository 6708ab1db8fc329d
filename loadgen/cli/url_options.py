"""Options whose value is a URL: declared ``type=URL``, recorded only redacted, their secrets scrubbed.

A URL may carry credentials: userinfo (``http://user:pass@host``) or a credential-like query value
(``?api_key=...``, :func:`loadgen.core.redact.split_url_secrets`). Every option whose value is a URL
(``--endpoint``, ``--server-metrics``, ``--otlp-endpoint``, ``--cluster``, ...) is declared with the
parameter type :data:`URL`, and whatever writes options finds them by that type, never by a list of
names: :func:`record_urls` gives a value as ``result.json`` and ``config.used.toml`` record it, and
:func:`url_secrets` the secret values that a run's :class:`~loadgen.core.redact.Redactor` scrubs from any
text it writes (error details, logs, pages). The value itself is kept whole: the run uses it.
"""

from __future__ import annotations

from typing import Any

import click

from loadgen.core.redact import split_url_secrets

__all__ = ["URL", "UrlType", "is_url_option", "record_urls", "url_option_names", "url_secrets"]


class UrlType(click.ParamType):
    """A URL, taken as given (a string); its credentials never reach a record (module docstring)."""

    name = "url"

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> str:
        return value if isinstance(value, str) else str(value)


URL = UrlType()
"""The parameter type of every option whose value is a URL."""


def is_url_option(param: click.Parameter) -> bool:
    """True for an option declared ``type=URL``."""
    return isinstance(param, click.Option) and isinstance(param.type, UrlType)


def url_option_names(command: click.Command | None = None) -> frozenset[str]:
    """The parameter names of ``command``'s URL options (default: the running command's; called
    outside a command it raises RuntimeError rather than record a URL unredacted)."""
    cmd = command if command is not None else click.get_current_context().command
    return frozenset(p.name for p in cmd.params if p.name and is_url_option(p))


def record_urls(value: Any) -> tuple[Any, bool]:
    """``(value as it may be recorded, whether it held credentials)`` for a URL option's value (one
    URL, or a list of them for a repeatable option). Without credentials the value is kept exactly."""
    if not value:
        return value, False
    urls = [value] if isinstance(value, str) else list(value)
    pairs = [split_url_secrets(str(u)) for u in urls]
    if not any(secrets for _, secrets in pairs):
        return value, False
    safe = [u for u, _ in pairs]
    return (safe[0] if isinstance(value, str) else safe), True


def url_secrets(kw: dict[str, Any], command: click.Command | None = None) -> list[str]:
    """Every secret value in the URL options of ``kw`` (userinfo parts, credential-like query values)."""
    out: list[str] = []
    for name in sorted(url_option_names(command)):
        value = kw.get(name)
        for u in [value] if isinstance(value, str) else (value or ()):
            out.extend(split_url_secrets(str(u))[1])
    return out
