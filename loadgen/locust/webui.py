"""The web UI's *loadgen* tab, ``/loadgen`` route, start-form check, the token check of ``--web-token-env``
and, before them, the guard against cross-site control (:mod:`loadgen.locust.webguard`).

The tab shows the live aggregation of :class:`~loadgen.locust.collect.LocustCollector`
(the same numbers ``result.json`` gets): a table of loadgen's metrics (TTFT, ITL,
inter-chunk, TPOT, E2E, schedule lag) and, above it, the panel drawn by
:mod:`loadgen.locust.tab_js` (state, with "draining" while requests in flight finish
after a stop; settings; SLO verdict; throughput; charts over time). ``/loadgen``
returns all of it as JSON, with the result once the test has ended. A start form whose
loadgen fields (:mod:`loadgen.locust.form`) are unusable is refused with one line.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from typing import TYPE_CHECKING, Any

from flask import Response, jsonify, request

from loadgen.core.clock import now_ns
from loadgen.locust import form
from loadgen.locust.collect import arrivals_text
from loadgen.locust.state import S
from loadgen.locust.tab_js import TAB_JS
from loadgen.locust.webguard import guard_web_ui

if TYPE_CHECKING:
    from locust.env import Environment

TOKEN_ENV = "LOADGEN_LOCUST_WEB_TOKEN"
_COOKIE = "loadgen_token"


def current_config() -> dict[str, Any]:
    """The running (or last) test's configuration, else the one ``loadgen locust`` started with."""
    return S.collector.cfg if S.collector is not None else (S.config or {})


def tab_state(env: Environment) -> dict[str, Any]:
    """``/loadgen``: the tab's whole content as JSON (module docstring)."""
    cfg, col = current_config(), S.collector
    users = env.runner.target_user_count if env.runner else None
    if S.draining_since_ns is not None:
        state = "draining"
    elif col is None:
        state = "idle"
    else:
        state = "stopped" if col.result is not None else "running"
    wl = cfg.get("workload") or {}
    out: dict[str, Any] = {
        "state": state,
        "mode": "open loop" if cfg.get("mode") == "open" else "closed loop",
        "arrivals": arrivals_text(cfg, users) if cfg else "",
        "settings": {
            "rate": cfg.get("rate"), "arrival": cfg.get("arrival"), "users": users,
            "input_tokens": wl.get("input_tokens"), "output_tokens": wl.get("output_tokens"),
        },
        "slo_targets": list(cfg.get("slos") or ()),
        "draining": None,
        "rows": table_rows(env)[1:],
        "counts": col.agg.counts() if col is not None else None,
        "result_path": str(col.out_dir / "result.json") if col is not None and col.result is not None else None,
        "result": col.result if col is not None and col.result is not None else None,
    }  # fmt: skip
    if state == "draining":
        proc = S.process
        out["draining"] = {
            "in_flight": (proc.active if proc is not None else 0) if S.role == "local" else None,  # master: unknown
            "elapsed_s": (now_ns() - (S.draining_since_ns or 0)) / 1e9,
            "stop_timeout_s": S.stop_timeout_s,
        }
    out.update(col.live() if col is not None else {"series": None, "throughput": None, "slo": None})
    return out


def table_rows(env: Environment) -> list[dict[str, Any]]:
    cfg = current_config()
    head = [{"metric": arrivals_text(cfg, env.runner.target_user_count if env.runner else None) if cfg else ""}]
    return head + (S.collector.live_rows() if S.collector is not None else [])


def install_web_ui(env: Environment) -> None:
    """Add the tab, its panel script and routes to Locust's web UI, and the start form's check;
    with ``LOADGEN_LOCUST_WEB_TOKEN`` set, require that token. First of all the guard against
    cross-site control (:mod:`loadgen.locust.webguard`: no wildcard CORS, Host, CSRF)."""
    web = env.web_ui
    assert web is not None and web.app is not None  # called when the UI is on
    token = os.environ.get(TOKEN_ENV)
    guard_web_ui(web, token)
    web.template_args["extendedTabs"] = [{"title": "loadgen", "key": "loadgen"}]
    cols = [("metric", "Metric"), ("count", "Count"), ("mean", "Mean (ms)"), ("p50", "p50"), ("p90", "p90"),
            ("p99", "p99"), ("p999", "p99.9"), ("max", "Max")]  # fmt: skip
    web.template_args["extendedTables"] = [{"key": "loadgen", "structure": [{"key": k, "title": t} for k, t in cols]}]

    @web.app.after_request
    def _extend(response: Response) -> Response:
        if request.path.endswith("/stats/requests") and response.is_json:
            data = response.get_json()
            data["extended_stats"] = [{"key": "loadgen", "data": table_rows(env)}]
            response.set_data(json.dumps(data))
        elif response.status_code == 200 and response.mimetype == "text/html" and not response.direct_passthrough:
            html = response.get_data(as_text=True)
            if request.path.endswith("/") and "window.templateArgs" in html:  # the UI's page, not its report
                response.set_data(html.replace("</body>", '<script src="./loadgen/tab.js"></script></body>', 1))
        return response

    @web.app.route("/loadgen")
    @web.auth_required_if_enabled
    def _loadgen() -> Response:
        return jsonify(tab_state(env))

    @web.app.route("/loadgen/tab.js")
    @web.auth_required_if_enabled
    def _tab_js() -> Response:
        return Response(TAB_JS, mimetype="text/javascript")

    if token:
        digest = hashlib.sha256(token.encode()).hexdigest()

        @web.app.before_request
        def _auth() -> Response | None:
            given = request.args.get("token") or request.headers.get("Authorization", "").removeprefix("Bearer ")
            if given and hmac.compare_digest(given.encode("utf-8", "replace"), token.encode()):
                request.environ["loadgen.set_cookie"] = True
                return None
            if hmac.compare_digest(request.cookies.get(_COOKIE, "").encode("utf-8", "replace"), digest.encode()):
                return None
            return Response("loadgen: this Locust UI needs its token (?token=... once, or Authorization: Bearer)", 401)

        @web.app.after_request
        def _cookie(response: Response) -> Response:
            if request.environ.get("loadgen.set_cookie"):
                response.set_cookie(_COOKIE, digest, httponly=True, samesite="Strict")
            return response

    @web.app.before_request  # after the token check (before_request functions run in order)
    def _check_form() -> Response | None:
        if request.method == "POST" and request.path.endswith("/swarm"):
            problem = form.check(form.values(request.form))
            if problem is not None:
                return jsonify({"success": False, "message": problem, "host": env.host})
        return None
