"""``loadgen locust`` end to end: Locust in subprocesses against the simulated endpoint.

Locust is never imported here (``import locust`` monkey-patches the standard library):
every Locust process is a child started through the real CLI, on 127.0.0.1, bounded in
time and always stopped. The simulated endpoint's truth log (server-side times on the
same CLOCK_MONOTONIC as the client's) is the reference.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from loadgen.core.histograms import LatencyHistogram
from loadgen.sim import SimProcess
from tests.fixtures.cli_proc import cli_popen

HAVE_LOCUST = importlib.util.find_spec("locust") is not None
pytestmark = [
    pytest.mark.skipif(not HAVE_LOCUST, reason="Locust not installed: pip install 'loadgen[locust]'"),
    pytest.mark.timing,
]

TOL_MS = 2.0


# --------------------------------------------------------------------------- helpers


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Child:
    """``loadgen locust ...`` in its own session, output to a file, always reaped."""

    def __init__(self, args: list[str], log: Path, env: dict[str, str] | None = None) -> None:
        self.log = log
        with open(log, "wb") as fh:  # the child has its own copy of the descriptor: ours is closed here
            self.proc = cli_popen(
                "locust", *args, env=env,
                stdin=subprocess.DEVNULL, stdout=fh, stderr=subprocess.STDOUT, process_group=0,
            )  # fmt: skip

    def wait(self, timeout_s: float) -> int:
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"loadgen locust did not finish in {timeout_s} s:\n{self.tail()}") from None

    def terminate(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(timeout=10)

    def tail(self, n: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-n:]


def run_locust(args: list[str], tmp: Path, name: str, timeout_s: float = 60) -> dict[str, Any]:
    """Run a headless test to its end; return result.json (requests.jsonl next to it)."""
    out = tmp / name
    child = Child([*args, "--out", str(out)], tmp / f"{name}.log")
    try:
        code = child.wait(timeout_s)
    finally:
        child.kill()
    assert (out / "result.json").exists(), f"no result.json (exit {code}):\n{child.tail()}"
    return json.loads((out / "result.json").read_text())


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def truth_stats(lines: list[dict[str, Any]]) -> tuple[list[float], list[float]]:
    """Server-side TTFT (ms) per ok request and per-token ITL samples (ms), as the conventions define."""
    ttft, itl = [], []
    for t in lines:
        if t["status"] != "ok" or not t["chunks"]:
            continue
        ttft.append((t["first_token_ns"] - t["arrival_ns"]) / 1e6)
        chunks = t["chunks"]
        itl += [0.0] * (chunks[0][1] - 1)
        for (a, _), (b, k) in zip(chunks, chunks[1:]):
            itl += [(b - a) / 1e6 / k] * k
    return ttft, itl


def trimmed_mean(values: list[float], cut: float = 0.1) -> float:
    """Mean without the lowest and highest ``cut`` fraction (robust to a few OS stalls)."""
    v = sorted(values)
    k = int(len(v) * cut)
    return float(np.mean(v[k : len(v) - k]))


# --------------------------------------------------------------------------- 1. against the truth log


class TimingMismatch(AssertionError):
    """A time outside its tolerance (counts and statuses fail at once, never retried)."""


def _close_ms(got: float, want: float, what: str) -> None:
    if not abs(got - want) <= TOL_MS:
        raise TimingMismatch(f"{what}: {got:.3f} ms vs the server's {want:.3f} ms (tolerance {TOL_MS} ms)")


ATTEMPTS = 3
"""A run whose only failures are times off by more than 2 ms is run again (at most 3 runs): on the shared
2-core machine the OS can deschedule the simulated endpoint for several ms between stamping a
write and making it (seen: single requests 5-60 ms late). A measurement fault is systematic
and fails every attempt; wrong counts fail at once."""


def test_headless_matches_truth_log(tmp_path: Path) -> None:
    """A headless run: result.json TTFT and ITL within 2 ms of the server's truth; counts match.

    One user, so each request has the endpoint to itself and the TTFT distribution is one
    mode (with two users it has two, ~30 and ~70 ms, and its median jumps between them).
    """
    for attempt in range(1, ATTEMPTS + 1):
        try:
            _truth_run(tmp_path / f"attempt{attempt}")
            return
        except TimingMismatch:
            if attempt == ATTEMPTS:
                raise


def _truth_run(tmp_path: Path) -> None:
    tmp_path.mkdir()
    truth_path = tmp_path / "truth.jsonl"
    with SimProcess(["--ttft-ms", "30", "--itl-ms", "10", "--truth-log", str(truth_path)]) as sim:
        assert sim.url is not None
        res = run_locust(
            ["--endpoint", sim.url, "--input-tokens", "32", "--output-tokens", "16",
             "--headless", "-u", "1", "-r", "10", "-t", "8s"], tmp_path, "truth",
        )  # fmt: skip
    truth = [t for t in read_jsonl(truth_path) if t["request_id"]]  # pre-flight probes carry no id
    recs = read_jsonl(tmp_path / "truth" / "requests.jsonl")
    c = res["counts"]
    assert c["requests"] == len(recs) == len(truth), (c, len(truth))
    assert c["completed"] == sum(t["status"] == "ok" for t in truth) == len(truth)
    assert c["failed"] == 0 and c["unsent"] == 0
    assert c["requests"] >= 15
    ttft, itl = truth_stats(truth)
    lat = res["latency_ms"]
    assert lat["ttft"]["count"] == len(ttft) and lat["itl"]["count"] == len(itl)
    _close_ms(lat["ttft"]["p50"], float(np.percentile(ttft, 50)), "TTFT p50")
    mine = [r["ttft_ms"] for r in recs]
    _close_ms(trimmed_mean(mine), trimmed_mean(ttft), "TTFT mean (10 % trimmed each side)")
    for stat, q in (("p50", 50), ("p90", 90)):
        _close_ms(lat["itl"][stat], float(np.percentile(itl, q)), f"ITL {stat}")
    _close_ms(lat["itl"]["mean"], float(np.mean(itl)), "ITL mean")
    # request by request: the client's TTFT also holds the request's trip to the server
    # (sub-millisecond on loopback) and any moment the server took to pick it up
    by_index = {int(t["request_id"].rsplit("-", 1)[1]): t for t in truth}
    off = [
        r["ttft_ms"] - (by_index[r["index"]]["first_token_ns"] - by_index[r["index"]]["arrival_ns"]) / 1e6 for r in recs
    ]
    _close_ms(float(np.median(off)), 0.0, "median per-request TTFT offset")
    if sum(abs(x) <= TOL_MS for x in off) < 0.75 * len(off):
        raise TimingMismatch(f"fewer than 75 % of TTFTs within 2 ms of the server's: {sorted(off)}")
    loc = res["locust"]
    assert loc["mode"] == "closed loop" and "closed loop" in loc["arrivals"]
    e2e_row = next(r for r in loc["locust_stats_at_stop"] if r["type"] == "E2E")
    assert e2e_row["requests"] == c["requests"]
    assert {r["type"] for r in loc["locust_stats_at_stop"]} == {"E2E"}  # one Locust request per request
    assert res["conditions"]["endpoint"]["client"]["library"].startswith("http.client")


# --------------------------------------------------------------------------- 2. distributed


def test_master_and_two_workers_merge_exactly(tmp_path: Path) -> None:
    """Master + 2 workers: merged histogram count = sum of the workers'; percentiles = one histogram of all."""
    port = free_port()
    out = tmp_path / "dist"
    with SimProcess(["--ttft-ms", "20", "--itl-ms", "5"]) as sim:
        assert sim.url is not None
        master = Child(
            ["--endpoint", sim.url, "--output-tokens", "16", "--out", str(out), "--headless", "--master",
             "--master-bind-host", "127.0.0.1", "--master-bind-port", str(port), "--expect-workers", "2",
             "--expect-workers-max-wait", "40", "-u", "4", "-r", "20", "-t", "6s"], tmp_path / "master.log",
        )  # fmt: skip
        workers = [
            Child(["--worker", "--master-host", "127.0.0.1", "--master-port", str(port)], tmp_path / f"worker{i}.log")
            for i in range(2)
        ]
        try:
            assert master.wait(90) in (0, 1), master.tail()  # 1: INVALID (a loaded machine's loop lag)
            for w in workers:
                w.wait(30)
        finally:
            for ch in (master, *workers):
                ch.kill()
    res = json.loads((out / "result.json").read_text())
    loc = res["locust"]
    assert len(loc["workers"]) == 2 and all(w["final_report"] for w in loc["workers"]), loc["workers"]
    assert all(w["records_received"] > 0 for w in loc["workers"])
    assert sum(w["records_received"] for w in loc["workers"]) == res["counts"]["requests"]
    assert not any("final report" in (c["detail"] or "") for c in res["validity"]["checks"])

    states = json.loads((out / "worker_histograms.json").read_text())["workers"]
    assert len(states) == 2
    recs = read_jsonl(out / "requests.jsonl")
    assert len({r["index"] for r in recs}) == len(recs) == res["counts"]["requests"]  # shards never collide
    samples = {
        "ttft": [r["ttft_ms"] for r in recs if r["ttft_ms"] is not None],
        "e2e": [r["e2e_ms"] for r in recs if r["e2e_ms"] is not None],
        "tpot": [r["tpot_ms"] for r in recs if r["tpot_ms"] is not None],
        "itl": [v for r in recs for v in r["itl_ms"]],
    }
    for name, values in samples.items():
        merged = LatencyHistogram(name)
        for st in states.values():
            merged.merge(LatencyHistogram.from_state(st[name]))
        parts = [st[name]["count"] for st in states.values()]
        assert merged.count == sum(parts) == len(values) and min(parts) > 0, (name, parts, len(values))
        single = LatencyHistogram(name)
        for v in values:
            single.record_ns(v * 1e6)
        for p in (50, 90, 99, 99.9, 100):
            assert merged.percentile_ms(p) == pytest.approx(single.percentile_ms(p), abs=0.0011), (name, p)
        # the master's own aggregation (from the shipped records) holds the very same histogram
        summary = loc["merged_worker_histograms_ms"][name]
        assert summary["count"] == merged.count
        assert summary["p99"] == merged.percentile_ms(99)
    lat = res["latency_ms"]["itl"]
    merged_itl = loc["merged_worker_histograms_ms"]["itl"]
    assert all(lat[k] == merged_itl[k] for k in ("count", "p50", "p90", "p99", "p999", "max")), (lat, merged_itl)


