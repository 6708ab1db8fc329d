"""The web UI against cross-site control: no wildcard CORS, the Host checked, a CSRF token on every change.

Locust's UI can start load, and Locust leaves ``CORS(app)`` on it (every route echoes
any ``Origin``) and accepts any ``Host``: a page on any site could read the UI and post
its start form, and DNS rebinding reaches a UI bound to loopback. :func:`guard_web_ui`
(also on loopback):

* removes the wildcard CORS (flask-cors' ``after_request`` and its exception wrappers):
  a browser then lets no other origin read an answer or pass a preflight;
* answers 403 to a request whose ``Host`` is not the bound address (``--web-host`` and
  ``--web-port``; for loopback also ``localhost``/``127.0.0.1``/``[::1]``; for every
  interface any IP literal and this machine's names): a rebound name is refused;
* answers 403 to a state-changing request (any method but GET/HEAD/OPTIONS: ``/swarm``,
  ``/stop``, ``/stats/reset``, ``/user``) from another origin (``Origin`` or
  ``Sec-Fetch-Site``), or without this process's CSRF token in the ``X-Loadgen-CSRF``
  header (or a ``loadgen_csrf`` form field), unless it carries the UI token of
  ``--web-token-env`` as ``Authorization: Bearer`` (a header no cross-site form can set).

The token is random per process and reaches only the UI's own page: a script added to
its ``<head>`` puts it on the page's same-origin non-GET ``fetch`` calls, so the UI works
unchanged; scripts take it from that page or use the bearer token. Imports Flask, not Locust.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import os
import socket
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from flask import Response, request

if TYPE_CHECKING:
    from flask import Flask
    from locust.web import WebUI

CSRF_HEADER = "X-Loadgen-CSRF"
CSRF_FIELD = "loadgen_csrf"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")
_WILDCARD = ("", "*", "0.0.0.0", "::")


def _split_host(value: str) -> tuple[str, int | None]:
    """``name:port`` / ``[v6]:port`` / ``name`` -> (lower-case name without brackets, port or None)."""
    p = urlsplit("//" + value.strip())
    try:
        port = p.port
    except ValueError:
        return "\0invalid", None
    return (p.hostname or "").lower(), port


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def host_allowed(host_header: str, bound_host: str, port: int, tls: bool) -> bool:
    """True when a request's ``Host`` names the address the UI is bound to (module docstring)."""
    name, given = _split_host(host_header)
    if (given if given is not None else (443 if tls else 80)) != port:
        return False
    bound = bound_host.strip("[]").lower()
    if bound in _LOOPBACK_NAMES or bound.startswith("127."):
        return name in _LOOPBACK_NAMES or name == bound
    machine = {socket.gethostname().lower(), socket.getfqdn().lower()}
    if bound in _WILDCARD:
        return _is_ip(name) or name in machine or name == "localhost"
    return name == bound or name in machine


def same_origin(origin: str, host_header: str, tls: bool) -> bool:
    """True when ``Origin`` is the UI's own (scheme and ``Host``)."""
    want = f"{'https' if tls else 'http'}://{host_header.strip().lower()}"
    return origin.strip().lower().rstrip("/") == want


def head_script(csrf: str) -> str:
    """The ``<head>`` script that adds the CSRF header to the page's same-origin non-GET fetches."""
    return (
        "<script>(function(){var T=" + json.dumps(csrf) + ",N=" + json.dumps(CSRF_HEADER) + ",F=window.fetch;"
        "window.fetch=function(i,o){var R=i instanceof Request,m=((o&&o.method)||(R?i.method:'GET')).toUpperCase();"
        "if(m!=='GET'&&m!=='HEAD'&&new URL(R?i.url:String(i),location.href).origin===location.origin){"
        "if(R&&!(o&&o.headers)){i.headers.set(N,T)}else{o=Object.assign({},o);"
        "var h=new Headers((o&&o.headers)||(R?i.headers:undefined));h.set(N,T);o.headers=h}}"
        "return F.call(this,i,o)}})();</script>"
    )


def _equal(given: str, secret: str) -> bool:
    return hmac.compare_digest(given.encode("utf-8", "replace"), secret.encode())


def _drop_wildcard_cors(app: Flask) -> None:
    funcs = app.after_request_funcs.get(None, [])
    funcs[:] = [f for f in funcs if getattr(f, "__name__", "") != "cors_after_request"]
    for name in ("handle_exception", "handle_user_exception"):
        app.__dict__.pop(name, None)  # flask-cors wrapped them on the instance: the class's methods again


def guard_web_ui(web: WebUI, ui_token: str | None) -> str:
    """Install the guard on Locust's ``WebUI`` ``web`` (module docstring); returns the CSRF token."""
    app = web.app
    assert app is not None
    _drop_wildcard_cors(app)
    csrf = os.urandom(18).hex()
    tls = bool(getattr(web, "tls_cert", None) and getattr(web, "tls_key", None))

    def refuse(why: str) -> Response:
        return Response(f"loadgen: refused: {why}\n", 403, mimetype="text/plain")

    @app.before_request
    def _guard() -> Response | None:
        host = request.headers.get("Host", "")
        if not host_allowed(host, str(web.host or ""), int(web.port), tls):
            return refuse(f"Host {host!r} is not this UI's address (cross-site or DNS rebinding)")
        if request.method in SAFE_METHODS:
            return None
        origin = request.headers.get("Origin")
        if origin is not None and not same_origin(origin, host, tls):
            return refuse(f"a state-changing request from another origin ({origin})")
        if request.headers.get("Sec-Fetch-Site", "same-origin") not in ("same-origin", "none"):
            return refuse("a state-changing request from another site")
        auth = request.headers.get("Authorization", "")
        if ui_token and auth.startswith("Bearer ") and _equal(auth.removeprefix("Bearer "), ui_token):
            return None
        given = request.headers.get(CSRF_HEADER) or request.form.get(CSRF_FIELD, "")
        if not _equal(given, csrf):
            return refuse(f"no CSRF token (the {CSRF_HEADER} header the UI's page sends)")
        return None

    @app.after_request
    def _head(response: Response) -> Response:
        if response.status_code == 200 and response.mimetype == "text/html" and not response.direct_passthrough:
            html = response.get_data(as_text=True)
            if request.path.endswith("/") and "window.templateArgs" in html:  # the UI's page, not its report
                response.set_data(html.replace("<head>", "<head>" + head_script(csrf), 1))
                response.headers["Cache-Control"] = "no-store"
        return response

    return csrf
