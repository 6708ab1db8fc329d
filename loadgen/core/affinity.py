"""CPU affinity: keep the load generator (and a local server) on cores of their own.

On a small machine that runs both the client and the server under test (the simulated
endpoint, a CPU-only vLLM), a woken client can wait in the run queue behind a busy server
for a scheduler tick (4 ms at HZ=250), which it then reports as its own schedule lag.
``--cpus`` on ``loadgen run``/``sweep`` and ``loadgen sim`` gives each its own cores
(``os.sched_setaffinity``; worker processes inherit it). Linux only.
"""

from __future__ import annotations

import os
import re

from loadgen.core.errors import ConfigError

MAX_CPU = 65535  # CPU numbers above this are refused before a set of them is built
_PART = re.compile(r"(\d+)(?:-(\d+))?")


def parse_cpus(text: str, option: str = "--cpus") -> set[int]:
    """CPU numbers from ``0``, ``0-3`` or ``0,2,4-5``.

    Raises:
        ConfigError: a malformed list, a descending range or no CPU at all (names ``option``).
    """
    if not text.strip():
        raise ConfigError(f"{option} {text!r}: no CPU given")
    cpus: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        m = _PART.fullmatch(part)
        if m is None:
            raise ConfigError(f"{option} {text!r}: expected CPU numbers like 0, 0-3 or 0,2,4-5")
        a = int(m.group(1))
        b = int(m.group(2)) if m.group(2) is not None else a
        if b < a:
            raise ConfigError(f"{option} {text!r}: {part!r} is not a range of CPU numbers (high end first)")
        if b > MAX_CPU:
            raise ConfigError(f"{option} {text!r}: CPU {b} is beyond any machine's CPU numbers (at most {MAX_CPU})")
        cpus.update(range(a, b + 1))
    return cpus


def pin_process(cpus: set[int], option: str = "--cpus") -> None:
    """Restrict this process (every thread it has now, and the threads and processes it
    starts later) to ``cpus``.

    Raises:
        ConfigError: the platform has no ``sched_setaffinity`` or a CPU is not available
        to this process (names ``option`` and the CPUs it may use).
    """
    check_cpus(cpus, option)
    os.sched_setaffinity(0, cpus)
    try:  # threads started before (e.g. a BLAS pool at import) keep their own mask: pin them too
        tids = [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:
        tids = []
    for tid in tids:
        try:
            os.sched_setaffinity(tid, cpus)
        except OSError:
            pass  # a thread that has just ended


def check_cpus(cpus: set[int], option: str = "--cpus") -> None:
    """Check that this process could be pinned to ``cpus`` (see :func:`pin_process`).

    Raises:
        ConfigError: as :func:`pin_process`.
    """
    if not hasattr(os, "sched_setaffinity"):
        raise ConfigError(f"{option}: CPU affinity is not supported on this platform")
    allowed = os.sched_getaffinity(0)
    missing = sorted(cpus - allowed)
    if missing:
        raise ConfigError(f"{option}: CPU {missing[0]} is not available (this process may use {format_cpus(allowed)})")


def current_cpus() -> list[int] | None:
    """The CPUs this process may run on (None where the platform cannot tell)."""
    if not hasattr(os, "sched_getaffinity"):
        return None
    return sorted(os.sched_getaffinity(0))


def format_cpus(cpus: set[int] | list[int]) -> str:
    """``{0, 1, 2, 5}`` -> ``"0-2,5"``."""
    out: list[str] = []
    s = sorted(cpus)
    i = 0
    while i < len(s):
        j = i
        while j + 1 < len(s) and s[j + 1] == s[j] + 1:
            j += 1
        out.append(str(s[i]) if i == j else f"{s[i]}-{s[j]}")
        i = j + 1
    return ",".join(out)