SHIFT_NS = 100_000 * 10**9  # a worker whose monotonic clock reads 100,000 s ahead (another host, a time namespace)


# alone: its offsets within 2 ms of the truth failed beside another test in two of session 24's
# three CI runs and passed by itself each time (.ci/LEDGER.md)
@pytest.mark.alone
def test_a_worker_with_a_moved_clock_is_placed_by_its_measured_offset(tmp_path: Path) -> None:
    """Open loop over master + 2 workers, one with its monotonic clock moved +100,000 s (issue 34, item 1):
    each worker's offset to the master is measured over the master channel (not read from its host name),
    so both keep the schedule and every record lands on the master's clock: counts equal the truth log,
    the run spans its 6 s, TTFT p50 / p99 within 2 ms of the server's."""
    port = free_port()
    out = tmp_path / "dist"
    truth_path = tmp_path / "truth.jsonl"
    with SimProcess(["--ttft-ms", "20", "--itl-ms", "2", "--truth-log", str(truth_path)]) as sim:
        assert sim.url is not None
        master = Child(
            ["--endpoint", sim.url, "--output-tokens", "8", "--out", str(out), "--headless", "--master",
             "--rate", "10", "--arrival", "constant", "-u", "0", "--stop-timeout", "5",
             "--master-bind-host", "127.0.0.1", "--master-bind-port", str(port), "--expect-workers", "2",
             "--expect-workers-max-wait", "40", "-t", "6s"], tmp_path / "master.log",
        )  # fmt: skip
        workers = [
            Child(
                ["--worker", "--master-host", "127.0.0.1", "--master-port", str(port)],
                tmp_path / f"worker{i}.log",
                env={"LOADGEN_TEST_CLOCK_SHIFT_NS": str(SHIFT_NS)} if i == 1 else None,
            )  # fmt: skip
            for i in range(2)
        ]
        try:
            assert master.wait(90) in (0, 1), master.tail()
            for w in workers:
                w.wait(30)
        finally:
            for ch in (master, *workers):
                ch.kill()
    res = json.loads((out / "result.json").read_text())
    truth = [t for t in read_jsonl(truth_path) if t["request_id"]]
    recs = read_jsonl(out / "requests.jsonl")
    c = res["counts"]
    assert c["requests"] == len(recs) == len(truth) and c["failed"] == 0 and c["unsent"] == 0, c
    assert all(w["records_received"] > 0 for w in res["locust"]["workers"])
    assert res["duration_s"] < 15, res["duration_s"]  # 6 s of load: not 100,000 s
    assert max(r["scheduled_s"] for r in recs) < 7 and min(r["scheduled_s"] for r in recs) >= 0
    lags = [r["schedule_lag_ms"] for r in recs if r["schedule_lag_ms"] is not None]
    assert max(lags) < 1000, max(lags)  # the moved worker sent on the schedule, not 100,000 s "late"
    offsets = sorted(w["clock_offset_ms"] for w in res["locust"]["workers"])
    assert len(offsets) == 2 and abs(offsets[0] + SHIFT_NS / 1e6) <= 1.0 and abs(offsets[1]) <= 1.0, offsets
    assert all(w["clock_uncertainty_ms"] <= 1.0 and w["clock_pings"] >= 10 for w in res["locust"]["workers"])
    ttft, _ = truth_stats(truth)
    assert abs(res["latency_ms"]["ttft"]["p50"] - float(np.percentile(ttft, 50))) <= TOL_MS, res["latency_ms"]["ttft"]
    # request by request, each worker's: the client's TTFT (from the request's due time on the master's clock)
    # against the server's; a worker placed wrongly would be off by its whole offset (p99 of ~60 requests is
    # their slowest one, an OS stall's: not asserted)
    by_index = {int(t["request_id"].rsplit("-", 1)[1]): t for t in truth}
    off = [r["ttft_ms"] - (by_index[r["index"]]["first_token_ns"] - by_index[r["index"]]["arrival_ns"]) / 1e6
           for r in recs]  # fmt: skip
    assert abs(float(np.median(off))) <= TOL_MS and sum(abs(x) <= TOL_MS for x in off) >= 0.75 * len(off), sorted(off)


