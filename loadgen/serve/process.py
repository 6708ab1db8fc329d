"""A real inference server as a child process: own process group, log file, readiness, teardown.

The pattern of :mod:`loadgen.sim.launch`, for servers that live in environments of
their own (vLLM, Triton): the command runs in a new process group (its id is its pid,
and every worker it forks without ``setsid`` stays in that group) of loadgen's own session,
never a new session: with the kernel's autogroup scheduling (``/proc/sys/kernel/sched_autogroup_enabled``)
a new session is a scheduling group of its own, and on a 2-core machine a vLLM CPU server in its own
group held both cores while loadgen's event loop, runnable, waited up to 2 s for one (its
``/proc/thread-self/schedstat`` run delay equal to the lateness): every probe INVALID, issue 30;
stdout and stderr go to a log file (never an undrained pipe), readiness is polled
over HTTP with a deadline, and :meth:`ServerProcess.stop` sends SIGTERM to the
whole group, SIGKILL after a grace period, and waits until no process of the
group is left. On Linux the child also gets ``PR_SET_PDEATHSIG=SIGTERM``, so a
server whose launcher is killed outright does not outlive it.

Errors::

    LoadgenError
    └── ServerStartError      the server exited or was not ready in time (cli: exit 4);
                              the message is one line; ``log_tail`` holds the log's end
"""

from __future__ import annotations

import atexit
import ctypes
import http.client
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from loadgen.core.errors import LoadgenError

__all__ = ["ServerProcess", "ServerStartError", "free_port", "group_alive", "group_members", "proc_stat_fields"]

"""Exit code of the CLI when a server launched by loadgen fails to start."""

_POLL_S = 0.25
_PR_SET_PDEATHSIG = 1


class ServerStartError(LoadgenError):
    """A launched server exited before it was ready, or was not ready before the deadline.

    ``str(exc)`` is one line (what failed, the last meaningful log line, the log's
    path); ``log_tail`` holds the last lines of the log for display under it.
    """

    def __init__(self, message: str, *, log_path: str | None = None, log_tail: str = "") -> None:
        super().__init__(message)
        self.log_path = log_path
        self.log_tail = log_tail


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free on ``host`` a moment ago (bind to port 0, read, close)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def group_members(pgid: int) -> list[tuple[int, str]] | None:
    """``(pid, state)`` of every process in group ``pgid``, from /proc; None without /proc."""
    if not os.path.isdir("/proc/self"):
        return None
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        rest = proc_stat_fields(int(name))
        if rest is not None and len(rest) >= 3 and rest[2] == str(pgid):
            out.append((int(name), rest[0]))
    return out


