"""Server launch wrapper: readiness, one-line start errors with the log tail, no process left behind."""

from __future__ import annotations

import os
import re
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from loadgen.cli import EXIT_SERVER_START
from loadgen.serve.process import (
    ServerProcess,
    ServerStartError,
    free_port,
    group_alive,
    group_members,
    last_error_line,
    log_tail,
)
from tests.fixtures.cli_proc import cli_run

# A server that forks a grandchild (a worker) into its own process group, then serves
# /health with 200 after a short delay. Argument: port, then "ignore-term" to make the
# worker ignore SIGTERM.
_SERVER = textwrap.dedent(
    """
    import http.server, os, signal, sys, time
    port = int(sys.argv[1])
    if os.fork() == 0:
        if "ignore-term" in sys.argv:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        for _ in range(600):
            time.sleep(0.1)
        os._exit(0)
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if self.path == "/health" else 404)
            self.end_headers()
        def log_message(self, *a):
            pass
    time.sleep(0.3)
    print("serving", flush=True)
    http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
    """
)


def _assert_gone(pgid: int) -> None:
    deadline = time.monotonic() + 5
    while group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not group_alive(pgid), group_members(pgid)
    with pytest.raises(ProcessLookupError):
        os.killpg(pgid, 0)


def _proc(tmp_path: Path, args: list[str], **kw: Any) -> ServerProcess:
    port = free_port()
    return ServerProcess(
        kind="fake",
        command=[sys.executable, "-c", _SERVER, str(port), *args],
        ready_url=f"http://127.0.0.1:{port}/health",
        base_url=f"http://127.0.0.1:{port}",
        env=dict(os.environ),
        log_dir=str(tmp_path),
        **kw,
    )


def test_ready_then_stop_leaves_no_process(tmp_path: Path) -> None:
    srv = _proc(tmp_path, [], ready_timeout_s=20).start()
    pgid = srv.pgid
    assert pgid is not None and srv.ready_s is not None
    members = group_members(pgid) or []
    assert len([m for m in members if m[1] != "Z"]) >= 2  # the server and its worker
    out = srv.stop()
    assert out["signal"] == "SIGTERM"
    _assert_gone(pgid)
    assert srv.stop()["signal"] is None  # idempotent


def _autogroup(path: Path) -> str:
    try:
        words = path.read_text().split()
    except OSError:
        return ""
    return words[0] if words else ""


def test_server_runs_in_its_own_group_of_loadgens_session(tmp_path: Path) -> None:
    """Own process group (stopped as a whole), never its own session: with autogroup scheduling a new
    session is a scheduling group of its own, and a vLLM CPU server there starved loadgen's event loop
    for up to 2 s on a 2-core machine (issue 30, loadgen/serve/process.py)."""
    srv = _proc(tmp_path, [], ready_timeout_s=20).start()
    try:
        assert srv.proc is not None and srv.pgid == srv.proc.pid
        assert os.getpgid(srv.proc.pid) == srv.proc.pid  # its own group: stop() signals it whole
        assert os.getsid(srv.proc.pid) == os.getsid(0)  # loadgen's session: the same autogroup
        theirs, ours = (_autogroup(Path(f"/proc/{p}/autogroup")) for p in (srv.proc.pid, "self"))
        if theirs and ours:  # empty where the kernel has autogroup off (CI's machine)
            assert theirs == ours
    finally:
        srv.stop()


def test_worker_ignoring_sigterm_is_killed(tmp_path: Path) -> None:
    srv = _proc(tmp_path, ["ignore-term"], ready_timeout_s=20, term_grace_s=0.5).start()
    pgid = srv.pgid
    assert pgid is not None
    out = srv.stop()
    assert out["signal"] == "SIGKILL"
    _assert_gone(pgid)


def test_exit_before_ready_is_one_line_error_with_tail(tmp_path: Path) -> None:
    code = "import sys, time\nprint('loading model', flush=True)\nprint('OSError: no such model: /bad/path', flush=True)\nsys.exit(3)"
    srv = ServerProcess(kind="fake", command=[sys.executable, "-c", code], ready_url="http://127.0.0.1:9/health",
                        base_url="http://127.0.0.1:9", env=dict(os.environ), log_dir=str(tmp_path))  # fmt: skip
    with pytest.raises(ServerStartError) as ei:
        srv.start()
    msg = str(ei.value)
    assert "\n" not in msg
    assert "exited with code 3" in msg and "OSError: no such model: /bad/path" in msg and srv.log_path in msg
    assert "loading model" in ei.value.log_tail
    assert srv.pgid is not None
    _assert_gone(srv.pgid)


def test_not_ready_in_time_stops_the_group(tmp_path: Path) -> None:
    # serves 404 on /health: never ready
    port = free_port()
    code = _SERVER.replace('self.path == "/health"', "False")
    srv = ServerProcess(kind="fake", command=[sys.executable, "-c", code, str(port)],
                        ready_url=f"http://127.0.0.1:{port}/health", base_url="", env=dict(os.environ),
                        log_dir=str(tmp_path), ready_timeout_s=1.5)  # fmt: skip
    t = time.monotonic()
    with pytest.raises(ServerStartError, match=r"not ready after 1.5 s"):
        srv.start()
    assert time.monotonic() - t < 15
    assert srv.pgid is not None
    _assert_gone(srv.pgid)


def test_missing_interpreter(tmp_path: Path) -> None:
    srv = ServerProcess(kind="fake", command=["/nonexistent/python"], ready_url="http://127.0.0.1:9/",
                        base_url="", log_dir=str(tmp_path))  # fmt: skip
    with pytest.raises(ServerStartError, match="could not be started"):
        srv.start()


def test_log_tail_and_error_line(tmp_path: Path) -> None:
    p = tmp_path / "x.log"
    p.write_text(
        "".join(f"line {i}\n" for i in range(100)) + "Traceback (most recent call last):\n  x\nValueError: bad\n"
    )
    tail = log_tail(str(p), n_lines=5)
    assert tail.splitlines()[-1] == "ValueError: bad" and len(tail.splitlines()) == 5
    assert last_error_line(tail) == "ValueError: bad"
    assert last_error_line("all good\nstill fine") == "still fine"
    assert log_tail(str(tmp_path / "none.log")) == ""


def test_cli_bad_start_exits_4_with_one_line_error_and_no_process(tmp_path: Path) -> None:
    """`loadgen serve vllm` with an interpreter that has no vLLM: exit 4, one error line, log tail, group gone."""
    out = cli_run(
        "serve", "vllm", "--serve-model", "/bad/model/path",
        "--server-python", sys.executable, "--log-dir", str(tmp_path), "--ready-timeout", "60s",
        timeout=120, cwd=tmp_path,
    )  # fmt: skip
    assert out.returncode == EXIT_SERVER_START, out.stderr
    lines = out.stderr.strip().splitlines()
    assert lines[0].startswith("error: vllm server failed to start: exited with code 1")
    assert "No module named 'vllm'" in lines[0]
    assert any(ln.startswith("  | ") for ln in lines[1:])
    log = (tmp_path / "vllm-server.log").read_text()
    found = re.search(r"process group (\d+)", log)
    assert found is not None
    pgid = int(found.group(1))
    _assert_gone(pgid)
