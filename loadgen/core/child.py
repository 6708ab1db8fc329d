"""Helper processes of a run that cannot hurt it: the /metrics scraper (:mod:`loadgen.serve.scrape`) and the
live exporter's page server (:mod:`loadgen.telemetry.pageserver`); and :func:`die_with_parent` for the
worker processes of ``--workers`` (:mod:`loadgen.spread.workers`).

A helper must never outlive the run, hold its output pipes, take its Ctrl-C, or outrank it for a CPU.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
import sys
import threading
import time

__all__ = ["die_with_parent", "quiet_child"]

PR_SET_PDEATHSIG = 1


def quiet_child(parent: int) -> None:
    """Set up a helper process of the run (call it first thing in the child; ``parent``: the run's pid): it dies
    with the run (``PR_SET_PDEATHSIG``), writes to /dev/null, ignores Ctrl-C (the run's handler stops it), runs
    off the client's own CPUs (``--cpus``) where there are others, and at ``nice`` +10."""
    # never outlive the run, and never hold its stdout/stderr: an orphaned scraper kept a caller waiting on the
    # run's pipes (CI, session 15: a `loadgen run --server-metrics` against vLLM waited 300 s for EOF)
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent:
        os._exit(0)  # the run ended before this child started
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.dup2(null, 2)
    # Ctrl-C reaches the whole foreground process group: the run's own handler stops it and closes this child
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:  # off the client's own CPUs (--cpus) where there are others: the scraper is not the client
        others = set(range(os.cpu_count() or 1)) - os.sched_getaffinity(0)
        if others:
            os.sched_setaffinity(0, others)
    except (OSError, AttributeError):
        pass
    try:
        os.nice(10)  # the client's event loop first, whenever the two want the same CPU
    except OSError:
        pass


PARENT_POLL_S = 0.25
"""How often a worker checks that its parent is alive (where the kernel cannot tell it)."""


def die_with_parent() -> None:
    """End this process when its parent dies, even by ``kill -9`` (issue 20: orphaned workers kept
    sending ~475 requests whose records were lost).

    On Linux the kernel sends SIGKILL at the parent's death (``prctl(PR_SET_PDEATHSIG)``); elsewhere,
    and as a second guard, a daemon thread polls ``os.getppid()`` every :data:`PARENT_POLL_S`
    and exits at once when the worker has been re-parented. Either way no request leaves this
    process more than a fraction of a second after the parent is gone: its records could not be
    written anyway.
    """
    proc = multiprocessing.parent_process()
    parent = proc.pid if proc is not None and proc.pid is not None else os.getppid()
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError):
        pass

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_S)
        os._exit(1)

    if os.getppid() != parent:  # died before the guard was armed
        os._exit(1)
    threading.Thread(target=watch, name="loadgen-parent-watch", daemon=True).start()
