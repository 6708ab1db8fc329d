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
from typing import Any

import orjson

__all__ = ["YIELD_EVERY", "RecordTail", "Ticker"]

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
