"""Locust integration: loadgen's LLM user, open-loop dispatcher and exact histograms inside Locust.

A leaf: Locust loads :mod:`loadgen.locust.locustfile` (``locust -f
.../loadgen/locust/locustfile.py``, started by ``loadgen locust``); nothing in loadgen
imports this package, because ``import locust`` monkey-patches the standard library
with gevent. This ``__init__`` imports nothing, so ``import loadgen.locust`` alone
patches nothing; its modules import gevent (and ``locustfile`` imports Locust).
Configuration arrives as JSON in ``LOADGEN_LOCUST_CONFIG`` (master or single
process); workers get it from the master at each test start, without its secrets
(:mod:`~loadgen.locust.channel`: they bring their own).

How it fits Locust's model:

* **Requests.** A request is sent with ``http.client`` over gevent sockets (a
  keep-alive pool that opens a connection rather than wait, connect timeout, a
  total deadline, no retries, no redirects; headers and body in one write), its body
  built by :class:`~loadgen.endpoints.openai.OpenAIEndpoint` and its stream read
  by the sans-IO :class:`~loadgen.endpoints.openai.OpenAIStreamParser` (the
  :class:`~loadgen.core.sse.SSEDecoder` and the event rules of ``loadgen run``); each
  read is stamped with :func:`loadgen.core.clock.now_ns`. Every request ends as one
  :class:`~loadgen.core.types.RequestRecord`; :func:`loadgen.core.metrics.compute` derives
  its metrics. One Locust ``request`` event per request feeds Locust's table (type
  ``E2E``, named by the endpoint path, its response time the E2E latency; a failure
  carries its error kind, so the failures tab counts by kind): Locust's request count
  and RPS are the real ones. TTFT, TPOT and ITL are loadgen metrics, in the loadgen tab.
* **Endpoint.** Fixed by ``--endpoint`` for the whole session; the UI's *Host*
  field shows it (secrets removed) and changing it there does not redirect the load.
* **Closed loop (default).** Each Locust user sends a request, waits for its end,
  sends the next (no think time); the latency origin is the send. ``-u`` is the
  concurrency.
* **Sessions (``--sessions SOURCE``).** A Locust user is a session: each user runs one
  multi-turn session at a time and starts the next when it ends (``-u`` is the number of
  concurrent sessions); a turn is due at the previous reply's end + its delay, latency from
  that due time; Locust's table has one row per turn depth (``turn K``); ``result.json`` gets
  ``loadgen run --sessions``'s ``sessions`` block (:mod:`~loadgen.locust.session_user`).
* **Open loop (``--rate``).** Users do not send (they idle). At test start the
  master (or the single process) fixes a common t0 and hands each worker a
  deterministic shard of the schedule (entry ``i`` to shard ``i mod n``). One
  dispatcher greenlet per process sleeps until ``t0 + offset`` of each entry
  (absolute deadlines) and spawns one greenlet per request; latency counts from the
  scheduled time. At most ``max_concurrency`` requests are in flight per process: a
  request that waited for a slot is marked ``pool_queued`` with the wait as its
  ``throttle_ns`` (every slot held a request in flight at the server: the warning
  ``server_saturated``, not the generator's lag); a dispatcher more than 1 s behind, the
  cap's waits excepted, stops sending and the run is INVALID.
* **Stopping** (``-t``, the stop button, Ctrl-C). Sending stops; requests in flight
  get Locust's ``--stop-timeout`` to finish, then are killed and recorded as
  ``cancelled``. Scheduled sends whose time had come are counted ``unsent``.
* **Distributed.** Workers ship their records (every 0.2 s, the master renewing each one's lease as it hears
  from it: a lost worker's shard is split into lost with the client and unsent, :mod:`loadgen.spread.lease`)
  and, at the end, their
  HDR histograms (encoded) to the master, which aggregates the records exactly as
  ``loadgen run`` does and merges the histograms (bucket counts add). The master's port
  binds 127.0.0.1 unless told otherwise (then with a shared token each worker proves);
  the master accepts records only from workers it handed a shard.
* **Output.** The master (or single process) writes ``requests.jsonl``,
  ``result.json`` (the ``loadgen run`` schema plus a ``locust`` section),
  ``histograms.hlog`` and ``worker_histograms.json`` into the output directory; the
  web UI gets a *loadgen* tab (live, from the same aggregation: the metrics table,
  state with "draining" after a stop, SLO verdict, throughput, charts over time) and
  ``/loadgen``.
* **Start form.** The web UI's form takes loadgen's rate (empty: closed loop), arrival,
  input/output tokens and SLO under *Custom parameters* (Locust's custom arguments,
  defaulting to the command line's values); a wrong value is refused with one line.

Modules (each imports only those above it):

* ``channel``: what goes to a worker (the configuration without secrets, the worker's own
  credentials filled in, the shared token's challenge) (pure).
* ``webguard``: the web UI against cross-site control (no wildcard CORS, Host check, CSRF).
* ``client``: :class:`~loadgen.locust.client.KeepAlivePool`,
  :class:`~loadgen.locust.client.GeventClient`, ``client_settings``.
* ``sessions``: ``--sessions``: the plan's sessions shared out to the users, one session's
  causal turns in its user's greenlet.
* ``collect``: records on the wire (``pack_record``/``unpack_record``, clock anchors)
  and :class:`~loadgen.locust.collect.LocustCollector` (aggregation, ``result.json``).
* ``dispatch``: :class:`~loadgen.locust.dispatch.LoadProcess` (closed loop, open-loop
  dispatcher, stop, shipping to the master).
* ``form``: loadgen's fields of the start form (custom arguments), their check, one
  test's configuration from them (pure).
* ``live``: the tab's series over time, throughput and SLO verdict (pure).
* ``state``: configuration from the environment, constants, the process-wide state.
* ``tab_js``: the script that draws the tab's panel and charts.
* ``webui``: the *loadgen* tab, ``/loadgen``, the start form's check, the web token.
* ``locustfile``: the file Locust loads: the user class and the event hooks.
"""
