"""The live terminal view of ``run`` and ``sweep``: what the run is doing, refreshed once a second.

Never on the send path: a daemon thread tails ``requests.jsonl`` (written line by line as
requests finish, :mod:`loadgen.recordlog`) and reads, without locking or writing, three
facts of the runner object (``t0_ns``, ``plan.schedule``, ``len(inflight_records)``). The
runner's send loop is not touched; the thread wakes once per ``interval_s`` and renders
with rich ``Live`` (``auto_refresh`` off: no second thread).

Shown (``interval`` = the last refresh period, figures over the requests that *finished* in
it): progress against the schedule (due = scheduled sends whose time has come, sent =
finished + in flight, behind = due - sent), in flight, completed, errors by kind, TTFT and
ITL p50/p99, output tok/s (tokens of the requests finished in the interval / interval),
schedule lag p99, and the client process's CPU (process CPU time / wall time, this process:
worker processes are not counted). For a sweep: the probe being run, and the probe table
filling in from each finished probe's ``result.json``, its misses by cause worked out as
``sweep.json`` will have them (against the sweep's unloaded check, :func:`loadgen.why.sweep_why`).

Quiet when stderr is not a terminal; ``--progress`` forces the view on, ``--no-progress``
or ``--quiet`` off (``--quiet`` also drops a sweep's progress lines).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
import numpy as np
import orjson
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from loadgen.cli.options import usage_errors
from loadgen.clock import now_ns
from loadgen.redact import redact_url
from loadgen.telemetry.tail import RecordTail
from loadgen.units import parse_duration_ns
from loadgen.why import unloaded_ttft_ms, why_of_dirs

if TYPE_CHECKING:
    from loadgen.slo import SLOTarget

__all__ = ["LiveStats", "LiveView", "live_enabled", "live_options", "telemetry_from_options", "view_options"]

INTERVAL_S = 1.0
"""Refresh period of the view (s)."""


def view_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """``--progress/--no-progress`` and ``--quiet`` (``run`` and ``sweep``)."""
    f = click.option("--quiet", "-q", is_flag=True, help="No live view and no progress lines; the summary only.")(f)
    return click.option(
        "--progress/--no-progress",
        default=None,
        help="Live view of the run on stderr (default: on when stderr is a terminal).",
    )(f)


def live_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """:func:`view_options` and the live exporters' ``--metrics-port``/``--metrics-host``/``--otlp-*`` (``run``)."""
    options = [  # in the order --help lists them
        click.option(
            "--metrics-port",
            type=click.IntRange(0, 65535),
            default=None,
            help="Serve live Prometheus metrics on 127.0.0.1:PORT during the run (0 picks a free port; "
            "needs the 'telemetry' extra).",
        ),
        click.option(
            "--metrics-host",
            default="127.0.0.1",
            show_default=True,
            help="Address the --metrics-port endpoint binds (loopback unless you choose otherwise).",
        ),
        click.option(
            "--otlp-endpoint",
            help="Push live metrics over OTLP/HTTP to this URL, e.g. http://127.0.0.1:4318/v1/metrics "
            "(needs the 'otlp' extra).",
        ),
        click.option("--otlp-interval", default="5s", show_default=True, help="How often --otlp-endpoint is pushed."),
    ]
    for opt in reversed(options):
        f = opt(f)
    return view_options(f)


def live_enabled(kw: dict[str, Any], err: Console) -> bool:
    """Whether the live view runs: ``--progress`` forces it, ``--quiet``/``--no-progress`` stop it, else a TTY."""
    if kw.get("quiet"):
        return False
    if kw.get("progress") is not None:
        return bool(kw["progress"])
    return err.is_terminal


def _pct(values: list[float], p: float) -> float | None:
    return float(np.percentile(values, p)) if values else None


