"""Locust integration: loadgen's LLM user, open-loop dispatcher and exact histograms inside Locust.

A leaf: Locust loads this file (``locust -f .../loadgen/locust.py``, started by
``loadgen locust``); nothing in loadgen imports it, because ``import locust``
monkey-patches the standard library with gevent. Configuration arrives as JSON in
``LOADGEN_LOCUST_CONFIG`` (master or single process); workers get it from the
master at each test start.

How it fits Locust's model:

* **Requests.** A request is sent with ``http.client`` over gevent sockets (a
  keep-alive pool that opens a connection rather than wait, connect timeout, a
  total deadline, no retries, no redirects; headers and body in one write), its body
  built by :class:`~loadgen.endpoints.openai.OpenAIEndpoint` and its stream read
  by the sans-IO :class:`~loadgen.endpoints.openai.OpenAIStreamParser` (the
  :class:`~loadgen.sse.SSEDecoder` and the event rules of ``loadgen run``); each
  read is stamped with :func:`loadgen.clock.now_ns`. Every request ends as one
  :class:`~loadgen.types.RequestRecord`; :func:`loadgen.metrics.compute` derives
  its metrics. Locust ``request`` events feed Locust's table: type ``E2E`` (one per
  request; a failure carries its error kind, so the failures tab counts by kind),
  ``TTFT`` and ``TPOT`` (one per sample), named by the endpoint path.
* **Endpoint.** Fixed by ``--endpoint`` for the whole session; the UI's *Host*
  field shows it (secrets removed) and changing it there does not redirect the load.
* **Closed loop (default).** Each Locust user sends a request, waits for its end,
  sends the next (no think time); the latency origin is the send. ``-u`` is the
  concurrency.
* **Open loop (``--rate``).** Users do not send (they idle). At test start the
  master (or the single process) fixes a common t0 and hands each worker a
  deterministic shard of the schedule (entry ``i`` to shard ``i mod n``). One
  dispatcher greenlet per process sleeps until ``t0 + offset`` of each entry
  (absolute deadlines) and spawns one greenlet per request; latency counts from the
  scheduled time. At most ``max_concurrency`` requests are in flight per process: a
  request that waited for a slot is marked ``pool_queued`` and the run is INVALID;
  a dispatcher more than 1 s behind stops sending and the run is INVALID.
* **Stopping** (``-t``, the stop button, Ctrl-C). Sending stops; requests in flight
  get Locust's ``--stop-timeout`` to finish, then are killed and recorded as
  ``cancelled``. Scheduled sends whose time had come are counted ``unsent``.
* **Distributed.** Workers ship their records (every 0.5 s) and, at the end, their
  HDR histograms (encoded) to the master, which aggregates the records exactly as
  ``loadgen run`` does and merges the histograms (bucket counts add).
* **Output.** The master (or single process) writes ``requests.jsonl``,
  ``result.json`` (the ``loadgen run`` schema plus a ``locust`` section),
  ``histograms.hlog`` and ``worker_histograms.json`` into the output directory; the
  web UI gets a *loadgen* tab (live, from the same aggregation) and ``/loadgen``.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import gc
import hashlib
import hmac
import http.client
import itertools
import json
import logging
import os
import platform
import resource
import select
import socket
import ssl
from array import array
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import gevent
import gevent.event
import gevent.lock
import orjson
from greenlet import GreenletExit
from locust import User, constant, events, task
from locust.runners import MasterRunner, WorkerRunner

from loadgen.clock import now_ns, wall_anchor
from loadgen.endpoints.base import (
    ERROR_BODY_LIMIT,
    classify_exception,
    fail,
    parse_ratelimit_headers,
    retry_after_from_headers,
)
from loadgen.endpoints.openai import OpenAIConfig, OpenAIEndpoint, OpenAIStreamParser
from loadgen.errors import ProtocolError
from loadgen.histograms import LatencyHistogram
from loadgen.measure import build_result, raise_fd_limit
from loadgen.metrics import RequestMetrics, compute
from loadgen.recordlog import RecordWriter, write_hlog, write_json
from loadgen.redact import Redactor
from loadgen.results import LATENCY_METRICS, Aggregator, summarize_hdr
from loadgen.runner import ClientStats, RunOutcome
from loadgen.runplan import LoadConfig
from loadgen.types import RequestRecord, RequestSpec, TokenEvent
from loadgen.workload.arrivals import arrival_offsets_ns
from loadgen.workload.prompts import new_salt
from loadgen.workload.replay import loop_offsets, replay_offsets
from loadgen.workload.spec import Workload, WorkloadOptions

log = logging.getLogger("loadgen.locust")

CONFIG_ENV = "LOADGEN_LOCUST_CONFIG"
TOKEN_ENV = "LOADGEN_LOCUST_WEB_TOKEN"
LEAD_IN_NS = 500_000_000  # open loop: t0 this far after the start (1 s more with workers)
SPIN_NS = 1_000_000  # the last 1 ms before a deadline is spent yielding, not sleeping
ABORT_LAG_NS = 1_000_000_000
SHIP_INTERVAL_S = 0.5
LOOP_PROBE_S = 0.005
FINAL_WAIT_EXTRA_S = 30.0
SCHEDULE_MARGIN_S = 0.25  # a -t schedule ends this long before the stop, so its last send is not cut
_COOKIE = "loadgen_token"


class _Deadline(Exception):
    """The total per-request deadline expired."""


# --------------------------------------------------------------------------- the client


class _Prepared(tuple):
    """A request ready to go: (spec, body bytes, headers)."""


class KeepAlivePool:
    """Idle keep-alive ``http.client`` connections to one origin, over gevent sockets.

    One request per connection at a time; a new connection whenever none is idle
    (never a wait for a slot); at most ``idle_limit`` kept idle; a connection the
    server closed while idle is dropped before reuse (as urllib3 does).
    """

    def __init__(self, url: str, connect_timeout_s: float, read_timeout_s: float, verify_tls: bool, idle_limit: int) -> None:
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
            conn: http.client.HTTPConnection = http.client.HTTPSConnection(
                self.host, self.port, timeout=self.connect_timeout_s, context=self.ctx
            )
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
        self.max_event_bytes = ocfg.max_event_bytes
        self.pool = KeepAlivePool(
            self.ep._url, cfg["connect_timeout_s"], cfg["timeout_s"], cfg["verify_tls"], cfg["pool_limit"]
        )

    def prepare(self, spec: RequestSpec) -> _Prepared:
        headers = {**self.headers, "x-request-id": f"{self.prefix}-{spec.index}"}
        return _Prepared((spec, orjson.dumps(self.ep.build_body(spec)), headers))

    def send(self, prepared: _Prepared, rec: RequestRecord) -> None:
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
        """A non-200 answer: ``rate_limited`` (429, Retry-After kept) or ``http_error``, as
        :func:`loadgen.endpoints.base.record_http_error` does for aiohttp."""
        rec.http_status = resp.status
        try:
            body = resp.read(ERROR_BODY_LIMIT)
        except Exception:
            body = b""
        rec.end_ns = now_ns()
        text = self.redact(body.decode("utf-8", "replace").strip().replace("\n", " "))[:300]
        if resp.status == 429:
            rec.retry_after_s = retry_after_from_headers(resp.headers)
            rec.error_kind = "rate_limited"
        else:
            rec.error_kind = "http_error"
        rec.status = "error"
        rec.error_detail = self.redact(f"HTTP {resp.status}: {text}")
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
        "retries": 0,
        "redirects": "not followed",
        "verify_tls": cfg["verify_tls"],
    }


# --------------------------------------------------------------------------- records on the wire

_FIELDS = [f.name for f in dataclasses.fields(RequestRecord) if f.name != "events"]
_TIMES = ("scheduled_ns", "sent_ns", "end_ns", "response_headers_ns")


def pack_record(rec: RequestRecord) -> list[Any]:
    """A record as plain lists (msgpack-able), for a worker -> master message."""
    return [[getattr(rec, f) for f in _FIELDS], [[e.t_ns, e.text, e.answer, e.usage_completion_tokens] for e in rec.events]]


def unpack_record(obj: list[Any], shift_ns: int = 0) -> RequestRecord:
    """Inverse of :func:`pack_record`; ``shift_ns`` maps the worker's clock onto the master's."""
    fields, evs = obj
    rec = RequestRecord(**dict(zip(_FIELDS, fields)))
    if shift_ns:
        for name in _TIMES:
            v = getattr(rec, name)
            if v is not None:
                setattr(rec, name, v + shift_ns)
        for a in rec.attempts or ():
            for k in ("sent_ns", "end_ns", "response_headers_ns"):
                if a.get(k) is not None:
                    a[k] += shift_ns
    rec.events = [TokenEvent(t + shift_ns, txt, ans, use) for t, txt, ans, use in evs]
    return rec


# --------------------------------------------------------------------------- one process's load


def workload_options(cfg: dict[str, Any], salt: str) -> WorkloadOptions:
    return WorkloadOptions(**{**cfg["workload"], "api": cfg["api"], "salt": salt})


class LoadProcess:
    """This process's part of one test: the client, the workload, open-loop dispatch, records.

    ``sink(rec, m)`` receives every finished record (single process); on a worker
    records are packed into ``outbox`` for the master instead.
    """

    def __init__(self, env: Any, plan: dict[str, Any], sink: Callable[[RequestRecord, RequestMetrics], None] | None) -> None:
        cfg = self.cfg = plan["config"]
        self.env = env
        self.plan = plan
        self.shard, self.shards = plan["shard"], plan["shards"]
        self.sink = sink
        self.workload = Workload(workload_options(cfg, plan["salt"]))
        self.tokenizer = self.workload.tokenizer
        self.client = GeventClient(cfg, plan["run_id"])
        self.hist = Aggregator()  # this process's own histograms (shipped encoded)
        self.outbox: list[list[Any]] = []
        self.counter = itertools.count()
        self.stop_event = gevent.event.Event()
        self.inflight: dict[int, gevent.Greenlet] = {}
        self.aborted_reason: str | None = None
        self.dispatched = self.unsent = self.not_reached = self.cap_waits = 0
        self.stop_ns: int | None = None
        self.loop_lag_ms = array("f")
        self.t0_ns = _local_mono(plan)
        self.ru0 = resource.getrusage(resource.RUSAGE_SELF)
        self.w0 = now_ns()
        self.greenlets = [gevent.spawn(self._loop_monitor)]
        self._rest: Iterator[tuple[int, int, Callable[[], RequestSpec]]] | None = None
        if cfg["mode"] == "open":
            self.cap = gevent.lock.BoundedSemaphore(cfg["max_concurrency"])
            self.greenlets.append(gevent.spawn(self._dispatch))
        if sink is None:
            self.greenlets.append(gevent.spawn(self._ship_loop))

    # -- one request ------------------------------------------------------------------

    def request(self, prepared: _Prepared, scheduled_ns: int, queued: bool = False) -> None:
        """Send one prepared request and finish its record; a kill records it as ``cancelled``."""
        spec = prepared[0]
        rec = RequestRecord(
            index=spec.index, phase="measure", scheduled_ns=scheduled_ns,
            requested_input_tokens=spec.requested_input_tokens, requested_output_tokens=spec.requested_output_tokens,
            prefix_group=spec.prefix_group, session_id=spec.session_id, pool_queued=queued,
        )  # fmt: skip
        try:
            self.client.send(prepared, rec)
        except GreenletExit:
            rec.status, rec.error_kind = "error", "cancelled"
            rec.error_detail = "in flight when the test stopped, after the stop timeout"
            rec.end_ns = now_ns()
            self.finish(rec)
            raise
        except Exception as exc:  # a bug must not lose the record
            fail(rec, rec.error_kind or "protocol", f"internal error: {type(exc).__name__}: {exc}")
        self.finish(rec)

    def finish(self, rec: RequestRecord) -> None:
        m = compute(rec, self.tokenizer, self.cfg["origin"])
        self.hist.add(rec, m)
        fire_request_events(self.env, rec, m, self.client.path)
        if self.sink is not None:
            self.sink(rec, m)
        else:
            self.outbox.append(pack_record(rec))

    def closed_loop_request(self) -> None:
        i = self.shard + self.shards * next(self.counter)
        prepared = self.client.prepare(self.workload.spec(i))
        self.request(prepared, now_ns())  # the user sends once its request is ready

    # -- open loop ----------------------------------------------------------------------

    def _entries(self) -> Iterator[tuple[int, int, Callable[[], RequestSpec]]]:
        """(offset_ns, index, spec builder) of this shard, in schedule order; specs built lazily.

        The offsets are those of :meth:`Workload.schedule` (arrival process, or a trace's
        replay plan); specs are built one ahead of their send, not all before t0.
        """
        cfg, wl = self.cfg, self.workload
        o = wl.opts
        duration = cfg["duration_s"] if cfg["requests"] is None else None
        if wl.trace is not None:
            target = o.trace_rate_rps if o.trace_rate_rps is not None else cfg["rate"]
            plan = replay_offsets(wl.trace, spread=o.trace_spread, time_scale=o.trace_time_scale, rate_rps=target)
            until = None if duration is None else round(duration * 1e9)
            offs, rows = loop_offsets(plan, count=cfg["requests"], until_ns=until, loop=o.trace_loop)
            n = max(len(wl.trace), 1)
            for i in range(self.shard, len(offs), self.shards):
                yield int(offs[i]), i, (lambda i=i: wl.spec(i, int(rows[i]), i // n))
            return
        offsets = arrival_offsets_ns(
            cfg["arrival"], cfg["rate"], count=cfg["requests"], duration_s=duration,
            seed=o.seed, burstiness=cfg["burstiness"],
        )  # fmt: skip
        for i in range(self.shard, len(offsets), self.shards):
            yield offsets[i], i, (lambda i=i: wl.spec(i))

    def _dispatch(self) -> None:
        entries = self._entries()
        t0 = self.t0_ns
        prepare = self.client.prepare
        item = next(entries, None)
        ready = prepare(item[2]()) if item else None  # built ahead of its deadline
        while item is not None and ready is not None:
            off, idx, _ = item
            deadline = t0 + off
            _sleep_until(deadline, self.stop_event)
            if self.stop_event.is_set():
                break
            late = now_ns() - deadline
            if late > ABORT_LAG_NS:
                self.aborted_reason = (
                    f"the dispatcher fell {late / 1e9:.2f} s behind its schedule at request {idx}; it stopped sending"
                )
                break
            queued = not self.cap.acquire(blocking=False)
            if queued:  # the in-flight cap is exhausted: a client limit, the run is INVALID
                self.cap_waits += 1
                got = False
                while not got and not self.stop_event.is_set():
                    got = self.cap.acquire(timeout=0.05)
                if not got:
                    break
            self.dispatched += 1
            self.inflight[idx] = gevent.spawn(self._one, ready, deadline, queued)
            gevent.sleep(0)  # let it send before the next request is built
            item = next(entries, None)
            ready = prepare(item[2]()) if item else None
        self._rest = entries if item is None else itertools.chain([item], entries)

    def _one(self, prepared: _Prepared, deadline: int, queued: bool) -> None:
        try:
            self.request(prepared, deadline, queued)
        finally:
            self.cap.release()
            self.inflight.pop(prepared[0].index, None)

    # -- stop and report ----------------------------------------------------------------

    def stop(self, stop_timeout_s: float) -> None:
        """Stop sending; in-flight open-loop requests get ``stop_timeout_s``, then are cancelled."""
        self.stop_ns = now_ns()
        self.stop_event.set()
        if self.cfg["mode"] == "open":
            self.greenlets[1].join(timeout=5)
            if self._rest is not None:
                for off, _, _ in self._rest:
                    if self.t0_ns + off <= self.stop_ns:
                        self.unsent += 1
                    else:
                        self.not_reached += 1
            pending = list(self.inflight.values())
            if pending:
                gevent.joinall(pending, timeout=stop_timeout_s)
                gevent.killall([g for g in pending if not g.dead], block=True, timeout=10)

    def report(self) -> dict[str, Any]:
        """What the master needs besides the records: counts, client facts, encoded histograms."""
        for g in self.greenlets[:1]:
            g.kill(block=False)
        ru = resource.getrusage(resource.RUSAGE_SELF)
        return {
            "requests": self.hist.requests,
            "hist": {name: h.to_state() for name, h in self.hist.hist.items()},
            "cpu_s": (ru.ru_utime - self.ru0.ru_utime) + (ru.ru_stime - self.ru0.ru_stime),
            "wall_s": (now_ns() - self.w0) / 1e9,
            "loop_lag_ms": self.loop_lag_ms.tobytes(),
            "aborted_reason": self.aborted_reason,
            "dispatched": self.dispatched,
            "unsent": self.unsent,
            "not_reached": self.not_reached,
            "cap_waits": self.cap_waits,
            "anchor": _anchor(),
        }

    def ship(self, final: bool = False) -> None:
        runner = self.env.runner
        if self.outbox:
            batch, self.outbox = self.outbox, []
            runner.send_message("loadgen_records", {"records": batch, "anchor": _anchor()})
        if final:
            runner.send_message("loadgen_final", self.report())

    def _ship_loop(self) -> None:
        while not self.stop_event.is_set():
            self.stop_event.wait(SHIP_INTERVAL_S)
            if not self.stop_event.is_set():
                self.ship()

    def _loop_monitor(self) -> None:
        lags = self.loop_lag_ms
        while len(lags) < 2_000_000:
            t = now_ns()
            gevent.sleep(LOOP_PROBE_S)
            lags.append(max((now_ns() - t) / 1e6 - LOOP_PROBE_S * 1e3, 0.0))


def _sleep_until(deadline_ns: int, stop: gevent.event.Event) -> None:
    """Sleep until an absolute deadline (never a relative interval); wakes early on a stop."""
    delay = deadline_ns - now_ns()
    if delay > 20_000_000:
        if stop.wait((delay - SPIN_NS) / 1e9):
            return
        delay = deadline_ns - now_ns()
    if delay > SPIN_NS:
        gevent.sleep((delay - SPIN_NS) / 1e9)
    while now_ns() < deadline_ns:
        gevent.sleep(0)


def _anchor() -> dict[str, Any]:
    mono, wall = wall_anchor()
    return {"host": socket.gethostname(), "mono_ns": mono, "wall_ns": wall}


def _local_mono(plan: dict[str, Any]) -> int:
    """The plan's t0 on this process's monotonic clock (the same clock on the same host)."""
    if plan["host"] == socket.gethostname():
        return plan["t0_mono_ns"]
    mono, wall = wall_anchor()
    return plan["t0_wall_ns"] - wall + mono


def fire_request_events(env: Any, rec: RequestRecord, m: RequestMetrics, name: str) -> None:
    """Locust rows: E2E per request (failures by error kind), TTFT and TPOT per sample."""
    fire = env.events.request.fire
    if not rec.ok:
        kind = rec.error_kind or "unknown"
        if rec.http_status is not None and kind == "http_error":
            kind = f"http_error: HTTP {rec.http_status}"
        fire(request_type="E2E", name=name, response_time=(m.error_e2e_ns or 0) / 1e6, response_length=0,
             exception=kind, context={})  # fmt: skip
        return
    if m.e2e_ns is None:
        fire(request_type="E2E", name=name, response_time=0.0, response_length=0, exception="zero_output", context={})
        return
    fire(request_type="E2E", name=name, response_time=m.e2e_ns / 1e6, response_length=m.output_tokens,
         exception=None, context={})  # fmt: skip
    if m.ttft_ns is not None:
        fire(request_type="TTFT", name=name, response_time=m.ttft_ns / 1e6, response_length=0, exception=None, context={})
    if m.tpot_ns is not None:
        fire(request_type="TPOT", name=name, response_time=m.tpot_ns / 1e6, response_length=0, exception=None, context={})


# --------------------------------------------------------------------------- master side


class Collector:
    """One test's aggregation on the master (or single process): the ``loadgen run`` path.

    Records arrive once each (``add``/``add_packed``); ``finalize`` writes
    ``result.json``, ``requests.jsonl`` (written as records arrive),
    ``histograms.hlog`` and ``worker_histograms.json``.
    """

    def __init__(self, env: Any, cfg: dict[str, Any], plan: dict[str, Any], out_dir: Path, workers: list[str]) -> None:
        self.env, self.cfg, self.plan, self.out_dir = env, cfg, plan, out_dir
        out_dir.mkdir(parents=True, exist_ok=True)
        self.started_at = dt.datetime.now(dt.UTC)
        self.t0_ns = plan["t0_mono_ns"]
        self.t0_wall_ns = plan["t0_wall_ns"]
        self.agg = Aggregator()
        self.tokenizer = None
        if cfg["workload"].get("tokenizer"):
            from loadgen.workload.tokenizer import load_tokenizer

            self.tokenizer = load_tokenizer(cfg["workload"]["tokenizer"])
        self.fh = open(out_dir / "requests.jsonl", "wb")
        self.writer = RecordWriter(
            self.fh, self.t0_ns, save_text=cfg["save_text"], token_lists=cfg["token_lists"], redactor=Redactor()
        )
        self.expected = list(workers)  # worker ids that were handed a shard
        self.finals: dict[str, dict[str, Any]] = {}
        self.received: dict[str, int] = {}
        self.result: dict[str, Any] | None = None
        self.sent_sched: list[int] = []  # [count, first, last] scheduled_ns of sent requests
        self._rows: tuple[int, list[dict[str, Any]]] | None = None

    def add(self, rec: RequestRecord, m: RequestMetrics | None = None) -> None:
        if m is None:
            m = compute(rec, self.tokenizer, self.cfg["origin"])
        self.agg.add(rec, m)
        self.writer.write(rec, m)
        if rec.sent_ns is not None:
            ss = self.sent_sched
            if not ss:
                ss.extend((0, rec.scheduled_ns, rec.scheduled_ns))
            ss[0] += 1
            ss[1] = min(ss[1], rec.scheduled_ns)
            ss[2] = max(ss[2], rec.scheduled_ns)

    def add_packed(self, worker: str, data: dict[str, Any]) -> None:
        shift = _shift(data["anchor"])
        for obj in data["records"]:
            self.add(unpack_record(obj, shift))
        self.received[worker] = self.received.get(worker, 0) + len(data["records"])

    def wait_for_finals(self, timeout_s: float) -> None:
        """Block (cooperatively) until every still-connected worker has sent its final report."""
        runner = self.env.runner
        deadline = now_ns() + int(timeout_s * 1e9)
        while now_ns() < deadline:
            connected = {c.id for c in runner.clients.values() if c.state != "missing"}
            if all(w in self.finals or w not in connected for w in self.expected):
                return
            gevent.sleep(0.05)

    def finalize(self, processes: list[dict[str, Any]], interrupted: bool) -> dict[str, Any]:
        self.fh.close()
        cfg = self.cfg
        open_loop = cfg["mode"] == "open"
        missing = [w for w in self.expected if w not in self.finals]
        aborted = [p["aborted_reason"] for p in processes if p.get("aborted_reason")]
        if missing:
            aborted.append(f"{len(missing)} worker(s) sent no final report: their last records may be missing")
        busiest = max(processes, key=lambda p: p["cpu_s"] / max(p["wall_s"], 1e-9), default=None)
        lags = array("f")
        for p in processes:
            lags.frombytes(p["loop_lag_ms"])
        client = ClientStats(
            cpu_s=busiest["cpu_s"] if busiest else 0.0, wall_s=busiest["wall_s"] if busiest else 0.0,
            loop_lag_ms=list(lags), open_loop=open_loop, aborted_reason="; ".join(aborted) or None,
        )  # fmt: skip
        if open_loop:
            n, first, last = self.sent_sched or (0, 0, 0)
            if n >= 2 and last > first:  # the schedule's own rate over the requests that were sent
                client.schedule_realized_rps = (n - 1) / ((last - first) / 1e9)
        unsent = sum(p["unsent"] for p in processes)
        self.agg.unsent = unsent
        outcome = RunOutcome(
            t0_ns=self.t0_ns, t0_wall_ns=self.t0_wall_ns, interrupted=interrupted, unsent=unsent,
            unsent_warmup=0, client=client, end_ns=now_ns(),
        )  # fmt: skip
        users = max(self.env.runner.target_user_count or 0, 1)
        load = LoadConfig(rate_rps=cfg["rate"], concurrency=None if open_loop else users, origin=cfg["origin"])
        result = build_result(
            self.agg, outcome, load, _Described(cfg), started_at=self.started_at,
            config_record=cfg["config_record"], fd_limit=raise_fd_limit(),
        )  # fmt: skip
        merged = {name: LatencyHistogram(name) for name in LATENCY_METRICS}
        for p in processes:
            for name, st in p["hist"].items():
                merged[name].merge(LatencyHistogram.from_state(st))
        result["locust"] = {
            "mode": "open loop" if open_loop else "closed loop",
            "arrivals": arrivals_text(cfg, self.env.runner.target_user_count),
            "locust_version": __import__("locust").__version__,
            "stop_timeout_s": self.env.stop_timeout,
            "users": self.env.runner.target_user_count,
            "processes": len(processes),
            "workers": [
                {"id": w, "records_received": self.received.get(w, 0), "final_report": w in self.finals,
                 "hist_counts": {k: v["count"] for k, v in self.finals[w]["hist"].items()} if w in self.finals else None}
                for w in self.expected
            ],  # fmt: skip
            "merged_worker_histograms_ms": {k: summarize_hdr(h) for k, h in merged.items()},
            "locust_stats_at_stop": _locust_stats(self.env),
            "note": "latency_ms comes from loadgen's records; Locust's own table rounds response times "
            "(to 10 ms above 100 ms, to 100 ms above 1 s) and is kept here for comparison only",
        }
        if open_loop:
            result["locust"]["schedule"] = {
                "rate_rps": cfg["rate"], "arrival": "trace" if cfg["workload"].get("trace") else cfg["arrival"],
                "dispatched": sum(p["dispatched"] for p in processes), "unsent": unsent,
                "not_reached_at_stop": sum(p["not_reached"] for p in processes),
                "max_concurrency_per_process": cfg["max_concurrency"],
                "inflight_cap_waits": sum(p["cap_waits"] for p in processes),
            }  # fmt: skip
        write_json(self.out_dir / "result.json", result)
        write_hlog(self.out_dir / "histograms.hlog", self.agg, outcome)
        hists = {w: self.finals[w]["hist"] for w in self.finals} if self.finals else {"local": p["hist"] for p in processes}  # noqa: B035 - one local process
        write_json(
            self.out_dir / "worker_histograms.json",
            {"unit": "us", "encoding": "HdrHistogram V2 base64", "workers": hists},
        )
        self.result = result
        return result

    def live_rows(self) -> list[dict[str, Any]]:
        """The web UI's loadgen table (recomputed at most once a second)."""
        now = now_ns()
        if self._rows is not None and now - self._rows[0] < 1_000_000_000:
            return self._rows[1]
        lat = self.agg.latency_ms() if self.result is None else self.result["latency_ms"]
        rows = [_row(label, lat[key]) for key, label in _ROWS]
        c = self.agg.counts()
        kinds = ", ".join(f"{k} {v}" for k, v in c["errors_by_kind"].items())
        rows.append({"metric": f"requests: {c['completed']} ok, {c['failed']} failed" + (f" ({kinds})" if kinds else "")})
        if self.result is not None:
            v = self.result["validity"]
            bad = ", ".join(c["name"] for c in v["checks"] if c["group"] == "generator" and not c["ok"])
            verdict = "VALID" if v["valid"] else f"INVALID ({bad})"
            rows.append({"metric": f"result: {verdict}, written to {self.out_dir / 'result.json'}"})
        self._rows = (now, rows)
        return rows


