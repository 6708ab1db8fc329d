"""Hostile /metrics pages beside a run (issue 33 must-show 1): the run's timing and memory, paired.

``loadgen run`` as a user types it against one simulated endpoint; the /metrics server
(tests/fixtures/hostile_metrics.py: a 0xff byte at the start and mid-page, a page over the scrape cap
(streamed past the 16 MiB scrape cap), one that never ends, one that stalls mid-body, a gzip bomb, malformed
lines) runs beside it, both pinned to the machine's last core (the server's core), the client to the
others. For each page kind, ``--pairs`` ABAB pairs: A without ``--server-metrics``, B with it (every
``--interval``), alternated so that a machine busy with other work weighs on both alike. Per run: the
exit code, whether result.json was written, p99 schedule lag (its ``requests.jsonl``), the client
process's peak RSS while it measures (``VmRSS`` of the loadgen process itself, every 0.1 s until its
result.json is written: the scraper child is a process of its own, and report.html, drawn after the
run with matplotlib when server gauges were read, is not the reader's cost)
and the skipped scrapes by kind. Bars: every run has result.json; per kind the median paired
difference B - A of p99 schedule lag <= 1 ms and no pair over 3 ms; peak RSS B - A <= 20 MB.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import SimProcess, median, pct, read_jsonl, tmpdir  # noqa: E402  (after the path)

KINDS = ["byte-first", "byte-mid", "huge", "endless", "stall", "bomb", "malformed"]
SERVE = (
    "import sys, time\n"
    "sys.path.insert(0, sys.argv[1])\n"
    "from tests.fixtures.hostile_metrics import hostile_metrics_server\n"
    "with hostile_metrics_server() as url:\n"
    "    print(url, flush=True)\n"
    "    time.sleep(1e6)\n"
)


def rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def one_run(url: str, metrics: str | None, out: Path, a: argparse.Namespace, client_cpus: str) -> dict[str, Any]:
    cmd = [str(ROOT / ".venv/bin/loadgen"), "run", "--endpoint", url, "--rate", str(a.rate), "--duration", a.duration,
           "--output-tokens", "8", "--no-progress", "--cpus", client_cpus, "--out", str(out)]  # fmt: skip
    if metrics:
        cmd += ["--server-metrics", metrics, "--server-metrics-interval", a.interval]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    hwm = 0.0
    res_path = out / "result.json"
    while proc.poll() is None:  # bounded by the run's own length
        if not res_path.exists():  # the run's own peak: result.json is written before report.html is drawn
            hwm = max(hwm, rss_mb(proc.pid) or 0.0)
        time.sleep(0.1)
    err = proc.stderr.read() if proc.stderr else ""
    row: dict[str, Any] = {"code": proc.returncode, "result_json": res_path.exists(), "rss_mb": hwm,
                           "traceback": "Traceback" in err}  # fmt: skip
    if res_path.exists():
        lag = [r["schedule_lag_ms"] for r in read_jsonl(out / "requests.jsonl") if r.get("schedule_lag_ms") is not None]
        row["lag_p99_ms"] = pct(lag, 99) if lag else None
        srv = json.loads(res_path.read_text()).get("server") or {}
        row["failed"] = srv.get("scrapes_failed_by_kind")
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kinds", default=",".join(KINDS))
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--rate", type=float, default=20.0)
    ap.add_argument("--duration", default="10s")
    ap.add_argument("--interval", default="1s")
    a = ap.parse_args()
    n = os.cpu_count() or 1
    server_core = str(n - 1)
    client_cpus = f"0-{n - 2}" if n > 1 else "0"
    work = tmpdir("bench-metrics-hostile-")
    hostile = subprocess.Popen([sys.executable, "-c", SERVE, str(ROOT)], stdout=subprocess.PIPE, text=True)
    ok = True
    try:
        assert hostile.stdout is not None
        base = hostile.stdout.readline().strip()
        with SimProcess(args=["--slots", "256", "--ttft-ms", "5", "--itl-ms", "5"]) as sim:
            assert sim.url is not None and sim.proc is not None
            for pid in (sim.proc.pid, hostile.pid):
                os.sched_setaffinity(pid, {int(server_core)})
            print(f"sim {sim.url}, hostile /metrics {base}, both on core {server_core}; client on {client_cpus}")
            for kind in a.kinds.split(","):
                diffs: list[float] = []
                rss: list[float] = []
                for i in range(a.pairs):
                    rows = {}
                    for v in "AB":
                        out = work / f"{kind}-{i}-{v}"
                        rows[v] = one_run(sim.url, f"{base}/{kind}" if v == "B" else None, out, a, client_cpus)
                        print(f"{kind} pair {i + 1} {v}: {rows[v]}", flush=True)
                    if not all(r["result_json"] and not r["traceback"] for r in rows.values()):
                        ok = False
                    if rows["A"].get("lag_p99_ms") is not None and rows["B"].get("lag_p99_ms") is not None:
                        diffs.append(rows["B"]["lag_p99_ms"] - rows["A"]["lag_p99_ms"])
                    rss.append(rows["B"]["rss_mb"] - rows["A"]["rss_mb"])
                med = median(diffs) if diffs else float("nan")
                worst = max(diffs, default=float("nan"))
                bar = bool(diffs) and med <= 1.0 and worst <= 3.0 and max(rss) <= 20.0
                ok = ok and bar
                print(f"== {kind}: p99 schedule lag B - A median {med:+.3f} ms, largest {worst:+.3f} ms over "
                      f"{len(diffs)} pairs; peak RSS B - A largest {max(rss):+.1f} MB: "
                      f"{'within the bars' if bar else 'OUTSIDE the bars'}", flush=True)  # fmt: skip
    finally:
        hostile.kill()
        hostile.wait(5)
    print("all within the bars" if ok else "NOT all within the bars")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
