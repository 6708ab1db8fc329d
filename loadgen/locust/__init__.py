"""Locust integration: loadgen's LLM user, open-loop dispatcher and exact histograms inside Locust.

A leaf: Locust loads :mod:`loadgen.locust.locustfile` (``locust -f
.../loadgen/locust/locustfile.py``, started by ``loadgen locust``); nothing in loadgen
imports this package, because ``import locust`` monkey-patches the standard library
with gevent. This ``__init__`` imports nothing, so ``import loadgen.locust`` alone
patches nothing; its modules import gevent (and ``locustfile`` imports Locust).
Configuration arrives as JSON in ``LOADGEN_LOCUST_CONFIG`` (master or single
process); workers get it from the master at each test start.

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

Modules (each imports only those above it):

* ``client``: :class:`~loadgen.locust.client.KeepAlivePool`,
  :class:`~loadgen.locust.client.GeventClient`, ``client_settings``.
* ``collect``: records on the wire (``pack_record``/``unpack_record``, clock anchors)
  and :class:`~loadgen.locust.collect.LocustCollector` (aggregation, ``result.json``).
* ``dispatch``: :class:`~loadgen.locust.dispatch.LoadProcess` (closed loop, open-loop
  dispatcher, stop, shipping to the master).
* ``state``: configuration from the environment, constants, the process-wide state.
* ``webui``: the *loadgen* tab, ``/loadgen``, the web token.
* ``locustfile``: the file Locust loads: the user class and the event hooks.
"""
