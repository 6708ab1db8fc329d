"""The client against the truth: raw throughput, honest capacity, the verdict grid, a reference client, long prompts.

Against a server in its own process with a truth log (``--server fast``, the default: ``loadgen sim
--fast``, a lean SSE server far faster than one client core; ``--server sim``: the simulated
endpoint, whose own ceiling is ~26k tok/s on its core; both: unlimited slots, TTFT 10 ms,
``--itl-ms``, ``--tokens`` tokens a stream), each level of ``--levels`` (``64``: closed loop, 64
users; ``r200``: open loop, 200 req/s, constant arrivals) runs ``loadgen run`` and pairs its
``requests.jsonl`` with the truth log (``bench_truth.truth_errors``: TTFT p50, TTFT p99 and ITL p99
of the report minus the truth's). Printed per level: delivered output tok/s, the three errors,
client CPU (cores, the run's own rusage), output tok/s per client core, peak RSS, the server's
cores over the measured window (``srv``: near 1.0, the server may be the limit), the stamp
lateness the verdict judges, the verdict and whether it *agrees* with the truth (VALID with every
error <= 2 ms, INVALID with any > 5 ms; between: either), and the failing checks. A level is
*honest* when every error is within 2 ms; the honest capacity is the highest honest level's output
tok/s (and per client core).

Side by side in the same run (each level runs every variant before the next level):

* ``--before DIR`` (repeatable): the same level with another checkout's loadgen (``git worktree
  add --detach /tmp/before HEAD`` of today's main), so "N x today's" is one ratio of one run;
* ``--reference``: a minimal client at the same level (asyncio over uvloop, raw socket reads,
  SSE split and ``orjson`` decode of every event, one stamp per read, no bookkeeping): the local
  limit of the read path.

A level given more than once is run again; the closing lines take, per level and variant, the run
of median tok/s and print loadgen's tok/s, client cores, RSS and verdict, each other variant's
tok/s with the ratios (raw and per client core), and loadgen / reference.

``--server-ceiling`` first measures the server alone: the reference client at
``--ceiling-streams`` (default 4x the largest level's) streams, with the server's cores over that
window: its output tok/s per server core is the ceiling; where loadgen's figure is near it (``srv``
near 1.0), the server is the limit, not the client.

``--long-prompts 32768,131072`` (issue 22 item 4): closed loop at ``--long-concurrency`` (64)
with prompts of that many tokens and 16 output tokens: client CPU per request, the send's
duration (time to the response headers, of which the body's upload is part) and the TTFT error.

``--cpus`` puts the server on the last CPU and each client on the others (``--pin``, the
old spelling, is the same). On a machine shared with other work, say so with the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import SimProcess, cpu_split
from bench_truth import truth_errors, worst_error_ms

REPO = Path(__file__).resolve().parents[1]
CLK_TCK = os.sysconf("SC_CLK_TCK")


class ServerCPU:
    """The server process's CPU time sampled every 50 ms (``/proc/PID/stat``) in a thread, so its
    cores over any interval of CLOCK_MONOTONIC (the measured window of a run) can be read back."""

    def __init__(self, pid: int) -> None:
        import threading

        self.pid = pid
        self.samples: list[tuple[int, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _cpu_s(self) -> float:
        with open(f"/proc/{self.pid}/stat", encoding="ascii") as fh:
            f = fh.read().rsplit(")", 1)[1].split()
        return (int(f[11]) + int(f[12])) / CLK_TCK

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.samples.append((time.monotonic_ns(), self._cpu_s()))
            except OSError:
                return
            self._stop.wait(0.05)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def cores(self, a_ns: int, b_ns: int) -> float:
        """Server cores used from ``a_ns`` to ``b_ns`` (nearest samples inside); nan without two."""
        inside = [x for x in self.samples if a_ns <= x[0] <= b_ns]
        if len(inside) < 2 or inside[-1][0] == inside[0][0]:
            return float("nan")
        return (inside[-1][1] - inside[0][1]) / ((inside[-1][0] - inside[0][0]) / 1e9)


def window_ns(res: dict[str, Any]) -> tuple[int, int]:
    """The run's measured window on CLOCK_MONOTONIC."""
    t0 = res["conditions"]["t0_monotonic_ns"]
    w = res.get("window") or {}
    return t0 + round((w.get("start_s") or 0.0) * 1e9), t0 + round((w.get("end_s") or 0.0) * 1e9)


