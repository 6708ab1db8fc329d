"""Start the simulated endpoint in a background process, for tools and tests.

::

    with SimProcess(["--ttft-ms", "100"]) as sim:
        ...  # talk to sim.url

The child runs ``python -m loadgen.sim --port 0 --port-file F ...`` in its own
process group, logging to a file (never an undrained pipe); it is ready once
the port file exists and ``GET /health`` answers 200. It also gets the hidden
``--parent-pid`` flag, so it exits by itself if this process dies without
stopping it (no orphaned servers after a killed test run).
"""

from __future__ import annotations

import http.client
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

__all__ = ["SimProcess"]

_REPO_ROOT = str(Path(__file__).resolve().parents[2])
_POLL_S = 0.05
_TERM_GRACE_S = 5.0


class SimProcess:
    """A running ``loadgen.sim`` child process; a context manager.

    Attributes after start: ``url`` (``http://HOST:PORT``), ``port``, ``host``,
    ``log_path`` (the child's stdout+stderr) and ``proc``. :meth:`stop` sends
    SIGTERM, SIGKILL after 5 s, and always reaps; it is idempotent. The log
    lives in a private temp dir removed by :meth:`stop`, after its text is kept
    in ``log_text``.
    """

    def __init__(self, args: Sequence[str] = (), ready_timeout_s: float = 20.0) -> None:
        self.args = [str(a) for a in args]
        self.ready_timeout_s = ready_timeout_s
        self.host = "127.0.0.1"
        for i, a in enumerate(self.args[:-1]):
            if a == "--host":
                self.host = self.args[i + 1]
        self.port: int | None = None
        self.url: str | None = None
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_text: str | None = None
        self._dir = tempfile.mkdtemp(prefix="loadgen-sim-")
        self.log_path = os.path.join(self._dir, "sim.log")
        self._port_file = os.path.join(self._dir, "port")
        self.start()

    # -- lifecycle ------------------------------------------------------------

    def start(self) -> None:
        """Spawn the child and wait until it serves; RuntimeError if it never does."""
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (_REPO_ROOT, env.get("PYTHONPATH")) if p)
        env.setdefault("PYTHONUNBUFFERED", "1")
        cmd = [
            sys.executable, "-m", "loadgen.sim", "--port", "0", "--port-file", self._port_file,
            "--parent-pid", str(os.getpid()), *self.args,
        ]  # fmt: skip
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                env=env, process_group=0,  # not a new session: loadgen/serve/process.py says why
            )  # fmt: skip
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self) -> None:
        assert self.proc is not None
        deadline = time.monotonic() + self.ready_timeout_s
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"loadgen-sim exited with code {self.proc.returncode} before it was ready:\n" + self._log_tail()
                )
            if self.port is None:
                self.port = self._read_port()
            if self.port is not None and self._healthy():
                self.url = f"http://{self._url_host()}:{self.port}"
                return
            if time.monotonic() >= deadline:
                raise RuntimeError(f"loadgen-sim not ready after {self.ready_timeout_s} s:\n" + self._log_tail())
            time.sleep(_POLL_S)

    def stop(self) -> None:
        """SIGTERM the process group, SIGKILL after 5 s; always reap. Idempotent."""
        proc = self.proc
        if proc is not None and proc.returncode is None:
            self._signal(proc, signal.SIGTERM)
            try:
                proc.wait(timeout=_TERM_GRACE_S)
            except subprocess.TimeoutExpired:
                self._signal(proc, signal.SIGKILL)
                proc.wait()
        if self.log_text is None and os.path.isdir(self._dir):
            try:
                with open(self.log_path, encoding="utf-8", errors="replace") as fh:
                    self.log_text = fh.read()
            except OSError:
                self.log_text = ""
            shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> SimProcess:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # -- helpers ----------------------------------------------------------------

    @staticmethod
    def _signal(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
        try:
            os.killpg(proc.pid, sig)  # its own session: pgid == pid
        except ProcessLookupError:
            pass

    def _url_host(self) -> str:
        host = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(self.host, self.host)
        return f"[{host}]" if ":" in host else host

    def _read_port(self) -> int | None:
        try:
            with open(self._port_file, encoding="ascii") as fh:
                text = fh.read().strip()
        except FileNotFoundError:
            return None
        return int(text) if text.isdigit() else None

    def _healthy(self) -> bool:
        host = self._url_host().strip("[]")
        conn = http.client.HTTPConnection(host, self.port, timeout=1.0)
        try:
            conn.request("GET", "/health")
            return conn.getresponse().status == 200
        except OSError:
            return False
        finally:
            conn.close()

    def _log_tail(self, n_chars: int = 4000) -> str:
        try:
            with open(self.log_path, "rb") as fh:
                fh.seek(0, os.SEEK_END)
                size = fh.tell()
                fh.seek(max(0, size - n_chars))
                return fh.read().decode("utf-8", errors="replace")
        except OSError:
            return "(no log)"