_ROWS = (("ttft", "TTFT"), ("itl", "ITL (per token, HDR)"), ("inter_chunk", "inter-chunk (HDR)"),
         ("tpot", "TPOT"), ("e2e", "E2E"), ("schedule_lag", "schedule lag"))  # fmt: skip


def _row(label: str, d: dict[str, Any]) -> dict[str, Any]:
    def f(v: Any) -> str:
        return "" if v is None else f"{v:.2f}"

    return {"metric": label, "count": d["count"], **{k: f(d.get(k)) for k in ("mean", "p50", "p90", "p99", "p999", "max")}}


class _Described:
    """The endpoint as ``build_result`` wants it: the pre-flight's description, this client's settings."""

    def __init__(self, cfg: dict[str, Any]) -> None:
        self.desc = {**cfg["describe"], "client": client_settings(cfg)}

    def describe(self) -> dict[str, Any]:
        return self.desc


def _shift(anchor: dict[str, Any]) -> int:
    """Offset from a worker's monotonic clock to ours: 0 on the same host, else via wall clocks."""
    if anchor["host"] == socket.gethostname():
        return 0
    mono, wall = wall_anchor()
    return (anchor["wall_ns"] - anchor["mono_ns"]) - (wall - mono)


def _locust_stats(env: Any) -> list[dict[str, Any]]:
    out = []
    for (name, method), e in sorted(env.runner.stats.entries.items()):
        out.append({
            "type": method, "name": name, "requests": e.num_requests, "failures": e.num_failures,
            "avg_ms": e.avg_response_time, "median_ms": e.median_response_time,
            "p95_ms": e.get_response_time_percentile(0.95), "p99_ms": e.get_response_time_percentile(0.99),
            "max_ms": e.max_response_time,
        })  # fmt: skip
    return out