def load_args(level: str) -> list[str]:
    if level.startswith("r"):
        return ["--rate", level[1:], "--arrival", "constant"]
    return ["--concurrency", level]


def loadgen_level(
    root: Path, level: str, sim_url: str, out: Path, a: argparse.Namespace, client_cpus: list[str], extra: list[str]
) -> dict[str, Any]:
    """One ``loadgen run`` of ``root``'s checkout; its result, CPU and RSS."""
    env = dict(os.environ, PYTHONPATH=str(root))
    cmd = [sys.executable, "-m", "loadgen.cli", "run", "--endpoint", sim_url, *load_args(level),
           "--duration", f"{a.duration}s", "--warmup", "2s", "--input-tokens", str(a.input_tokens),
           "--output-tokens", str(a.tokens), "--out", str(out), *client_cpus, *extra]  # fmt: skip
    rss_file = out.parent / "client-maxrss-kib"
    if Path("/usr/bin/time").exists():  # the client's own peak RSS (the children's rusage also holds the simulator's)
        cmd = ["/usr/bin/time", "-f", "%M", "-o", str(rss_file), *cmd]
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.run(cmd, env=env, cwd=root, capture_output=True, text=True, timeout=a.duration * 6 + 180)
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    rss_mib = int(rss_file.read_text().split()[-1]) / 1024 if rss_file.exists() else r1.ru_maxrss / 1024
    if p.returncode not in (0, 1) or not (out / "result.json").exists():
        raise SystemExit(f"{root}: exit {p.returncode}\n{p.stderr[-2000:]}")
    res = json.loads((out / "result.json").read_text())
    # the run's own CPU (the runner's rusage from t0 to the drained end: no start-up imports)
    cpu = res["client"].get("cpu_fraction") or res["client"]["cpu_s"] / max(res["client"]["wall_s"], 1e-9)
    return {
        "res": res,
        "cpu_cores": cpu,
        "rss_mib": rss_mib,
        "process_cpu_s": (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime),
    }


REFERENCE = r"""
import asyncio, json, os, resource, sys, time
import orjson
url, level, tokens, duration = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
host, port = url.split("//")[1].split(":")
port = int(port)
model = json.loads(__import__("urllib.request").request.urlopen(url + "/v1/models").read())["data"][0]["id"]
body = json.dumps({"model": model, "prompt": "hello " * 16, "max_tokens": tokens, "stream": True, "ignore_eos": True,
                   "stream_options": {"include_usage": True, "continuous_usage_stats": True}}).encode()
req = (b"POST /v1/completions HTTP/1.1\r\nHost: %b\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
       % (host.encode(), len(body))) + body
mono = time.monotonic_ns
events = 0

class Stream(asyncio.Protocol):
    def __init__(self):
        self.buf = b""; self.done = None; self.t = []
    def connection_made(self, tr): self.tr = tr
    def start(self):
        self.buf = b""; self.done = asyncio.get_running_loop().create_future(); self.tr.write(req)
    def data_received(self, data):
        global events
        t = mono()  # one stamp per read
        self.buf += data
        *evs, self.buf = self.buf.split(b"\n\n")
        for ev in evs:
            i = ev.find(b"data: ")
            if i < 0:
                continue
            d = ev[i + 6:]
            if d == b"[DONE]":
                self.buf = b""
                if not self.done.done():
                    self.done.set_result(None)
                return
            obj = orjson.loads(d)
            if obj["choices"] and obj["choices"][0]["text"]:
                events += 1
                self.t.append(t)

async def user(end):
    loop = asyncio.get_running_loop()
    _, s = await loop.create_connection(Stream, host, port)
    while mono() < end:
        s.start()
        await s.done
        await asyncio.sleep(0)  # the chunked terminator, if any, is read with the next answer

async def main():
    c = int(level)
    await asyncio.sleep(0)
    warm = mono() + int(2e9)
    end = warm + int(duration * 1e9)
    ru0 = None
    tasks = [asyncio.create_task(user(end)) for _ in range(c)]
    await asyncio.sleep(2)
    global events
    events = 0
    ru0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = mono()
    await asyncio.sleep(duration)
    n, t1 = events, mono()
    ru1 = resource.getrusage(resource.RUSAGE_SELF)
    for t in tasks:
        t.cancel()
    cpu = ru1.ru_utime - ru0.ru_utime + ru1.ru_stime - ru0.ru_stime
    print(json.dumps({"output_tps": n / ((t1 - t0) / 1e9), "cpu_cores": cpu / ((t1 - t0) / 1e9),
                      "rss_mib": ru1.ru_maxrss / 1024, "t0_ns": t0, "t1_ns": t1}))

try:
    import uvloop
    uvloop.run(main())
except ImportError:
    asyncio.run(main())
"""


