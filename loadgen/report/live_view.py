"""The live terminal view's figures and drawing, and the process that draws it.

The view of ``run`` and ``sweep`` (started by :class:`loadgen.cli.live.LiveView`) runs in a
**process of its own** (:func:`child_main`), never in the sending process: it tails
``requests.jsonl`` (written line by line as requests finish, :mod:`loadgen.engine.recordlog`), works
out the figures and draws them with rich ``Live`` on the terminal it shares with the run. The
sending process keeps one thread that wakes once per ``interval_s`` and writes one short line
to the view's stdin (requests in flight, its CPU time; once per runner t0 and the schedule's
send offsets, in a file): no parsing, no percentiles and no drawing share the interpreter lock
with the send loop. (In a thread of the sending process, each refresh held the interpreter
for ~2 ms of parsing and drawing at 200 req/s, and the send loop waited for it.) The sending
process waits for the view to be ready (its imports, ~1 s of CPU) before its run starts; from
then on the view runs in the idle scheduling class (``SCHED_IDLE``, else nice 19), so that on a
busy machine it never takes a CPU from the run (its figures may then lag).

Shown (``interval`` = the last refresh period, figures over the requests that *finished* in
it): progress against the schedule (due = scheduled sends whose time has come, sent =
finished + in flight, behind = due - sent), in flight, completed, errors by kind, TTFT and
ITL p50/p99, output tok/s (tokens of the requests finished in the interval / interval),
schedule lag p99, and the client process's CPU (the sending process's CPU time / wall time,
as it reports them; worker processes are not counted). For a sweep: the table of finished probes,
each row the probe as the sweep stored it (handed over by the sending process, :func:`probe_message`):
its verdict text and its counts per target (over of measured: ``sweep.json`` ``targets[j]``
``exceedances`` of ``requests``, the counts the console and report.html show too), its misses by
cause worked out over all its segments as ``sweep.json`` will have them (against the sweep's unloaded
check, :func:`loadgen.engine.why.sweep_why`).

The view's stdin protocol (one JSON object a line): ``{"t0_ns": int, "offsets": path | null}``
(a runner started: its t0 on the monotonic clock and an ``.npy`` of its send offsets),
``{"inflight": n, "cpu_s": s, "wall_s": s}`` (each refresh), ``{"print": text}`` (a line
above the view: a sweep's progress lines), ``{"probe": {...}}`` (a sweep's probe has finished:
:func:`probe_message`). End of input ends the view (it clears itself).
"""

from __future__ import annotations

import contextlib
import math
import os
import select
import signal
import sys
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

import numpy as np
import orjson
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from loadgen.core.clock import now_ns
from loadgen.engine.why import unloaded_ttft_ms, why_of_dirs
from loadgen.report.why import cause_words
from loadgen.telemetry.tail import RecordTail

if TYPE_CHECKING:
    from loadgen.core.slo import SLOTarget
    from loadgen.engine.runner import Runner
    from loadgen.sessions.turns import SessionRunner

__all__ = [
    "INTERVAL_S",
    "LiveFigures",
    "LiveSettings",
    "LiveStats",
    "child_main",
    "inflight_count",
    "probe_message",
    "schedule_offsets",
]

INTERVAL_S = 1.0
"""Refresh period of the view (s)."""

COUNTED_SHORT = "over of measured: sweep.json's counts per target"
"""The finished-probes table's note on its counts (:data:`loadgen.report.sweep_facts.COUNTED`)."""

PROBE_KEYS = ("index", "offered_rps", "concurrency", "verdict", "verdict_text", "low_confidence", "stopped_early",
              "targets", "latency_ms", "dir", "segments", "judged_requests")  # fmt: skip
"""The fields of a finished probe the sending process hands the view (:func:`probe_message`)."""


def probe_message(index: int, probe: dict[str, Any]) -> dict[str, Any]:
    """The view's ``{"probe": ...}`` message of a finished probe: its ``sweep.json`` entry (``Probe.to_json()``),
    numbered from 1, cut to :data:`PROBE_KEYS`."""
    return {"probe": {k: v for k, v in {**probe, "index": index}.items() if k in PROBE_KEYS}}


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


