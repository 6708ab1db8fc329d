"""The live view's cost (issue 18): p99 schedule lag at 200 req/s with and without it, interleaved.

``loadgen run`` as a user types it, against one simulated endpoint in its own process, with its
output on a pseudo-terminal (so the live view really draws, once a second): variant A
``--no-progress``, variant B ``--progress``, variant C ``--progress --metrics-port`` (the live
view and the Prometheus exporter), alternated A B C A B C ... ``--repeats`` times in one run so
that a machine busy with other work weighs on every variant alike. Prints each run's p99
schedule lag (from its ``requests.jsonl``) and the medians per variant; bar: the medians of A
and B within 0.2 ms. First, the CPU time one refresh of the view takes at that rate (spent in
the view's own process: :mod:`loadgen.report.live_view`) and the CPU time the *sending*
process spends per refresh (its one feeder thread: the in-flight count, its CPU time, one
line down a pipe), the only time the view holds the sending process's interpreter.
"""

from __future__ import annotations

import argparse
import bisect
import os
import select
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import SimProcess, median, pct, read_jsonl, tmpdir

ROOT = Path(__file__).resolve().parents[1]
SIM = ["--slots", "512", "--ttft-ms", "2", "--itl-ms", "5", "--default-max-tokens", "8"]
VARIANTS = {"A": ["--no-progress"], "B": ["--progress"], "C": ["--progress", "--metrics-port", "{port}"]}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def on_terminal(cmd: list[str], timeout_s: float) -> tuple[int | None, int]:
    """Run ``cmd`` with its output on a pseudo-terminal (drained, thrown away); (exit code, bytes written)."""
    import pty

    master, slave = pty.openpty()
    env = dict(os.environ, PYTHONPATH=str(ROOT), COLUMNS="160", LINES="40", TERM="xterm")
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=slave, stderr=slave)
    os.close(slave)
    n = 0
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.5)
            if ready:
                try:
                    data = os.read(master, 65536)
                except OSError:
                    break
                if not data:
                    break
                n += len(data)
            elif proc.poll() is not None:
                break
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)
    return proc.returncode, n


