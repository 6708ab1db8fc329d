"""The verdict rule against the truth, as the user runs it (issue 22 item 3), and ``--workers 2``.

``loadgen run`` closed loop against the simulator with a truth log (TTFT 10 ms, ITL 2 ms, 48
tokens), errors from ``scripts/bench_truth.py`` (reported - true TTFT p50, TTFT p99, ITL p99):

* a stalled client (the test stops the process 60 ms in every 200 ms with SIGSTOP/SIGCONT): its
  numbers are off by the stalls, and the run must be INVALID, limited by the client (the rule:
  INVALID where any error is over 5 ms);
* an idle client at C = 8: where its measured errors are within 2 ms *and* the records show the
  client kept time (true stamp lateness p99 and the users' idle share small: facts of the truth
  log and the records, not of the machine being quiet), the run must be VALID;
* ``--workers 2``: the parent judges the merged stamp lateness; every measured token event of
  both workers is counted once (the merge is exact), and the verdict carries the stamp check.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from loadgen.sim.launch import SimProcess
from tests.fixtures.cli_proc import cli_popen

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))
from bench_truth import agreement, true_stamp_lateness_ms, truth_errors, worst_error_ms  # noqa: E402

pytestmark = pytest.mark.timing  # asserts timing figures: the serial phase


def _run(tmp: Path, extra: list[str], *, stall: bool = False) -> tuple[dict[str, Any], dict[str, float], Path]:
    truth = tmp / "truth.jsonl"
    out = tmp / "run"
    sim_args = ["--slots", "1024", "--ttft-ms", "10", "--itl-ms", "2", "--truth-log", str(truth)]
    with SimProcess(sim_args) as sim:
        p = cli_popen("run", "--endpoint", sim.url or "", "--concurrency", "8",
                      "--duration", "3s", "--warmup", "1s", "--input-tokens", "16", "--output-tokens", "48",
                      "--out", str(out), *extra, stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
        done = threading.Event()

        def stall_it() -> None:
            time.sleep(2.0)  # after the start-up and into the warm-up
            for _ in range(200):  # bounded: 200 stalls at most (40 s)
                if done.wait(0.14):
                    return
                try:  # the run may end between the check above and a signal: then there is nothing to stall
                    os.kill(p.pid, signal.SIGSTOP)
                    try:
                        time.sleep(0.06)
                    finally:
                        os.kill(p.pid, signal.SIGCONT)
                except ProcessLookupError:
                    return

        th = threading.Thread(target=stall_it, daemon=True)
        if stall:
            th.start()
        try:
            _, err = p.communicate(timeout=120)
        finally:
            done.set()
            if stall:
                th.join(5)
            if p.poll() is None:
                p.kill()
                p.wait()
        time.sleep(0.3)  # the simulator's last truth lines
    assert (out / "result.json").exists(), err.decode()[-3000:]
    res = json.loads((out / "result.json").read_text())
    return res, truth_errors(out, truth), truth


def _checks(res: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in res["validity"]["checks"]}


def test_a_stalled_client_is_invalid(tmp_path: Path) -> None:
    res, e, _ = _run(tmp_path, [], stall=True)
    worst = worst_error_ms(e)
    assert math.isfinite(worst) and e["requests"] >= 20, e
    assert worst > 5.0, e  # 60 ms stalls in every 200 ms: the numbers are off
    assert not res["validity"]["valid"] and res["validity"]["limited_by"] == "client", res["validity"]
    assert agreement(False, e) == "yes"
    failing = [n for n, c in _checks(res).items() if c["group"] == "generator" and not c["ok"]]
    assert set(failing) & {"stamp_error", "send_lag", "stamp_lateness_p99"}, failing


def test_an_idle_client_with_small_errors_is_valid(tmp_path: Path) -> None:
    res, e, truth = _run(tmp_path, [])
    worst = worst_error_ms(e)
    assert math.isfinite(worst) and e["requests"] >= 20, e
    late = true_stamp_lateness_ms(tmp_path / "run", truth)
    rows = [json.loads(x) for x in (tmp_path / "run" / "requests.jsonl").read_text().splitlines() if x.strip()]
    measured = [r for r in rows if r["phase"] == "measure" and r["status"] == "ok"]
    lag = sum(r["schedule_lag_ms"] for r in measured)
    idle = lag / (lag + sum(r["e2e_ms"] for r in measured))
    kept_time = late.size and float(np.percentile(late, 99)) <= 2.0 and idle <= 0.02
    if worst <= 2.0 and kept_time:
        assert res["validity"]["valid"], (e, res["validity"]["checks"])
    if worst > 5.0:  # a machine busy enough to make the numbers wrong: the verdict must say so
        assert not res["validity"]["valid"], (e, res["validity"]["checks"])


def test_workers_send_their_stamp_lateness_to_the_parent(tmp_path: Path) -> None:
    res, e, _ = _run(tmp_path, ["--workers", "2"])
    client = res["client"]
    rows = [json.loads(x) for x in (tmp_path / "run" / "requests.jsonl").read_text().splitlines() if x.strip()]
    events = sum(r["chunks"] or 0 for r in rows if r["phase"] == "measure")
    assert events > 0
    assert client["stamp_lateness_p99_ms"] is not None
    checks = _checks(res)
    assert "stamp_error" in checks and checks["stamp_error"]["group"] == "generator", checks
    # every measured token event of both workers charged once: "over N token stamps" is the records' count
    assert f"over {events} token stamps" in checks["stamp_error"]["detail"], (events, checks["stamp_error"])
    if worst_error_ms(e) > 5.0:
        assert not res["validity"]["valid"], (e, checks)