def arrivals_text(cfg: dict[str, Any], users: int | None) -> str:
    if cfg["mode"] == "open":
        src = "a trace" if cfg["workload"].get("trace") else f"{cfg['arrival']} arrivals at {cfg['rate']:g} req/s"
        return (f"open loop: {src}, independent of responses; latency from the scheduled time; "
                f"one dispatcher per process, at most {cfg['max_concurrency']} in flight per process; "
                "Locust users idle")  # fmt: skip
    return (f"closed loop: {users if users is not None else 'N'} Locust users, each sends its next request when "
            "the last ends (Locust's default); latency from the send")  # fmt: skip


# --------------------------------------------------------------------------- Locust wiring


class _State:
    role = "local"
    config: dict[str, Any] | None = None
    process: LoadProcess | None = None
    collector: Collector | None = None
    runs = 0
    quitting = False


S = _State()


class LLMUser(User):
    """Closed loop: one streamed request at a time, the next as soon as the last ends.

    In open-loop mode the schedule sends and users idle (see the module docstring).
    """

    wait_time = constant(0)

    @task
    def generate(self) -> None:
        proc = S.process
        if proc is None or proc.cfg["mode"] == "open":
            gevent.sleep(1.0)
            return
        proc.closed_loop_request()


def _config_from_env() -> dict[str, Any]:
    text = os.environ.get(CONFIG_ENV)
    if not text:
        raise SystemExit(f"loadgen's Locust file needs its configuration: start it with `loadgen locust` "
                         f"({CONFIG_ENV} is not set)")  # fmt: skip
    return json.loads(text)


