"""Ctrl-C (SIGINT) and SIGTERM during ``loadgen run``: drain, cancel, write everything, exit 130.

``loadgen run`` runs in a subprocess against its embedded simulated endpoint
(``--duration 60s``, so the run is always stopped by the signal). The schedule a
run would have sent is round(rate x duration) requests (it offers the rate asked, issue 30),
so the split between measured and unsent requests is checked exactly.
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.cli_proc import CliProc, cli_procs

pytestmark = pytest.mark.timing  # asserts timing figures: the serial phase

RATE = 20.0
DURATION_S = 60.0
SCHEDULE_LEN = round(RATE * DURATION_S)  # `run --rate R --duration D` sends round(R x D) (LoadConfig.exact_rate)
BASE_ARGS = ["--rate", "20", "--duration", "60s", "--output-tokens", "40", "--drain-grace", "2s", "--no-preflight"]
SIM = "--itl-ms 20 --ttft-ms 10"


class Run(CliProc):
    """A ``loadgen run`` subprocess writing into ``out``; killed at teardown if still alive."""

    def __init__(self, tmp: Path, args: list[str]) -> None:
        super().__init__(tmp, "run", args)

    @property
    def jsonl(self) -> Path:
        return self.out / "requests.jsonl"

    def lines(self) -> list[str]:
        return self.jsonl.read_text().splitlines() if self.jsonl.exists() else []

    def result(self) -> dict[str, Any]:
        return json.loads((self.out / "result.json").read_text())


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Callable[[list[str]], Run]]:
    with cli_procs(tmp_path, Run) as make:
        yield make


def parse_lines(raw: list[str]) -> list[dict[str, Any]]:
    out = []
    for line in raw:
        obj = json.loads(line)  # every line is complete, valid JSON
        assert isinstance(obj, dict)
        out.append(obj)
    return out


def check_interrupted(run: Run, rc: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    assert rc == 130, run.stderr()
    assert "Traceback" not in run.stderr()
    res = run.result()
    assert res["interrupted"] is True
    lines = parse_lines(run.lines())
    c = res["counts"]
    assert len(lines) == c["requests"]  # every finished request was written
    assert sorted(ln["index"] for ln in lines) == list(range(c["requests"]))
    assert c["unsent"] > 0
    assert c["requests"] + c["unsent"] == SCHEDULE_LEN
    assert c["completed"] + c["failed"] == c["requests"]
    assert (run.out / "histograms.hlog").read_text().startswith("#[Histogram log format version")
    return res, lines


def test_sigint_drains_in_flight(start: Callable[[list[str]], Run]) -> None:
    run = start([*BASE_ARGS, "--sim-args", SIM])
    run.wait_for(lambda: len(run.lines()) >= 10, 30.0, "10 finished requests")
    rc, took = run.signal_and_wait(signal.SIGINT)
    res, lines = check_interrupted(run, rc)
    c = res["counts"]
    # a request takes ~0.9 s: everything in flight finished inside the 2 s grace
    assert c["errors_by_kind"] == {}
    assert c["completed"] == c["requests"] >= 10
    assert all(ln["status"] == "ok" and ln["output_tokens"] == 40 for ln in lines)
    assert res["latency_ms"]["ttft"]["count"] == c["completed"]
    assert took < 2.0 + 8.0


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_stop_cancels_requests_past_the_grace(start: Callable[[list[str]], Run], sig: int) -> None:
    # every request stalls 10 s half-way: none can finish inside the 2 s grace
    run = start([*BASE_ARGS, "--sim-args", f"{SIM} --fault-stall 1.0 --stall-ms 10000"])
    run.wait_for(run.jsonl.exists, 30.0, "the run to start")
    time.sleep(1.5)
    assert run.lines() == []  # nothing can have finished yet
    rc, took = run.signal_and_wait(sig)
    res, lines = check_interrupted(run, rc)
    c = res["counts"]
    assert c["requests"] >= 5
    assert c["errors_by_kind"] == {"cancelled": c["requests"]}
    assert c["completed"] == 0
    assert res["latency_ms"]["error_e2e"]["count"] == c["requests"]
    for ln in lines:
        assert ln["status"] == "error" and ln["error_kind"] == "cancelled", ln
        assert ln["error_detail"] == "in flight at the drain deadline"
        assert ln["sent_s"] is not None
        assert ln["ttft_ms"] is None and ln["e2e_ms"] is None
        # sent before the stop, ended at the end of the 2 s grace
        assert ln["error_e2e_ms"] >= 1990.0, ln
        assert ln["chunks"] <= 20  # stalled at token 20 of 40
    assert 1.9 <= took < 2.0 + 8.0  # waited for the grace, not for the 10 s stall


def test_second_sigint_cancels_at_once(start: Callable[[list[str]], Run]) -> None:
    args = [a if a != "2s" else "30s" for a in BASE_ARGS]  # --drain-grace 30s
    run = start([*args, "--sim-args", f"{SIM} --fault-stall 1.0 --stall-ms 10000"])
    run.wait_for(run.jsonl.exists, 30.0, "the run to start")
    time.sleep(1.0)
    run.proc.send_signal(signal.SIGINT)
    time.sleep(0.5)
    assert run.proc.poll() is None  # still draining (30 s grace)
    rc, took = run.signal_and_wait(signal.SIGINT)
    res, _ = check_interrupted(run, rc)
    assert took < 8.0
    assert res["counts"]["errors_by_kind"] == {"cancelled": res["counts"]["requests"]}
    assert res["counts"]["requests"] >= 3


# Ctrl-C during the pre-flight (issue 20 item 12), for run and sweep: discovery (GET /v1/models)
# and the pre-flight POST never answer; exit 130 at once, no traceback. (run during discovery is
# also tests/integration/test_fault_hardening.py's.)
PREFLIGHT_STALLS: dict[str, tuple[dict[str, dict[str, Any]], tuple[str, str | None]]] = {
    "discovery": ({"GET /v1/models": {"kind": "never"}}, ("GET", "/v1/models")),
    "preflight_post": (
        {"GET /v1/models": {"kind": "ok", "body": b'{"data": [{"id": "m"}]}'}, "POST": {"kind": "never"}},
        ("POST", None),
    ),
}


@pytest.mark.parametrize(
    ("command", "phase"),
    [("sweep", "discovery"), ("sweep", "preflight_post"), ("run", "preflight_post")],
)
def test_ctrl_c_during_preflight_exits_130(tmp_path: Path, command: str, phase: str) -> None:
    from tests.fixtures.side_server import SideServer

    routes, (method, path) = PREFLIGHT_STALLS[phase]
    load = (
        ["--requests", "1", "--rate", "1"] if command == "run" else ["--slo", "ttft:p90<=500ms", "--calibration", "0"]
    )
    with SideServer(routes) as srv, cli_procs(tmp_path, lambda t, a: CliProc(t, command, a)) as start:
        proc = start(["--endpoint", srv.url, "--model", "m", *load, "--timeout", "60s"])
        proc.wait_for(
            lambda: any(m == method and (path is None or t.split("?")[0] == path) for m, t in srv.seen),
            30.0,
            f"the CLI's {phase} request",
        )
        time.sleep(0.2)  # the request is waiting for its answer
        rc, _ = proc.signal_and_wait(signal.SIGINT, 15.0)
        err = proc.stderr()
    assert rc == 130, (rc, err[-2000:])
    assert "Traceback" not in err, err
    assert "interrupted" in err, err


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_while_workers_start_sends_nothing(start: Callable[[list[str]], Run], sig: int) -> None:
    """Issue 34: Ctrl-C or SIGTERM while ``--workers 2`` processes were still starting let the whole schedule go
    out (91 or 100 requests) before the run ended. The signal now comes while the workers start (the first
    spawned worker seen among the CLI's children), and no request is sent: every one is unsent."""
    run = start([*BASE_ARGS, "--workers", "2", "--sim-args", SIM])
    children = Path(f"/proc/{run.proc.pid}/task/{run.proc.pid}/children")

    def worker_started() -> bool:
        for pid in children.read_text().split() if children.exists() else []:
            try:
                if b"multiprocessing" in Path(f"/proc/{pid}/cmdline").read_bytes():
                    return True
            except OSError:
                continue
        return False

    run.wait_for(worker_started, 60.0, "a worker process")
    rc, _ = run.signal_and_wait(sig)
    assert rc == 130, run.stderr()[-2000:]
    res = run.result()
    assert res["interrupted"] is True and res["counts"]["requests"] == 0, res["counts"]
    assert res["counts"]["unsent"] == SCHEDULE_LEN and run.lines() == []
