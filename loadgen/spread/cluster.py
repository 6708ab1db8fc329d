"""``--cluster ADDRESS``: the worker shards of :mod:`loadgen.spread.workers` as actors of a Ray cluster.

Why Ray: the issue asks for an existing distributed engine, not a home-made protocol; Ray
places actors on nodes, can ship code (``runtime_env`` ``py_modules``), reports dead actors as
errors and is asyncio-friendly. Locust's master/worker stays the engine of the Locust path.
Every actor runs the driver's own code: the nodes' installed ``loadgen`` when its source hash
(:func:`code_hash`) matches the driver's, else the driver's package shipped as ``py_modules``
(a slower actor start); ``conditions.cluster.code`` says which.

Each actor runs the very worker body of the local processes (:func:`loadgen.spread.workers.worker_body`)
in a thread with its own event loop (uvloop when installed); its messages go to a queue that
the driver drains with ``take()`` calls, one outstanding per actor, so records stream back in
batches and are written as they arrive (:class:`loadgen.spread.workers.Collector`, shared with the
local path: exact per-request summaries, HDR-merged per-token histograms).

Time origins across hosts. CLOCK_MONOTONIC is per host, so the shared t0 is a wall-clock
instant ``T`` of the driver. Each actor reports an anchor pair (its ``time.monotonic_ns`` /
``perf_counter_ns`` read back to back with ``time.time_ns``); the driver measures each actor's
clock offset with a few ping exchanges, NTP style: driver send ``t0``, actor clock ``t1 = t2``,
driver receive ``t3``; ``offset = ((t1 - t0) + (t2 - t3)) / 2``, ``rtt = (t3 - t0) - (t2 - t1)``;
the minimum-RTT sample is kept (its uncertainty is ``rtt / 2``). The actor then starts at
``t0_actor = anchor_monotonic + (T + offset - anchor_wall)`` on its own monotonic clock. Each
request's latencies are measured on one host's monotonic clock from its own scheduled time, so
the skew shifts only when a shard starts, never a latency; it is reported in
``result.json`` ``conditions.cluster``. Every instant an actor reports (scheduled, sent, end,
token arrivals, quota-header times) is on that host's own monotonic clock, which on another
host can be hours away from the driver's: the collector maps each onto the driver's clock with
``t_driver = t_actor + (t0_driver - t0_actor)`` (:func:`loadgen.spread.workers.summary_on_clock`)
before anything is aggregated, so the run's window and rates are those of one clock.

Failures are bounded: an actor not ready after :data:`READY_TIMEOUT_S`, one that dies
(``RayActorError``) or that does not answer a ``take()`` within :data:`STALL_TIMEOUT_S`
is reported in ``client.worker_failures`` (the run is INVALID, ``limited_by: client``) and
whatever it never delivered is split by its lease (each ``take()`` renews it, :mod:`loadgen.spread.lease`):
lost with the client when due within it (maybe sent), unsent when due after it (never sent). An actor
cut off from the driver stops sending when its lease runs out and ends after ``LEASE_LOST_NS``: it never
sends after the run. SIGINT/SIGTERM to the driver stop the
actors (first: stop sending and drain; second: cancel in-flight requests).
"""

from __future__ import annotations

import functools
import os
import queue
import signal
import socket
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from loadgen.core.clock import now_ns, wall_anchor, wall_ns
from loadgen.core.errors import ConfigError, cause_line, strip_ansi
from loadgen.core.redact import Redactor
from loadgen.engine.runner import LEAD_IN_NS, Runner, RunOutcome
from loadgen.engine.runplan import LoadConfig
from loadgen.sessions.turns import SessionRunner
from loadgen.spread.job import SpreadJob
from loadgen.spread.lease import LEASE_AHEAD_NS
from loadgen.spread.workers import Collector, worker_body

if TYPE_CHECKING:
    import asyncio
    from types import ModuleType