def _new_plan(cfg: dict[str, Any], lead_ns: int) -> dict[str, Any]:
    salt = cfg["workload"].get("salt") or new_salt()
    mono, wall = wall_anchor()
    t0 = mono + (lead_ns if cfg["mode"] == "open" else 0)
    return {
        "config": cfg, "run_id": os.urandom(6).hex(), "salt": salt, "shard": 0, "shards": 1,
        "t0_mono_ns": t0, "t0_wall_ns": wall + (t0 - mono), "host": socket.gethostname(),
    }  # fmt: skip


def _out_dir(cfg: dict[str, Any]) -> Path:
    base = Path(cfg["out_dir"])
    S.runs += 1
    return base if S.runs == 1 else base / f"run-{S.runs}"


def _schedule_span(env: Any, cfg: dict[str, Any], lead_ns: int) -> dict[str, Any]:
    """Open loop without --requests/--duration: the schedule fills Locust's -t after the lead-in
    (else one hour, ended by the stop button)."""
    if cfg["mode"] == "open" and cfg["requests"] is None and cfg["duration_s"] is None:
        rt = getattr(env.parsed_options, "run_time", None) if env.parsed_options else None
        cfg = {**cfg, "duration_s": max(float(rt) - lead_ns / 1e9 - SCHEDULE_MARGIN_S, 0.001) if rt else 3600.0}
    return cfg


