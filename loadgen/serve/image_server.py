"""The images of ``--images N,WxH,url``: served by a helper process of the client, fetched by the server under test.

A multimodal server takes an image as a data URL in the request or as a URL it downloads (vLLM fetches
``http(s)`` image URLs itself); the download is part of what a user waits for. With ``url`` in
``--images`` (``url`` alone: ``127.0.0.1``, for a server on this machine; ``url=ADDR``: the address the server
reaches this machine at) each image part carries ``http://ADDR:PORT/i/SALT/INDEX/K.png``, and this process
answers it with the same PNG the data URL would hold (:class:`loadgen.workload.images.ImageMaker`: distinct per
request, position and run salt). It runs apart from the client, set up by
:func:`loadgen.core.child.quiet_child` (it dies with the run, writes nowhere, ignores Ctrl-C, runs off the
client's CPUs at ``nice`` +10): making and sending ~1 MB a picture never costs the client's event loop. The
parent binds the listening socket (the port is known before the first request is built) and passes it.

Usage (by :func:`shared_server`): ``python -m loadgen.serve.image_server FD COUNT WIDTH HEIGHT SEED PARENT_PID``.
"""

from __future__ import annotations

import atexit
import os
import re
import socket
import subprocess
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote

from loadgen.workload.images import ImageMaker, ImageSpec

__all__ = ["shared_server"]

_PATH = re.compile(r"/i/([^/]{1,128})/([0-9]{1,12})/([0-9]{1,3})\.png")
_SERVERS: dict[tuple[ImageSpec, int, str], tuple[subprocess.Popen[bytes], str]] = {}


def shared_server(spec: ImageSpec, seed: int, host: str) -> str:
    """The base URL of this process's image server for ``spec`` (started on first use, stopped at exit)."""
    key = (spec, seed, host)
    got = _SERVERS.get(key)
    if got is not None and got[0].poll() is None:
        return got[1]
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, 0))
    sock.listen(128)
    port = sock.getsockname()[1]
    args = [str(sock.fileno()), str(spec.count), str(spec.width), str(spec.height), str(seed), str(os.getpid())]
    proc = subprocess.Popen(  # our own module, our own arguments
        [sys.executable, "-m", "loadgen.serve.image_server", *args],
        pass_fds=(sock.fileno(),),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    sock.close()  # the child holds it
    url = f"http://{'[' + host + ']' if family == socket.AF_INET6 else host}:{port}"
    _SERVERS[key] = (proc, url)
    return url


@atexit.register
def _stop_all() -> None:
    for proc, _ in _SERVERS.values():
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=5)
    _SERVERS.clear()


class _Handler(BaseHTTPRequestHandler):
    makers: dict[str, ImageMaker] = {}
    spec: ImageSpec
    seed: int

    def do_GET(self) -> None:  # http.server's name
        m = _PATH.fullmatch(self.path)
        if m is None or int(m.group(3)) >= self.spec.count:
            self.send_error(404)
            return
        salt = unquote(m.group(1))
        maker = self.makers.get(salt)
        if maker is None:
            if len(self.makers) > 64:  # one run's probes; bounded
                self.makers.clear()
            maker = self.makers[salt] = ImageMaker(self.spec, salt, self.seed)
        body = maker.png(int(m.group(2)), int(m.group(3)))
        self.send_response(200)
        self.send_header("Content-Type", "image/png")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # http.server's signature
        pass


def serve(fd: int, spec: ImageSpec, seed: int) -> None:
    """Answer ``GET /i/SALT/INDEX/K.png`` on the listening socket ``fd`` until killed."""
    _Handler.spec, _Handler.seed = spec, seed
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler, bind_and_activate=False)
    server.socket.close()
    server.socket = socket.socket(fileno=fd)
    server.daemon_threads = True
    server.serve_forever()


if __name__ == "__main__":  # pragma: no cover - the helper process
    from loadgen.core.child import quiet_child

    fd_, count, width, height, seed_, parent = (int(x) for x in sys.argv[1:7])
    quiet_child(parent)
    serve(fd_, ImageSpec(count, width, height), seed_)
