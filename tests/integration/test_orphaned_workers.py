"""Workers die with their parent (issue 20 item 7): after ``kill -9`` of ``loadgen run --workers 2``
no request reaches the server more than 2 s later (before: the workers kept sending ~475 requests
whose records were lost). The server is the simulated endpoint in its own process on 127.0.0.1,
with its truth log (arrival stamps on CLOCK_MONOTONIC, the test's own clock)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.fixtures.cli_proc import cli_popen

pytestmark = pytest.mark.timing  # asserts timing figures: the serial phase


def test_kill_9_of_the_parent_stops_its_workers(tmp_path: Path) -> None:
    truth, port_file = tmp_path / "truth.jsonl", tmp_path / "port"
    sim = cli_popen(
        "sim", "--port", "0", "--port-file", str(port_file), "--truth-log", str(truth), "--ttft-ms", "2", "--itl-ms", "1",
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    run = None
    try:
        for _ in range(200):  # bounded: 20 s for the sim to listen
            if port_file.exists() and port_file.read_text().strip():
                break
            time.sleep(0.1)
        url = f"http://127.0.0.1:{port_file.read_text().strip()}"
        run = cli_popen(
            "run", "--endpoint", url, "--workers", "2", "--rate", "40",
            "--duration", "60s", "--output-tokens", "2", "--out", str(tmp_path / "out"),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, process_group=0,
        )  # fmt: skip
        for _ in range(300):  # bounded: 30 s until the workers are sending
            if truth.exists() and len(truth.read_text().splitlines()) > 40:
                break
            time.sleep(0.1)
        assert len(truth.read_text().splitlines()) > 40, "the run never started sending"
        killed_ns = time.perf_counter_ns()
        os.kill(run.pid, signal.SIGKILL)
        run.wait(timeout=10)
        time.sleep(4.0)
        arrivals = [json.loads(x)["arrival_ns"] for x in truth.read_text().splitlines() if x.strip()]
        late = [a for a in arrivals if a > killed_ns + 2_000_000_000]
        assert late == [], f"{len(late)} requests reached the server more than 2 s after kill -9 of the parent"
    finally:
        if run is not None and run.poll() is None:
            os.kill(run.pid, signal.SIGKILL)
            run.wait(timeout=10)
        sim.terminate()
        sim.wait(timeout=10)