@events.init.add_listener
def _on_init(environment: Any, **_: Any) -> None:
    runner = environment.runner
    if isinstance(runner, WorkerRunner):
        S.role = "worker"
        runner.register_message("loadgen_start", _on_start_message)
        runner.register_message("loadgen_stop", _on_stop_message)
        return
    S.role = "master" if isinstance(runner, MasterRunner) else "local"
    S.config = _config_from_env()
    if S.role == "master":
        runner.register_message("loadgen_records", _on_records_message)
        runner.register_message("loadgen_final", _on_final_message)
    if environment.web_ui is not None:
        _install_web_ui(environment)
    _refresh_loop_clock()


def _refresh_loop_clock() -> None:
    """Re-read the gevent loop's cached time after blocking work (imports, set-up).

    libev/libuv time timers from the time cached at the loop's last iteration: after
    seconds of blocking start-up, Locust's ``-t`` timer would otherwise fire early.
    """
    gevent.get_hub().loop.update_now()


_GC: dict[str, Any] = {}


def _gc_quiet(on: bool) -> None:
    """Collect and freeze the start-up heap while a test runs, so cyclic GC passes over it do
    not stall the hub for tens of ms (as :mod:`loadgen.runner` does for its event loop)."""
    if on and not _GC:
        _GC["threshold"] = gc.get_threshold()
        gc.collect()
        gc.freeze()
        gc.set_threshold(max(_GC["threshold"][0], 50_000), 50, 1000)
    elif not on and _GC:
        gc.set_threshold(*_GC.pop("threshold"))
        gc.unfreeze()


