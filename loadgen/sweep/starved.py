"""A starved client, found in seconds: its own wake-up lateness against what the SLO tolerates (issue 30).

A client whose event loop wakes late stamps late: every probe it runs carries that error, and a
verdict its error could flip is INVALID (:mod:`loadgen.sweep.client_error`). When the lateness is
already too large with no load at all, every probe near the answer will be INVALID, re-run and
halved; a sweep found that out after 20 minutes. So before any load, and again during the
unloaded check (:mod:`loadgen.sweep.unloaded`: one request at a time, when a server that computes
on the client's cores first uses them), the sweep measures the client's **wake-up lateness**:

* a 2 ms sleep, again and again (the stamp probe's period, :data:`~loadgen.engine.stamp_lateness.PROBE_S`),
  for :data:`BEFORE_LOAD_S` before any load and for the whole unloaded check; each sleep's lateness
  is how long after its due time it ended, less the event-loop thread's own CPU time over the sleep
  (``time.thread_time_ns``): the client's own work (building the workload, a GC collection, writing
  files) holds the loop but is not starvation; the rest is time the client waited for a CPU. A sleep
  in which the loop's own work exceeded the period is left out (counted in ``own_work_samples``): a
  one-off burst of the client's own (a first request's lazy imports, ~30-50 ms) beside a same-priority
  process on its core runs at half speed, so its wall time is twice its CPU time, and two such bursts
  in the ~200 sleeps of an unloaded check made its p99 16-58 ms where the probes that followed ran
  at a p99 schedule lag of 4 ms;
* the phase's figure is the p99 of those lateness values (and the max, printed beside it).

**The rule** (:func:`starved_refusal`, the one refusal rule for a client that cannot serve the test):
the client is starved when a phase's p99 wake-up lateness exceeds the SLO-derived bound
:func:`tolerated_lateness_ms` = max(5 ms, 10 % of the tightest threshold among the TTFT, time to first
answer token, E2E, ITL and stall targets; TPOT only when it is the only one: a late stamp is spread
over a request's tokens). Why 10 %: a lateness of L at p99 means at least 1 in 100 of the client's
stamps is late by L with no load at all (under load it only grows), so a p99 verdict whose true value
lies within L of its threshold cannot be told from a miss; near a queue's knee latency rises at least
as fast as the load (d ln latency / d ln rate = rho / (1 - rho) >= 1 once rho >= 1/2), so a band of
10 % of the threshold is at least the 5-10 % rate precision the search resolves: the client could
decide nothing near the answer. (The 2 % of the schedule-lag bound, ``SweepConfig.schedule_lag_bound_ms``,
is where a lag cannot matter at all; a 2 s SLO absorbs the 48-169 ms lags of a vLLM CPU sweep.) The 5 ms
floor is the schedule-lag bound's: on a 2-core machine with two same-priority CPU hogs the p99 was
0.1-3.9 ms (max 2.9-8.2 ms) over 0.5 s, so the max is not the statistic; a client under SCHED_IDLE
beside a hog on its core read p99 14-21 ms.

The refusal says the figure, the bound and its rule, the cause where it can be seen cheaply (the
client's scheduling priority, the server under test's CPU when ``--serve`` started it, how busy the
client's CPUs were and by whom, the load average, steal) and the remedy; the sweep stops there with
``limited_by: client`` (exit 5), no probe run. ``sweep.json`` ``client_wakeup`` holds each phase's figures.
With ``--cluster`` the load is sent by the cluster's actors: the figures are recorded, nothing refused.
"""

from __future__ import annotations

import asyncio
import math
import os
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from loadgen.core.clock import now_ns
from loadgen.core.slo import SLOTarget
from loadgen.engine.stamp_lateness import PROBE_S
from loadgen.sweep.config import LAG_FLOOR_MS

if TYPE_CHECKING:
    from loadgen.serve.observe import ObserverPair, ServerObserver
    from loadgen.spread.cluster import Cluster

__all__ = [
    "BEFORE_LOAD_S",
    "STARVED_FRACTION",
    "StarvedCheck",
    "Wakeup",
    "measure_wakeup",
    "starved_refusal",
    "tolerated_lateness_ms",
]

T = TypeVar("T")

