"""The live view's cost (issue 18): p99 schedule lag at 200 req/s with and without it, interleaved.

``loadgen run`` as a user types it, against one simulated endpoint in its own process, with its
output on a pseudo-terminal (so the live view really draws, once a second): variant A
``--no-progress``, variant B ``--progress``, variant C ``--progress --metrics-port`` (the live
view and the Prometheus exporter), alternated A B C A B C ... ``--repeats`` times in one run so
that a machine busy with other work weighs on every variant alike. Prints each run's p99
schedule lag (from its ``requests.jsonl``) and the medians per variant; bar: the medians of A
and B within 0.2 ms. First, the CPU time one refresh of the view takes at that rate (its
thread holds the interpreter that long per second of the run).
"""

from __future__ import annotations

import argparse
import os
import select
import socket
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import SimProcess, pct, read_jsonl, tmpdir

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


def exporter_cost_ms(rate: float, itl_tokens: int = 8, refreshes: int = 50) -> float:
    """Median CPU time of one refresh of the ``--metrics-port`` exporter (half a second of records) plus a scrape, ms."""
    import json

    from prometheus_client import CollectorRegistry, generate_latest

    from loadgen.telemetry.prom import REFRESH_S, PromExporter

    d = tmpdir("bench-live-prom-")
    path = d / "requests.jsonl"
    line = {"index": 0, "phase": "measure", "status": "ok", "sent_s": 0.0, "ttft_ms": 12.5, "e2e_ms": 50.0,
            "itl_ms": [5.0] * (itl_tokens - 1), "output_tokens": itl_tokens, "schedule_lag_ms": 0.2}  # fmt: skip
    batch = "".join(json.dumps({**line, "index": i}) + "\n" for i in range(int(rate * REFRESH_S)))
    ex = PromExporter(path, 0)
    reg = CollectorRegistry(auto_describe=False)
    reg.register(ex)  # type: ignore[arg-type]  # a duck-typed Collector
    took = []
    for k in range(refreshes + 1):
        with open(path, "a") as fh:
            fh.write(batch)
        t = time.thread_time()
        ex.refresh()
        generate_latest(reg)
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
    a = ap.parse_args()
    med_ms, max_ms = refresh_cost_ms(a.rate)
    print(f"one refresh at {a.rate:g} req/s (read, figures, draw): {med_ms:.2f} ms CPU median, {max_ms:.2f} ms max, "
          f"once a second: {med_ms / 10:.3f} % of a core", flush=True)  # fmt: skip
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
