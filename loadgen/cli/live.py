"""The live view of ``run`` and ``sweep`` (its options and its process) and the live exporters' options.

The view itself -- what it shows, the rule for each figure, and the process that draws it --
is :mod:`loadgen.report.live_view`. Never on the send path: the view runs in a process of its
own that tails ``requests.jsonl``; :class:`LiveView` starts it and keeps one thread here that
wakes once a second to send it three facts of the runner (``t0_ns`` and the schedule's send
offsets once, ``len(inflight_records)`` each time) and this process's CPU time. Nothing here
parses, computes percentiles or draws while requests are sent.

Quiet when stderr is not a terminal; ``--progress`` forces the view on, ``--no-progress``
or ``--quiet`` off (``--quiet`` also drops a sweep's progress lines).
"""

from __future__ import annotations

import contextlib
import math
import os
import select
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self, Unpack

import click
import numpy as np
import orjson
from rich.console import Console

from loadgen.cli.load_options import picked
from loadgen.cli.options import usage_errors
from loadgen.cli.url_options import URL
from loadgen.core.redact import redact_url
from loadgen.core.units import parse_duration_ns
from loadgen.report.live_view import (
    LiveFigures,
    LiveSettings,
    LiveStats,
    inflight_count,
    probe_message,
    schedule_offsets,
)
from loadgen.telemetry.tail import Ticker

if TYPE_CHECKING:
    from loadgen.engine.runner import Runner
    from loadgen.serve import ServerObserver
    from loadgen.serve.observe import ObserverPair
    from loadgen.sessions.turns import SessionRunner

__all__ = [
    "LiveStats",
    "LiveView",
    "ViewOptions",
    "live_enabled",
    "live_options",
    "server_observer",
    "telemetry_from_options",
    "view_options",
]


def view_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """``--progress/--no-progress`` and ``--quiet`` (``run`` and ``sweep``)."""
    f = click.option("--quiet", "-q", is_flag=True, help="No live view and no progress lines; the summary only.")(f)
    return click.option(
        "--progress/--no-progress",
        default=None,
        help="Live view of the run on stderr (default: on when stderr is a terminal).",
    )(f)


def server_metrics_option_list() -> list[Callable[..., Any]]:
    """``--server-metrics URL`` and ``--server-metrics-interval`` (``run`` and ``sweep``)."""
    return [
        click.option(
            "--server-metrics",
            type=URL,
            help="The server's Prometheus page (e.g. http://127.0.0.1:8000/metrics): scraped during the run; "
            "running/waiting requests and KV-cache usage go into result.json's timeseries on the client's "
            "time axis (--serve does this by itself).",
        ),
        click.option(
            "--server-metrics-interval",
            default="1s",
            show_default=True,
            help="How often --server-metrics and --dcgm-metrics are scraped.",
        ),
        click.option(
            "--dcgm-metrics",
            type=URL,
            help="An NVIDIA DCGM exporter's page (e.g. http://127.0.0.1:9400/metrics): the GPUs' power and energy "
            "over the run, once per physical GPU (MIG instance rows not summed), in result.json's gpu_dcgm.",
        ),
    ]


def server_metrics_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """:func:`server_metrics_option_list` on a command (``sweep``: each probe's server section)."""
    for opt in reversed(server_metrics_option_list()):
        f = opt(f)
    return f


def live_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """:func:`view_options` and the live exporters' ``--metrics-port``/``--metrics-host``/``--otlp-*`` (``run``)."""
    options = [  # in the order --help lists them
        click.option(
            "--metrics-port",
            type=click.IntRange(0, 65535),
            default=None,
            help="Serve live Prometheus metrics on 127.0.0.1:PORT during the run (0 picks a free port); the page "
            "is rendered at most once a second, whatever the scrape rate.",
        ),
        click.option(
            "--metrics-host",
            default="127.0.0.1",
            show_default=True,
            help="Address the --metrics-port endpoint binds (loopback unless you choose otherwise: another "
            "address needs --metrics-token-env).",
        ),
        click.option(
            "--metrics-token-env",
            metavar="NAME",
            help="Require the token in environment variable NAME of every scrape (Authorization: Bearer TOKEN); "
            "needed when --metrics-host is not loopback.",
        ),
        click.option(
            "--otlp-endpoint",
            type=URL,
            help="Push live metrics over OTLP/HTTP to this URL, e.g. http://127.0.0.1:4318/v1/metrics "
            "(needs the 'otlp' extra).",
        ),
        click.option("--otlp-interval", default="5s", show_default=True, help="How often --otlp-endpoint is pushed."),
        *server_metrics_option_list(),
    ]
    for opt in reversed(options):
        f = opt(f)
    return view_options(f)


