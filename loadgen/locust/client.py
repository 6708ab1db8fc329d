"""The Locust client: one streamed OpenAI-compatible request over ``http.client`` on gevent sockets.

A keep-alive pool that opens a connection rather than wait, a connect timeout, a
header timeout (``header_timeout``, as ``loadgen run``'s), a total deadline, no retries,
no redirects; headers and body in one write. The body
comes from :class:`~loadgen.endpoints.openai.OpenAIEndpoint`, the stream is read
by the sans-IO :class:`~loadgen.endpoints.openai.OpenAIStreamParser`, each read
stamped with :func:`loadgen.core.clock.now_ns`; failures become the record's error kind.
"""

from __future__ import annotations

import http.client
import os
import platform
import select
import socket
import ssl
from typing import Any
from urllib.parse import urlsplit

import gevent
import orjson

from loadgen.core.clock import now_ns
from loadgen.core.errors import HeaderTimeout, ProtocolError
from loadgen.core.types import RequestRecord, RequestSpec
from loadgen.endpoints.http import ERROR_BODY_LIMIT, classify_exception, fail, fill_http_error
from loadgen.endpoints.openai import OpenAIConfig, OpenAIEndpoint, OpenAIStreamParser
from loadgen.endpoints.quota import parse_ratelimit_headers


class _Deadline(Exception):
    """The total per-request deadline expired."""


class _HeaderDeadline(Exception):
    """No response headers within the header timeout."""


class Prepared(tuple):
    """A request ready to go: (spec, body bytes, headers)."""


class KeepAlivePool:
    """Idle keep-alive ``http.client`` connections to one origin, over gevent sockets.

    One request per connection at a time; a new connection whenever none is idle
    (never a wait for a slot); at most ``idle_limit`` kept idle; a connection the
    server closed while idle is dropped before reuse (as urllib3 does).
    """

    def __init__(
        self, url: str, connect_timeout_s: float, read_timeout_s: float, verify_tls: bool, idle_limit: int
    ) -> None:
        p = urlsplit(url)
        self.https = p.scheme == "https"
        self.host, self.port = p.hostname or "127.0.0.1", p.port
        self.connect_timeout_s, self.read_timeout_s = connect_timeout_s, read_timeout_s
        self.idle: list[http.client.HTTPConnection] = []
        self.idle_limit = idle_limit
        self.ctx = None
        if self.https:
            self.ctx = ssl.create_default_context()
            if not verify_tls:
                self.ctx.check_hostname = False
                self.ctx.verify_mode = ssl.CERT_NONE
        self.opened = 0

    def get(self) -> tuple[http.client.HTTPConnection, int]:
        """A connection and the ns spent opening it (0 when an idle one was reused)."""
        while self.idle:
            conn = self.idle.pop()
            if conn.sock is not None and not _readable(conn.sock):
                return conn, 0
            conn.close()
        t = now_ns()
        if self.https:
            conn = http.client.HTTPSConnection(self.host, self.port, timeout=self.connect_timeout_s, context=self.ctx)
        else:
            conn = http.client.HTTPConnection(self.host, self.port, timeout=self.connect_timeout_s)
        conn.connect()
        conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn.sock.settimeout(self.read_timeout_s)
        self.opened += 1
        return conn, now_ns() - t

    def put(self, conn: http.client.HTTPConnection) -> None:
        if len(self.idle) < self.idle_limit:
            self.idle.append(conn)
        else:
            conn.close()


def _readable(sock: socket.socket) -> bool:
    """True when an idle socket has data or EOF waiting: the server closed or broke it."""
    r, _, _ = select.select([sock], [], [], 0)
    return bool(r)