def test_a_killed_worker_has_its_losses_counted_where_they_happened(tmp_path: Path) -> None:
    """Open loop over master + 2 workers, one killed (-9) mid-run (issue 34, item 2). Before, a killed worker
    left ``unsent`` at 0 while 115 of 300 planned requests were never sent. Now its shard is split by the
    last lease the master granted it: due within it and never delivered is "lost with the client" (the
    server may have it), due after it is unsent; every planned request is counted once and what the server
    received beyond the records is within "lost with the client"."""
    port = free_port()
    out = tmp_path / "dist"
    truth_path = tmp_path / "truth.jsonl"
    with SimProcess(["--ttft-ms", "20", "--itl-ms", "20", "--truth-log", str(truth_path)]) as sim:
        assert sim.url is not None
        master = Child(
            ["--endpoint", sim.url, "--output-tokens", "8", "--out", str(out), "--headless", "--master",
             "--rate", "20", "--requests", "160", "--arrival", "constant", "-u", "0", "--stop-timeout", "3",
             "--master-bind-host", "127.0.0.1", "--master-bind-port", str(port), "--expect-workers", "2",
             "--expect-workers-max-wait", "40", "-t", "14s"], tmp_path / "master.log",
        )  # fmt: skip
        workers = [
            Child(["--worker", "--master-host", "127.0.0.1", "--master-port", str(port)], tmp_path / f"worker{i}.log")
            for i in range(2)
        ]
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and len(read_jsonl(truth_path) if truth_path.exists() else []) < 40:
                time.sleep(0.1)  # ~2 s of load reached the server
            workers[1].kill()
            assert master.wait(90) in (0, 1), master.tail()
            workers[0].wait(30)
        finally:
            for ch in (master, *workers):
                ch.kill()
    res = json.loads((out / "result.json").read_text())
    recs = read_jsonl(out / "requests.jsonl")
    c = res["counts"]
    lost = c.get("lost_with_client", 0)
    assert [w["final_report"] for w in res["locust"]["workers"]].count(False) == 1, res["locust"]["workers"]
    assert c["requests"] == len(recs) and lost > 0 and c["unsent"] > 0, c
    assert c["requests"] + lost + c["unsent"] == 160, c  # every planned request counted once
    time.sleep(0.5)
    at_server = len([t for t in read_jsonl(truth_path) if t["request_id"]])
    assert len(recs) <= at_server <= len(recs) + lost, (at_server, c)
    assert lost <= 10 + 10 + 6, c  # a 1 s lease at 10 req/s a worker, its 0.5 s of unshipped records, in flight


