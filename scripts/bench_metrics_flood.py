"""A flood of scrapes of the live exporter (issue 33 must-show 2): the client's own CPU, paired.

``loadgen run --rate 20 --metrics-port P`` against one simulated endpoint; a flooder scraping
``http://127.0.0.1:P/metrics`` ``--flood`` times a second (absolute deadlines, a new connection each)
runs beside it, the flooder and the endpoint pinned to the machine's last core (the server's core),
the client to the others. ``--pairs`` ABAB pairs: A with the exporter and no scrapes, B with the
flood, alternated so that other work on the machine weighs on both alike. Per run: the client
process's CPU (utime + stime of /proc/PID/stat, its threads included: the exporter's page is served
by one of them) over its wall time, in % of one core, and the scrapes answered. Bar: the median
paired difference B - A of client CPU <= 5 points, and no pair over 10.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import SimProcess, median, tmpdir  # noqa: E402  (after the path)

FLOOD = (
    "import sys, time, urllib.request\n"
    "url, rate, secs = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])\n"
    "t0 = time.monotonic(); ok = 0; i = 0\n"
    "while time.monotonic() - t0 < secs:\n"
    "    due = t0 + i / rate; i += 1\n"
    "    d = due - time.monotonic()\n"
    "    if d > 0: time.sleep(d)\n"
    "    try:\n"
    "        with urllib.request.urlopen(url, timeout=2) as r: r.read(); ok += 1\n"
    "    except OSError: pass\n"
    "print(ok, flush=True)\n"
)


def cpu_s(pid: int) -> float | None:
    try:
        f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def one_run(url: str, flood: bool, out: Path, a: argparse.Namespace, client_cpus: str, core: int) -> dict[str, Any]:
    port = free_port()
    cmd = [str(ROOT / ".venv/bin/loadgen"), "run", "--endpoint", url, "--rate", str(a.rate), "--duration", a.duration,
           "--output-tokens", "8", "--no-progress", "--cpus", client_cpus, "--metrics-port", str(port),
           "--out", str(out)]  # fmt: skip
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    flooder = None
    if flood:
        secs = str(float(a.duration.rstrip("s")) + 2)  # the run's start-up and its measured window
        flooder = subprocess.Popen([sys.executable, "-c", FLOOD, f"http://127.0.0.1:{port}/metrics", str(a.flood), secs],
                                   stdout=subprocess.PIPE, text=True)  # fmt: skip
        os.sched_setaffinity(flooder.pid, {core})
    last = 0.0
    while proc.poll() is None:  # bounded by the run's own length
        last = cpu_s(proc.pid) or last
        time.sleep(0.05)
    wall = time.monotonic() - t0
    answered = None
    if flooder is not None:
        try:
            answered = flooder.communicate(timeout=30)[0].strip() or None
        except subprocess.TimeoutExpired:
            flooder.kill()
            flooder.communicate()
    return {"code": proc.returncode, "cpu_pct": 100 * last / wall, "wall_s": round(wall, 1), "scrapes": answered}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--rate", type=float, default=20.0)
    ap.add_argument("--duration", default="20s")
    ap.add_argument("--flood", type=float, default=200.0, help="scrapes per second")
    a = ap.parse_args()
    n = os.cpu_count() or 1
    core = n - 1
    client_cpus = f"0-{n - 2}" if n > 1 else "0"
    work = tmpdir("bench-metrics-flood-")
    with SimProcess(args=["--slots", "256", "--ttft-ms", "5", "--itl-ms", "5"]) as sim:
        assert sim.url is not None and sim.proc is not None
        os.sched_setaffinity(sim.proc.pid, {core})
        print(f"sim {sim.url} and the flooder on core {core}; client on {client_cpus}; {a.flood:g} scrapes/s")
        diffs = []
        for i in range(a.pairs):
            rows = {v: one_run(sim.url, v == "B", work / f"{i}-{v}", a, client_cpus, core) for v in "AB"}
            print(f"pair {i + 1}: A {rows['A']}  B {rows['B']}", flush=True)
            diffs.append(rows["B"]["cpu_pct"] - rows["A"]["cpu_pct"])
    med, worst = median(diffs), max(diffs)
    ok = med <= 5.0 and worst <= 10.0
    print(f"client CPU B - A: median {med:+.1f} points, largest {worst:+.1f} over {len(diffs)} pairs: "
          f"{'within the bar' if ok else 'OUTSIDE the bar'} (median <= 5, each <= 10)")  # fmt: skip
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