def refresh_cost_ms(rate: float, itl_tokens: int = 8, refreshes: int = 50) -> tuple[float, float]:
    """CPU time of one refresh of the live view (read ``rate`` new records, figures, draw), in ms: (median, max).

    In this process, on a terminal console writing to /dev/null: the time the view's thread
    holds the interpreter per second of a run at ``rate`` req/s (one refresh a second).
    """
    import io
    import json

    from rich.console import Console

    from loadgen.cli.live import LiveView

    d = tmpdir("bench-live-cost-")
    path = d / "requests.jsonl"
    line = {"index": 0, "phase": "measure", "status": "ok", "sent_s": 0.0, "ttft_ms": 12.5, "e2e_ms": 50.0,
            "itl_ms": [5.0] * (itl_tokens - 1), "output_tokens": itl_tokens, "schedule_lag_ms": 0.2}  # fmt: skip
    batch = "".join(json.dumps({**line, "index": i}) + "\n" for i in range(int(rate)))
    view = LiveView(Console(file=io.StringIO(), force_terminal=True), enabled=False, run_file=path)
    sink = Console(file=open(os.devnull, "w"), force_terminal=True, width=160)
    took = []
    for k in range(refreshes + 1):
        with open(path, "a") as fh:
            fh.write(batch)
        t = time.thread_time()
        view.tick()
        sink.print(view.render())
        if k:  # the first refresh imports and warms up: not counted
            took.append((time.thread_time() - t) * 1e3)
    took.sort()
    return took[len(took) // 2], took[-1]


def feeder_cost_us(inflight: int = 300, refreshes: int = 2000) -> float:
    """Median CPU time (µs) of one wake of the view's feeder thread in the sending process, ``inflight`` requests."""
    import io
    from types import SimpleNamespace

    from rich.console import Console

    from loadgen.cli.live import LiveView
    from loadgen.report.live_view import inflight_count

    view = LiveView(Console(file=io.StringIO()), enabled=False)
    recs = {i: SimpleNamespace(sent_ns=i) for i in range(inflight)}
    view.attach(SimpleNamespace(inflight_records=recs, t0_ns=1, plan=SimpleNamespace(schedule=None)))
    view._sent_runner = view.runner  # t0 and offsets went once, before the run: not per refresh
    assert view.runner is not None
    r, w = os.pipe()
    proc = SimpleNamespace(stdin=os.fdopen(w, "wb"))
    view._proc = proc  # type: ignore[assignment]  # a pipe nobody draws from: the cost of the write only
    drain = os.fdopen(r, "rb", buffering=0)
    took = []
    for _ in range(refreshes):
        t = time.thread_time_ns()  # one pass of _feed's body (after t0 and offsets went)
        view._send(
            {"inflight": inflight_count(view.runner), "cpu_s": time.process_time(), "wall_s": time.perf_counter()}
        )
        took.append((time.thread_time_ns() - t) / 1e3)
        drain.read(65536)
    view._proc = None
    proc.stdin.close()
    drain.close()
    took.sort()
    return took[len(took) // 2]


def gil_probe(variant: str, seconds: float, rate: float) -> tuple[list[float], list[float], list[float]]:
    """Lateness (ms) of the deadlines that fell due while the view worked, of the others, and the
    view's work pieces (ms): ``rate`` absolute deadlines a second kept by an event loop in this process,
    each followed by one record line written (the send loop's pattern), while the view's share runs
    beside it: ``none``; ``thread`` (the view's old place: a thread of this process that reads the
    file, works out the figures and draws, once a second); ``feeder`` (now: the one thread that
    sends a few facts to the view's own process, once a second).

    What it isolates: the interpreter lock. A thread that runs Python keeps the lock until it
    blocks or the switch interval (5 ms) asks it to hand over, so a deadline that falls while the
    old view drew waited for it; the feeder holds the lock ~20 µs a second.
    """
    import asyncio
    import io
    import json
    import threading
    from types import SimpleNamespace

    from rich.console import Console

    from loadgen.cli.live import LiveView
    from loadgen.core.clock import now_ns, sleep_until
    from loadgen.report.live_view import LiveFigures
    from loadgen.telemetry.tail import refresh_until_stopped

    d = tmpdir("bench-live-gil-")
    path = d / "requests.jsonl"
    line = (json.dumps({"index": 0, "phase": "measure", "status": "ok", "sent_s": 0.0, "ttft_ms": 12.5,
                        "e2e_ms": 50.0, "itl_ms": [5.0] * 7, "output_tokens": 8, "schedule_lag_ms": 0.2}) + "\n").encode()  # fmt: skip
    stop = threading.Event()
    windows: list[tuple[int, int]] = []  # (start, end) ns of each piece of the view's work in this process
    thread: threading.Thread | None = None
    cat = None
    if variant == "thread":
        view = LiveFigures(run_file=path)
        sink = Console(file=open(os.devnull, "w"), force_terminal=True, width=160)

        def draw() -> None:
            while not stop.wait(1.0):
                t = now_ns()
                view.tick()
                sink.print(view.render())
                windows.append((t, now_ns()))

        thread = threading.Thread(target=draw, daemon=True)
    elif variant == "feeder":
        feeder = LiveView(Console(file=io.StringIO()), enabled=False)
        recs = {i: SimpleNamespace(sent_ns=i) for i in range(int(rate * 0.05))}
        feeder.attach(SimpleNamespace(inflight_records=recs, t0_ns=1, plan=SimpleNamespace(schedule=None)))
        feeder._sent_runner = feeder.runner
        cat = subprocess.Popen(["cat"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
        feeder._proc = cat
        send = feeder._send

        def timed_send(msg: dict[str, Any]) -> None:
            t = now_ns()
            send(msg)
            windows.append((t, now_ns()))

        feeder._send = timed_send  # type: ignore[method-assign]  # the same send, its time noted
        thread = threading.Thread(
            target=refresh_until_stopped, args=(stop, feeder.interval_s, feeder._feed), daemon=True
        )
    late: list[tuple[int, float]] = []

    async def loop() -> None:
        period = int(1e9 / rate)
        t0 = now_ns() + 50_000_000
        with open(path, "ab", buffering=0) as fh:
            for k in range(int(seconds * rate)):
                due = t0 + k * period
                await sleep_until(due)
                late.append((due, (now_ns() - due) / 1e6))
                fh.write(line)

    if thread is not None:
        thread.start()
    try:
        asyncio.run(loop())
    finally:
        stop.set()
        if thread is not None:
            thread.join(timeout=5)
        if cat is not None:
            assert cat.stdin is not None
            cat.stdin.close()
            cat.wait(timeout=10)
    # a deadline "meets" the view's work when it fell due while the view worked (or up to 1 ms before)
    ws = sorted(windows)
    met: list[float] = []
    other: list[float] = []
    for due, x in late:
        k = bisect.bisect_right(ws, (due + 1_000_000, 1 << 62)) - 1
        (met if k >= 0 and ws[k][1] >= due else other).append(x)
    return sorted(met), sorted(other), [(b - a) / 1e6 for a, b in ws]


def gil_main(repeats: int, seconds: float, rate: float) -> None:
    """``--gil``: :func:`gil_probe`'s variants alternated ``repeats`` times in this process; p99 and max per run."""
    res: dict[str, list[float]] = {}
    for rep in range(repeats):
        for v in ("none", "thread", "feeder"):
            met, other, work = gil_probe(v, seconds, rate)
            late = sorted(met + other)
            res.setdefault(v, []).append(pct(late, 99))
            extra = ""
            if work:
                extra = (f"; the view's work {median(work):.3f} ms a piece (median), {len(met)} deadlines fell due in "
                         f"it: lateness median {median(met) if met else float('nan'):.3f} ms, max "
                         f"{max(met) if met else float('nan'):.3f} ms (others: median {median(other):.3f} ms)")  # fmt: skip
            print(f"run {rep + 1} {v:7s} deadline lateness p99 {pct(late, 99):.3f} ms{extra}", flush=True)
    for v, p99s in res.items():
        print(f"median over runs, {v:7s}: p99 deadline lateness {sorted(p99s)[len(p99s) // 2]:.3f} ms")


def exporter_cost_ms(rate: float, itl_tokens: int = 8, refreshes: int = 50) -> float:
    """Median CPU time of one refresh of the ``--metrics-port`` exporter (half a second of records) plus a scrape, ms."""
    import json

    from loadgen.telemetry.prom import REFRESH_S, PromExporter

    d = tmpdir("bench-live-prom-")
    path = d / "requests.jsonl"
    line = {"index": 0, "phase": "measure", "status": "ok", "sent_s": 0.0, "ttft_ms": 12.5, "e2e_ms": 50.0,
            "itl_ms": [5.0] * (itl_tokens - 1), "output_tokens": itl_tokens, "schedule_lag_ms": 0.2}  # fmt: skip
    batch = "".join(json.dumps({**line, "index": i}) + "\n" for i in range(int(rate * REFRESH_S)))
    ex = PromExporter(path, 0)
    took = []
    for k in range(refreshes + 1):
        with open(path, "a") as fh:
            fh.write(batch)
        t = time.thread_time()
        ex.refresh()
        ex.render()
        if k:
            took.append((time.thread_time() - t) * 1e3)
    took.sort()
    return took[len(took) // 2]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rate", type=float, default=200.0)
    ap.add_argument("--duration", type=float, default=20.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--variants", default="ABC", help="which variants, in the order they alternate")
    ap.add_argument("--gil", action="store_true", help="Only the in-process lock probe (gil_probe), no runs.")
    ap.add_argument("--gil-seconds", type=float, default=10.0)
    a = ap.parse_args()
    if a.gil:
        gil_main(a.repeats, a.gil_seconds, a.rate)
        return 0
    med_ms, max_ms = refresh_cost_ms(a.rate)
    print(f"one refresh at {a.rate:g} req/s (read, figures, draw; in the view's own process): {med_ms:.2f} ms CPU "
          f"median, {max_ms:.2f} ms max, once a second: {med_ms / 10:.3f} % of a core", flush=True)  # fmt: skip
    print(f"the sending process's share of a refresh (feeder thread, 300 in flight): {feeder_cost_us():.1f} µs CPU "
          "median, once a second", flush=True)  # fmt: skip
    prom_ms = exporter_cost_ms(a.rate)
    print(
        f"one exporter refresh (every 0.5 s) and one scrape at {a.rate:g} req/s: {prom_ms:.2f} ms CPU median",
        flush=True,
    )
    d = tmpdir("bench-live-")
    lags: dict[str, list[float]] = {v: [] for v in a.variants}
    with SimProcess(SIM) as sim:
        assert sim.url is not None
        for rep in range(a.repeats):
            for v in a.variants:
                out = d / f"{v}{rep}"
                extra = [x.replace("{port}", str(free_port())) for x in VARIANTS[v]]
                cmd = [sys.executable, "-m", "loadgen.cli", "run", "--endpoint", sim.url, "--rate", f"{a.rate:g}",
                       "--arrival", "constant", "--duration", f"{a.duration:g}s", "--input-tokens", "16",
                       "--output-tokens", "8", "--seed", "1", "--out", str(out), *extra]  # fmt: skip
                code, nbytes = on_terminal(cmd, timeout_s=a.duration * 4 + 120)
                lag = [
                    r["schedule_lag_ms"] for r in read_jsonl(out / "requests.jsonl") if r["schedule_lag_ms"] is not None
                ]
                p99 = pct(lag, 99)
                lags[v].append(p99)
                print(f"run {rep + 1} {v} {' '.join(extra):28s} exit {code}  {nbytes:7d} bytes on the terminal  "
                      f"p99 schedule lag {p99:.3f} ms", flush=True)  # fmt: skip
    med = {v: sorted(x)[len(x) // 2] for v, x in lags.items() if x}
    print("medians of p99 schedule lag (ms): " + ", ".join(f"{v} {m:.3f}" for v, m in med.items()))
    if "A" in med and "B" in med:
        ok = abs(med["A"] - med["B"]) <= 0.2
        print(
            f"bar: live view (B) within 0.2 ms of none (A): {'PASS' if ok else 'FAIL'} ({med['B'] - med['A']:+.3f} ms)"
        )
        return 0 if ok else 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