# --------------------------------------------------------------------------- 4. open vs closed loop


def test_open_loop_keeps_rate_when_endpoint_slows(tmp_path: Path) -> None:
    """Constant 10 req/s against a saturating endpoint: open loop keeps the send rate within 2 %;
    closed-loop users sized for 10 req/s fall behind."""
    slow = ["--slots", "4", "--ttft-ms", "50", "--itl-ms", "20"]  # ~5.8 req/s of 32 tokens at most
    common = ["--input-tokens", "32", "--output-tokens", "32", "--headless", "-t", "8s", "--stop-timeout", "0"]
    with SimProcess(slow) as sim:
        assert sim.url is not None
        open_res = run_locust(["--endpoint", sim.url, "--rate", "10", "--arrival", "constant", "-u", "0", *common],
                              tmp_path, "open")  # fmt: skip
    with SimProcess(slow) as sim:
        assert sim.url is not None
        closed_res = run_locust(["--endpoint", sim.url, "-u", "7", "-r", "100", *common], tmp_path, "closed")
    sent = open_res["throughput"]["achieved_send_rps"]
    assert abs(sent - 10.0) / 10.0 <= 0.02, open_res["throughput"]
    checks = {c["name"]: c for c in open_res["validity"]["checks"]}
    assert checks["send_rate"]["ok"], checks["send_rate"]
    assert open_res["locust"]["schedule"]["unsent"] == 0
    ttft = [r["ttft_ms"] for r in read_jsonl(tmp_path / "open" / "requests.jsonl") if r["ttft_ms"] is not None]
    assert np.mean(ttft[-10:]) > 2 * np.mean(ttft[:5])  # the endpoint slowed down (its queue grew)
    closed_rate = closed_res["throughput"]["achieved_send_rps"]
    assert closed_rate < 0.8 * 10.0, closed_res["throughput"]
    assert closed_res["locust"]["mode"] == "closed loop"


