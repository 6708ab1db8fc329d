"""``--images N[,WxH]`` (loadgen.workload.images): parsing, valid distinct PNGs, chat and Responses parts."""

from __future__ import annotations

import base64
import struct
import zlib

import pytest

from loadgen.core.errors import ConfigError
from loadgen.endpoints.responses_stream import responses_input
from loadgen.workload.images import DATA_URL_PREFIX, ImageMaker, ImageSpec, parse_images, with_images
from loadgen.workload.spec import Workload, WorkloadOptions


def _decode(png: bytes) -> tuple[int, int, bytes]:
    """(width, height, raw scanlines) of a PNG, every chunk's CRC checked."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    pos, w, h, idat = 8, 0, 0, b""
    while pos < len(png):
        (n,) = struct.unpack(">I", png[pos : pos + 4])
        kind, data = png[pos + 4 : pos + 8], png[pos + 8 : pos + 8 + n]
        assert struct.unpack(">I", png[pos + 8 + n : pos + 12 + n])[0] == zlib.crc32(kind + data) & 0xFFFFFFFF
        if kind == b"IHDR":
            w, h = struct.unpack(">II", data[:8])
            assert data[8:10] == b"\x08\x02"  # 8-bit RGB
        elif kind == b"IDAT":
            idat += data
        pos += 12 + n
    return w, h, zlib.decompress(idat)


def test_parse() -> None:
    assert parse_images("2") == ImageSpec(2, 512, 512)
    assert parse_images("1,1024x768") == ImageSpec(1, 1024, 768)
    for bad in ("", "0", "2,10", "1,0x5", "99", "1,9000x10"):
        with pytest.raises(ConfigError, match="--images"):
            parse_images(bad)


def test_pngs_are_valid_of_the_stated_size_and_distinct() -> None:
    m = ImageMaker(ImageSpec(2, 64, 48), "salt-a")
    w, h, raw = _decode(m.png(7, 1))
    assert (w, h) == (64, 48) and len(raw) == (64 * 3 + 1) * 48
    assert len({m.png(i, k) for i in range(5) for k in range(2)}) == 10  # every image distinct
    assert m.png(3, 0) == m.png(3, 0)  # the same request builds the same image
    assert m.png(3, 0) != ImageMaker(ImageSpec(2, 64, 48), "salt-b").png(3, 0)  # another run's salt: another
    url = m.data_url(1, 0)
    assert url.startswith(DATA_URL_PREFIX) and base64.b64decode(url[len(DATA_URL_PREFIX) :]) == m.png(1, 0)


def test_parts_in_chat_and_responses_and_the_workload_record() -> None:
    m = ImageMaker(ImageSpec(2, 8, 8), "s")
    msgs = with_images(({"role": "system", "content": "x"}, {"role": "user", "content": "look"}), m, 4)
    parts = msgs[1]["content"]
    assert parts[0] == {"type": "text", "text": "look"} and [p["type"] for p in parts[1:]] == ["image_url"] * 2
    items = responses_input(list(msgs))
    assert [p["type"] for p in items[1]["content"]] == ["input_text", "input_image", "input_image"]
    assert items[1]["content"][1]["image_url"].startswith(DATA_URL_PREFIX)
    wl = Workload(WorkloadOptions(api="chat", input_tokens=16, output_tokens=4, images=ImageSpec(1, 32, 16), salt="z"))
    spec = wl.spec(3)
    assert spec.messages is not None and spec.messages[-1]["content"][1]["type"] == "image_url"
    d = wl.describe()["images"]
    assert (d["count"], d["width"], d["height"]) == (1, 32, 16) and d["bytes_each"] == len(wl._images.png(0, 0))  # type: ignore[union-attr]  # set with --images
    with pytest.raises(ConfigError, match="--api chat"):
        Workload(WorkloadOptions(api="completions", images=ImageSpec(1)))