BEFORE_LOAD_S = 0.5
"""How long the wake-up probe runs before any load (250 sleeps of 2 ms)."""
STARVED_FRACTION = 0.10
"""The share of the tightest threshold a p99 wake-up lateness may reach (module docstring)."""
SPREAD_METRICS = ("tpot",)
"""Targets a late stamp moves only spread over the request's tokens: they set the bound only when alone."""
REMEDY = (
    "give the client CPUs of its own (--cpus), pin the server under test to other cores (taskset or its "
    "cpuset), or run the client on another machine"
)


@dataclass
class Wakeup:
    """One phase's wake-up lateness (module docstring): ``samples`` sleeps of ``period_ms``, their lateness
    ``p99_ms`` and ``max_ms``, over ``duration_s``; ``cpu``: what used the CPU meanwhile (:func:`_cpu_delta`)."""

    phase: str
    samples: int
    p99_ms: float
    max_ms: float
    duration_s: float
    period_ms: float = PROBE_S * 1e3
    cpu: dict[str, Any] = field(default_factory=dict)
    own_work_samples: int = 0  # sleeps left out: the loop's own work exceeded the period (module docstring)

    def to_json(self) -> dict[str, Any]:
        return {
            "phase": self.phase,
            "samples": self.samples,
            "p99_ms": round(self.p99_ms, 3),
            "max_ms": round(self.max_ms, 3),
            "duration_s": round(self.duration_s, 3),
            "period_ms": self.period_ms,
            "own_work_samples": self.own_work_samples,
            "cpu": self.cpu,
        }


def tolerated_lateness_ms(slos: Sequence[SLOTarget]) -> tuple[float, str]:
    """The SLO-derived bound on the p99 wake-up lateness (ms) and its rule in words (module docstring):
    max(5 ms, 10 % of the tightest threshold; TPOT counts only when no other target is set)."""
    direct = [t for t in slos if t.metric not in SPREAD_METRICS]
    chosen = direct or list(slos)
    if not chosen:
        return LAG_FLOOR_MS, f"{LAG_FLOOR_MS:g} ms: no SLO target"
    tight = min(chosen, key=lambda t: t.threshold_ns)
    bound = max(LAG_FLOOR_MS, STARVED_FRACTION * tight.threshold_ns / 1e6)
    return bound, f"max({LAG_FLOOR_MS:g} ms, {STARVED_FRACTION:.0%} of the tightest threshold, {tight.label})"


def starved_refusal(w: Wakeup, slos: Sequence[SLOTarget]) -> str | None:
    """The one refusal rule: the line that stops the sweep when ``w``'s p99 wake-up lateness exceeds
    :func:`tolerated_lateness_ms` (cause and remedy in it), else None."""
    bound, rule = tolerated_lateness_ms(slos)
    if not w.p99_ms > bound:
        return None
    return (
        f"client starved: its own wake-up lateness {w.phase} was p99 {round(w.p99_ms, 3):.1f} ms (max {w.max_ms:.1f} ms; "
        f"{w.samples} sleeps of {w.period_ms:g} ms over {w.duration_s:.1f} s), above the {bound:g} ms the SLO "
        f"tolerates ({rule}), so its timing error could flip the verdicts near the answer; cause: "
        f"{cause_words(w.cpu)}; remedy: {REMEDY}; no probe was run"
    )


def cause_words(cpu: dict[str, Any]) -> str:
    """What kept the client off its CPU, from what :func:`_cpu_delta` saw (cheap, /proc only), in words."""
    said = []
    if cpu.get("policy"):
        said.append(f"the client runs at a low CPU priority ({cpu['policy']})")
    cores, mine = cpu.get("cores"), cpu.get("client_cpus") or []
    if cpu.get("server_cores") is not None and cpu["server_cores"] >= 0.25:
        said.append(f"the server under test used {cpu['server_cores']:.1f} of {cores} cores")
    busy, own = cpu.get("client_cpus_busy"), cpu.get("client_cores")
    if busy is not None and own is not None and busy - own >= 0.25 * max(len(mine), 1):
        which = ",".join(map(str, mine))
        said.append(
            f"other processes kept the client's CPU{'s' if len(mine) > 1 else ''} {which} "
            f"{busy - own:.1f} of {len(mine)} busy (the client itself {own:.2f})"
        )
    if cpu.get("steal_fraction") and cpu["steal_fraction"] >= 0.05:
        said.append(f"the hypervisor took {cpu['steal_fraction']:.0%} of the CPU (steal)")
    load = cpu.get("loadavg_1m")
    tail = f"load average {load:.1f} on {cores} cores" if load is not None else ""
    if not said:
        said.append("no other CPU user was seen (a CPU quota or a held process?)")
    return "; ".join(said) + (f" ({tail})" if tail else "")