READY_TIMEOUT_S = 120.0
"""An actor that has not built its shard by then is reported and left out (placement, imports)."""
STALL_TIMEOUT_S = 60.0
"""A ``take()`` unanswered this long: the actor (or its node) is lost; it is killed and reported."""
TAKE_WAIT_S = 0.25
"""How long one ``take()`` waits for a first message before it returns an empty batch."""
PINGS = 8
"""Clock-offset exchanges per actor and run (the minimum-RTT one is kept)."""
CONNECT_TIMEOUT_S = 60.0
"""``ray.init`` taking longer than this is a failed connection (ConfigError), never a hang."""
MIN_LEAD_IN_NS = 300_000_000
"""t0 is at least this far after the driver's go: the go messages must reach every node first."""


def code_hash() -> str:
    """SHA-256 over the ``loadgen`` package's Python sources (paths and contents), 16 hex digits."""
    import hashlib

    import loadgen

    root = os.path.dirname(os.path.abspath(loadgen.__file__))
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for f in sorted(filenames):
            if f.endswith(".py"):
                path = os.path.join(dirpath, f)
                h.update(os.path.relpath(path, root).encode() + b"\0")
                with open(path, "rb") as fh:
                    h.update(fh.read() + b"\0")
    return h.hexdigest()[:16]


def _check_reachable(address: str, timeout_s: float = 5.0) -> None:
    """Raise ConfigError unless ``host:port`` (or ``ray://host:port``) accepts a TCP connection.

    ``auto`` and other forms Ray resolves itself are not checked here."""
    hostport = address.removeprefix("ray://")
    host, sep, port = hostport.rpartition(":")
    if not sep or not port.isdigit() or not host:
        return
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except OSError as exc:
        raise ConfigError(
            f"--cluster {address!r}: nothing listens there ({exc.strerror or exc}); is the Ray head up?"
        ) from None


def root_cause(text: str) -> str:
    """:func:`loadgen.core.errors.cause_line` of a (Ray) error text; an import error says what to install.

    Ray wraps an actor's own exception in its traceback (``ActorDiedError: ... RuntimeError: The actor
    ... failed to import ... ModuleNotFoundError: No module named 'msgspec'``): cut at a length, the
    cause never showed (issue 34)."""
    line = cause_line(text)
    if line.startswith(("ModuleNotFoundError", "ImportError")):
        line += " (the node's Python lacks a package loadgen imports: install loadgen's dependencies there, README 'Many machines')"
    return line


def _import_ray() -> ModuleType:
    try:
        import ray
    except ImportError:
        raise ConfigError(
            "--cluster needs Ray: pip install 'loadgen[cluster]' (on the driver and every node)"
        ) from None
    return ray


