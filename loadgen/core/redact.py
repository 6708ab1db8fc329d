"""Keep secrets out of results, logs and messages.

Two tools: structural redaction of what we record (URLs lose their userinfo and
the values of credential-like query parameters; headers are recorded by name
only, with sensitive values replaced) and a :class:`Redactor` that knows every
secret value of a run and scrubs it (plain, URL-encoded and base64) from any
text before it is written: error details, log lines, console output.
"""

from __future__ import annotations

import base64
import re
from typing import TypeVar, cast
from urllib.parse import parse_qsl, quote, quote_plus, urlencode, urlsplit, urlunsplit

REDACTED = "***"
_J = TypeVar("_J")

_SENSITIVE = re.compile(
    r"(auth|key|token|secret|password|passwd|cookie|session|signature|sig|credential|bearer|jwt|private)", re.I
)
SENSITIVE_EXACT = frozenset({"code", "pwd", "pass", "passphrase", "sas"})
"""Names that carry credentials only as a whole name (a substring match would flag ``encoding`` or
``status_code``): Azure Functions' ``code`` key, passwords as ``pwd``/``pass``/``passphrase``, a SAS
token as ``sas`` (an Azure SAS URL's own secret, ``sig``, is caught by the pattern)."""


def is_sensitive_name(name: str) -> bool:
    """True for header, query or body field names that usually carry credentials.

    A name is sensitive when it contains one of ``auth key token secret password passwd cookie
    session signature sig credential bearer jwt private`` (case-insensitive; so ``api_key``,
    ``x-api-key``, ``Authorization``, ``Ocp-Apim-Subscription-Key``, ``x-goog-api-key``,
    ``access_token``, ``client_secret``) or is one of :data:`SENSITIVE_EXACT`.
    """
    return bool(_SENSITIVE.search(name)) or name.strip().lower() in SENSITIVE_EXACT


def split_url_secrets(url: str) -> tuple[str, list[str]]:
    """Return ``(url_without_userinfo_and_secret_query_values, secret_values_found)``."""
    parts = urlsplit(url)
    secrets: list[str] = []
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, _, hostport = netloc.rpartition("@")
        for s in userinfo.split(":"):
            if s:
                secrets.append(s)
        netloc = hostport
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        kept = []
        for k, v in pairs:
            if is_sensitive_name(k) and v:
                secrets.append(v)
                kept.append((k, REDACTED))
            else:
                kept.append((k, v))
        query = urlencode(kept, safe="*")
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment)), secrets


def redact_url(url: str) -> str:
    """The URL as it may be recorded: no userinfo, credential-like query values replaced."""
    return split_url_secrets(url)[0]


def redact_headers(headers: dict[str, str]) -> dict[str, str]:
    """Header names with values, sensitive values replaced by ``***``."""
    return {k: (REDACTED if is_sensitive_name(k) else v) for k, v in headers.items()}


def find_body_secrets(obj: object) -> list[str]:
    """String values under credential-like keys anywhere in a JSON-like body."""
    out: list[str] = []
    if isinstance(obj, dict):
        for k, v in obj.items():
            if isinstance(v, str) and is_sensitive_name(str(k)) and v:
                out.append(v)
            else:
                out.extend(find_body_secrets(v))
    elif isinstance(obj, list):
        for v in obj:
            out.extend(find_body_secrets(v))
    return out


def redact_body(obj: object) -> object:
    """A copy of a JSON-like body with values under credential-like keys replaced."""
    if isinstance(obj, dict):
        return {
            k: (REDACTED if isinstance(v, str) and is_sensitive_name(str(k)) else redact_body(v))
            for k, v in obj.items()
        }
    if isinstance(obj, list):
        return [redact_body(v) for v in obj]
    return obj


class Redactor:
    """Scrubs known secret values from text: plain, URL-encoded and base64 forms."""

    def __init__(self, secrets: list[str] | None = None) -> None:
        self._forms: list[str] = []
        for s in secrets or []:
            self.add(s)

    def add(self, secret: str | None) -> None:
        if not secret or len(secret) < 4:
            return
        forms = {secret, quote(secret, safe=""), quote_plus(secret)}
        b = secret.encode()
        for pad in range(3):
            # base64 of the secret at any alignment inside a larger encoded blob
            enc = base64.b64encode(b"\0" * pad + b).decode()
            core = enc[(pad * 4 + 2) // 3 : len(enc) - 4]
            if len(core) >= 6:
                forms.add(core)
        for f in forms:
            if f and f not in self._forms:
                self._forms.append(f)
        self._forms.sort(key=len, reverse=True)

    def __call__(self, text: str) -> str:
        for f in self._forms:
            if f in text:
                text = text.replace(f, REDACTED)
        return text

    def scrub(self, obj: _J) -> _J:
        """A copy of a JSON-like value with every string (keys too) scrubbed: text a server supplied
        (its ``/version``, model names, error bodies) is redacted by value like everything else."""
        return cast(_J, self._scrub(obj)) if self._forms else obj

    def _scrub(self, obj: object) -> object:
        if isinstance(obj, str):
            return self(obj)
        if isinstance(obj, dict):
            return {(self(k) if isinstance(k, str) else k): self._scrub(v) for k, v in obj.items()}
        if isinstance(obj, list | tuple):
            return [self._scrub(v) for v in obj]
        return obj

    def __bool__(self) -> bool:
        return bool(self._forms)
