"""``loadgen selftest``: what this machine's client can measure honestly, against a truth log.

No peer publishes its own timing error or per-core capacity; users ask "can I trust the
generator?". The self-test answers for the machine it runs on, in about a minute: each level runs
``loadgen run`` (the command a user types) against a fresh simulated endpoint in its lean
``--fast`` mode (TTFT ``TTFT_MS``, ITL ``ITL_MS``, ``TOKENS`` tokens a stream, a slot for every
stream: it queues nothing, so every error is the client's) that writes a truth log, and pairs the
run's records with it (:func:`loadgen.sim.truth.truth_errors`). With two CPUs or more the
simulator has the last CPU and the client the others (``--cpus``), as a client and a remote server
would.

Levels: closed loop at ``CLOSED_LEVELS`` users, open loop at ``OPEN_RATES`` req/s (constant
arrivals), each ``duration_s`` measured after ``WARMUP_S``. A level stops the ladder when it is
no longer honest twice in a row (higher levels only get worse). Per level:

* output tok/s delivered, client CPU (cores busy, the run's own from t0 to its end, less the senders'
  idle spin to their deadlines), output tok/s per client core, the client's peak RSS (``VmHWM``);
* TTFT p50, TTFT p99 and ITL p99 errors (reported - true, ms), the p99 schedule lag (open loop);
* the run's own verdict; *honest*: VALID and every error within ``HONEST_MS`` (2 ms);
* the run's own estimate of the three errors (``result.json`` ``latency_error_ms``) and its bound,
  beside the truth: how far the client's account of its own error can be trusted.

The certificate: the highest honest closed-loop level and open-loop rate, with their figures,
written as ``selftest.json`` and printed as a table. ``loadgen sweep --selftest`` runs it first and
records it beside the sweep's answer.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from loadgen.sim.launch import SimProcess
from loadgen.sim.truth import truth_errors
from loadgen.version import __version__

__all__ = ["CLOSED_LEVELS", "HONEST_MS", "OPEN_RATES", "Level", "certificate", "run_selftest"]

CLOSED_LEVELS = (8, 16, 32, 64, 128)  # closed-loop users
OPEN_RATES = (100, 200, 400, 800)  # open-loop req/s, constant arrivals
HONEST_MS = 2.0  # a level is honest when every error is within this (and the run VALID)
TTFT_MS, ITL_MS, TOKENS, INPUT_TOKENS = 10.0, 1.0, 256, 16
WARMUP_S = 1.0
STOP_AFTER_DISHONEST = 2  # the ladder stops after this many dishonest levels in a row


@dataclass
class Level:
    """One level's figures (see the module docstring)."""

    kind: str  # "closed" (users) or "open" (req/s)
    level: int
    output_tps: float
    client_cores: float
    tps_per_core: float
    ttft_p50_err_ms: float
    ttft_p99_err_ms: float
    itl_p99_err_ms: float
    schedule_lag_p99_ms: float | None
    rss_mib: float | None
    valid: bool
    honest: bool
    failing: list[str] = field(default_factory=list)
    # the run's own estimate of the same three errors and its bound (result.json latency_error_ms): the
    # certificate shows how near the client's estimate of its error is to the truth
    estimated_moves_ms: dict[str, float] | None = None
    error_bound_ms: float | None = None


class _PeakRSS:
    """A child's peak RSS (``VmHWM`` of ``/proc/PID/status``, KiB), sampled until it exits."""

    def __init__(self, pid: int) -> None:
        self.pid, self.kib = pid, 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                with open(f"/proc/{self.pid}/status", encoding="ascii") as fh:
                    for line in fh:
                        if line.startswith("VmHWM:"):
                            self.kib = max(self.kib, int(line.split()[1]))
            except (OSError, ValueError):
                return
            self._stop.wait(0.1)

    def stop(self) -> float | None:
        self._stop.set()
        self._t.join()
        return self.kib / 1024 if self.kib else None


def cpu_split() -> tuple[list[str], list[str]]:
    """``--cpus`` for the simulator (the last CPU) and the client (the others); empty with one CPU."""
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if len(cpus) < 2:
        return [], []
    return ["--cpus", str(cpus[-1])], ["--cpus", ",".join(map(str, cpus[:-1]))]