class _WorkerActor:
    """One worker shard inside a Ray actor (used through :func:`_actor_class`).

    ``prepare`` starts the shared worker body in a thread and returns its ``ready`` message
    with the actor's clock anchors; ``go`` hands it t0 on this host's monotonic clock;
    ``take`` returns the messages queued since the last call; ``stop`` interrupts the run.
    """

    def __init__(self) -> None:
        self._out: queue.Queue[tuple] = queue.Queue()
        self._in: queue.Queue[tuple] = queue.Queue()
        self._runner: Runner | SessionRunner | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._tick_since: float | None = None  # when the pending liveness callback was scheduled
        self._lease_ns = LEASE_AHEAD_NS  # no send past it, offset from t0 (loadgen.spread.lease): go and take renew it

    def info(self) -> dict[str, Any]:
        import ray

        ctx = ray.get_runtime_context()
        return {
            "host": socket.gethostname(),
            "ip": ray.util.get_node_ip_address(),
            "node_id": ctx.get_node_id(),
            "pid": os.getpid(),
        }

    def clock(self) -> int:
        return wall_ns()

    def code_hash(self) -> str:
        return code_hash()

    def prepare(self, w: int, n: int, ep_cfg: object, redactor: Redactor, load: LoadConfig, timeout_s: float) -> tuple:
        if self._thread is not None:
            self._thread.join(timeout=30)  # the previous run sends "done" before it closes its endpoint
            if self._thread.is_alive():
                return ("error", "the previous run of this actor has not finished")
        self._out = queue.Queue()
        self._in = queue.Queue()
        self._runner = None
        self._loop = None
        self._tick_since = None
        out = self._out
        finished = False

        def send(msg: tuple) -> None:
            nonlocal finished
            finished = finished or msg[0] in ("done", "error")
            out.put(msg)

        def on_runner(r: Runner | SessionRunner) -> None:
            import asyncio

            self._runner = r
            self._loop = asyncio.get_running_loop()

        def body() -> None:
            import asyncio

            try:
                import uvloop

                factory: Callable[[], asyncio.AbstractEventLoop] | None = uvloop.new_event_loop
            except ImportError:
                factory = None
            try:
                with asyncio.Runner(loop_factory=factory) as r:
                    r.run(
                        worker_body(
                            w,
                            n,
                            ep_cfg,
                            redactor,
                            load,
                            send,
                            self._in.get,
                            install_signal_handlers=False,
                            on_runner=on_runner,
                            lease_offset=lambda: self._lease_ns,
                        )
                    )
            except BaseException as exc:  # reported to the driver, which counts this shard as unsent
                send(("error", f"{type(exc).__name__}: {redactor(str(exc))}"))
            if not finished:  # stopped before its t0: the driver must not wait for it
                send(("error", "stopped before it started"))

        self._thread = threading.Thread(target=body, name=f"loadgen-worker-{w}", daemon=True)
        self._thread.start()
        try:
            msg = self._out.get(timeout=timeout_s)
        except queue.Empty:
            self._in.put(("stop",))
            return ("error", f"not ready after {timeout_s:g} s")
        m, wall = wall_anchor()
        return (*msg, {"monotonic_ns": m, "wall_ns": wall})

    def go(self, t0_ns: int, lease_ns: int = LEASE_AHEAD_NS) -> None:
        self._lease_ns = lease_ns
        self._in.put(("go", t0_ns))

    def take(self, wait_s: float, lease_ns: int | None = None) -> list[tuple]:
        if lease_ns is not None:  # the driver hears from this actor: its lease moves on
            self._lease_ns = max(self._lease_ns, lease_ns)
        out: list[tuple] = []
        try:
            out.append(self._out.get(timeout=wait_s))
            while True:
                out.append(self._out.get_nowait())
        except queue.Empty:
            pass
        loop = self._loop
        if not out and loop is not None and not loop.is_closed():
            # liveness: a quiet run is fine, an event loop that runs no callback is not
            now = time.monotonic()
            if self._tick_since is None:
                self._tick_since = now
                loop.call_soon_threadsafe(self._tick)
            elif now - self._tick_since > STALL_TIMEOUT_S:
                out.append(("error", f"event loop unresponsive for {STALL_TIMEOUT_S:g} s"))
        return out

    def _tick(self) -> None:
        self._tick_since = None

    def stop(self, cancel: bool) -> None:
        self._in.put(("stop",))  # a run not started yet ends before sending
        r, loop = self._runner, self._loop
        if r is not None and loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(lambda: r.request_stop(True, cancel_inflight=cancel))


def _actor_class(ray: ModuleType) -> Any:
    # threaded actor: take/clock/stop are answered while the worker body runs in its own thread
    return ray.remote(num_cpus=1, max_concurrency=4, max_restarts=0)(_WorkerActor)


def _remote_clock_ns(ray: ModuleType, actor: Any) -> int:
    """One reading of an actor's wall clock (ns), within 10 s."""
    return int(ray.get(actor.clock.remote(), timeout=10))


def ping(clock: Callable[[], int], samples: int = PINGS, local: Callable[[], int] = wall_ns) -> dict[str, float]:
    """Clock offset of a remote wall clock, NTP style; the minimum-RTT sample is kept.

    ``clock()`` performs one round trip and returns the remote ``time.time_ns()``; ``local`` is
    this side's wall clock.
    Returns ``offset_ms`` (remote minus local), ``rtt_ms`` (of the kept sample),
    ``uncertainty_ms`` (``rtt / 2``: the offset is exact only if both legs take equally long)
    and ``samples``.
    """
    best: tuple[int, int] | None = None
    for _ in range(samples):
        t0 = local()
        t1 = clock()
        t3 = local()
        rtt = t3 - t0  # t2 == t1: the remote reads its clock once
        off = ((t1 - t0) + (t1 - t3)) // 2
        if best is None or rtt < best[0]:
            best = (rtt, off)
    assert best is not None
    return {"offset_ms": best[1] / 1e6, "rtt_ms": best[0] / 1e6, "uncertainty_ms": best[0] / 2e6, "samples": samples}