class GeventClient:
    """Streams one OpenAI-compatible request into a record, over ``http.client`` on gevent sockets.

    Body, URL and headers come from :class:`OpenAIEndpoint` (with the fields the
    pre-flight of ``loadgen locust`` found accepted); the body is built by
    :meth:`prepare` before the request's start is stamped, and sent with its headers
    in one write. :meth:`send` never raises except ``GreenletExit`` (a stop):
    failures become the record's error kind.
    """

    def __init__(self, cfg: dict[str, Any], request_id_prefix: str) -> None:
        api_key = os.environ.get(cfg["api_key_env"]) if cfg.get("api_key_env") else None
        ocfg = OpenAIConfig(
            base_url=cfg["endpoint_url"], api=cfg["api"], model=cfg["model"], headers=dict(cfg["headers"]),
            api_key=api_key, extra_body=dict(cfg["extra_body"]), timeout_s=cfg["timeout_s"],
            connect_timeout_s=cfg["connect_timeout_s"], pool_limit=cfg["pool_limit"], verify_tls=cfg["verify_tls"],
        )  # fmt: skip
        self.ep = OpenAIEndpoint(ocfg)
        self.ep.accepted.update(cfg["accepted"])
        self.redact = self.ep.redactor
        self.chat = cfg["api"] == "chat"
        url = urlsplit(self.ep._url)  # proposed public: OpenAIEndpoint.request_url
        self.target = url.path + (f"?{url.query}" if url.query else "")
        self.headers = {**self.ep._headers, "User-Agent": "loadgen"}  # proposed: request_headers
        self.path = urlsplit(self.ep.url_for_record).path or "/"
        self.prefix = request_id_prefix
        self.timeout_s = cfg["timeout_s"]
        header_s = cfg.get("header_timeout_s")
        self.header_timeout_s = header_s if header_s is not None and header_s < self.timeout_s else None
        self.max_event_bytes = ocfg.max_event_bytes
        self.pool = KeepAlivePool(
            self.ep._url, cfg["connect_timeout_s"], cfg["timeout_s"], cfg["verify_tls"], cfg["pool_limit"]
        )

    def prepare(self, spec: RequestSpec) -> Prepared:
        headers = {**self.headers, "x-request-id": f"{self.prefix}-{spec.index}"}
        return Prepared((spec, orjson.dumps(self.ep.build_body(spec)), headers))

    def send(self, prepared: Prepared, rec: RequestRecord) -> None:
        _spec, payload, headers = prepared
        conn = None
        started = reusable = False
        try:
            with gevent.Timeout(self.timeout_s, _Deadline):
                conn, rec.connect_ns = self.pool.get()
                rec.connect_late_ns = rec.connect_ns  # connected at or after the scheduled time
                rec.connection_reused = rec.connect_ns == 0
                rec.sent_ns = now_ns()
                conn.request("POST", self.target, body=payload, headers=headers)  # one write
                with gevent.Timeout(self.header_timeout_s, _HeaderDeadline):  # None: no timer
                    resp = conn.getresponse()
                rec.response_headers_ns = now_ns()
                started = True
                rec.ratelimit = parse_ratelimit_headers(resp.headers)
                if resp.status != 200:
                    reusable = self._http_error(resp, rec)
                else:
                    reusable = self._read_stream(resp, rec)
        except ProtocolError as exc:
            fail(rec, "protocol", self.redact(str(exc)))
        except _Deadline:
            fail(rec, "timeout", f"no clean end within the {self.timeout_s:g} s request deadline")
        except _HeaderDeadline:
            fail(rec, "header_timeout", str(HeaderTimeout(self.header_timeout_s or 0.0)))
        except Exception as exc:  # transport errors become data, never escape
            kind = "timeout" if isinstance(exc, TimeoutError) else classify_exception(exc, response_started=started)
            detail = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            fail(rec, kind, self.redact(detail)[:300])
        finally:
            if conn is not None:
                if reusable and conn.sock is not None:  # http.client drops the socket of a closing response
                    self.pool.put(conn)
                else:
                    conn.close()  # a half-read connection is never reused

    def _http_error(self, resp: http.client.HTTPResponse, rec: RequestRecord) -> bool:
        """A non-200 answer, through :func:`loadgen.endpoints.http.fill_http_error` (the one
        non-200 handler of every HTTP client); True when the connection can be reused."""
        try:
            body = resp.read(ERROR_BODY_LIMIT)
        except Exception:
            body = b""
        fill_http_error(rec, resp.status, resp.headers, body, self.redact)
        return resp.isclosed()

    def _read_stream(self, resp: http.client.HTTPResponse, rec: RequestRecord) -> bool:
        """Feed each read, stamped on arrival, to the sans-IO parser of ``loadgen run``;
        True when the body was read to its end (the connection can be reused)."""
        parser = OpenAIStreamParser(rec, chat=self.chat, redact=self.redact, max_event_bytes=self.max_event_bytes)
        while True:
            data = resp.read1(65536)
            t = now_ns()
            if not data or parser.feed(data, t):
                break
        if parser.done:
            while resp.read1(65536):  # the rest (the chunked terminator), so the connection can be reused
                pass
        parser.finish(now_ns())
        return resp.isclosed()


def client_settings(cfg: dict[str, Any]) -> dict[str, Any]:
    """The client's settings as recorded in a result's conditions."""
    return {
        "library": f"http.client (Python {platform.python_version()}) on gevent {gevent.__version__} sockets (Locust)",
        "pool": "keep-alive; a new connection whenever none is idle (never a wait); headers and body in one write",
        "idle_connections_kept": cfg["pool_limit"],
        "connect_timeout_s": cfg["connect_timeout_s"],
        "request_timeout_s": cfg["timeout_s"],
        "header_timeout_s": cfg.get("header_timeout_s"),  # no response headers this long: header_timeout
        "retries": 0,
        "redirects": "not followed",
        "verify_tls": cfg["verify_tls"],
    }