def run_level(kind: str, level: int, work: Path, duration_s: float, pin: bool = True) -> Level:
    """One ``loadgen run`` at ``level`` against a fresh ``--fast`` simulator with a truth log."""
    sim_cpus, client_cpus = cpu_split() if pin else ([], [])
    work.mkdir(parents=True, exist_ok=True)
    truth, out = work / "truth.jsonl", work / "run"
    load = ["--concurrency", str(level)] if kind == "closed" else ["--rate", str(level), "--arrival", "constant"]
    sim_args = ["--fast", "--slots", "8192", "--ttft-ms", str(TTFT_MS), "--itl-ms", str(ITL_MS),
                "--truth-log", str(truth), *sim_cpus]  # fmt: skip
    with SimProcess(sim_args) as sim:
        cmd = [sys.executable, "-m", "loadgen.cli", "run", "--endpoint", sim.url or "", *load,
               "--duration", f"{duration_s:g}s", "--warmup", f"{WARMUP_S:g}s", "--input-tokens", str(INPUT_TOKENS),
               "--output-tokens", str(TOKENS), "--out", str(out), *client_cpus]  # fmt: skip
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        rss = _PeakRSS(p.pid)
        text, _ = p.communicate(timeout=duration_s * 8 + 120)
        rss_mib = rss.stop()
    time.sleep(0.2)  # the simulator's last truth lines
    if not (out / "result.json").exists():
        tail = text.decode(errors="replace").strip().splitlines()[-3:]
        raise RuntimeError(f"loadgen run at {kind} {level} wrote no result (exit {p.returncode}): {' | '.join(tail)}")
    res = json.loads((out / "result.json").read_text())
    e = truth_errors(out, truth)
    # the busy share (less the senders' idle spin to their deadlines: loadgen.engine.lifecycle.RunEngine._spin)
    cores = float(res["client"].get("busy_cpu_fraction") or res["client"].get("cpu_fraction") or 0.0)
    tps = float(res["throughput"].get("output_tps") or 0.0)
    valid = bool(res["validity"]["valid"])
    errs = [e["ttft_p50_err_ms"], e["ttft_p99_err_ms"], e["itl_p99_err_ms"]]
    lag = ((res.get("latency_ms") or {}).get("schedule_lag") or {}).get("p99") if kind == "open" else None
    failing = [c["name"] for c in res["validity"]["checks"] if not c["ok"]]
    est = res.get("latency_error_ms") or {}
    return Level(
        kind=kind, level=level, output_tps=tps, client_cores=cores, tps_per_core=tps / cores if cores else 0.0,
        ttft_p50_err_ms=errs[0], ttft_p99_err_ms=errs[1], itl_p99_err_ms=errs[2], schedule_lag_p99_ms=lag,
        rss_mib=rss_mib, valid=valid, honest=valid and all(abs(x) <= HONEST_MS for x in errs if x == x),
        failing=failing, estimated_moves_ms=est.get("estimated_moves_ms"), error_bound_ms=est.get("bound_ms"),
    )  # fmt: skip


def run_selftest(
    work: Path,
    *,
    closed: tuple[int, ...] = CLOSED_LEVELS,
    rates: tuple[int, ...] = OPEN_RATES,
    duration_s: float = 4.0,
    pin: bool = True,
    on_level: Callable[[Level], None] | None = None,
) -> dict[str, Any]:
    """Run the ladders (each stops after ``STOP_AFTER_DISHONEST`` dishonest levels in a row) and
    return the certificate (:func:`certificate`); each level's files stay under ``work``."""
    t = time.monotonic()
    levels: list[Level] = []
    for kind, ladder in (("closed", closed), ("open", rates)):
        bad = 0
        for lv in ladder:
            r = run_level(kind, lv, work / f"{kind}-{lv}", duration_s, pin)
            levels.append(r)
            if on_level is not None:
                on_level(r)
            bad = 0 if r.honest else bad + 1
            if bad >= STOP_AFTER_DISHONEST:
                break
    return certificate(levels, duration_s=duration_s, pinned=pin and bool(cpu_split()[0]),
                       took_s=time.monotonic() - t)  # fmt: skip


def certificate(levels: list[Level], *, duration_s: float, pinned: bool, took_s: float) -> dict[str, Any]:
    """The certificate of ``levels``: the highest honest level of each kind and every level's figures."""

    def best(kind: str) -> dict[str, Any] | None:
        ok = [x for x in levels if x.kind == kind and x.honest]
        return asdict(max(ok, key=lambda x: x.level)) if ok else None

    return {
        "loadgen_version": __version__,
        "command": "loadgen selftest",
        "machine": {
            "cpus": os.cpu_count(),
            "usable_cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
            "platform": platform.platform(),
            "python": platform.python_version(),
        },  # fmt: skip
        "server": {
            "kind": "loadgen sim --fast",
            "ttft_ms": TTFT_MS,
            "itl_ms": ITL_MS,
            "output_tokens": TOKENS,
            "input_tokens": INPUT_TOKENS,
            "pinned_apart": pinned,
        },  # fmt: skip
        "honest_within_ms": HONEST_MS,
        "duration_s": duration_s,
        "took_s": round(took_s, 1),
        "highest_honest_closed": best("closed"),
        "highest_honest_open": best("open"),
        "levels": [asdict(x) for x in levels],
    }
