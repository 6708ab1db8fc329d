"""Every request error kind, end to end through ``loadgen run`` (a real subprocess).

Each fault run is a mixed load against the simulated endpoint (a fraction of the
requests faulted, ``--seed 7``) and is checked against the sim's truth log: the
run goes to the end, every request is one line of ``requests.jsonl``, the error
counts match the server's own record of which requests it faulted, failed
requests carry only ``error_e2e_ms``, and nothing is retried (the server saw
exactly one request per measured request: ``--no-preflight``).

``cancelled`` is covered by ``test_interrupt.py``.
"""

from __future__ import annotations

import json
import resource
import socket
import time
from pathlib import Path
from typing import Any

import pytest

from loadgen.core.types import ERROR_KINDS
from loadgen.sim.launch import SimProcess
from tests.fixtures.cli_proc import cli_run
from tests.fixtures.recording_server import RecordingServer, ok_stream

N_REQ = 30
RATE = "40"
OUT_TOKENS = 16


# --------------------------------------------------------------------------- helpers


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def wait_lines(path: Path, n: int, timeout_s: float) -> None:
    """Bounded wait until ``path`` has at least ``n`` lines."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists() and len(read_jsonl(path)) >= n:
            return
        time.sleep(0.05)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class TinyServer(RecordingServer):
    """Raw HTTP/1.1 on 127.0.0.1 (one request per connection, ``Connection: close``).

    ``GET /v1/models`` lists model ``tiny``. The first ``answer_limit`` POSTs get a
    3-token stream; after that the listening socket is closed (new connections are
    refused) and any POST already accepted is dropped without a response.
    Every request seen is logged in ``requests`` (method, target, lower-cased headers, body).
    """

    def __init__(self, answer_limit: int) -> None:
        super().__init__(lambda n, req: ok_stream(), refuse_after=answer_limit, model="tiny")
        self.answer_limit = answer_limit

    @property
    def answered(self) -> int:
        return self.posts


def check_common(res: dict[str, Any], lines: list[dict[str, Any]], n_req: int) -> None:
    """Invariants of every finished (not interrupted) run with failures."""
    c = res["counts"]
    assert res["interrupted"] is False
    assert c["requests"] == n_req
    assert len(lines) == n_req
    assert sorted(ln["index"] for ln in lines) == list(range(n_req))
    assert c["completed"] + c["failed"] == n_req
    assert c["unsent"] == 0
    assert sum(c["errors_by_kind"].values()) == c["failed"]
    ok = [ln for ln in lines if ln["status"] == "ok"]
    bad = [ln for ln in lines if ln["status"] == "error"]
    assert len(ok) == c["completed"] and len(bad) == c["failed"]
    lat = res["latency_ms"]
    assert lat["ttft"]["count"] == c["completed"] - c["zero_output"]
    assert lat["e2e"]["count"] == c["completed"] - c["zero_output"]
    assert lat["error_e2e"]["count"] == c["failed"]
    for ln in bad:
        assert ln["ttft_ms"] is None and ln["e2e_ms"] is None and ln["tpot_ms"] is None, ln
        assert ln["error_e2e_ms"] is not None and ln["error_e2e_ms"] > 0, ln
        assert ln["error_kind"] in ERROR_KINDS, ln
        assert ln["error_detail"], ln
    for ln in ok:
        assert ln["error_kind"] is None and ln["error_e2e_ms"] is None, ln
        assert ln["ttft_ms"] is not None and ln["e2e_ms"] is not None, ln
        assert 0 < ln["ttft_ms"] <= ln["e2e_ms"], ln


# --------------------------------------------------------------------------- sim fault runs

# kind -> (sim flags, the error kind loadgen must report, extra loadgen flags)
FAULTS: dict[str, tuple[list[str], str, list[str]]] = {
    "429": (["--fault-429", "0.3"], "rate_limited", []),
    "500": (["--fault-500", "0.3"], "http_error", []),
    "drop": (["--fault-drop", "0.3"], "incomplete_stream", []),
    "malformed": (["--fault-malformed", "0.3"], "protocol", []),
    "inband_error": (["--fault-inband-error", "0.3"], "stream_error", []),
    "stall": (["--fault-stall", "0.3", "--stall-ms", "3000"], "timeout", ["--timeout", "1s"]),
}
# Faults after which the client walks away mid-stream: the sim overwrites the truth
# status "fault:<kind>" with "client_gone" (see test_truth_log_keeps_fault_kind).
CLIENT_LEAVES = {"malformed", "stall"}

_RUNS: dict[str, dict[str, Any]] = {}


def fault_run(kind: str, tmp_root: Path, embedded: bool = False) -> dict[str, Any]:
    key = kind + (":embedded" if embedded else "")
    if key in _RUNS:
        return _RUNS[key]
    sim_flags, _, extra = FAULTS[kind]
    d = tmp_root / key.replace(":", "_")
    d.mkdir(parents=True)
    truth = d / "truth.jsonl"
    sim_args = ["--seed", "7", "--truth-log", str(truth), "--ttft-ms", "10", "--itl-ms", "2", *sim_flags]
    args = [
        "--rate",
        RATE,
        "--requests",
        str(N_REQ),
        "--output-tokens",
        str(OUT_TOKENS),
        "--no-preflight",
        "--seed",
        "7",
        "--out",
        str(d / "out"),
        *extra,
    ]
    t0 = time.monotonic()
    if embedded:
        proc = cli_run("run", *args, "--sim-args", " ".join(sim_args))
    else:
        with SimProcess(sim_args) as sim:
            assert sim.url is not None
            proc = cli_run("run", *args, "--endpoint", sim.url)
            # stalled handlers end (and log) after their stall; wait for them, bounded
            wait_lines(truth, N_REQ, 8.0)
    run = {
        "proc": proc,
        "wall_s": time.monotonic() - t0,
        "result": json.loads((d / "out" / "result.json").read_text()),
        "lines": read_jsonl(d / "out" / "requests.jsonl"),
        "truth": read_jsonl(truth),
    }
    _RUNS[key] = run
    return run


def _prefix(lines_truth: list[dict[str, Any]]) -> str:
    prefixes = {t["request_id"].rsplit("-", 1)[0] for t in lines_truth}
    assert len(prefixes) == 1, prefixes
    return prefixes.pop()


@pytest.mark.timing
@pytest.mark.parametrize(
    "kind,embedded",
    [(k, False) for k in FAULTS] + [("500", True)],
    ids=[f"{k}" for k in FAULTS] + ["500-embedded-sim"],
)
def test_fault_kind(kind: str, embedded: bool, tmp_path_factory: pytest.TempPathFactory) -> None:
    run = fault_run(kind, tmp_path_factory.mktemp("faults"), embedded)
    proc, res, lines, truth = run["proc"], run["result"], run["lines"], run["truth"]
    assert proc.returncode in (0, 1), proc.stderr
    assert "Traceback" not in proc.stderr
    expected_kind = FAULTS[kind][1]
    check_common(res, lines, N_REQ)

    # no retries, no extra requests: the server saw exactly one request per measured request
    assert len(truth) == N_REQ, [t["status"] for t in truth]
    prefix = _prefix(truth)
    by_index = {int(t["request_id"].rsplit("-", 1)[1]): t for t in truth}
    assert sorted(by_index) == list(range(N_REQ))
    assert all(t["request_id"] == f"{prefix}-{i}" for i, t in by_index.items())

    fault_statuses = {f"fault:{kind}"} | ({"client_gone"} if kind in CLIENT_LEAVES else set())
    faulted = {i for i, t in by_index.items() if t["status"] in fault_statuses}
    ok_truth = {i for i, t in by_index.items() if t["status"] == "ok"}
    assert faulted | ok_truth == set(range(N_REQ)), sorted(t["status"] for t in truth)
    assert 0 < len(faulted) < N_REQ  # a mixed load
    c = res["counts"]
    assert c["errors_by_kind"] == {expected_kind: len(faulted)}
    assert c["failed"] == len(faulted) and c["completed"] == N_REQ - len(faulted)
    assert c["zero_output"] == 0
    failed_idx = {ln["index"] for ln in lines if ln["status"] == "error"}
    assert failed_idx == faulted
    assert res["tokens"]["output"] == OUT_TOKENS * (N_REQ - len(faulted))

    bad = [ln for ln in lines if ln["status"] == "error"]
    for ln in bad:
        assert ln["error_kind"] == expected_kind
        if kind == "429":
            assert ln["http_status"] == 429 and ln["retry_after_s"] == 1.0, ln
        elif kind == "500":
            assert ln["http_status"] == 500 and ln["retry_after_s"] is None, ln
        else:
            assert ln["http_status"] is None and ln["retry_after_s"] is None, ln
        if kind == "stall":
            # the 1 s per-request deadline, not the 3 s stall, ended it; and never before 1 s from
            # the scheduled time (uvloop's millisecond timers once ended it at 998.9 ms)
            assert 1000.0 <= ln["error_e2e_ms"] < 2000.0, ln
            assert ln["error_detail"] == "TimeoutError"
        assert ln["sent_s"] is not None
        # faulted mid-stream: the tokens before the fault arrived, as the server logged
        if kind in ("drop", "inband_error", "stall"):
            assert ln["chunks"] == len(by_index[ln["index"]]["chunks"]) == OUT_TOKENS // 2, ln
        if kind == "malformed":  # the server may get a write or two more out before it notices
            assert ln["chunks"] == OUT_TOKENS // 2 <= len(by_index[ln["index"]]["chunks"]), ln
    for ln in lines:
        if ln["status"] == "ok":
            assert ln["http_status"] is None and ln["retry_after_s"] is None
            assert ln["output_tokens"] == OUT_TOKENS == by_index[ln["index"]]["output_tokens"]
    if kind == "429":
        assert {ln["error_detail"].split(":")[0] for ln in bad} == {"HTTP 429"}
    if kind == "stall":
        assert run["wall_s"] < 25


@pytest.mark.timing
@pytest.mark.parametrize("kind", sorted(CLIENT_LEAVES))
def test_truth_log_keeps_fault_kind(kind: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    run = fault_run(kind, tmp_path_factory.mktemp("faults"))
    failed = {ln["index"] for ln in run["lines"] if ln["status"] == "error"}
    statuses = {t["status"] for t in run["truth"] if int(t["request_id"].rsplit("-", 1)[1]) in failed}
    assert failed and statuses == {f"fault:{kind}"}


def test_preflight_request_count(tmp_path: Path) -> None:
    """The pre-flight sends exactly one probe to a lenient server, and 4 to a strict one
    (three HTTP 400s while it drops continuous_usage_stats, ignore_eos, min_tokens)."""
    for strict, n_probes in ((False, 1), (True, 4)):
        d = tmp_path / f"strict{int(strict)}"
        truth = d / "truth.jsonl"
        d.mkdir()
        with SimProcess(
            ["--truth-log", str(truth), "--ttft-ms", "5", "--itl-ms", "1"] + (["--strict"] if strict else [])
        ) as sim:
            assert sim.url is not None
            proc = cli_run(
                "run", "--endpoint", sim.url, "--rate", RATE, "--requests", "5", "--output-tokens", "4", out=d / "out"
            )
        assert proc.returncode in (0, 1), proc.stderr
        res = json.loads((d / "out" / "result.json").read_text())
        t = read_jsonl(truth)
        probes = [x for x in t if x["request_id"] is None]
        assert len(t) == 5 + n_probes
        assert len(probes) == n_probes
        assert [p["status"] for p in probes] == ["rejected:400"] * (n_probes - 1) + ["ok"]
        assert probes[-1]["max_tokens"] == 2 and probes[-1]["output_tokens"] == 2
        assert res["counts"]["requests"] == 5 and res["counts"]["errors_by_kind"] == {}
        accepted = res["conditions"]["endpoint"]["accepted_fields"]
        want = {
            "continuous_usage_stats": not strict,
            "include_usage": True,
            "ignore_eos": not strict,
            "min_tokens": not strict,
        }
        assert accepted == want


# --------------------------------------------------------------------------- connect


def test_connect_refused_mid_run(tmp_path: Path) -> None:
    answer = 10
    with TinyServer(answer_limit=answer) as srv:
        proc = cli_run(
            "run",
            "--endpoint",
            srv.url,
            "--rate",
            RATE,
            "--requests",
            str(N_REQ),
            "--output-tokens",
            "3",
            "--no-preflight",
            "--model",
            "x",
            out=tmp_path / "out",
        )
    assert proc.returncode in (0, 1), proc.stderr
    assert "Traceback" not in proc.stderr
    res = json.loads((tmp_path / "out" / "result.json").read_text())
    lines = read_jsonl(tmp_path / "out" / "requests.jsonl")
    check_common(res, lines, N_REQ)
    posts = [r for r in srv.requests if r["method"] == "POST"]
    assert srv.answered == answer
    assert res["counts"]["completed"] == answer
    assert res["counts"]["errors_by_kind"] == {"connect": N_REQ - answer}
    # no retries: every POST the server saw is a distinct request
    ids = [p["headers"]["x-request-id"] for p in posts]
    assert len(ids) == len(set(ids)) == answer + srv.dropped
    assert all(json.loads(p["body"])["model"] == "x" for p in posts)
    bad = [ln for ln in lines if ln["status"] == "error"]
    # refused connections never sent anything
    never_sent = [ln for ln in bad if ln["sent_s"] is None]
    assert len(never_sent) >= N_REQ - answer - srv.dropped
    assert all(ln["http_status"] is None for ln in bad)


def test_discovery_refused_exits_3(tmp_path: Path) -> None:
    port = free_port()
    proc = cli_run(
        "run",
        "--endpoint",
        f"http://127.0.0.1:{port}",
        "--rate",
        RATE,
        "--requests",
        "5",
        "--no-preflight",
        "--model",
        "x",
        out=tmp_path / "out",
        timeout=30,
    )
    assert proc.returncode == 3, proc.stderr
    assert "Traceback" not in proc.stderr
    assert f"cannot reach http://127.0.0.1:{port}/v1/completions" in " ".join(proc.stderr.split())
    assert not (tmp_path / "out" / "result.json").exists()


# --------------------------------------------------------------------------- client_limit

FD_LIMIT = 30  # ~14 descriptors at rest: about 16 sockets fit, the rest fail with EMFILE


def test_client_limit(tmp_path: Path) -> None:
    truth = tmp_path / "truth.jsonl"

    def low_fd_limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (FD_LIMIT, FD_LIMIT))

    n = 40
    with SimProcess(["--truth-log", str(truth), "--slow-ms", "500", "--ttft-ms", "5", "--itl-ms", "1"]) as sim:
        assert sim.url is not None
        proc = cli_run(
            "run",
            "--endpoint",
            sim.url,
            "--rate",
            "400",
            "--arrival",
            "constant",
            "--requests",
            str(n),
            "--output-tokens",
            "4",
            "--no-preflight",
            out=tmp_path / "out",
            preexec_fn=low_fd_limit,
        )
        wait_lines(truth, 1, 5.0)
    assert "Traceback" not in proc.stderr
    res = json.loads((tmp_path / "out" / "result.json").read_text())
    lines = read_jsonl(tmp_path / "out" / "requests.jsonl")
    check_common(res, lines, n)
    c = res["counts"]
    assert res["conditions"]["open_file_limit"] == {"soft": FD_LIMIT, "hard": FD_LIMIT}
    assert set(c["errors_by_kind"]) == {"client_limit"}
    assert 0 < c["errors_by_kind"]["client_limit"] < n
    bad = [ln for ln in lines if ln["status"] == "error"]
    assert all(ln["sent_s"] is None for ln in bad)  # never left the client
    assert all("Too many open files" in ln["error_detail"] for ln in bad)
    # the server saw exactly the requests that got a socket
    t = read_jsonl(truth)
    assert len(t) == c["completed"]
    assert {x["status"] for x in t} == {"ok"}
    # a client limit makes the run INVALID (exit 1), limited by the client
    v = res["validity"]
    assert v["valid"] is False and v["limited_by"] == "client"
    check = {ch["name"]: ch for ch in v["checks"]}["client_resources"]
    assert check["ok"] is False
    assert check["detail"].startswith(f"{c['errors_by_kind']['client_limit']} requests hit a descriptor limit")
    assert proc.returncode == 1


def test_every_error_kind_is_covered() -> None:
    covered = {FAULTS[k][1] for k in FAULTS} | {"connect", "client_limit"} | {"cancelled"}  # test_interrupt
    covered |= {"filtered"}  # tests/integration/test_provider_faults.py
    covered |= {"header_timeout"}  # tests/integration/test_header_timeout.py
    covered |= {"abandoned"}  # tests/integration/test_abandon_cli.py
    assert covered == set(ERROR_KINDS)