class LiveStats:
    """Running figures of one ``requests.jsonl`` being written (fed whole lines by :meth:`feed`)."""

    def __init__(self) -> None:
        self.completed = 0
        self.failed = 0
        self.errors: Counter[str] = Counter()
        self.output_tokens = 0
        self.interval: list[dict[str, Any]] = []

    def feed(self, d: dict[str, Any]) -> None:
        if d.get("status") == "ok":
            self.completed += 1
        else:
            self.failed += 1
            self.errors[str(d.get("error_kind") or "error")] += 1
        self.output_tokens += int(d.get("output_tokens") or 0)
        self.interval.append(d)

    def take_interval(self, span_s: float) -> dict[str, Any]:
        """Figures over the lines fed since the last call (see the module docstring); resets them."""
        lines, self.interval = self.interval, []
        ok = [d for d in lines if d.get("status") == "ok"]
        ttft = [float(d["ttft_ms"]) for d in ok if d.get("ttft_ms") is not None]
        itl = [float(v) for d in ok for v in d.get("itl_ms") or ()]
        lag = [float(d["schedule_lag_ms"]) for d in lines if d.get("schedule_lag_ms") is not None]
        tokens = sum(int(d.get("output_tokens") or 0) for d in ok)
        return {
            "finished": len(lines),
            "ttft_p50_ms": _pct(ttft, 50),
            "ttft_p99_ms": _pct(ttft, 99),
            "itl_p50_ms": _pct(itl, 50),
            "itl_p99_ms": _pct(itl, 99),
            "schedule_lag_p99_ms": _pct(lag, 99),
            "output_tps": tokens / span_s if span_s > 0 else None,
        }


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}"