def proc_stat_fields(pid: int) -> list[str] | None:
    """The fields of ``/proc/PID/stat`` after the command's name, from its state on (field 3 of
    proc(5) is index 0); None when the process is gone or there is no /proc."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read().decode("ascii", "replace")
    except OSError:
        return None
    # pid (comm) state ppid pgrp ...: comm may hold spaces and parentheses
    return stat[stat.rfind(")") + 2 :].split()


def group_alive(pgid: int) -> bool:
    """True while a live (non-zombie) process of process group ``pgid`` exists."""
    members = group_members(pgid)
    if members is not None:
        return any(state != "Z" for _, state in members)
    return _group_exists(pgid)


def _pdeathsig() -> None:  # runs in the child between fork and exec (main thread only)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
    except Exception:
        pass


def _use_pdeathsig() -> bool:
    # the signal fires when the *thread* that forked exits: only tie it to the main thread
    return sys.platform.startswith("linux") and threading.current_thread() is threading.main_thread()


_LIVE: weakref.WeakSet[ServerProcess] = weakref.WeakSet()


@atexit.register
def _stop_all() -> None:  # pragma: no cover - exercised by interpreter exit
    for srv in list(_LIVE):
        try:
            srv.stop()
        except Exception:
            pass


@dataclass(eq=False)
class ServerProcess:
    """One launched server. Start it with :meth:`start` (or use it as a context manager).

    ``command``: argv (the interpreter first); ``ready_url``: polled with GET until it
    answers 200 (and every URL in ``also_ready``, e.g. a model's ready URL); ``base_url``: what clients use; ``kind``: "vllm" or "triton";
    ``log_dir``: where ``server.log`` goes (a new temp dir when None; kept after stop
    so the log can be read). ``info`` carries launch facts for the conditions block
    (engine options, served model, interpreter, ports).
    """

    kind: str
    command: list[str]
    ready_url: str
    base_url: str
    env: dict[str, str] = field(default_factory=dict)
    cwd: str | None = None
    log_dir: str | None = None
    ready_timeout_s: float = 300.0
    also_ready: list[str] = field(default_factory=list)
    term_grace_s: float = 15.0
    info: dict[str, Any] = field(default_factory=dict)
    proc: subprocess.Popen[bytes] | None = field(default=None, init=False)
    log_path: str = field(default="", init=False)
    ready_s: float | None = field(default=None, init=False)
    stopped: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        if self.log_dir is None:
            self.log_dir = tempfile.mkdtemp(prefix=f"loadgen-{self.kind}-")
        Path(self.log_dir).mkdir(parents=True, exist_ok=True)
        self.log_path = os.path.join(self.log_dir, f"{self.kind}-server.log")

    # -- lifecycle ------------------------------------------------------------------

    @property
    def pgid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def start(self) -> ServerProcess:
        """Spawn the server and wait until ``ready_url`` answers 200.

        Raises :class:`ServerStartError` (after stopping whatever was started) when the
        process exits first or the deadline passes; the interpreter missing is the same.
        """
        t0 = time.monotonic()
        self._refuse_taken_ports()
        env = dict(self.env)
        with open(self.log_path, "ab") as log:
            log.write(f"# loadgen: {' '.join(self.command)}\n".encode())
            log.flush()
            try:
                self.proc = subprocess.Popen(
                    self.command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                    env=env, cwd=self.cwd, process_group=0,
                    preexec_fn=_pdeathsig if _use_pdeathsig() else None,
                )  # fmt: skip
            except OSError as exc:
                raise ServerStartError(
                    f"{self.kind} server could not be started: {exc.strerror or exc}: {self.command[0]}",
                    log_path=self.log_path,
                ) from None
        _LIVE.add(self)
        with open(self.log_path, "ab") as log:  # O_APPEND: interleaves whole lines with the child's
            log.write(f"# loadgen: pid {self.proc.pid}, process group {self.proc.pid}\n".encode())
        try:
            self._wait_ready(t0)
        except BaseException:
            self.stop()
            raise
        self.ready_s = time.monotonic() - t0
        return self

    def _refuse_taken_ports(self) -> None:
        """Raise ServerStartError when something already answers on a port the server is to use:
        its readiness URL would answer for the other process (a server "ready" at once, measured
        in its place)."""
        from urllib.parse import urlsplit

        seen = set()
        for url in (self.ready_url, *self.also_ready):
            parts = urlsplit(url)
            if not parts.hostname or not parts.port or (parts.hostname, parts.port) in seen:
                continue
            seen.add((parts.hostname, parts.port))
            try:
                with socket.create_connection((parts.hostname, parts.port), timeout=1.0):
                    pass
            except OSError:
                continue
            raise ServerStartError(
                f"{self.kind} server not started: {parts.hostname}:{parts.port} is already in use by another "
                "process (give another --server-port, or stop that process)",
                log_path=self.log_path,
            )

    def _wait_ready(self, t0: float) -> None:
        assert self.proc is not None
        deadline = t0 + self.ready_timeout_s
        while True:
            code = self.proc.poll()
            if code is not None:
                self._fail(f"exited with code {code} after {time.monotonic() - t0:.1f} s")
            if _http_status(self.ready_url, timeout_s=2.0) == 200 and all(
                _http_status(u, timeout_s=2.0) == 200 for u in self.also_ready
            ):
                return
            if time.monotonic() >= deadline:
                self._fail(f"not ready after {self.ready_timeout_s:g} s ({self.ready_url})")
            time.sleep(_POLL_S)

    def _fail(self, what: str) -> None:
        tail = log_tail(self.log_path)
        last = last_error_line(log_tail(self.log_path, 64_000, n_lines=10**6))
        msg = f"{self.kind} server failed to start: {what}"
        if last:
            msg += f": {last}"
        msg += f" (log: {self.log_path})"
        raise ServerStartError(msg, log_path=self.log_path, log_tail=tail)

    def stop(self) -> dict[str, Any]:
        """SIGTERM the process group, SIGKILL after ``term_grace_s``; wait until the group is gone.

        Idempotent. Returns what happened: ``{"signal": "SIGTERM"|"SIGKILL"|None,
        "stop_s": seconds, "exit_code": code}``.
        """
        proc = self.proc
        out: dict[str, Any] = {"signal": None, "stop_s": 0.0, "exit_code": None}
        if proc is None or self.stopped:
            return out
        self.stopped = True
        _LIVE.discard(self)
        t0 = time.monotonic()
        pgid = proc.pid
        if group_alive(pgid):
            out["signal"] = "SIGTERM"
            _killpg(pgid, signal.SIGTERM)
            deadline = t0 + self.term_grace_s
            while time.monotonic() < deadline:
                proc.poll()
                if not group_alive(pgid):
                    break
                time.sleep(0.05)
            else:
                out["signal"] = "SIGKILL"
                _killpg(pgid, signal.SIGKILL)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL cannot be ignored
            pass
        # members of the group that are not our children are reaped by init; wait (bounded)
        # until none is left, zombies included, so that killpg(pgid, 0) finds nothing
        deadline = time.monotonic() + 10
        while _group_exists(pgid) and time.monotonic() < deadline:
            if group_alive(pgid):
                _killpg(pgid, signal.SIGKILL)
            time.sleep(0.05)
        if _group_exists(pgid):
            out["left"] = group_members(pgid)
        out["stop_s"] = round(time.monotonic() - t0, 3)
        out["exit_code"] = proc.returncode
        return out

    def __enter__(self) -> ServerProcess:
        if self.proc is None:
            self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def log_text(self, n_chars: int = 8000) -> str:
        """The last ``n_chars`` characters of the server log."""
        return log_tail(self.log_path, n_chars, n_lines=10**9)


def _group_exists(pgid: int) -> bool:
    """True while process group ``pgid`` has any member, zombies included (``killpg(pgid, 0)``)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _killpg(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _http_status(url: str, timeout_s: float = 2.0) -> int | None:
    """GET ``url`` (http only) and return the status, None when nothing answers."""
    from urllib.parse import urlsplit

    p = urlsplit(url)
    conn = http.client.HTTPConnection(p.hostname or "127.0.0.1", p.port or 80, timeout=timeout_s)
    try:
        conn.request("GET", p.path or "/")
        resp = conn.getresponse()
        resp.read()
        return resp.status
    except (OSError, http.client.HTTPException):
        return None
    finally:
        conn.close()


def log_tail(path: str, n_chars: int = 4000, n_lines: int = 25) -> str:
    """The last ``n_lines`` lines (at most ``n_chars`` characters) of a log file."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - n_chars))
            text = fh.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    lines = text.splitlines()
    if size > n_chars and lines:
        lines = lines[1:]  # the first line is probably cut
    return "\n".join(lines[-n_lines:])


_ERROR_MARKERS = ("Error", "error:", "Exception", "FAILED", "failed", "E1", "E0", "No such file", "not found")


_GLOG_ERROR = re.compile(r"^E\d{4} [\d:.]+ +\d+ [\w.]+:\d+\] (.*)$")


# vLLM's log prefix "(VllmWorker-0 pid=1) ERROR 12-01 17:55:53 [file.py:953] " before a raised exception's line
_LOG_PREFIX = re.compile(r"^(?:\([\w-]+ pid=\d+\) )?(?:(?:ERROR|CRITICAL) [\d-]+ [\d:.]+ \[[^\]]*\] )?")
_EXCEPTION = re.compile(r"^(?:[a-z_][\w]*\.)*[A-Z]\w*(?:Error|Exception|Exit|Interrupt): \S")
# an exception raised only to say that another one happened: never the root cause
_WRAPPERS = ("root cause", "See stack trace", "initialization failed", "failed to start", "died unexpectedly")


def root_cause_line(tail: str) -> str | None:
    """The first exception a log raised that is not a wrapper of another: the root cause.

    vLLM logs the worker's own error (``ValueError: Available memory on node 0 ...``) first, then
    the engine core's and the API server's wrappers (``RuntimeError: Engine core initialization
    failed. See root cause above.``); the last line names only the wrapper.
    """
    for ln in tail.splitlines():
        text = _LOG_PREFIX.sub("", ln.strip(), count=1)
        if _EXCEPTION.match(text) and not any(w in text for w in _WRAPPERS):
            return text[:300]
    return None


def last_error_line(tail: str) -> str:
    """The most telling line of a log tail: the last glog error line (``E1130 ...``, as
    tritonserver writes), else the root cause (:func:`root_cause_line`), else the last line
    that names an error, else the last line."""
    lines = [ln.strip() for ln in tail.splitlines() if ln.strip() and not ln.startswith("# loadgen:")]
    for ln in reversed(lines):
        m = _GLOG_ERROR.match(ln)
        if m:
            return m.group(1).strip('"')[:300]
    root = root_cause_line("\n".join(lines))
    if root:
        return root
    for ln in reversed(lines):
        if any(m in ln for m in _ERROR_MARKERS) and not ln.startswith("Traceback"):
            return ln[:300]
    return lines[-1][:300] if lines else ""


def server_env(extra: Mapping[str, str] | None = None, *, drop: Sequence[str] = ()) -> dict[str, str]:
    """The launch environment: ours, minus loadgen's own venv activation, plus ``extra``.

    ``PYTHONPATH`` and ``VIRTUAL_ENV`` are removed so the server's interpreter sees only
    its own packages; ``PYTHONUNBUFFERED=1`` keeps the log current.
    """
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    for k in drop:
        env.pop(k, None)
    env["PYTHONUNBUFFERED"] = "1"
    if extra:
        env.update(extra)
    return env
