"""The web UI's *loadgen* tab and ``/loadgen`` route, and the token check of ``--web-token-env``.

The tab shows the live aggregation of :class:`~loadgen.locust.collect.LocustCollector`
(the same numbers ``result.json`` gets); ``/loadgen`` returns them as JSON, with the
result once the test has ended.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from typing import Any

from flask import Response, jsonify, request

from loadgen.locust.collect import arrivals_text
from loadgen.locust.state import S

TOKEN_ENV = "LOADGEN_LOCUST_WEB_TOKEN"
_COOKIE = "loadgen_token"


def install_web_ui(env: Any) -> None:
    """Add the tab and routes to Locust's web UI; with ``LOADGEN_LOCUST_WEB_TOKEN`` set, require it."""
    web = env.web_ui
    cfg = S.config or {}
    mode = "open loop" if cfg.get("mode") == "open" else "closed loop"
    web.template_args["extendedTabs"] = [{"title": f"loadgen ({mode})", "key": "loadgen"}]
    cols = [("metric", "Metric"), ("count", "Count"), ("mean", "Mean (ms)"), ("p50", "p50"), ("p90", "p90"),
            ("p99", "p99"), ("p999", "p99.9"), ("max", "Max")]  # fmt: skip
    web.template_args["extendedTables"] = [{"key": "loadgen", "structure": [{"key": k, "title": t} for k, t in cols]}]

    def rows() -> list[dict[str, Any]]:
        head = [{"metric": arrivals_text(cfg, env.runner.target_user_count if env.runner else None)}]
        return head + (S.collector.live_rows() if S.collector is not None else [])

    @web.app.after_request
    def _extend(response: Any) -> Any:
        if request.path.endswith("/stats/requests") and response.is_json:
            data = response.get_json()
            data["extended_stats"] = [{"key": "loadgen", "data": rows()}]
            response.set_data(json.dumps(data))
        return response

    @web.app.route("/loadgen")
    @web.auth_required_if_enabled
    def _loadgen() -> Any:
        col = S.collector
        return jsonify({
            "mode": mode, "arrivals": rows()[0]["metric"], "rows": rows()[1:],
            "result": col.result if col is not None and col.result is not None else None,
        })  # fmt: skip

    token = os.environ.get(TOKEN_ENV)
    if token:
        digest = hashlib.sha256(token.encode()).hexdigest()

        @web.app.before_request
        def _auth() -> Any:
            given = request.args.get("token") or request.headers.get("Authorization", "").removeprefix("Bearer ")
            if given and hmac.compare_digest(given, token):
                request.environ["loadgen.set_cookie"] = True
                return None
            if hmac.compare_digest(request.cookies.get(_COOKIE, ""), digest):
                return None
            return Response("loadgen: this Locust UI needs its token (?token=... once, or Authorization: Bearer)", 401)

        @web.app.after_request
        def _cookie(response: Any) -> Any:
            if request.environ.get("loadgen.set_cookie"):
                response.set_cookie(_COOKIE, digest, httponly=True, samesite="Strict")
            return response