def _proc_stat() -> dict[int, tuple[int, int, int]]:
    """Per CPU (-1: all): (total, idle incl. iowait, steal) jiffies, from /proc/stat; {} without it."""
    out: dict[int, tuple[int, int, int]] = {}
    try:
        with open("/proc/stat", encoding="ascii") as fh:
            for line in fh:
                if not line.startswith("cpu"):
                    break
                name, *vals = line.split()
                v = [int(x) for x in vals[:8]] + [0] * (8 - min(8, len(vals)))
                out[-1 if name == "cpu" else int(name[3:])] = (sum(v), v[3] + v[4], v[7])
    except (OSError, ValueError):
        return {}
    return out


def _group_ticks(pgid: int | None) -> int | None:
    """User + system clock ticks of every process in group ``pgid`` (the server under test), from /proc."""
    if pgid is None:
        return None
    from loadgen.serve.process import group_members, proc_stat_fields

    total = 0
    for pid, _ in group_members(pgid) or []:
        f = proc_stat_fields(pid)
        if f is not None and len(f) > 12:
            total += int(f[11]) + int(f[12])  # utime, stime (fields 14 and 15 of proc(5))
    return total


def _snapshot(pgid: int | None) -> tuple[int, dict[int, tuple[int, int, int]], float, int | None]:
    return now_ns(), _proc_stat(), time.process_time(), _group_ticks(pgid)


def _policy() -> str | None:
    """The client's scheduling policy or niceness when it is below the default, in words; else None."""
    try:
        pol = os.sched_getscheduler(0)
        if pol == getattr(os, "SCHED_IDLE", -1):
            return "SCHED_IDLE"
        if pol == getattr(os, "SCHED_BATCH", -1):
            return "SCHED_BATCH"
        nice = os.getpriority(os.PRIO_PROCESS, 0)
    except (AttributeError, OSError):
        return None
    return f"nice {nice}" if nice > 0 else None


def _cpu_delta(a: tuple[int, dict[int, tuple[int, int, int]], float, int | None], pgid: int | None) -> dict[str, Any]:
    """What used the CPU since snapshot ``a`` (cores busy, on average): the client's CPUs, the client itself,
    the server under test, steal, the load average; missing figures are None."""
    t1, st1, cpu1, ticks1 = _snapshot(pgid)
    wall_s = max((t1 - a[0]) / 1e9, 1e-9)
    st0 = a[1]
    try:
        mine = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        mine = []
    cores = len([k for k in st1 if k >= 0]) or os.cpu_count()

    def busy(keys: Sequence[int]) -> float | None:
        if not keys or any(k not in st0 or k not in st1 for k in keys):
            return None
        tot = sum(st1[k][0] - st0[k][0] for k in keys)
        idle = sum(st1[k][1] - st0[k][1] for k in keys)
        return (tot - idle) / tot * len(keys) if tot > 0 else None

    all_tot = (st1[-1][0] - st0[-1][0]) if -1 in st1 and -1 in st0 else 0
    steal = (st1[-1][2] - st0[-1][2]) / all_tot if all_tot > 0 else None
    hz = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    server = (ticks1 - a[3]) / hz / wall_s if ticks1 is not None and a[3] is not None else None
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        load = None
    cb = busy(mine)
    return {
        "cores": cores,
        "client_cpus": mine,
        "client_cpus_busy": None if cb is None else round(cb, 3),
        "client_cores": round((cpu1 - a[2]) / wall_s, 3),
        "server_cores": None if server is None else round(server, 3),
        "steal_fraction": None if steal is None else round(steal, 4),
        "loadavg_1m": load,
        "policy": _policy(),
    }