@events.quitting.add_listener
def _on_quitting(environment: Any, **_: Any) -> None:
    S.quitting = True


@events.test_start.add_listener
def _on_test_start(environment: Any, **_: Any) -> None:
    if S.role == "worker":
        return  # the shard came with loadgen_start, just before the spawn message
    _gc_quiet(True)
    runner = environment.runner
    lead = LEAD_IN_NS if S.role == "local" else LEAD_IN_NS + 1_000_000_000
    cfg = _schedule_span(environment, S.config, lead)  # type: ignore[arg-type]
    if S.role == "local":
        plan = _new_plan(cfg, lead)
        S.collector = Collector(environment, cfg, plan, _out_dir(cfg), [])
        S.process = LoadProcess(environment, plan, S.collector.add)
        _refresh_loop_clock()
        return
    active = [c.id for c in runner.clients.values() if c.state in ("ready", "running", "spawning")]
    workers = sorted(active, key=runner.get_worker_index)
    plan = _new_plan(cfg, lead)
    S.collector = Collector(environment, cfg, plan, _out_dir(cfg), workers)
    for k, wid in enumerate(workers):
        runner.send_message("loadgen_start", {**plan, "shard": k, "shards": len(workers)}, client_id=wid)
    _refresh_loop_clock()


@events.test_stopping.add_listener
def _on_test_stopping(environment: Any, **_: Any) -> None:
    if S.role == "master":
        if S.collector is not None:
            environment.runner.send_message("loadgen_stop", {})
            S.collector.wait_for_finals((environment.stop_timeout or 0) * 2 + FINAL_WAIT_EXTRA_S)
        return
    if S.process is not None:
        S.process.stop(environment.stop_timeout or 0)


