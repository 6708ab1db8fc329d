"""The client against the truth: honest capacity, the verdict grid, a reference client, long prompts.

Against the simulated endpoint (own process, truth log, many slots so it queues nothing; TTFT
10 ms, ``--itl-ms``, ``--tokens`` tokens a stream), each level of ``--levels`` (``64``: closed
loop, 64 users; ``r200``: open loop, 200 req/s, constant arrivals) runs ``loadgen run`` and pairs
its ``requests.jsonl`` with the truth log (``bench_truth.truth_errors``: TTFT p50, TTFT p99 and
ITL p99 of the report minus the truth's). Printed per level: delivered output tok/s, the three
errors, client CPU (cores, all client processes), output tok/s per client core, peak RSS, the
stamp lateness the verdict judges, the verdict and whether it *agrees* with the truth (VALID
with every error <= 2 ms, INVALID with any > 5 ms; between: either), and the failing checks.
A level is *honest* when every error is within 2 ms; the honest capacity is the highest honest
level's output tok/s (and per client core).

Side by side in the same run (each level runs every variant before the next level):

* ``--before DIR``: the same level with another checkout's loadgen (``git worktree add
  /tmp/before HEAD`` of today's main), so "N x today's" is one ratio of one run;
* ``--reference``: a minimal client at the same level (asyncio over uvloop, raw socket reads,
  SSE split and ``orjson`` decode of every event, one stamp per read, no bookkeeping): the local
  limit of the read path; loadgen / reference is printed per level.

``--server-ceiling`` first measures the simulator alone: the reference client at 4x the largest
level's streams; where loadgen's figure is at that ceiling, the server is the limit, not the client.

``--long-prompts 32768,131072`` (issue 22 item 4): closed loop at ``--long-concurrency`` (64)
with prompts of that many tokens and 16 output tokens: client CPU per request, the send's
duration (time to the response headers, of which the body's upload is part) and the TTFT error.

``--cpus`` puts the simulator on the last CPU and each client on the others (``--pin``, the
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
                      "rss_mib": ru1.ru_maxrss / 1024}))

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


def print_row(name: str, level: str, r: dict[str, Any], e: dict[str, float]) -> None:
    res = r["res"]
    tps = res["throughput"]["output_tps"] or 0.0
    valid = bool(res["validity"]["valid"])
    worst = worst_error_ms(e)
    bad = [c["name"] for c in res["validity"]["checks"] if c["group"] == "generator" and not c["ok"]]
    stamp = (res.get("client") or {}).get("stamp_lateness_p99_ms")
    print(
        f"{name:>9s} {level:>6s} {tps:9.0f} {e['ttft_p50_err_ms']:8.2f} {e['ttft_p99_err_ms']:8.2f} {e['itl_p99_err_ms']:8.2f} "
        f"{r['cpu_cores']:6.2f} {tps / max(r['cpu_cores'], 1e-9):10.0f} {r['rss_mib']:6.0f} "
        f"{(f'{stamp:.1f}' if stamp is not None else '-'):>6s} {'VALID' if valid else 'INVALID':>8s} "
        f"{agrees(valid, worst):>7s}  {','.join(bad)}"
    )


def grid(a: argparse.Namespace) -> None:
    sim_cpus, client_cpus = cpu_split(1, a.cpus)
    variants: list[tuple[str, Path]] = [("loadgen", REPO)]
    if a.before:
        variants.insert(0, ("before", Path(a.before)))
    levels = a.levels.split(",")
    print(
        f"== {a.tokens} tokens a stream at {a.itl_ms} ms ITL, TTFT 10 ms; {a.duration:g} s measured after 2 s warm-up"
        + (f"; simulator on CPU {sim_cpus[1]}, client on {client_cpus[1]}" if sim_cpus else "; no CPU pinning")
    )
    sim_args = ["--slots", "4096", "--ttft-ms", "10", "--itl-ms", str(a.itl_ms), *sim_cpus]
    if a.server_ceiling:
        top = max(int(x) for x in levels if not x.startswith("r"))
        with SimProcess(sim_args) as sim:
            r = reference_level(str(4 * top), sim.url or "", a, client_cpus)
        print(f"server ceiling (reference client, {4 * top} streams): {r['output_tps']:.0f} output tok/s")
    print(
        f"{'client':>9s} {'level':>6s} {'out tok/s':>9s} {'TTFT50':>8s} {'TTFT99':>8s} {'ITL99':>8s} {'cores':>6s} "
        f"{'tok/s/core':>10s} {'RSS':>6s} {'stamp':>6s} {'verdict':>8s} {'agrees':>7s}  failing checks"
    )
    honest: dict[str, tuple[str, float, float]] = {}
    for level in levels:
        for name, root in variants:
            d = Path(tempfile.mkdtemp(prefix=f"bench-client-{name}-{level}-"))
            truth = d / "truth.jsonl"
            with SimProcess([*sim_args, "--truth-log", str(truth)]) as sim:
                r = loadgen_level(root, level, sim.url or "", d / "run", a, client_cpus, [])
            time.sleep(0.3)
            e = truth_errors(d / "run", truth)
            print_row(name, level, r, e)
            tps = r["res"]["throughput"]["output_tps"] or 0.0
            if worst_error_ms(e) <= 2 and tps > honest.get(name, ("", 0.0, 0.0))[1]:
                honest[name] = (level, tps, tps / max(r["cpu_cores"], 1e-9))
        if a.reference and not level.startswith("r"):
            with SimProcess(sim_args) as sim:
                ref = reference_level(level, sim.url or "", a, client_cpus)
            print(
                f"{'reference':>9s} {level:>6s} {ref['output_tps']:9.0f} {'':>8s} {'':>8s} {'':>8s} {ref['cpu_cores']:6.2f} "
                f"{ref['output_tps'] / max(ref['cpu_cores'], 1e-9):10.0f} {ref['rss_mib']:6.0f}"
            )
    for name, (level, tps, per_core) in honest.items():
        print(f"honest capacity ({name}): {tps:.0f} output tok/s at level {level} ({per_core:.0f} per client core)")
    for name, _ in variants:
        if name not in honest:
            print(f"honest capacity ({name}): no level within 2 ms of the truth")


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
            ["--slots", "4096", "--ttft-ms", "10", "--itl-ms", "5", "--truth-log", str(truth), *sim_cpus]
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
    ap.add_argument("--before", default=None, help="another checkout to run beside this one (today's main)")
    ap.add_argument("--reference", action="store_true", help="run the minimal reference client at each level")
    ap.add_argument("--server-ceiling", action="store_true", help="measure the simulator's own ceiling first")
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