async def measure_wakeup(
    phase: str, *, duration_s: float | None = None, until: asyncio.Future[Any] | None = None, pgid: int | None = None
) -> Wakeup:
    """The wake-up lateness over ``duration_s`` seconds, and until ``until`` is done (module docstring)."""
    period_ns = int(PROBE_S * 1e9)
    late: list[int] = []
    own_work = 0
    a = _snapshot(pgid)
    end = a[0] + int((duration_s or 0.0) * 1e9)
    while now_ns() < end or (until is not None and not until.done()):
        t, c = now_ns(), time.thread_time_ns()
        await asyncio.sleep(PROBE_S)
        own = time.thread_time_ns() - c
        if own > period_ns:
            own_work += 1  # the client's own burst, not a wake-up: left out (module docstring)
            continue
        late.append(max(0, now_ns() - t - period_ns - own))
    cpu = _cpu_delta(a, pgid)
    late.sort()
    p99 = late[max(0, math.ceil(0.99 * len(late)) - 1)] / 1e6 if late else 0.0
    dur = (now_ns() - a[0]) / 1e9
    return Wakeup(phase, len(late), p99, (late[-1] / 1e6) if late else 0.0, dur, cpu=cpu, own_work_samples=own_work)


class StarvedCheck:
    """The sweep's side of the rule: ``before_load``, then ``during`` the unloaded check; ``refusal`` once
    starved; :meth:`apply` writes ``client_wakeup`` and the answer into ``sweep.json``."""

    def __init__(
        self,
        slos: Sequence[SLOTarget],
        progress: Callable[[str], None],
        *,
        pgid: int | None = None,
        remote: bool = False,
    ) -> None:
        self.slos, self.progress, self.pgid, self.remote = list(slos), progress, pgid, remote
        self.phases: list[Wakeup] = []
        self.refusal: str | None = None

    @classmethod
    def for_sweep(
        cls,
        slos: Sequence[SLOTarget],
        progress: Callable[[str], None],
        server_observer: ServerObserver | ObserverPair | None,
        cluster: Cluster | None,
    ) -> StarvedCheck:
        """The check of one sweep: the server's process group when ``--serve`` started it; remote with a cluster."""
        server = getattr(server_observer, "server", None)
        return cls(slos, progress, pgid=getattr(server, "pgid", None), remote=cluster is not None)

    def _judge(self, w: Wakeup, last: bool) -> bool:
        self.phases.append(w)
        self.refusal = None if self.remote else starved_refusal(w, self.slos)
        if self.refusal is not None:
            self.progress(self.refusal)
        elif last:
            self.progress(self.line())
        return self.refusal is not None

    async def before_load(self, *, last: bool = False) -> bool:
        """Probe the loop for :data:`BEFORE_LOAD_S`; True (said at once) when the client is starved."""
        return self._judge(await measure_wakeup("before any load", duration_s=BEFORE_LOAD_S, pgid=self.pgid), last)

    async def during(self, aw: Awaitable[T]) -> T:
        """Await ``aw`` (the unloaded check) with the loop probed meanwhile; :attr:`refusal` set when starved."""
        task = asyncio.ensure_future(aw)
        # at least BEFORE_LOAD_S of samples (~250): a hold or two of the client's own (a file written) stay out of
        # the p99 (0.5 s more than that cost every sweep ~1 s: over CI's ~80 sweeps, a minute)
        w = await measure_wakeup("during the unloaded check", duration_s=BEFORE_LOAD_S, until=task, pgid=self.pgid)
        out = await task
        self._judge(w, True)
        return out

    def line(self) -> str:
        """The console line of the plan: each phase's figures and the bound."""
        bound, rule = tolerated_lateness_ms(self.slos)
        figs = "; ".join(f"p99 {w.p99_ms:.1f} ms, max {w.max_ms:.1f} ms {w.phase}" for w in self.phases)
        return f"client wake-up lateness: {figs} (a starved client is refused above {bound:g} ms at p99: {rule})"

    def apply(self, result: dict[str, Any]) -> None:
        """``sweep.json``: ``client_wakeup`` (figures, bound, refusal); a refusal is the answer (``limited_by: client``)."""
        bound, rule = tolerated_lateness_ms(self.slos)
        result["client_wakeup"] = {
            "phases": [w.to_json() for w in self.phases],
            "bound_ms": bound,
            "rule": f"p99 wake-up lateness above {rule}" + (" (not judged: --cluster)" if self.remote else ""),
            "starved": self.refusal is not None,
            "refusal": self.refusal,
        }
        result["answer"]["client_starved"] = self.refusal
        if self.refusal is not None:
            result["answer"]["limited_by"] = "client"