@events.test_stop.add_listener
def _on_test_stop(environment: Any, **_: Any) -> None:
    proc, S.process = S.process, None
    if S.role == "worker":
        if proc is not None:
            proc.stop_event.set()
            proc.ship(final=True)
        _gc_quiet(False)
        return
    col = S.collector
    if col is None or col.result is not None:
        return
    if S.role == "local":
        processes = [proc.report()] if proc is not None else []
    else:
        processes = list(col.finals.values())
    result = col.finalize(processes, interrupted=S.quitting)
    _gc_quiet(False)
    v = result["validity"]
    log.info("loadgen: %s, result written to %s", "VALID" if v["valid"] else "INVALID", col.out_dir / "result.json")


def _on_start_message(environment: Any, msg: Any, **_: Any) -> None:
    if S.process is not None:
        S.process.stop(0)
    _gc_quiet(True)
    S.process = LoadProcess(environment, msg.data, None)
    _refresh_loop_clock()


def _on_stop_message(environment: Any, msg: Any, **_: Any) -> None:
    if S.process is not None:
        environment.runner.stop()  # test_stopping -> drain -> users stopped -> test_stop -> final report
    if S.process is not None:  # stop() found nothing running (no users spawned): drain and report anyway
        S.process.stop(environment.stop_timeout or 0)
        _on_test_stop(environment)


def _on_records_message(environment: Any, msg: Any, **_: Any) -> None:
    if S.collector is not None:
        S.collector.add_packed(msg.node_id, msg.data)


def _on_final_message(environment: Any, msg: Any, **_: Any) -> None:
    if S.collector is not None:
        S.collector.finals[msg.node_id] = msg.data


# --------------------------------------------------------------------------- web UI


def _install_web_ui(env: Any) -> None:
    from flask import Response, jsonify, request

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