@dataclass(frozen=True, slots=True)
class ViewOptions:
    """What a command shows and exports as it runs (the options of this module), built once from click's
    values by :meth:`from_kw` (a command without an option gets its default)."""

    quiet: bool = False
    progress: bool | None = None
    """``--progress`` / ``--no-progress``; None: the view runs on a terminal."""
    server_metrics: str | None = field(default=None, repr=False)
    """``--server-metrics URL`` (may hold credentials)."""
    server_metrics_interval: str | None = "1s"
    dcgm_metrics: str | None = field(default=None, repr=False)
    metrics_port: int | None = None
    metrics_host: str | None = "127.0.0.1"
    metrics_token_env: str | None = None
    """The name of the environment variable with the metrics page's token (never the token)."""
    otlp_endpoint: str | None = field(default=None, repr=False)
    otlp_interval: str | None = "5s"

    @classmethod
    def from_kw(cls, kw: dict[str, Any]) -> Self:
        """The options of ``kw`` (click's values)."""
        return cls(**picked(cls, kw))


def live_enabled(view: ViewOptions, err: Console) -> bool:
    """Whether the live view runs: ``--progress`` forces it, ``--quiet``/``--no-progress`` stop it, else a TTY."""
    if view.quiet:
        return False
    if view.progress is not None:
        return bool(view.progress)
    return err.is_terminal


CHILD_CODE = "from loadgen.report.live_view import child_main; child_main()"
"""The view's process (it lowers its own priority once ready: a busy machine's CPU goes to the sends first)."""
READY_TIMEOUT_S = 10.0
"""How long entering the view waits for its process to be ready (imports done) before the run starts."""