def _finite_rate(rate: float | None) -> bool:
    """A rate that sets a due count: finite and positive (not ``--rate inf``, NaN, 0 or absent)."""
    return rate is not None and math.isfinite(rate) and rate > 0


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}"


class LiveSettings(TypedDict, total=False):
    """The keyword arguments of :class:`LiveFigures` (its defaults), which :class:`loadgen.cli.live.LiveView` forwards."""

    run_file: Path | None
    sweep_dir: Path | None
    targets: Sequence[SLOTarget]
    origin: str
    total: int | None
    rate_rps: float | None
    interval_s: float
    started_ns: int | None


class LiveFigures:
    """What the view shows, worked out from the files (``tick``) and drawn (``render``).

    ``run_file``: the run's ``requests.jsonl``; ``sweep_dir``: a sweep's output directory (the
    newest ``requests.jsonl`` under it is tailed; finished probes come from :meth:`add_probe`).
    ``total``/``rate_rps``: the planned requests and rate, for progress without a runner
    (``--workers``; an infinite or absent rate gives no due count). Runner facts come either
    from a runner in this process (``attach``: tests, the bench) or from the sending process's
    messages (``t0_ns``, ``offsets``, ``inflight``, ``parent_cpu``: the view's process).
    """

    def __init__(
        self,
        *,
        run_file: Path | None = None,
        sweep_dir: Path | None = None,
        targets: Sequence[SLOTarget] = (),
        origin: str = "scheduled",
        total: int | None = None,
        rate_rps: float | None = None,
        interval_s: float = INTERVAL_S,
        started_ns: int | None = None,
    ) -> None:
        self.run_file = run_file
        self.sweep_dir = sweep_dir
        self.targets = list(targets)
        self.origin = origin
        self.total = total
        self.rate_rps = rate_rps
        self.interval_s = interval_s
        self.runner: Runner | SessionRunner | None = None
        self.t0_ns: int | None = None
        self.offsets: np.ndarray | None = None
        self.inflight: int | None = None
        self.parent_cpu: tuple[float, float] | None = None  # (CPU s, wall s) last reported by the sending process
        self.stats = LiveStats()
        self.last: dict[str, Any] = {}
        self._tail: RecordTail | None = None
        self._started_ns = now_ns() if started_ns is None else started_ns
        self._cpu: tuple[float, float] | None = (time.process_time(), time.perf_counter())
        self._tick_ns = self._started_ns
        self.cpu_fraction: float | None = None
        self._probes: dict[str, dict[str, Any]] = {}
        self._offsets: tuple[Any, np.ndarray] | None = None  # (runner, its schedule's send offsets)

    def attach(self, runner: Runner | SessionRunner) -> None:
        """Keep a read-only reference to a runner of this process (``measure``'s ``runner_hook``)."""
        self.runner = runner

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

    def _cpu_now(self) -> tuple[float, float]:
        return self.parent_cpu if self.parent_cpu is not None else (time.process_time(), time.perf_counter())

    def tick(self) -> None:
        """Read what was written since the last tick and work out the figures (the view's step)."""
        path = self._current_file()
        if path is not None and (self._tail is None or self._tail.path != path):
            self._tail, self.stats = RecordTail(path), LiveStats()
            if self.sweep_dir is not None:  # a new probe: its own runner, not known here
                self.runner, self.t0_ns, self.offsets, self.inflight = None, None, None, None
        if self._tail is not None:
            for d in self._tail.read():
                self.stats.feed(d)
        cpu, wall = self._cpu_now()
        if self._cpu is not None and wall > self._cpu[1]:
            self.cpu_fraction = (cpu - self._cpu[0]) / (wall - self._cpu[1])
        self._cpu = (cpu, wall)
        now = now_ns()
        span_s = (now - self._tick_ns) / 1e9
        self._tick_ns = now
        self.last = self.stats.take_interval(span_s if span_s > 0 else self.interval_s)

    def _runner_facts(self) -> tuple[int | None, np.ndarray | None, int | None]:
        """(t0_ns, send offsets, in flight): from an attached runner, else from the sending process's messages."""
        r = self.runner
        if r is None:
            return self.t0_ns, self.offsets, self.inflight
        if self._offsets is None or self._offsets[0] is not r:
            self._offsets = (r, schedule_offsets(r))
        return (r.t0_ns or None), self._offsets[1], inflight_count(r)

    def progress(self) -> dict[str, int | None]:
        """due / sent / behind / in flight against the schedule (None where not known)."""
        finished = self.stats.completed + self.stats.failed
        t0, offsets, inflight = self._runner_facts()
        due: int | None = None
        total = self.total
        if offsets is not None and len(offsets):
            total = len(offsets)
            if t0 is not None:
                due = int(np.searchsorted(offsets, now_ns() - t0, side="right"))
        elif total and self.rate_rps is not None and _finite_rate(self.rate_rps):  # not --rate inf, NaN, 0
            due = min(total, int(self.rate_rps * (now_ns() - self._started_ns) / 1e9))
        sent = finished + inflight if inflight is not None else None
        if sent is not None and total is not None:
            sent = min(sent, total)  # a request ending between the in-flight count and the file's read
        behind = max(due - sent, 0) if due is not None and sent is not None else None
        return {"total": total, "due": due, "sent": sent, "behind": behind, "inflight": inflight, "done": finished}

    def add_probe(self, probe: dict[str, Any]) -> None:
        """A finished probe as the sweep stored it (its ``sweep.json`` entry, :func:`probe_message`): a row of
        the table, its counts and verdict text the sweep's own. Its misses by cause are worked out here, over
        all its segments, as ``sweep.json`` will have them (:func:`loadgen.engine.why.sweep_why`)."""
        probe = dict(probe)
        if self.targets and self.sweep_dir is not None and probe.get("dir"):
            pdir = self.sweep_dir / str(probe["dir"])
            unloaded = self.sweep_dir / "unloaded"
            base = unloaded_ttft_ms(unloaded) if (unloaded / "result.json").exists() else None
            o = "sent" if probe.get("concurrency") else self.origin
            dirs = [pdir, *sorted(pdir.glob("extension-*"))]
            probe["why"] = why_of_dirs(dirs, self.targets, origin=o, unloaded_ttft_ms=base)
        self._probes[str(probe.get("index") or len(self._probes) + 1)] = probe

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
        figs = Text(
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
        """The finished probes: verdict text and counts as the sweep stored them (never "met" for a probe
        without a PASS: an INVALID, interrupted or rate-limited probe shows its own verdict text)."""
        from loadgen.report.sweep_facts import counts_words  # a sweep's only: a plain run imports no sweep module
        from loadgen.sweep.verdict import text_of

        t = Table(title=f"finished probes ({COUNTED_SHORT})", box=None, pad_edge=False)
        for col in ("probe", "offered", "verdict", "over of measured", "p99 ms", "why"):
            t.add_column(col, overflow="fold")
        for name, p in self._probes.items():
            rate = p.get("offered_rps")
            load = f"c={p['concurrency']}" if p.get("concurrency") else ("-" if rate is None else f"{rate:.2f} req/s")
            metric = self.targets[0].metric if self.targets else "ttft"
            p99 = ((p.get("latency_ms") or {}).get(metric) or {}).get("p99")
            whys = [cause_words(w) for w in (p.get("why") or {}).get("targets") or () if w.get("misses")]
            t.add_row(name, load, text_of(p), counts_words(p), _ms(p99), "; ".join(x for x in whys if x)[:100])
        return t

    def handle(self, msg: dict[str, Any]) -> str | None:
        """Take one message of the sending process (see the module docstring); a line to print, or None."""
        if "print" in msg:
            return str(msg["print"])
        if "probe" in msg:
            self.add_probe(msg["probe"])
        if "t0_ns" in msg:
            self.t0_ns = int(msg["t0_ns"])
            path = msg.get("offsets")
            self.offsets = np.load(path) if path else None
        if "inflight" in msg:
            self.inflight = None if msg["inflight"] is None else int(msg["inflight"])
        if "cpu_s" in msg:
            if self.parent_cpu is None:
                self._cpu = None  # this process's own CPU time is not the run's
            self.parent_cpu = (float(msg["cpu_s"]), float(msg["wall_s"]))
        return None


def inflight_count(runner: Runner | SessionRunner) -> int:
    """Requests of ``runner`` sent and not yet ended (prepared sends waiting for their time left out).

    Read from another thread: ``list(dict.values())`` copies under the interpreter lock, so the
    event loop's changes to the dict cannot break the count (~300 records: ~15 µs).
    """
    return sum(1 for rec in list(runner.inflight_records.values()) if rec.sent_ns is not None)


def schedule_offsets(runner: Runner | SessionRunner) -> np.ndarray:
    """The send offsets (ns from t0) of a runner's open-loop schedule; empty for a closed loop."""
    sched = getattr(runner.plan, "schedule", None) or ()
    offsets = getattr(sched, "offsets_ns", None)
    if offsets is None:  # a list of built entries
        offsets = np.asarray([s.offset_ns for s in sched], dtype=np.int64)
    return np.asarray(offsets, dtype=np.int64)


def child_main() -> None:
    """The view's process: ``argv[1]`` its settings (JSON); stdin the sending process's messages; draws on stderr."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the run's: the view ends when its input does
    from loadgen.core.slo import parse_slo

    cfg = orjson.loads(sys.argv[1])
    with contextlib.suppress(OSError):  # ready: the sending process starts its run now
        os.write(1, b"r")
        os.close(1)
    # from now on the view never takes a CPU from the run: it runs only when a CPU is otherwise idle
    # (SCHED_IDLE: no wake-up preemption of the sending process on a busy machine); else the lowest nice
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError):
        with contextlib.suppress(OSError):
            os.nice(19)
    view = LiveFigures(
        run_file=Path(cfg["run_file"]) if cfg.get("run_file") else None,
        sweep_dir=Path(cfg["sweep_dir"]) if cfg.get("sweep_dir") else None,
        targets=[parse_slo(t) for t in cfg.get("targets") or ()],
        origin=cfg.get("origin") or "scheduled",
        total=cfg.get("total"),
        rate_rps=cfg.get("rate_rps"),
        interval_s=float(cfg.get("interval_s") or INTERVAL_S),
        started_ns=cfg.get("started_ns"),
    )
    console = Console(stderr=True)
    live: Live | None = None
    buf = b""
    next_tick = time.monotonic() + view.interval_s
    open_input = True
    try:
        while open_input:
            ready, _, _ = select.select([0], [], [], max(0.0, next_tick - time.monotonic()))
            if ready:
                data = os.read(0, 65536)
                open_input = bool(data)
                buf += data
                *lines, buf = buf.split(b"\n")
                refresh = False
                for raw in lines:
                    try:
                        msg = orjson.loads(raw)
                        text = view.handle(msg)
                    except (orjson.JSONDecodeError, ValueError, OSError, TypeError, KeyError):
                        continue
                    refresh = refresh or "inflight" in msg  # drawn as the facts arrive: in flight and the file agree
                    if text is not None:
                        (live.console if live is not None else console).print(text, markup=False)
                if refresh:
                    next_tick = time.monotonic()
            if open_input and time.monotonic() >= next_tick:
                next_tick = time.monotonic() + 2 * view.interval_s  # without word from the run: every 2 intervals
                try:
                    view.tick()
                    if live is None:  # drawn from the first refresh on: lines printed before it stay above
                        live = Live(console=console, auto_refresh=False, transient=True, redirect_stdout=False,
                                    redirect_stderr=False)  # fmt: skip
                        live.__enter__()
                    live.update(view.render(), refresh=True)
                except Exception:  # a bad refresh is skipped; the view goes on
                    continue
    finally:
        if live is not None:
            live.__exit__(None, None, None)