class LiveView:
    """The live view (a context manager); ``attach`` is a ``measure(runner_hook=...)``.

    ``run_file``: the run's ``requests.jsonl``; ``sweep_dir``: a sweep's output directory (the
    newest ``requests.jsonl`` under it is tailed, finished probes' ``result.json`` tabled).
    ``total``/``rate_rps``: the planned requests and rate, for progress without a runner
    (``--workers``). Disabled, it does nothing at all.
    """

    def __init__(
        self,
        err: Console,
        *,
        enabled: bool,
        run_file: Path | None = None,
        sweep_dir: Path | None = None,
        targets: Sequence[SLOTarget] = (),
        origin: str = "scheduled",
        total: int | None = None,
        rate_rps: float | None = None,
        interval_s: float = INTERVAL_S,
    ) -> None:
        self.err = err
        self.enabled = enabled
        self.run_file = run_file
        self.sweep_dir = sweep_dir
        self.targets = list(targets)
        self.origin = origin
        self.total = total
        self.rate_rps = rate_rps
        self.interval_s = interval_s
        self.runner: Any = None
        self.stats = LiveStats()
        self.last: dict[str, Any] = {}
        self._tail: RecordTail | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._live: Live | None = None
        self._started_ns = now_ns()
        self._cpu = (time.process_time(), time.perf_counter())
        self.cpu_fraction: float | None = None
        self._probes: dict[str, dict[str, Any]] = {}
        self._offsets: tuple[Any, np.ndarray] | None = None  # (runner, its schedule's send offsets)

    def attach(self, runner: Any) -> None:
        """Keep a read-only reference to the runner (``measure``'s ``runner_hook``)."""
        self.runner = runner

    def __enter__(self) -> LiveView:
        if self.enabled:
            self._live = Live(console=self.err, auto_refresh=False, transient=True, redirect_stdout=False)
            self._live.__enter__()
            self._thread = threading.Thread(target=self._loop, name="loadgen-live", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
        if self._live is not None:
            self._live.__exit__(None, None, None)

    def print(self, msg: str) -> None:
        """A line above the view (a sweep's progress lines), or plain on stderr without one."""
        (self._live.console if self._live is not None else self.err).print(msg, markup=False)

    # ------------------------------------------------------------------ the thread

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.tick()
                if self._live is not None:
                    self._live.update(self.render(), refresh=True)
            except Exception:  # the view must never stop the run
                continue

    def _current_file(self) -> Path | None:
        if self.run_file is not None:
            return self.run_file
        if self.sweep_dir is None:
            return None
        files = [p for p in self.sweep_dir.glob("*/requests.jsonl")]
        files += [p for p in self.sweep_dir.glob("*/extension-*/requests.jsonl")]
        if not files:
            return None
        return max(files, key=lambda p: p.stat().st_mtime_ns)

    def tick(self) -> None:
        """Read what was written since the last tick and work out the figures (the thread's step)."""
        path = self._current_file()
        if path is not None and (self._tail is None or self._tail.path != path):
            self._tail, self.stats = RecordTail(path), LiveStats()
            self.runner = None if self.sweep_dir is not None else self.runner
        if self._tail is not None:
            for d in self._tail.read():
                self.stats.feed(d)
        cpu, wall = time.process_time(), time.perf_counter()
        if wall > self._cpu[1]:
            self.cpu_fraction = (cpu - self._cpu[0]) / (wall - self._cpu[1])
        span = wall - self._cpu[1]
        self._cpu = (cpu, wall)
        self.last = self.stats.take_interval(span)
        if self.sweep_dir is not None:
            self._read_probes()

    def progress(self) -> dict[str, int | None]:
        """due / sent / behind / in flight against the schedule (None where not known)."""
        finished = self.stats.completed + self.stats.failed
        r = self.runner
        inflight = len(r.inflight_records) if r is not None else None
        due: int | None = None
        total = self.total
        if r is not None:
            if self._offsets is None or self._offsets[0] is not r:
                sched = getattr(r.plan, "schedule", None) or ()
                offsets = getattr(sched, "offsets_ns", None)
                if offsets is None:  # a list of built entries: read once per runner
                    offsets = np.asarray([s.offset_ns for s in sched], dtype=np.int64)
                self._offsets = (r, offsets)
            offsets = self._offsets[1]
            if len(offsets):
                total = len(offsets)
                due = int(np.searchsorted(offsets, now_ns() - r.t0_ns, side="right"))
        elif self.rate_rps and total:
            due = min(total, int(self.rate_rps * (now_ns() - self._started_ns) / 1e9))
        sent = finished + inflight if inflight is not None else None
        behind = max(due - sent, 0) if due is not None and sent is not None else None
        return {"total": total, "due": due, "sent": sent, "behind": behind, "inflight": inflight, "done": finished}

    def _read_probes(self) -> None:
        assert self.sweep_dir is not None
        for p in sorted(self.sweep_dir.glob("*/result.json")):
            key = p.parent.name
            if key in self._probes:
                continue
            try:
                res = orjson.loads(p.read_bytes())
            except (OSError, orjson.JSONDecodeError):
                continue
            if self.targets and key not in ("unloaded", "calibration"):
                # the misses by cause as sweep.json will have them: against the unloaded check's TTFT
                unloaded = self.sweep_dir / "unloaded"
                base = unloaded_ttft_ms(unloaded) if (unloaded / "result.json").exists() else None
                o = "sent" if (res.get("config") or {}).get("concurrency") else self.origin
                res["why"] = why_of_dirs([p.parent], self.targets, origin=o, unloaded_ttft_ms=base)
            self._probes[key] = res

    # ------------------------------------------------------------------ drawing

    def render(self) -> Group:
        """The view as rich renderables (also used by tests)."""
        pr = self.progress()
        st, last = self.stats, self.last
        head = Text(f"{(now_ns() - self._started_ns) / 1e9:.0f} s  ")
        if pr["total"] is not None:
            head.append(f"due {pr['due'] if pr['due'] is not None else '?'} of {pr['total']}  ")
        if pr["sent"] is not None:
            head.append(f"sent {pr['sent']}  ")
        if pr["behind"]:
            head.append(f"behind {pr['behind']}  ", style="yellow")
        if pr["inflight"] is not None:
            head.append(f"in flight {pr['inflight']}  ")
        head.append(f"completed {st.completed}  failed {st.failed}")
        if st.errors:
            head.append("  errors: " + ", ".join(f"{k} {n}" for k, n in st.errors.most_common()), style="red")
        cpu = "-" if self.cpu_fraction is None else f"{self.cpu_fraction * 100:.0f} %"
        tps = last.get("output_tps")
        figs = Text(  # one plain line: a rich Table costs ~4x the drawing time, held on the interpreter
            f"TTFT p50/p99 ms {_ms(last.get('ttft_p50_ms'))} / {_ms(last.get('ttft_p99_ms'))}   "
            f"ITL p50/p99 ms {_ms(last.get('itl_p50_ms'))} / {_ms(last.get('itl_p99_ms'))}   "
            f"output tok/s {'-' if tps is None else f'{tps:.0f}'}   "
            f"sched lag p99 ms {_ms(last.get('schedule_lag_p99_ms'))}   client CPU {cpu}"
        )
        parts: list[Any] = [head, figs]
        if self._probes:
            parts.append(self._probe_table())
        return Group(*parts)

    def _probe_table(self) -> Table:
        t = Table(title="finished probes", box=None, pad_edge=False)
        for col in ("probe", "offered rps", "requests", "TTFT p99 ms", "SLO", "why"):
            t.add_column(col)
        for name, res in self._probes.items():
            cfg = res.get("config") or {}
            p99 = ((res.get("latency_ms") or {}).get("ttft") or {}).get("p99")
            slo = res.get("slo") or {}
            met = "-" if not slo else ("met" if slo.get("met") else "MISSED")
            whys = [w["text"] for w in (res.get("why") or {}).get("targets") or () if w.get("misses")]
            rate = cfg.get("offered_rps")
            t.add_row(
                name,
                "-" if rate is None else f"{rate:.2f}",
                str((res.get("counts") or {}).get("requests", "-")),
                _ms(p99),
                met,
                "; ".join(whys)[:100],
            )
        return t


class _Exporters:
    """The live exporters of a run (none, Prometheus, OTLP): ``attach`` hands each the runner."""

    def __init__(self) -> None:
        self.exporters: list[Any] = []

    def attach(self, runner: Any) -> None:
        for e in self.exporters:
            e.attach(runner)


@contextlib.contextmanager
def telemetry_from_options(kw: dict[str, Any], jsonl: Path, err: Console) -> Iterator[Any]:
    """The live exporters of ``--metrics-port`` and ``--otlp-endpoint`` around a run (:mod:`loadgen.telemetry`)."""
    out = _Exporters()
    with contextlib.ExitStack() as stack:
        port = kw.get("metrics_port")
        if port is not None:
            try:
                import prometheus_client  # noqa: F401

                from loadgen.telemetry.prom import PromExporter
            except ImportError:
                raise click.UsageError(
                    "--metrics-port needs prometheus-client: pip install 'loadgen[telemetry]'"
                ) from None
            try:
                prom = stack.enter_context(PromExporter(jsonl, port, kw.get("metrics_host") or "127.0.0.1"))
            except OSError as exc:
                raise click.UsageError(f"--metrics-port {port}: cannot listen: {exc.strerror or exc}") from None
            err.print(f"live metrics on {prom.url}", markup=False)
            out.exporters.append(prom)
        url = kw.get("otlp_endpoint")
        if url:
            try:
                import opentelemetry.exporter.otlp.proto.http  # noqa: F401

                from loadgen.telemetry.otlp import OtlpPusher
            except ImportError:
                raise click.UsageError(
                    "--otlp-endpoint needs the OpenTelemetry SDK: pip install 'loadgen[otlp]'"
                ) from None
            with usage_errors():
                interval_s = parse_duration_ns(kw.get("otlp_interval") or "5s") / 1e9
            out.exporters.append(stack.enter_context(OtlpPusher(jsonl, url, interval_s)))
            err.print(f"pushing live metrics over OTLP to {redact_url(url)} every {interval_s:g} s", markup=False)
        yield out
