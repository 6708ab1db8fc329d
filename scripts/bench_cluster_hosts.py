"""``--cluster`` (Ray) across two simulated hosts (issue 34, must-shows 1 and 2): too slow for CI, a bench.

Two network namespaces on one bridge (``tests/fixtures/netns.py``: private addresses, nothing leaves the
machine). Host M runs the Ray head, the simulated endpoint (its truth log) and the driver; host W runs a
second Ray node in a time namespace of its own (``unshare --time``: CLOCK_MONOTONIC 100,000 s ahead) with its
wall clock 2.5 s ahead (``LOADGEN_TEST_WALL_SHIFT_NS``, tests only). Both Ray nodes run a Python that sees
only the packages of the README's node set-up (``tests/fixtures/node_env.py``), so the driver ships its
package. Two runs of ``loadgen run --cluster M:PORT --workers 2`` (open loop, constant 20 req/s):

1. 400 requests, nothing killed: 400 records, 400 at the server; each actor's clock offset and the TTFT
   p50 / p99 against the server's.
2. The same, host W killed whole (every process in its namespace, -9) ~5 s in: every planned request
   counted once (records, ``lost_with_client``, ``unsent``), what the server received beyond the records
   within ``lost_with_client``.

Root only. About 2 minutes.

    scripts/bench_cluster_hosts
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from tests.fixtures.netns import hosts, kill_all, netns_unavailable  # noqa: E402
from tests.fixtures.node_env import node_python, readme_node_packages  # noqa: E402

SHIFT_S = 100_000
WALL_SHIFT_NS = 2_500_000_000
RAY_PORT = 6390
SIM_PORT = 18090


def ray_start(py: str, *args: str) -> list[str]:
    return [py, "-c", "import sys; from ray.scripts.scripts import main; sys.argv[0] = 'ray'; main()", "start",
            "--block", "--disable-usage-stats", "--object-store-memory", str(80 * 1024 * 1024), *args]  # fmt: skip


def popen(cmd: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    with open(log, "wb") as fh:  # the child has its own copy of the descriptor: ours is closed here
        return subprocess.Popen(cmd, env=env, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                process_group=0, cwd=log.parent)  # fmt: skip


def wait_for(text: str, log: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while text.encode() not in log.read_bytes():
        if time.monotonic() > deadline:
            raise SystemExit(f"{log.name}: no {text!r} after {timeout_s:g} s:\n{log.read_text()[-3000:]}")
        time.sleep(0.2)


def jsonl(p: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in p.read_text().splitlines() if x.strip()] if p.exists() else []


def run(
    ns: dict[str, str], addr: dict[str, str], tmp: Path, name: str, truth: Path, kill_w_after_s: float | None
) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "OPENAI_API_KEY", "VIRTUAL_ENV")}
    env.update(RAY_USAGE_STATS_ENABLED="0", COLUMNS="200")
    out = tmp / name
    truth.write_bytes(b"")
    cmd = ["ip", "netns", "exec", ns["m"], sys.executable, "-m", "loadgen.cli", "run", "--cluster",
           f"{addr['m']}:{RAY_PORT}", "--workers", "2", "--rate", "20", "--requests", "400", "--arrival", "constant",
           "--input-tokens", "16", "--output-tokens", "8", "--endpoint", f"http://{addr['m']}:{SIM_PORT}",
           "--yes", "--out", str(out)]  # fmt: skip
    log = tmp / f"{name}.log"
    p = popen(cmd, log, env)
    if kill_w_after_s is not None:
        wait_for("cluster: worker 1 on", log, 240)
        time.sleep(kill_w_after_s)
        kill_all(ns["w"])  # host W dies whole: its raylet, its actor
    p.wait(timeout=300)
    time.sleep(1.0)  # the sim writes its last truth lines
    res = json.loads((out / "result.json").read_text())
    recs = jsonl(out / "requests.jsonl")
    at_server = [t for t in jsonl(truth) if t["request_id"]]
    c = res["counts"]
    lost = c.get("lost_with_client", 0)
    print(f"\n{name}: exit {p.returncode}; {res['validity']['valid'] and 'VALID' or 'INVALID'}; records {len(recs)}, "
          f"lost with the client {lost}, unsent {c['unsent']} (sum {len(recs) + lost + c['unsent']} of 400); "
          f"at the server {len(at_server)}")  # fmt: skip
    ok = len(recs) <= len(at_server) <= len(recs) + lost
    print(f"  the server's count within records + lost: {'yes' if ok else 'NO'}")
    cl = res["conditions"].get("cluster") or {}
    print(f"  code: {cl.get('code')}")
    for a in cl.get("actors", []):
        off = a.get("clock_offset") or {}
        print(f"  actor {a.get('worker')} on {a.get('ip')}: wall-clock offset {off.get('offset_ms', 0):+.3f} ms "
              f"± {off.get('uncertainty_ms', 0):.3f} ms")  # fmt: skip
    for chk in res["validity"]["checks"]:
        if not chk["ok"]:
            print(f"  FAIL {chk['name']}: {chk['detail'][:300]}")
    by_index = {int(t["request_id"].rsplit("-", 1)[1]): t for t in at_server}
    pairs = [(r["ttft_ms"] - (r["sent_s"] - r["scheduled_s"]) * 1e3,
              (by_index[r["index"]]["first_token_ns"] - by_index[r["index"]]["arrival_ns"]) / 1e6)
             for r in recs if r["status"] == "ok" and r["index"] in by_index]  # fmt: skip
    if pairs:
        got, want = np.array([a for a, _ in pairs]), np.array([b for _, b in pairs])
        for q in (50, 99):
            g, w = float(np.percentile(got, q)), float(np.percentile(want, q))
            print(f"  TTFT p{q} from the send: client {g:.3f} ms, server {w:.3f} ms ({g - w:+.3f})")


def main() -> int:
    why = netns_unavailable()
    if why is not None:
        print(f"bench_cluster_hosts: {why}")
        return 2
    tmp = Path(tempfile.mkdtemp(prefix="lgch-", dir="/tmp"))
    node_py = node_python(tmp / "node", readme_node_packages())  # the README's node set-up, as written
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    procs: list[subprocess.Popen[bytes]] = []
    with hosts(("m", "w")) as (ns, addr):
        try:
            truth = tmp / "truth.jsonl"
            procs.append(popen(["ip", "netns", "exec", ns["m"], sys.executable, "-m", "loadgen.cli", "sim", "--host",
                                addr["m"], "--port", str(SIM_PORT), "--ttft-ms", "20", "--itl-ms", "5", "--truth-log",
                                str(truth)], tmp / "sim.log", dict(env, PYTHONPATH=str(REPO))))  # fmt: skip
            procs.append(popen(["ip", "netns", "exec", ns["m"], *ray_start(node_py, "--head", "--include-dashboard", "false", "--node-ip-address",
                                addr["m"], "--port", str(RAY_PORT), "--num-cpus", "1", "--temp-dir", str(tmp / "rm"))],
                               tmp / "head.log", env))  # fmt: skip
            wait_for("Ray runtime started", tmp / "head.log", 120)
            w_env = dict(env, LOADGEN_TEST_WALL_SHIFT_NS=str(WALL_SHIFT_NS))
            procs.append(popen(["ip", "netns", "exec", ns["w"], "unshare", "--time", "--monotonic", str(SHIFT_S),
                                "--fork", *ray_start(node_py, "--address", f"{addr['m']}:{RAY_PORT}",
                                "--node-ip-address", addr["w"], "--num-cpus", "2", "--temp-dir", str(tmp / "rw"))],
                               tmp / "node.log", w_env))  # fmt: skip
            wait_for("Ray runtime started", tmp / "node.log", 120)
            print(f"hosts: M {addr['m']} (head, sim, driver), W {addr['w']} (a Ray node; monotonic +{SHIFT_S} s, "
                  f"wall +{WALL_SHIFT_NS / 1e9:g} s); nodes' Python: the README's node set-up")  # fmt: skip
            run(ns, addr, tmp, "whole", truth, None)
            run(ns, addr, tmp, "host-W-killed", truth, 5.0)
        finally:
            for p in procs:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
    print(f"(logs in {tmp})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