# --------------------------------------------------------------------------- stopping


def test_stop_cancels_what_outlives_stop_timeout(tmp_path: Path, scripted_server: Any) -> None:
    """-t with a short --stop-timeout: requests still in flight end as ``cancelled``; none is lost."""
    slow = {"writes": [[8.0, 'data: {"choices": [{"index": 0, "text": "late", "finish_reason": "stop"}]}\n\n'],
                       [8.01, "data: [DONE]\n\n"]]}  # fmt: skip
    srv = scripted_server([slow, slow, slow], thread=True)
    res = run_locust(
        ["--endpoint", srv.url, "--no-preflight", "--output-tokens", "4", "--headless", "-u", "3", "-r", "100",
         "-t", "2s", "--stop-timeout", "1"], tmp_path, "cancel",
    )  # fmt: skip
    c = res["counts"]
    assert c["requests"] == 3 and c["errors_by_kind"] == {"cancelled": 3}, c
    recs = read_jsonl(tmp_path / "cancel" / "requests.jsonl")
    assert all(r["error_kind"] == "cancelled" and r["sent_s"] is not None for r in recs)
    assert all(2.5 <= r["error_e2e_ms"] / 1e3 <= 6.0 for r in recs), [r["error_e2e_ms"] for r in recs]  # -t + 1 s
    seen = sorted(int(p.headers["x-request-id"].rsplit("-", 1)[1]) for p in srv.posts)
    assert seen == sorted(r["index"] for r in recs)  # the server saw exactly these requests
    fails = next(r for r in res["locust"]["locust_stats_at_stop"] if r["type"] == "E2E")
    assert fails["failures"] == 3


