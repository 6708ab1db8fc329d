"""Locust over three "hosts" on one machine (issue 34, item 5): network namespaces this test creates, with
private addresses that exist only inside them (traffic never leaves the machine).

* host M (``10.213.N.1``): the simulated endpoint (its truth log) and the Locust master, bound to its own
  address with a shared token (a master bound beyond loopback needs one);
* host W0 (``.2``): a worker whose wall clock is 2.5 s behind (``LOADGEN_TEST_WALL_SHIFT_NS``, tests only);
* host W1 (``.3``): a worker in a time namespace of its own (``unshare --time``): its CLOCK_MONOTONIC reads
  100,000 s ahead of the others'.

An open-loop test of 160 requests; W1 is killed (-9) after ~2 s of load. Checked against the truth log:
each worker's clock offset measured within 1 ms (W1 -100,000 s, W0 0: the wall clock does not enter); every
planned request counted once (records, lost with the client, unsent), what the server received beyond
the records within "lost with the client"; TTFT p50 and p99 within 1 ms of the server's over the same
requests from the send (the server's origin is the arrival), within 2 ms from the scheduled time (that plus
the dispatcher's send lag, ~0.8 ms here).

Root only (namespaces): CI runs as root, so there this test fails rather than skips when it cannot build
its hosts, and ``.ci/run`` prints its figures (the log shows it ran). Where ``unshare --time`` is refused (a
kernel without time namespaces) W1's clock is moved by ``LOADGEN_TEST_CLOCK_SHIFT_NS`` instead, and the
figures say so. About 20 s.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.fixtures.cli_proc import REPO, cli_argv, cli_env
from tests.fixtures.netns import hosts as netns_hosts
from tests.fixtures.netns import netns_unavailable

pytestmark = [pytest.mark.timing, pytest.mark.alone]  # 1 ms TTFT tolerance: an idle machine's

SHIFT_S = 100_000
WALL_SHIFT_NS = -2_500_000_000
TOL_MS = 1.0
TOKEN_ENV = "LG_MULTIHOST_TOKEN"


def _time_namespace() -> str | None:
    """None when ``unshare --time`` moves a child's monotonic clock here, else why not (the moved worker then
    reads its clock through ``LOADGEN_TEST_CLOCK_SHIFT_NS``, said in the report)."""
    if shutil.which("unshare") is None:
        return "unshare is not installed"
    probe = subprocess.run(["unshare", "--time", "--monotonic", "1", "--fork", "true"], capture_output=True, text=True)
    return None if probe.returncode == 0 else f"unshare --time failed: {probe.stderr.strip()}"


@pytest.fixture()
def hosts() -> Iterator[dict[str, Any]]:
    """Three namespaces on one bridge (tests/fixtures/netns.py); always removed."""
    why = netns_unavailable()
    if why is not None:
        if os.environ.get("CI"):
            pytest.fail(f"the multi-host test cannot run in CI: {why}")
        pytest.skip(why)
    with netns_hosts(("m", "w0", "w1")) as (ns, addr):
        yield {"ns": ns, "addr": addr}


class Proc:
    """A command in a namespace (``ip netns exec NS`` + the CLI's :func:`cli_argv`), in a process group of its
    own, with the CLI's environment (:func:`cli_env`), output to a file, always reaped."""

    def __init__(self, cmd: list[str], log: Path, env: dict[str, str] | None = None) -> None:
        e = cli_env({TOKEN_ENV: "multihost-test-token", **(env or {})})
        self.log = log
        with open(log, "wb") as fh:  # the child has its own copy of the descriptor: ours is closed here
            self.p = subprocess.Popen(cmd, cwd=REPO, env=e, stdin=subprocess.DEVNULL, stdout=fh,
                                      stderr=subprocess.STDOUT, process_group=0)  # fmt: skip

    def wait(self, timeout_s: float) -> int:
        try:
            return self.p.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"{self.p.args!r} did not finish in {timeout_s} s:\n{self.tail()}") from None

    def kill(self) -> None:
        if self.p.poll() is None:
            try:
                os.killpg(self.p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.p.wait(timeout=10)

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]