def reference_level(level: str, sim_url: str, a: argparse.Namespace, client_cpus: list[str]) -> dict[str, float]:
    """The minimal reference client (closed loop only) at ``level`` streams: output tok/s, CPU, RSS."""
    pin = ["taskset", "-c", client_cpus[1]] if client_cpus else []
    p = subprocess.run([*pin, sys.executable, "-c", REFERENCE, sim_url, level, str(a.tokens), str(a.duration)],
                       capture_output=True, text=True, timeout=a.duration * 4 + 60)  # fmt: skip
    if p.returncode:
        raise SystemExit(p.stderr[-2000:])
    return json.loads(p.stdout.strip().splitlines()[-1])


def agrees(valid: bool, worst: float) -> str:
    if not np.isfinite(worst):
        return "?"
    if worst <= 2:
        return "yes" if valid else "NO"
    if worst > 5:
        return "yes" if not valid else "NO"
    return "either"


def print_row(name: str, level: str, r: dict[str, Any], e: dict[str, float], srv: float) -> None:
    res = r["res"]
    tps = res["throughput"]["output_tps"] or 0.0
    valid = bool(res["validity"]["valid"])
    worst = worst_error_ms(e)
    bad = [c["name"] for c in res["validity"]["checks"] if c["group"] == "generator" and not c["ok"]]
    stamp = (res.get("client") or {}).get("stamp_lateness_p99_ms")
    print(
        f"{name:>9s} {level:>6s} {tps:9.0f} {e['ttft_p50_err_ms']:8.2f} {e['ttft_p99_err_ms']:8.2f} {e['itl_p99_err_ms']:8.2f} "
        f"{r['cpu_cores']:6.2f} {tps / max(r['cpu_cores'], 1e-9):10.0f} {r['rss_mib']:6.0f} {srv:5.2f} "
        f"{(f'{stamp:.1f}' if stamp is not None else '-'):>6s} {'VALID' if valid else 'INVALID':>8s} "
        f"{agrees(valid, worst):>7s}  {','.join(bad)}"
    )


