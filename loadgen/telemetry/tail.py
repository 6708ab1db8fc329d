"""Whole new lines of a ``requests.jsonl`` being written: what live readers of a run consume.

The run writes one whole line per finished request as it finishes (:mod:`loadgen.engine.recordlog`),
the parent of ``--workers`` processes and of Ray actors included, so one reader of that file
sees every request of the run, from whichever process it came. Readers run in a thread of the
sending process: parsing hands the interpreter over every :data:`YIELD_EVERY` lines, so the
event loop's thread waits at most that long (tens of µs) for it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import orjson

if TYPE_CHECKING:
    from loadgen.engine.runner import Runner
    from loadgen.sessions.turns import SessionRunner

__all__ = ["YIELD_EVERY", "LiveReader", "RecordTail", "Ticker"]

YIELD_EVERY = 32
"""Lines parsed between two hand-overs of the interpreter (a reader runs in a thread beside the sends)."""


class RecordTail:
    """Reads the lines appended to ``path`` since the last :meth:`read` (a torn last line waits)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.rest = b""

    def read(self) -> list[dict[str, Any]]:
        """The whole lines written since the last call, parsed (malformed ones skipped); [] without a file."""
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self.offset)
                data = fh.read()
        except OSError:
            return []
        self.offset += len(data)
        data = self.rest + data
        cut = data.rfind(b"\n") + 1
        self.rest = data[cut:]
        out = []
        for k, raw in enumerate(data[:cut].splitlines()):
            if k % YIELD_EVERY == YIELD_EVERY - 1:
                time.sleep(0)  # let the event loop's thread take the interpreter: a send never waits long
            if raw.strip():
                try:
                    out.append(orjson.loads(raw))
                except orjson.JSONDecodeError:
                    continue
        return out


def refresh_until_stopped(stop: threading.Event, period_s: float, refresh: Callable[[], None]) -> None:
    """An exporter thread's body: ``refresh()`` every ``period_s`` seconds until ``stop`` is set.
    An exception in one refresh is skipped: an exporter must never stop the run."""
    while not stop.wait(period_s):
        try:
            refresh()
        except Exception:  # the exporter must never stop the run
            continue


class Ticker:
    """A daemon thread that calls ``tick()`` every ``period_s`` seconds from :meth:`start` to :meth:`stop`
    (:func:`refresh_until_stopped`: an exception in one tick is skipped), the thread of every live reader."""

    def __init__(self, name: str, period_s: float, tick: Callable[[], None]) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=refresh_until_stopped, args=(self._stop, period_s, tick), name=name, daemon=True
        )

    def start(self) -> None:
        """Start the thread: the first tick comes ``period_s`` from now."""
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop the ticks and wait up to ``timeout_s`` for the one under way (nothing to wait for if never started)."""
        self._stop.set()
        if self._thread.ident is not None:
            self._thread.join(timeout=timeout_s)


class LiveReader:
    """What every live exporter of a run (the OTLP push, the Prometheus page) reads: the new lines of
    ``jsonl`` (``_tail``), the runner once attached (in flight, unsent: :meth:`attach` is a
    ``measure(runner_hook=...)``), and the client's own gauges, set by :meth:`_client_gauges` each refresh."""

    def __init__(self, jsonl: Path, refresh_s: float) -> None:
        self.jsonl = jsonl
        self.refresh_s = refresh_s
        self.runner: Runner | SessionRunner | None = None
        self._tail = RecordTail(jsonl)
        self._lag_p99_s: float | None = None
        self._cpu_ratio: float | None = None
        self._cpu = (time.process_time(), time.perf_counter())

    def attach(self, runner: Runner | SessionRunner) -> None:
        """Keep a read-only reference to the runner (in flight, unsent)."""
        self.runner = runner

    def _client_gauges(self, lines: list[dict[str, Any]], cpu: float, wall: float) -> None:
        """This process's CPU time / wall time since the last refresh (``cpu``, ``wall``: now), and the p99
        schedule lag of ``lines`` (kept from before when none of them has one)."""
        if wall > self._cpu[1]:
            self._cpu_ratio = (cpu - self._cpu[0]) / (wall - self._cpu[1])
        self._cpu = (cpu, wall)
        lags = [float(d["schedule_lag_ms"]) / 1e3 for d in lines if d.get("schedule_lag_ms") is not None]
        if lags:
            self._lag_p99_s = float(np.percentile(lags, 99))