class LiveView(LiveFigures):
    """The live view of a run or sweep (a context manager); ``attach`` is a ``measure(runner_hook=...)``.

    Enabled, entering it starts the view's own process (:func:`loadgen.report.live_view.child_main`,
    drawing on ``err``'s terminal) and one thread here that wakes once per ``interval_s`` to send it
    the runner's in-flight count and this process's CPU time (and, once per runner, its t0 and send
    offsets): the only work the view adds to the sending process. Disabled, it does nothing at all
    (its figures can still be worked out here: ``tick``/``render``, for tests and benches).
    """

    def __init__(self, err: Console, *, enabled: bool, **settings: Unpack[LiveSettings]) -> None:
        super().__init__(**settings)
        self.err = err
        self.enabled = enabled
        self._proc: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()
        self._ticker = Ticker("loadgen-live", self.interval_s, self._feed)
        self._sent_runner: Runner | SessionRunner | None = None
        self._offsets_file: Path | None = None
        self._offsets_path: str | None = None
        self._probes_sent = 0  # a sweep's probes handed to the view so far (probes_done)

    def __enter__(self) -> LiveView:
        if not self.enabled:
            return self
        settings = {
            "run_file": None if self.run_file is None else str(self.run_file),
            "sweep_dir": None if self.sweep_dir is None else str(self.sweep_dir),
            "targets": [t.label for t in self.targets],
            "origin": self.origin,
            "total": self.total,
            "rate_rps": self.rate_rps if self.rate_rps is None or math.isfinite(self.rate_rps) else None,
            "interval_s": self.interval_s,
            "started_ns": self._started_ns,
        }
        import loadgen

        root = str(Path(loadgen.__file__).resolve().parents[1])
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(x for x in (root, os.environ.get("PYTHONPATH")) if x))
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-c", CHILD_CODE, orjson.dumps(settings).decode()],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=None, env=env,
            )  # fmt: skip
        except OSError:
            self._proc = None  # no view: the run goes on
            return self
        # wait for its imports (~1 s of CPU) before the run starts: not while requests are sent
        assert self._proc.stdout is not None
        with contextlib.suppress(OSError, ValueError):
            if select.select([self._proc.stdout], [], [], READY_TIMEOUT_S)[0]:
                self._proc.stdout.read(1)
        self._ticker.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._ticker.stop()
        proc, self._proc = self._proc, None
        if proc is not None:
            with self._lock, contextlib.suppress(OSError):
                assert proc.stdin is not None
                proc.stdin.close()  # the view clears itself and ends
            try:
                proc.wait(timeout=10.0)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5.0)
            if proc.stdout is not None:
                proc.stdout.close()
        if self._offsets_file is not None:
            with contextlib.suppress(OSError):
                self._offsets_file.unlink()

    def _send(self, msg: dict[str, Any]) -> None:
        proc = self._proc
        if proc is None or proc.stdin is None:
            return
        with self._lock, contextlib.suppress(OSError, ValueError, TypeError):  # a view that died: the run goes on
            proc.stdin.write(orjson.dumps(msg, option=orjson.OPT_SERIALIZE_NUMPY) + b"\n")
            proc.stdin.flush()

    def print(self, msg: str) -> None:
        """A line above the view (a sweep's progress lines), or plain on stderr without one."""
        if self._proc is not None:
            self._send({"print": msg})
        else:
            self.err.print(msg, markup=False)

    def probes_done(self, probes: Sequence[Any]) -> None:
        """Hand the view each probe of ``probes`` (a sweep's :class:`~loadgen.sweep.probe.Probe` list, in order)
        finished since the last call: its row in the view is the probe as ``sweep.json`` stores it, so the view
        counts what the console, the table and the report count (:func:`~loadgen.report.live_view.probe_message`)."""
        while self._probes_sent < len(probes):
            self._probes_sent += 1
            if self._proc is not None:
                self._send(probe_message(self._probes_sent, probes[self._probes_sent - 1].to_json()))

    def attach(self, runner: Any) -> None:
        """Keep a read-only reference to the runner; its send offsets go to a file now, before it sends."""
        super().attach(runner)
        if self._proc is not None:
            self._offsets_path = self._write_offsets(runner)

    def _feed(self) -> None:
        """The thread's tick, once per ``interval_s``: a few facts for the view's process (see the class)."""
        r = self.runner
        if r is not None and r is not self._sent_runner and r.t0_ns:  # t0 is set when the runner starts
            self._sent_runner = r
            self._send({"t0_ns": r.t0_ns, "offsets": self._offsets_path})
        self._send({"inflight": None if r is None else inflight_count(r),
                    "cpu_s": time.process_time(), "wall_s": time.perf_counter()})  # fmt: skip

    def _write_offsets(self, runner: Runner | SessionRunner) -> str | None:
        """The runner's send offsets in a temporary ``.npy`` for the view (once per runner); None without any."""
        try:
            offsets = schedule_offsets(runner)
        except Exception:  # not an open-loop runner the view can read
            return None
        if not len(offsets):
            return None
        if self._offsets_file is None:
            fd, name = tempfile.mkstemp(prefix="loadgen-live-", suffix=".npy")
            os.close(fd)
            self._offsets_file = Path(name)
        np.save(self._offsets_file, offsets)
        return str(self._offsets_file)


class _Exporters:
    """The live exporters of a run (none, Prometheus, OTLP): ``attach`` hands each the runner."""

    def __init__(self) -> None:
        self.exporters: list[Any] = []

    def attach(self, runner: Runner | SessionRunner) -> None:
        for e in self.exporters:
            e.attach(runner)


def with_dcgm(view: ViewOptions, observer: ServerObserver | None) -> ServerObserver | ObserverPair | None:
    """``observer`` paired with the :class:`~loadgen.serve.observe.DcgmObserver` of ``--dcgm-metrics URL``
    (issue 33), or ``observer`` itself without the option."""
    url = view.dcgm_metrics
    if not url:
        return observer
    from loadgen.serve.observe import DcgmObserver, ObserverPair

    _, period_s = _metrics_url(view, "--dcgm-metrics", url, "http://127.0.0.1:9400/metrics")
    return ObserverPair(observer, DcgmObserver(url, sample_period_s=period_s))


