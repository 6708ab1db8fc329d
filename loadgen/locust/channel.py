"""What travels between a Locust master and its workers: no secret, and only to workers that prove the token.

Locust's master/worker channel (ZeroMQ on ``--master-bind-port``) is plain text with no
authentication: any process that connects receives what the master sends. So:

* **No secret on the channel.** :func:`public_config` is the configuration a worker is
  sent: the endpoint URL without userinfo and with credential-like query values as
  ``***``, credential-like headers and ``--extra-body`` fields as ``***``, the API key by
  its environment variable's *name*, and every other string scrubbed by value
  (:class:`loadgen.core.redact.Redactor`: a server's ``/version`` echo of a key is caught too).
* **Workers bring their own secrets.** ``loadgen locust --worker`` takes ``--endpoint``,
  ``--header``, ``--api-key-env`` and ``--extra-body`` (best from ``--config FILE`` and the
  environment, not the command line, which ``ps`` shows) and hands them to its Locust
  process in ``LOADGEN_LOCUST_WORKER_SECRETS``; :func:`worker_config` fills the ``***``
  placeholders from them at each test start, and refuses, with one line naming what is
  missing or different, rather than send a placeholder.
* **A shared token.** With ``LOADGEN_LOCUST_MASTER_TOKEN`` (``--master-token-env``, needed for
  a master bound beyond loopback) the master sends each connecting worker a random nonce
  and takes part only from workers that answer HMAC-SHA256(token, nonce + worker id)
  (:func:`answer`, :func:`verify`): the token itself never travels.

Pure: imports neither Locust nor gevent.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from typing import Any

from loadgen.core.errors import ConfigError
from loadgen.core.redact import (
    REDACTED,
    Redactor,
    find_body_secrets,
    is_sensitive_name,
    redact_body,
    redact_headers,
    split_url_secrets,
)

WORKER_SECRETS_ENV = "LOADGEN_LOCUST_WORKER_SECRETS"
MASTER_TOKEN_ENV = "LOADGEN_LOCUST_MASTER_TOKEN"


def secret_values(cfg: dict[str, Any]) -> list[str]:
    """Every secret value ``cfg`` holds or points to: URL userinfo and credential-like query values,
    credential-like header values (and their tokens after a scheme word), ``--extra-body``
    credential fields, the API key in the environment variable ``api_key_env`` names."""
    out = list(split_url_secrets(cfg.get("endpoint_url") or "")[1])
    for k, v in (cfg.get("headers") or {}).items():
        if is_sensitive_name(k) and v:
            out += [v, *v.split()[1:]]
    out += find_body_secrets(cfg.get("extra_body") or {})
    env = cfg.get("api_key_env")
    if env and os.environ.get(env):
        out.append(os.environ[env])
    return out


def public_config(cfg: dict[str, Any]) -> dict[str, Any]:
    """The configuration as it may travel to a worker (module docstring): secrets out, by name and by value."""
    shown, url_secrets = split_url_secrets(cfg["endpoint_url"])
    pub = {
        **cfg,
        "endpoint_url": shown if url_secrets else cfg["endpoint_url"],
        "endpoint_url_needs_secrets": bool(url_secrets),
        "headers": redact_headers(cfg.get("headers") or {}),
        "extra_body": redact_body(cfg.get("extra_body") or {}),
    }
    return Redactor(secret_values(cfg)).scrub(pub)


def local_secrets() -> dict[str, Any]:
    """This worker's own endpoint URL, headers, API key variable and extra body (``WORKER_SECRETS_ENV``)."""
    text = os.environ.get(WORKER_SECRETS_ENV)
    return json.loads(text) if text else {}


def _holds_placeholder(obj: object) -> bool:
    if isinstance(obj, dict):
        return any(_holds_placeholder(v) for v in obj.values())
    if isinstance(obj, list):
        return any(_holds_placeholder(v) for v in obj)
    return obj == REDACTED


def worker_config(public: dict[str, Any], mine: dict[str, Any]) -> dict[str, Any]:
    """The configuration a worker sends with: the master's public one, its ``***`` filled from ``mine``.

    ``mine`` holds what ``loadgen locust --worker`` was given (``endpoint_url``, ``headers``,
    ``api_key_env``, ``extra_body``). Raises ConfigError (one line, naming the option) when a
    secret the master's configuration needs is not given, or what is given targets something else.
    """
    cfg = dict(public)
    how = "give the worker the master's"
    url = mine.get("endpoint_url")
    if url:
        theirs = split_url_secrets(public["endpoint_url"])[0]
        if split_url_secrets(url)[0] != theirs:
            raise ConfigError(f"this worker's --endpoint ({split_url_secrets(url)[0]}) is not the master's ({theirs})")
        cfg["endpoint_url"] = url
    elif public.get("endpoint_url_needs_secrets"):
        raise ConfigError(f"the master's endpoint URL holds credentials: {how} --endpoint (in --config FILE)")
    headers = {k.lower(): (k, v) for k, v in (public.get("headers") or {}).items()}
    headers.update({k.lower(): (k, v) for k, v in (mine.get("headers") or {}).items()})
    missing = sorted(k for k, v in headers.values() if v == REDACTED)
    if missing:
        raise ConfigError(f"the master sends with header(s) {', '.join(missing)}: {how} --header (in --config FILE)")
    cfg["headers"] = dict(headers.values())
    body = mine.get("extra_body")
    if body:
        if redact_body(body) != public.get("extra_body"):
            raise ConfigError("this worker's --extra-body is not the master's (compared without secret values)")
        cfg["extra_body"] = body
    elif _holds_placeholder(public.get("extra_body")):
        raise ConfigError(f"the master's --extra-body holds credentials: {how} --extra-body (in --config FILE)")
    env = mine.get("api_key_env") or public.get("api_key_env")
    cfg["api_key_env"] = env
    if env and not os.environ.get(env):
        raise ConfigError(f"the API key is read from ${env}: set {env} in this worker's environment")
    return cfg


def answer(token: str, nonce: str, worker_id: str) -> str:
    """A worker's proof that it holds the master's token: HMAC-SHA256(token, nonce | worker id), hex."""
    return hmac.new(token.encode(), f"{nonce}|{worker_id}".encode(), hashlib.sha256).hexdigest()


def verify(token: str, nonce: str, worker_id: str, given: object) -> bool:
    """True when ``given`` is :func:`answer` for this token, nonce and worker (constant-time compare)."""
    return isinstance(given, str) and hmac.compare_digest(given, answer(token, nonce, worker_id))