def _report(lines: list[str]) -> None:
    """The figures, printed, and written to ``$LOADGEN_TEST_REPORT_DIR/multihost.txt`` where set (.ci/run shows
    it: the log says the test ran)."""
    print("\n" + "\n".join(lines))
    where = os.environ.get("LOADGEN_TEST_REPORT_DIR")
    if where:
        Path(where, "multihost.txt").write_text("\n".join(lines) + "\n")


def _jsonl(p: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in p.read_text().splitlines() if x.strip()] if p.exists() else []


class TimingMismatch(AssertionError):
    """A TTFT outside its tolerance (counts and clocks fail at once, never retried)."""


ATTEMPTS = 2
"""A run whose only failure is a TTFT off by more than its tolerance runs once more: the OS can deschedule the
simulated endpoint between stamping a write and making it. A placement fault is systematic and fails both."""


def test_locust_over_three_hosts_with_moved_and_skewed_clocks(hosts: dict[str, Any], tmp_path: Path) -> None:
    for attempt in range(ATTEMPTS):
        try:
            _once(hosts, tmp_path / f"try{attempt}")
            return
        except TimingMismatch:
            if attempt == ATTEMPTS - 1:
                raise


def _once(hosts: dict[str, Any], tmp_path: Path) -> None:
    tmp_path.mkdir()
    ns, addr = hosts["ns"], hosts["addr"]
    py = cli_argv()
    truth_path, out = tmp_path / "truth.jsonl", tmp_path / "dist"
    procs: list[Proc] = []
    try:
        sim = Proc(["ip", "netns", "exec", ns["m"], *py, "sim", "--host", addr["m"], "--port", "18080", "--ttft-ms",
                    "20", "--itl-ms", "5", "--truth-log", str(truth_path), "--port-file", str(tmp_path / "port")],
                   tmp_path / "sim.log")  # fmt: skip
        procs.append(sim)
        deadline = time.monotonic() + 30
        while not (tmp_path / "port").exists() and time.monotonic() < deadline and sim.p.poll() is None:
            time.sleep(0.05)
        assert (tmp_path / "port").exists(), sim.tail()
        master = Proc(
            ["ip", "netns", "exec", ns["m"], *py, "locust", "--endpoint", f"http://{addr['m']}:18080",
             "--output-tokens", "8", "--out", str(out), "--headless", "--master", "--rate", "20", "--requests",
             "160", "--arrival", "constant", "-u", "0", "--stop-timeout", "3", "--master-bind-host", addr["m"],
             "--master-bind-port", "15557", "--allow-remote-workers", "--master-token-env", TOKEN_ENV,
             "--expect-workers", "2", "--expect-workers-max-wait", "40", "-t", "14s"], tmp_path / "master.log",
        )  # fmt: skip
        procs.append(master)
        worker = [*py, "locust", "--worker", "--master-host", addr["m"], "--master-port", "15557",
                  "--master-token-env", TOKEN_ENV]  # fmt: skip
        w0 = Proc(["ip", "netns", "exec", ns["w0"], *worker], tmp_path / "w0.log",
                  env={"LOADGEN_TEST_WALL_SHIFT_NS": str(WALL_SHIFT_NS)})  # fmt: skip
        no_time_ns = _time_namespace()
        if no_time_ns is None:  # a time namespace of its own: CLOCK_MONOTONIC moved for the whole process
            w1 = Proc(["ip", "netns", "exec", ns["w1"], "unshare", "--time", "--monotonic", str(SHIFT_S), "--fork",
                       *worker], tmp_path / "w1.log")  # fmt: skip
        else:
            w1 = Proc(["ip", "netns", "exec", ns["w1"], *worker], tmp_path / "w1.log",
                      env={"LOADGEN_TEST_CLOCK_SHIFT_NS": str(SHIFT_S * 10**9)})  # fmt: skip
        procs += [w0, w1]
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(_jsonl(truth_path)) < 40 and master.p.poll() is None:
            time.sleep(0.1)  # ~2 s of load reached the server
        assert len(_jsonl(truth_path)) >= 40, master.tail() + w0.tail() + w1.tail()
        w1.kill()
        assert master.wait(90) in (0, 1), master.tail()
        w0.wait(30)
    finally:
        for p in reversed(procs):
            p.kill()
    res = json.loads((out / "result.json").read_text())
    recs = _jsonl(out / "requests.jsonl")
    truth = [t for t in _jsonl(truth_path) if t["request_id"]]
    c = res["counts"]
    lost = c.get("lost_with_client", 0)
    workers = res["locust"]["workers"]
    how = "unshare --time" if no_time_ns is None else f"LOADGEN_TEST_CLOCK_SHIFT_NS ({no_time_ns})"
    lines = [f"multi-host (Locust, 3 network namespaces; moved clock by {how}): counts {c}; {len(truth)} at the server"]
    lines += [f"  worker {w['id']}: clock offset {w['clock_offset_ms']:+.3f} ms within {w['clock_uncertainty_ms']:.3f} ms, "
              f"{w['records_received']} records, final report {w['final_report']}" for w in workers]  # fmt: skip
    # the clocks: measured over the master channel, each within 1 ms; the wall clock does not enter
    offsets = sorted(w["clock_offset_ms"] for w in workers)
    assert abs(offsets[0] + SHIFT_S * 1e3) <= 1.0 and abs(offsets[1]) <= 1.0, offsets
    assert all(w["clock_uncertainty_ms"] <= 1.0 for w in workers), workers
    # every planned request counted once; the killed worker's losses where they happened
    assert [w["final_report"] for w in workers].count(False) == 1, workers
    assert c["requests"] == len(recs) and c["requests"] + lost + c["unsent"] == 160, c
    assert len(recs) <= len(truth) <= len(recs) + lost, (len(truth), c)
    assert res["duration_s"] < 20, res["duration_s"]  # 8 s of load: not 100,000 s
    # TTFT against the server's, over the same requests: each worker placed on the master's clock
    by_index = {int(t["request_id"].rsplit("-", 1)[1]): t for t in truth}  # the sent id ends with the index
    ok = [r for r in recs if r["status"] == "ok" and r["index"] in by_index]
    assert len(ok) >= 0.9 * len(recs), (len(ok), len(recs))
    want = np.array([(by_index[r["index"]]["first_token_ns"] - by_index[r["index"]]["arrival_ns"]) / 1e6 for r in ok])
    # from the send (the server's own origin is the request's arrival): the clocks' placement, within 1 ms; from
    # the scheduled time (what loadgen reports in open loop): that plus the dispatcher's send lag, within 2 ms
    lag = np.array([(r["sent_s"] - r["scheduled_s"]) * 1e3 for r in ok])
    sched = np.array([r["ttft_ms"] for r in ok])
    off: list[str] = []
    for origin, got, tol in (("sent", sched - lag, TOL_MS), ("scheduled", sched, 2 * TOL_MS)):
        for q in (50, 99):
            g, w = float(np.percentile(got, q)), float(np.percentile(want, q))
            lines.append(f"  TTFT p{q} from the {origin} time: client {g:.3f} ms, server {w:.3f} ms ({g - w:+.3f})")
            if not abs(g - w) <= tol:
                off.append(f"TTFT p{q} from the {origin} time: client {g:.3f} ms, server {w:.3f} ms")
    _report(lines)  # once, with every figure, before any mismatch is raised
    if off:
        raise TimingMismatch("; ".join(off))