def server_observer(view: ViewOptions, endpoint_url: str | None, model: str | None) -> ServerObserver | None:
    """The :class:`~loadgen.serve.ServerObserver` of ``--server-metrics URL`` (the server's kind told by
    its metric names; ``model``: ``--model``), or None without the option."""
    url = view.server_metrics
    if not url:
        return None
    from urllib.parse import urlsplit

    from loadgen.serve import ServerObserver

    p, period_s = _metrics_url(view, "--server-metrics", url, "http://127.0.0.1:8000/metrics")
    base = endpoint_url or f"{p.scheme}://{p.netloc}"
    q = urlsplit(base)
    return ServerObserver("auto", f"{q.scheme}://{q.netloc}", metrics_url=url, model=model,
                          sample_period_s=period_s, energy=False)  # fmt: skip


def _metrics_url(view: ViewOptions, flag: str, url: str, example: str) -> tuple[Any, float]:
    """A /metrics URL option checked (http(s) with a host) and the sampling period of
    ``--server-metrics-interval`` (> 0): usage errors naming the option, the URL's secrets redacted."""
    from urllib.parse import urlsplit

    p = urlsplit(url)
    if p.scheme not in ("http", "https") or not p.hostname:
        raise click.UsageError(f"{flag} {redact_url(url)!r}: expected an http(s) URL, e.g. {example}")
    with usage_errors():
        period_s = parse_duration_ns(view.server_metrics_interval or "1s") / 1e9
    if period_s <= 0:
        raise click.UsageError("--server-metrics-interval must be more than 0")
    return p, period_s


LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})


def metrics_token(host: str, env_name: str | None) -> str | None:
    """The token ``--metrics-token-env NAME`` names (read from the environment, never from the command
    line); UsageError for a non-loopback ``--metrics-host`` without one: the page shows the run to anyone
    who can reach it, and a flood of scrapes costs the client CPU (issue 33)."""
    if env_name:
        token = os.environ.get(env_name)
        if not token:
            raise click.UsageError(f"--metrics-token-env {env_name}: that environment variable is not set or empty")
        return token
    if host not in LOOPBACK:
        raise click.UsageError(
            f"--metrics-host {host!r} serves the live metrics beyond this machine: also give --metrics-token-env "
            "NAME (every scrape must then send Authorization: Bearer <token>)"
        )
    return None


@contextlib.contextmanager
def telemetry_from_options(view: ViewOptions, jsonl: Path, err: Console, redact: Callable[[str], str]) -> Iterator[Any]:
    """The live exporters of ``--metrics-port`` and ``--otlp-endpoint`` around a run (:mod:`loadgen.telemetry`);
    ``redact``: the run's :class:`~loadgen.core.redact.Redactor` (the OTLP exporter's log lines name its URL)."""
    out = _Exporters()
    with contextlib.ExitStack() as stack:
        port = view.metrics_port
        if port is not None:
            from loadgen.telemetry.prom import PromExporter  # its own page and server: no extra needed

            host = view.metrics_host or "127.0.0.1"
            token = metrics_token(host, view.metrics_token_env)
            try:
                prom = stack.enter_context(PromExporter(jsonl, port, host, token=token))
            except OSError as exc:
                raise click.UsageError(f"--metrics-port {port}: cannot listen: {exc.strerror or exc}") from None
            err.print(f"live metrics on {prom.url}", markup=False)
            out.exporters.append(prom)
        url = view.otlp_endpoint
        if url:
            try:
                import opentelemetry.exporter.otlp.proto.http  # noqa: F401

                from loadgen.telemetry.otlp import OtlpPusher
            except ImportError:
                raise click.UsageError(
                    "--otlp-endpoint needs the OpenTelemetry SDK: pip install 'loadgen[otlp]'"
                ) from None
            with usage_errors():
                interval_s = parse_duration_ns(view.otlp_interval or "5s") / 1e9
            out.exporters.append(stack.enter_context(OtlpPusher(jsonl, url, interval_s, redact=redact)))
            err.print(f"pushing live metrics over OTLP to {redact_url(url)} every {interval_s:g} s", markup=False)
        yield out
