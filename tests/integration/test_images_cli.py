"""``loadgen run --images N,WxH`` from the CLI: the request bodies carry the stated images.

Against a scripted chat server (tests/fixtures/scripted_server.py) that logs every body: each request's
last user message holds its text and N PNG data URLs of W x H pixels, every image distinct, each the
size ``config.workload.images`` records; with ``--api responses`` the same images as ``input_image``.
"""

from __future__ import annotations

import base64
import json
import struct
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.cli_proc import cli_run
from tests.fixtures.fake_platforms import openai_chat_writes
from tests.fixtures.scripted_server import ScriptedServer


def _size(url: str) -> tuple[int, int]:
    png = base64.b64decode(url.split(",", 1)[1])
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", png[16:24])


@pytest.mark.parametrize("api", ["chat", "responses"])
def test_bodies_carry_the_stated_images(tmp_path: Path, api: str) -> None:
    if api == "chat":
        script = {
            "writes": openai_chat_writes(["a", "b"], [0.005, 0.01], usage={"prompt_tokens": 9, "completion_tokens": 2})
        }
    else:
        done = {"type": "response.completed", "response": {"usage": {"input_tokens": 9, "output_tokens": 2}}}
        script = {"writes": [[0.005, 'data: {"type":"response.output_text.delta","delta":"a b"}\n\n'],
                             [0.01, f"data: {json.dumps(done)}\n\n"]]}  # fmt: skip
    srv = ScriptedServer([script for _ in range(8)]).start_in_thread()
    out = tmp_path / "run"
    try:
        proc = cli_run("run", "--endpoint", srv.url, "--api", api,
                       "--model", "scripted", "--rate", "10", "--requests", "4", "--input-tokens", "16",
                       "--output-tokens", "2", "--images", "2,96x64", "--no-progress", out=out, timeout=120)  # fmt: skip
    finally:
        srv.stop_thread()
    res = json.loads((out / "result.json").read_text())
    assert res["counts"]["completed"] == 4, proc.stderr[-2000:]
    rec = res["config"]["workload"]["images"]
    assert (rec["count"], rec["width"], rec["height"]) == (2, 96, 64)
    urls = []
    for post in srv.posts[-4:]:
        body = post.json
        last = (body["messages"] if api == "chat" else body["input"])[-1]
        parts = last["content"]
        kinds = [p["type"] for p in parts]
        if api == "chat":
            assert kinds == ["text", "image_url", "image_url"]
            got = [p["image_url"]["url"] for p in parts[1:]]
        else:
            assert kinds == ["input_text", "input_image", "input_image"]
            got = [p["image_url"] for p in parts[1:]]
        assert all(_size(u) == (96, 64) and len(u) == rec["data_url_bytes_each"] for u in got)
        urls += got
    assert len(set(urls)) == 8  # every image distinct


class _FetchingServer:
    """A chat server that downloads each request's image URLs before answering (as vLLM does), on 127.0.0.1."""

    def __init__(self) -> None:
        self.fetched: list[tuple[str, int, tuple[int, int]]] = []  # (url, bytes, (w, h))
        self.url = ""
        self._loop: Any = None
        self._thread: Any = None

    async def _chat(self, request: Any) -> Any:
        from aiohttp import ClientSession, web

        body = await request.json()
        async with ClientSession() as s:
            for part in body["messages"][-1]["content"]:
                if part.get("type") == "image_url":
                    u = part["image_url"]["url"]
                    async with s.get(u) as r:
                        png = await r.read()
                        assert r.status == 200 and r.headers["Content-Type"] == "image/png"
                    self.fetched.append((u, len(png), struct.unpack(">II", png[16:24])))
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for i, t in enumerate(("a", "b")):
            chunk = {"choices": [{"index": 0, "delta": {"content": t}, "finish_reason": "length" if i else None}]}
            await resp.write(f"data: {json.dumps(chunk)}\n\n".encode())
        await resp.write(b"data: [DONE]\n\n")
        return resp

    async def _models(self, request: Any) -> Any:
        from aiohttp import web

        return web.json_response({"data": [{"id": "fetcher"}]})

    def __enter__(self) -> _FetchingServer:
        import asyncio
        import threading

        from aiohttp import web

        ready = threading.Event()

        def run() -> None:
            self._loop = asyncio.new_event_loop()
            app = web.Application()
            app.router.add_post("/v1/chat/completions", self._chat)
            app.router.add_get("/v1/models", self._models)
            runner = web.AppRunner(app)
            self._loop.run_until_complete(runner.setup())
            site = web.TCPSite(runner, "127.0.0.1", 0)
            self._loop.run_until_complete(site.start())
            self.url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]  # started
            ready.set()
            self._loop.run_forever()
            self._loop.run_until_complete(runner.cleanup())
            self._loop.close()

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()
        assert ready.wait(10)
        return self

    def __exit__(self, *exc: Any) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


def test_url_images_are_fetched_from_the_clients_image_server(tmp_path: Path) -> None:
    """``--images 2,80x40,url``: each image part is a URL on the client's image server, which the server under
    test downloads (every fetch a 200 PNG of the stated size, every image distinct); the helper is gone after."""
    out = tmp_path / "run"
    with _FetchingServer() as srv:
        proc = cli_run("run", "--endpoint", srv.url, "--api", "chat",
                       "--model", "fetcher", "--rate", "10", "--requests", "5", "--input-tokens", "16",
                       "--output-tokens", "2", "--images", "2,80x40,url", "--no-preflight", "--no-progress",
                       out=out, timeout=120)  # fmt: skip
    res = json.loads((out / "result.json").read_text())
    assert res["counts"]["completed"] == 5, proc.stderr[-2000:]
    rec = res["config"]["workload"]["images"]
    assert rec["url_host"] == "127.0.0.1" and rec["encoding"].startswith("URL")
    assert len(srv.fetched) == 10 and len({u for u, _, _ in srv.fetched}) == 10
    assert all(n == rec["bytes_each"] and size == (80, 40) for _, n, size in srv.fetched)
    assert all(u.startswith("http://127.0.0.1:") and "/i/" in u for u, _, _ in srv.fetched)
    port = srv.fetched[0][0].split(":")[2].split("/")[0]
    left = subprocess.run(["pgrep", "-f", "loadgen.serve.image_server"], capture_output=True, text=True).stdout
    assert not left.strip(), f"the image server outlived its run (port {port}): {left}"
