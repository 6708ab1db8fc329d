"""``loadgen run --images N,WxH`` from the CLI: the request bodies carry the stated images.

Against a scripted chat server (tests/fixtures/scripted_server.py) that logs every body: each request's
last user message holds its text and N PNG data URLs of W x H pixels, every image distinct, each the
size ``config.workload.images`` records; with ``--api responses`` the same images as ``input_image``.
"""

from __future__ import annotations

import base64
import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.fake_platforms import openai_chat_writes
from tests.fixtures.scripted_server import ScriptedServer

REPO = Path(__file__).resolve().parents[2]


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
        proc = subprocess.run([sys.executable, "-m", "loadgen.cli", "run", "--endpoint", srv.url, "--api", api,
                               "--model", "scripted", "--rate", "10", "--requests", "4", "--input-tokens", "16",
                               "--output-tokens", "2", "--images", "2,96x64", "--no-progress", "--out", str(out)],
                              capture_output=True, text=True, timeout=120, cwd=str(REPO),
                              env=dict(os.environ, PYTHONPATH=str(REPO)))  # fmt: skip
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