def test_stop_timeout_lets_inflight_finish_and_errors_by_kind(tmp_path: Path) -> None:
    """A long enough --stop-timeout: in-flight requests finish; failures are counted by kind
    both in result.json and in Locust's failures table."""
    with SimProcess(["--ttft-ms", "300", "--itl-ms", "5", "--fault-429", "0.3", "--seed", "3"]) as sim:
        assert sim.url is not None
        res = run_locust(
            ["--endpoint", sim.url, "--no-preflight", "--output-tokens", "8", "--headless", "-u", "2", "-r", "100",
             "-t", "3s", "--stop-timeout", "10", "--csv", str(tmp_path / "lc")], tmp_path, "drain",
        )  # fmt: skip
    c = res["counts"]
    assert "cancelled" not in c["errors_by_kind"], c
    assert c["errors_by_kind"].get("rate_limited", 0) > 0 and c["failed"] == c["errors_by_kind"]["rate_limited"]
    rows = (tmp_path / "lc_failures.csv").read_text().splitlines()
    by_kind = {r.split(",")[2]: int(r.split(",")[3]) for r in rows[1:]}
    assert by_kind == {"rate_limited": c["errors_by_kind"]["rate_limited"]}, rows


# --------------------------------------------------------------------------- web UI token


def _get(url: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def test_web_token_guards_the_ui(tmp_path: Path) -> None:
    """With --web-token-env every UI route needs the token (query once, then a cookie; or a bearer header)."""
    port = free_port()
    token = "lg-test-token-7f3a"
    child = Child(["--sim-args", "--ttft-ms 5", "--out", str(tmp_path / "out"), "--web-port", str(port),
                   "--web-token-env", "LG_TEST_WEB_TOKEN"], tmp_path / "ui.log", env={"LG_TEST_WEB_TOKEN": token})  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                status, _, _ = _get(base + "/")
                break
            except OSError:
                assert time.monotonic() < deadline, child.tail()
                time.sleep(0.2)
        assert status == 401
        assert _get(base + "/stats/requests")[0] == 401
        assert _get(base + "/?token=wrong")[0] == 401
        status, headers, _ = _get(base + f"/?token={token}")
        assert status == 200
        cookie = headers["Set-Cookie"].split(";")[0]
        assert token not in cookie and "HttpOnly" in headers["Set-Cookie"]
        status, _, body = _get(base + "/stats/requests", {"Cookie": cookie})
        assert status == 200
        assert json.loads(body)["extended_stats"][0]["key"] == "loadgen"
        assert _get(base + "/loadgen", {"Authorization": f"Bearer {token}"})[0] == 200
    finally:
        child.terminate()
        try:
            child.wait(40)
        finally:
            child.kill()
    assert token not in child.log.read_text()


def test_inflight_cap_exhaustion_is_the_servers_backlog(tmp_path: Path) -> None:
    """Open loop whose in-flight cap runs out: the dispatcher waits, the requests are marked, and the wait
    is the server's backlog (every slot in flight there; issue 20 item 14), not "limited by client"."""
    with SimProcess(["--ttft-ms", "600", "--itl-ms", "5"]) as sim:
        assert sim.url is not None
        res = run_locust(
            ["--endpoint", sim.url, "--no-preflight", "--output-tokens", "4", "--rate", "10", "--arrival", "constant",
             "--max-concurrency", "2", "--headless", "-u", "0", "-t", "4s", "--stop-timeout", "5"], tmp_path, "cap",
        )  # fmt: skip
    sched = res["locust"]["schedule"]
    assert sched["inflight_cap_waits"] > 0 and sched["max_concurrency_per_process"] == 2
    v = res["validity"]
    failed = {c["name"] for c in v["checks"] if not c["ok"]}
    assert "server_saturated" in failed and "client_resources" not in failed, failed
    assert "generator_kept_up" not in failed, failed  # the cap's waits are not the dispatcher falling behind
    held = [r for r in read_jsonl(tmp_path / "cap" / "requests.jsonl") if r.get("throttle_ms")]
    assert held and max(r["schedule_lag_ms"] - r["throttle_ms"] for r in held) < 200
    recs = read_jsonl(tmp_path / "cap" / "requests.jsonl")
    assert len(recs) == res["counts"]["requests"] == sched["dispatched"]
    assert (
        res["counts"]["requests"] + sched["unsent"] + sched["not_reached_at_stop"] >= 30
    )  # the schedule is all accounted for