def _median_row(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The row of median output tok/s among a level's repeats (its other figures its own)."""
    return sorted(rows, key=lambda r: r["tps"])[len(rows) // 2]


def server_args(a: argparse.Namespace, sim_cpus: list[str]) -> list[str]:
    """The server under the client: the simulated endpoint, or its lean ``--fast`` mode."""
    fast = ["--fast"] if a.server == "fast" else []
    return [*fast, "--slots", "4096", "--ttft-ms", "10", "--itl-ms", str(a.itl_ms), *sim_cpus]


def run_reference(level: str, sim_args: list[str], a: argparse.Namespace, client_cpus: list[str]) -> dict[str, float]:
    """The reference client at ``level`` against a fresh server; ``server_cores`` over its window."""
    with SimProcess(sim_args) as sim:
        assert sim.proc is not None
        cpu = ServerCPU(sim.proc.pid)
        try:
            ref = reference_level(level, sim.url or "", a, client_cpus)
        finally:
            cpu.stop()
    ref["server_cores"] = cpu.cores(int(ref["t0_ns"]), int(ref["t1_ns"]))
    return ref


def grid(a: argparse.Namespace) -> None:
    sim_cpus, client_cpus = cpu_split(1, a.cpus)
    variants: list[tuple[str, Path]] = [(Path(b).name[:9], Path(b)) for b in a.before or []]
    variants.append(("loadgen", REPO))
    levels = a.levels.split(",")
    print(
        f"== {a.tokens} tokens a stream at {a.itl_ms} ms ITL, TTFT 10 ms; {a.duration:g} s measured after 2 s warm-up; "
        f"server: {'loadgen sim --fast' if a.server == 'fast' else 'loadgen sim'}"
        + (f"; server on CPU {sim_cpus[1]}, client on {client_cpus[1]}" if sim_cpus else "; no CPU pinning")
    )
    sim_args = server_args(a, sim_cpus)
    closed = [int(x) for x in levels if not x.startswith("r")]
    if a.server_ceiling and closed:
        n = a.ceiling_streams or 4 * max(closed)
        ceiling = run_reference(str(n), sim_args, a, client_cpus)
        sc = ceiling["server_cores"]
        print(
            f"server ceiling: the reference client at {n} streams got {ceiling['output_tps']:.0f} output tok/s with the "
            f"server at {sc:.2f} cores and the client at {ceiling['cpu_cores']:.2f}: {ceiling['output_tps'] / max(sc, 1e-9):.0f} "
            f"tok/s per server core ({'the server is the limit' if sc > 0.9 else 'the server is not saturated'})"
        )
    print(
        f"{'client':>9s} {'level':>6s} {'out tok/s':>9s} {'TTFT50':>8s} {'TTFT99':>8s} {'ITL99':>8s} {'cores':>6s} "
        f"{'tok/s/core':>10s} {'RSS':>6s} {'srv':>5s} {'stamp':>6s} {'verdict':>8s} {'agrees':>7s}  failing checks"
    )
    honest: dict[str, tuple[str, float, float]] = {}
    raw: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for level in levels:
        for name, root in variants:
            d = Path(tempfile.mkdtemp(prefix=f"bench-client-{name}-{level}-"))
            truth = d / "truth.jsonl"
            with SimProcess([*sim_args, "--truth-log", str(truth)]) as sim:
                assert sim.proc is not None
                cpu = ServerCPU(sim.proc.pid)
                try:
                    r = loadgen_level(root, level, sim.url or "", d / "run", a, client_cpus, [])
                finally:
                    cpu.stop()
            srv = cpu.cores(*window_ns(r["res"]))
            time.sleep(0.3)
            e = truth_errors(d / "run", truth)
            print_row(name, level, r, e, srv)
            tps = r["res"]["throughput"]["output_tps"] or 0.0
            raw.setdefault((name, level), []).append({"tps": tps, "cores": r["cpu_cores"], "rss": r["rss_mib"], "srv": srv,
                                  "valid": bool(r["res"]["validity"]["valid"]), "worst": worst_error_ms(e)})  # fmt: skip
            if worst_error_ms(e) <= 2 and tps > honest.get(name, ("", 0.0, 0.0))[1]:
                honest[name] = (level, tps, tps / max(r["cpu_cores"], 1e-9))
        if a.reference and not level.startswith("r"):
            ref = run_reference(level, sim_args, a, client_cpus)
            raw.setdefault(("reference", level), []).append({"tps": ref["output_tps"], "cores": ref["cpu_cores"]})
            print(
                f"{'reference':>9s} {level:>6s} {ref['output_tps']:9.0f} {'':>8s} {'':>8s} {'':>8s} {ref['cpu_cores']:6.2f} "
                f"{ref['output_tps'] / max(ref['cpu_cores'], 1e-9):10.0f} {ref['rss_mib']:6.0f} {ref['server_cores']:5.2f}"
            )
    for name, (level, tps, per_core) in honest.items():
        print(f"honest capacity ({name}): {tps:.0f} output tok/s at level {level} ({per_core:.0f} per client core)")
    for name, _ in variants:
        if name not in honest:
            print(f"honest capacity ({name}): no level within 2 ms of the truth")
    med = {k: _median_row(v) for k, v in raw.items()}
    for level in dict.fromkeys(levels):  # each level once: the median of its repeats
        now = med.get(("loadgen", level))
        if now is None:
            continue
        parts = [f"level {level}: loadgen {now['tps']:.0f} tok/s ({now['cores']:.2f} client cores, RSS {now['rss']:.0f} MiB, "
                 f"{'VALID' if now['valid'] else 'INVALID'})"]  # fmt: skip
        for name, _ in variants[:-1]:
            b = med[(name, level)]
            parts.append(
                f"{name} {b['tps']:.0f} (x{now['tps'] / max(b['tps'], 1e-9):.2f}; per client core "
                f"x{now['tps'] / max(now['cores'], 1e-9) / max(b['tps'] / max(b['cores'], 1e-9), 1e-9):.2f})"
            )
        ref_row = med.get(("reference", level))
        if ref_row:
            parts.append(
                f"reference {ref_row['tps']:.0f} (loadgen/reference {now['tps'] / max(ref_row['tps'], 1e-9):.2f}; per client core "
                f"{now['tps'] / max(now['cores'], 1e-9) / max(ref_row['tps'] / max(ref_row['cores'], 1e-9), 1e-9):.2f})"
            )
        if now["srv"] > 0.9:
            parts.append(f"server at {now['srv']:.2f} cores: the server may be the limit")
        print("; ".join(parts))


def long_prompts(a: argparse.Namespace) -> None:
    sim_cpus, client_cpus = cpu_split(1, a.cpus)
    print(f"\n== long prompts: closed loop, {a.long_concurrency} users, 16 output tokens")
    print(
        f"{'prompt tokens':>13s} {'requests':>8s} {'CPU ms/req':>10s} {'send p50 ms':>11s} {'send p99 ms':>11s} {'TTFT50 err':>10s} {'TTFT99 err':>10s} {'RSS MiB':>8s}"
    )
    for n in [int(x) for x in a.long_prompts.split(",")]:
        d = Path(tempfile.mkdtemp(prefix=f"bench-client-long-{n}-"))
        truth = d / "truth.jsonl"
        b = argparse.Namespace(**{**vars(a), "input_tokens": n, "tokens": 16})
        with SimProcess(
            [*server_args(argparse.Namespace(server=a.server, itl_ms=5), sim_cpus), "--truth-log", str(truth)]
        ) as sim:
            r = loadgen_level(REPO, str(a.long_concurrency), sim.url or "", d / "run", b, client_cpus, [])
        e = truth_errors(d / "run", truth)
        rows = [json.loads(x) for x in (d / "run" / "requests.jsonl").read_text().splitlines() if x.strip()]
        hdr = [
            x["time_to_headers_ms"] for x in rows if x.get("time_to_headers_ms") is not None and x["phase"] == "measure"
        ]
        reqs = sum(1 for x in rows if x["phase"] == "measure")
        wall = r["res"]["client"]["wall_s"] or 1.0
        cpu_ms = r["cpu_cores"] * wall * 1e3 / max(len(rows), 1)
        print(
            f"{n:13d} {reqs:8d} {cpu_ms:10.2f} {np.percentile(hdr, 50) if hdr else float('nan'):11.2f} "
            f"{np.percentile(hdr, 99) if hdr else float('nan'):11.2f} {e['ttft_p50_err_ms']:10.2f} {e['ttft_p99_err_ms']:10.2f} {r['rss_mib']:8.0f}"
        )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--levels", default="8,16,32,64,128", help="closed-loop users (N) and open-loop rates (rN)")
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--input-tokens", type=int, default=16)
    ap.add_argument("--itl-ms", type=float, default=1.0)
    ap.add_argument("--duration", type=float, default=8.0)
    ap.add_argument(
        "--before", action="append", help="another checkout to run beside this one (today's main; repeatable)"
    )
    ap.add_argument("--reference", action="store_true", help="run the minimal reference client at each level")
    ap.add_argument("--server-ceiling", action="store_true", help="measure the server's own ceiling first")
    ap.add_argument(
        "--ceiling-streams", type=int, default=0, help="streams of the ceiling run (default: 4x the top level)"
    )
    ap.add_argument(
        "--server",
        choices=("fast", "sim"),
        default="fast",
        help="fast: loadgen sim --fast (a lean SSE server); sim: the simulated endpoint",
    )
    ap.add_argument("--long-prompts", default=None, help="prompt token counts, e.g. 32768,131072")
    ap.add_argument("--long-concurrency", type=int, default=64)
    ap.add_argument("--cpus", "--pin", dest="cpus", action="store_true", help="simulator and client on separate CPUs")
    ap.add_argument("--workers", default="1", help=argparse.SUPPRESS)  # the old option; one client process
    a = ap.parse_args()
    if a.levels:
        grid(a)
    if a.long_prompts:
        long_prompts(a)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
