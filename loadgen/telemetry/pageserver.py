"""The live exporter's page server: a child process that answers scrapes with the page the run last wrote.

The run (:class:`loadgen.telemetry.prom.PromExporter`) binds the listening socket, renders its page at
most once a second and writes it to a private file (atomically: a rename); this process, started with
that socket (``pass_fds``), answers each ``GET /metrics`` with the file's bytes, re-read only when the
file changed. So a flood of scrapes costs this process, never the client's: not its CPU, not its
interpreter lock (the run's own thread served them before: 200 scrapes/s cost the client ~6 points of
CPU even with a kept page, ``scripts/bench_metrics_flood``). Set up by
:func:`loadgen.core.child.quiet_child`: it dies with the run, writes nowhere, ignores Ctrl-C, runs off the
client's CPUs and at ``nice`` +10. One scrape at a time; a connection gets :data:`READ_TIMEOUT_S` to send
its request head (at most :data:`MAX_HEAD` bytes). The token, when one is required, comes on stdin (never
in the argv: a process title shows that).

Usage (by the exporter): ``python -m loadgen.telemetry.pageserver FD PAGE_PATH PARENT_PID``.
"""

from __future__ import annotations

import hmac
import os
import socket
import sys

from loadgen.core.child import quiet_child

__all__ = ["MAX_HEAD", "READ_TIMEOUT_S", "serve"]

READ_TIMEOUT_S = 2.0
MAX_HEAD = 8192
_CT = b"text/plain; version=0.0.4; charset=utf-8"


def _response(code: int, reason: str, body: bytes, ctype: bytes = b"text/plain") -> bytes:
    head = (f"HTTP/1.1 {code} {reason}\r\nContent-Length: {len(body)}\r\nConnection: close\r\n").encode()
    return head + b"Content-Type: " + ctype + b"\r\n\r\n" + body


def _head(conn: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data and len(data) < MAX_HEAD:
        chunk = conn.recv(4096)
        if not chunk:
            break
        data += chunk
    return data


def serve(listener: socket.socket, page_path: str, token: str | None) -> None:
    """Answer scrapes until killed (module docstring)."""
    want = f"Bearer {token}".encode() if token else None
    cached: tuple[float, bytes] = (-1.0, _response(503, "Service Unavailable", b"no page yet\n"))
    while True:
        try:
            conn, _ = listener.accept()
        except OSError:
            continue
        with conn:
            try:
                conn.settimeout(READ_TIMEOUT_S)
                head = _head(conn)
                line, _, rest = head.partition(b"\r\n")
                parts = line.split()
                auth = b""
                for h in rest.split(b"\r\n"):
                    k, _, v = h.partition(b":")
                    if k.strip().lower() == b"authorization":
                        auth = v.strip()
                if want is not None and not hmac.compare_digest(auth, want):
                    conn.sendall(
                        _response(401, "Unauthorized", b"a token is required: Authorization: Bearer <token>\n")
                    )
                    continue
                if len(parts) < 2 or parts[0] != b"GET" or parts[1].split(b"?", 1)[0] not in (b"/metrics", b"/"):
                    conn.sendall(_response(404, "Not Found", b"not found\n"))
                    continue
                try:
                    mtime = os.stat(page_path).st_mtime_ns
                    if mtime != cached[0]:
                        with open(page_path, "rb") as fh:
                            cached = (mtime, _response(200, "OK", fh.read(), _CT))
                except OSError:
                    pass
                conn.sendall(cached[1])
            except OSError:
                continue


def main() -> None:
    fd, page_path, parent = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    token = sys.stdin.readline().strip() or None  # before quiet_child: stdin stays ours
    quiet_child(parent)
    listener = socket.socket(fileno=fd)
    listener.settimeout(None)
    serve(listener, page_path, token)


if __name__ == "__main__":
    main()