def actor_t0_ns(anchor: dict[str, int], t0_wall_ns: int, skew: dict[str, float]) -> int:
    """The driver's wall-clock instant ``t0_wall_ns`` on an actor's monotonic clock.

    ``anchor``: the actor's ``monotonic_ns``/``wall_ns`` read together; ``skew``: :func:`ping`'s
    result (``offset_ms``: the actor's wall clock minus the driver's).
    ``t0_actor = anchor_monotonic + (t0_wall + offset - anchor_wall)``.
    """
    offset_ns = round(skew["offset_ms"] * 1e6)
    return anchor["monotonic_ns"] + (t0_wall_ns + offset_ns - anchor["wall_ns"])


class Cluster:
    """A connection to a Ray cluster and the worker actors kept on it across runs (probes).

    ``Cluster(address)`` connects (``ray.init(address=...)``; ``auto`` or ``ray://host:port`` as
    Ray takes them); :meth:`run` has the same contract as :func:`loadgen.spread.workers.run_workers`
    and returns the outcome with the ``conditions.cluster`` record; :meth:`close` kills the
    actors and disconnects. Raises ConfigError when Ray is missing or the cluster is not there.
    """

    def __init__(self, address: str, *, progress: Callable[[str], None] | None = None) -> None:
        ray = _import_ray()
        self.ray = ray
        self.address = address
        self.progress = progress or (lambda text: None)
        self._connect(None)
        self._cls = _actor_class(ray)
        self._actors: list[Any] = []
        self._hash = code_hash()
        self._shipping = False  # True once the nodes' own loadgen differed and the driver's is shipped
        self.code = "installed on the nodes (same source hash as the driver)"
        self.last_conditions: dict[str, Any] | None = None  # the last run's conditions.cluster

    def _connect(self, runtime_env: dict[str, Any] | None) -> None:
        """``ray.init`` with bounds: a TCP check of ``host:port`` first (Ray itself retries a dead
        address for minutes), then at most :data:`CONNECT_TIMEOUT_S` for the handshake."""
        _check_reachable(self.address)
        box: dict[str, Any] = {}

        def init() -> None:
            try:
                self.ray.init(
                    address=self.address,
                    runtime_env=runtime_env,
                    log_to_driver=False,
                    logging_level="ERROR",
                    namespace="loadgen",
                )
                box["ok"] = True
            except Exception as exc:  # ConnectionError, ValueError, RuntimeError: all "no cluster there"
                box["error"] = exc

        t = threading.Thread(target=init, name="loadgen-ray-init", daemon=True)
        t.start()
        t.join(CONNECT_TIMEOUT_S)
        if "ok" not in box:
            exc = box.get("error")
            why = f"{type(exc).__name__}: {exc}" if exc is not None else f"no answer in {CONNECT_TIMEOUT_S:g} s"
            raise ConfigError(f"--cluster {self.address!r}: cannot connect: {why}")

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def cpus(self) -> int:
        """Logical CPUs of the cluster's live nodes."""
        return int(self.ray.cluster_resources().get("CPU", 1))

    def auto_workers(self) -> int:
        """``--workers auto`` with ``--cluster``: one actor per cluster CPU, less one for the driver."""
        return max(1, self.cpus() - 1)

    def _new_actor(self) -> Any:
        return self._cls.options(scheduling_strategy="SPREAD").remote()

    def _actors_for(self, n: int) -> list[Any]:
        """``n`` actors running the driver's own code: the nodes' installed ``loadgen`` when its
        source hash matches, else the driver's package shipped as ``py_modules`` (Ray takes a local
        directory only for a whole job: the driver reconnects with it; actors start slower)."""
        while len(self._actors) < n:
            self._actors.append(self._new_actor())
        if not self._shipping:
            refs = [a.code_hash.remote() for a in self._actors[:n]]
            try:
                same = all(h == self._hash for h in self.ray.get(refs, timeout=READY_TIMEOUT_S))
            except Exception:  # loadgen not importable there (the actor could not be created), or too slow
                same = False
            if not same:
                import loadgen

                self.progress("cluster: the nodes' loadgen differs from the driver's: shipping the driver's package")
                for a in self._actors:
                    self._kill(a)
                self.ray.shutdown()
                self._connect({"py_modules": [os.path.dirname(os.path.abspath(loadgen.__file__))]})
                self._shipping = True
                self.code = "shipped from the driver (Ray runtime_env py_modules): the nodes' loadgen differs"
                self._actors = [self._new_actor() for _ in range(n)]
        return self._actors[:n]

    def _kill(self, actor: Any) -> None:
        try:
            self.ray.kill(actor, no_restart=True)
        except Exception:
            pass

    def _drop(self, w: int) -> None:
        """Forget (and kill) actor ``w``; the next run gets a fresh one in its place."""
        if w < len(self._actors):
            self._kill(self._actors[w])
            self._actors[w] = self._new_actor()

    def close(self) -> None:
        for a in self._actors:
            self._kill(a)
        self._actors = []
        try:
            self.ray.shutdown()
        except Exception:
            pass

    def run(self, job: SpreadJob) -> tuple[RunOutcome, dict[str, Any]]:
        """Run ``job`` over actors; aggregate into its ``agg``, write lines to its ``fh`` as they arrive.

        Blocking. Returns the outcome and the ``conditions.cluster`` record (actors, their
        hosts, anchors and measured clock offsets).
        """
        ray, n, redactor = self.ray, job.n, job.redactor
        actors = self._actors_for(n)
        col = Collector(n, job.agg, job.fh, on_record=job.on_record, on_summary=job.on_summary)
        signals = 0

        def forward(signum: int, frame: object) -> None:
            nonlocal signals
            signals += 1
            col.interrupted = True
            for a in actors:
                try:
                    a.stop.remote(signals > 1)
                except Exception:
                    pass

        old = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
        info: dict[int, dict[str, Any]] = {}
        ready_msgs: dict[int, tuple] = {}
        skew: dict[int, dict[str, float]] = {}
        failed: set[int] = set()
        went: set[int] = set()
        t0_wall = wall_ns()
        t0_local = now_ns()
        try:
            # prepare: every actor imports, opens its endpoint and builds its shard
            refs = {
                a.prepare.remote(w, n, job.ep_cfg, redactor, job.load, READY_TIMEOUT_S): w for w, a in enumerate(actors)
            }
            info_refs = {a.info.remote(): w for w, a in enumerate(actors)}
            deadline = time.monotonic() + READY_TIMEOUT_S + 10
            pending = dict(refs)
            while pending and time.monotonic() < deadline:
                done, _ = ray.wait(list(pending), num_returns=1, timeout=0.5)
                for ref in done:
                    w = pending.pop(ref)
                    try:
                        msg = ray.get(ref, timeout=10)
                    except Exception as exc:
                        whole = strip_ansi(redactor(str(exc)))
                        msg = ("error", root_cause(whole) or type(exc).__name__)
                        if not failed:  # the first one whole on the console (the others name their cause)
                            self.progress(f"cluster: worker {w} failed to start: {type(exc).__name__}:\n{whole}")
                    if msg[0] == "ready":
                        col.handle(w, msg[:2])
                        ready_msgs[w] = msg
                    else:
                        col.fail(w, f"failed to start: {msg[1]}")
                        failed.add(w)
            for w in pending.values():
                col.fail(w, f"not ready after {READY_TIMEOUT_S:g} s (cluster resources: {ray.available_resources()})")
                failed.add(w)
            got, _ = ray.wait(list(info_refs), num_returns=len(info_refs), timeout=5)
            for ref in got:
                try:
                    info[info_refs[ref]] = ray.get(ref, timeout=1)
                except Exception:
                    pass
            live = [w for w in range(n) if w not in failed]
            # clock offsets, then one wall-clock t0 for all
            for w in list(live):
                try:
                    skew[w] = ping(functools.partial(_remote_clock_ns, ray, actors[w]))
                except Exception as exc:
                    col.fail(w, f"lost while measuring its clock: {type(exc).__name__}")
                    failed.add(w)
                    live.remove(w)
            for w in live:
                i, off = info.get(w, {}), skew[w]
                self.progress(
                    f"cluster: worker {w} on {i.get('host', '?')} ({i.get('ip', '?')}, pid {i.get('pid', '?')}), "
                    f"clock offset {off['offset_ms']:+.3f} ms ± {off['uncertainty_ms']:.3f} ms"
                )
            max_rtt_ns = max((int(s["rtt_ms"] * 1e6) for s in skew.values()), default=0)
            anchor_m, anchor_w = wall_anchor()
            t0_wall = wall_ns() + max(LEAD_IN_NS, MIN_LEAD_IN_NS, 20 * max_rtt_ns)
            t0_local = anchor_m + (t0_wall - anchor_w)
            for w in live:
                t0_actor = actor_t0_ns(ready_msgs[w][2], t0_wall, skew[w])
                col.clock_shift_ns[w] = t0_local - t0_actor  # its instants onto the driver's clock
                col.leased_ns[w] = LEASE_AHEAD_NS
                actors[w].go.remote(t0_actor, LEASE_AHEAD_NS)
                went.add(w)

            def take(w: int) -> Any:  # one outstanding take() per actor, each renewing its lease
                col.leased_ns[w] = max(col.leased_ns[w], max(now_ns() - t0_local, 0) + LEASE_AHEAD_NS)
                return actors[w].take.remote(TAKE_WAIT_S, col.leased_ns[w])

            takes = {take(w): (w, time.monotonic()) for w in live}
            while takes:
                done, _ = ray.wait(list(takes), num_returns=1, timeout=1.0)
                now = time.monotonic()
                for ref in done:
                    w, _since = takes.pop(ref)
                    try:
                        msgs = ray.get(ref, timeout=10)
                    except Exception as exc:
                        col.fail(w, f"died: {type(exc).__name__}: {root_cause(redactor(str(exc)))}")
                        failed.add(w)
                        continue
                    finished = False
                    for msg in msgs:
                        if col.handle(w, msg):
                            finished = True
                            if msg[0] != "done":
                                failed.add(w)
                            break
                    if not finished:
                        takes[take(w)] = (w, now)
                for ref, (w, since) in list(takes.items()):
                    if now - since > STALL_TIMEOUT_S:
                        del takes[ref]
                        col.fail(w, f"unresponsive for {STALL_TIMEOUT_S:g} s: killed")
                        failed.add(w)
        finally:
            for s, h in old.items():
                signal.signal(s, h)
            for w in range(n):
                if w not in went and w not in failed:
                    actors[w].stop.remote(False)  # a prepared shard that never got its t0 ends now
            for w in sorted(failed):
                self._drop(w)
        outcome = col.outcome(job.plan, t0_local, t0_wall)
        self.last_conditions = self._conditions(n, info, ready_msgs, skew, t0_wall, redactor)
        return outcome, self.last_conditions

    def _conditions(
        self,
        n: int,
        info: dict[int, dict],
        ready: dict[int, tuple],
        skew: dict[int, dict],
        t0_wall: int,
        redactor: Redactor,
    ) -> dict[str, Any]:
        actors = []
        for w in range(n):
            a = {"worker": w, **info.get(w, {})}
            if w in ready:
                a["anchor"] = ready[w][2]
            if w in skew:
                a["clock_offset"] = skew[w]
            actors.append(a)
        offs = [abs(s["offset_ms"]) for s in skew.values()]
        return {
            "engine": "ray",
            "ray_version": self.ray.__version__,
            "address": redactor(self.address),
            "code": self.code,
            "code_hash": self._hash,
            "actors": actors,
            "hosts": len({a.get("node_id") for a in actors if a.get("node_id")}),
            "t0_wall_ns": t0_wall,
            "max_abs_clock_offset_ms": max(offs) if offs else None,
            "max_offset_uncertainty_ms": max((s["uncertainty_ms"] for s in skew.values()), default=None),
            "time_origin": (
                "t0 is a wall-clock instant of the driver; each actor starts at its monotonic anchor + "
                "(t0 + measured clock offset - its wall anchor); offsets NTP-style, minimum-RTT ping kept"
            ),
        }
