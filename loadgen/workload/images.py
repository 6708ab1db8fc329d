"""Images in chat requests (``--images N[,WxH]``): generated pictures of a known size and count.

Multimodal prefill is a large share of real traffic and of TTFT. Each chat request gets ``N`` PNG
images of ``W x H`` pixels (default 512x512) after its text, as OpenAI chat content parts
(``{"type": "image_url", "image_url": {"url": "data:image/png;base64,..."}}``; the Responses API's
``input_image`` parts are made from them, :mod:`loadgen.endpoints.responses_stream`).

Every image is distinct (a server that caches image embeddings by content, as vLLM's multimodal cache
does, must encode each one, as with real users' pictures): a noise picture made once per size, its
first row stamped with the request's index, the image's position and the run's salt, written as a
PNG whose pixel data is stored uncompressed (deflate level 0: the size is the pixels', ~3 bytes a pixel,
and making one costs a copy, not a compression). Built with the request, so before the clock starts
where the run prepares its requests (:mod:`loadgen.engine.prepare`); the size and count go into the
result's ``config.workload.images``.
"""

from __future__ import annotations

import base64
import hashlib
import re
import struct
import zlib
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import numpy as np

from loadgen.core.errors import ConfigError

__all__ = ["ImageMaker", "ImageSpec", "parse_images", "with_images"]

DATA_URL_PREFIX = "data:image/png;base64,"
MAX_SIDE = 8192
MAX_IMAGES = 64


@dataclass(frozen=True)
class ImageSpec:
    """``count`` images of ``width x height`` pixels per request."""

    count: int
    width: int = 512
    height: int = 512
    url_host: str | None = None  # url mode: the address the server fetches the images from (image_server)

    def describe(self, png_bytes: int) -> dict[str, Any]:
        """The result's ``config.workload.images`` (``png_bytes``: one image's size, as made)."""
        return {
            "count": self.count,
            "width": self.width,
            "height": self.height,
            "format": "png",
            "encoding": "base64 data URL" if self.url_host is None else "URL (served by the client's image server)",
            "url_host": self.url_host,
            "bytes_each": png_bytes,
            "data_url_bytes_each": 4 * -(-png_bytes // 3) + len(DATA_URL_PREFIX),
            "distinct": "every image (its first row stamped with the request, the position and the salt)",
        }


def parse_images(text: str) -> ImageSpec:
    """``2``, ``2,1024x768``, ``2,1024x768,url`` or ``...,url=ADDR`` -> :class:`ImageSpec`; ConfigError naming the part."""
    m = re.fullmatch(r"\s*([0-9]+)\s*(?:,\s*([0-9]+)\s*[xX]\s*([0-9]+))?\s*(?:,\s*url(?:=(\S+))?)?\s*", text or "")
    if not m:
        raise ConfigError(f"--images {text!r}: expected N, N,WxH or N,WxH,url[=ADDR] (e.g. 1 or 2,1024x768,url)")
    url = "url" in (text or "").split(",")[-1]
    n = int(m.group(1))
    w, h = (int(m.group(2)), int(m.group(3))) if m.group(2) else (512, 512)
    if not 1 <= n <= MAX_IMAGES:
        raise ConfigError(f"--images {text!r}: the count must be 1 to {MAX_IMAGES}")
    if not (1 <= w <= MAX_SIDE and 1 <= h <= MAX_SIDE):
        raise ConfigError(f"--images {text!r}: each side must be 1 to {MAX_SIDE} pixels")
    return ImageSpec(n, w, h, (m.group(4) or "127.0.0.1") if url else None)


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


class ImageMaker:
    """Distinct PNG data URLs of one size, from one noise picture made at construction."""

    def __init__(self, spec: ImageSpec, salt: str, seed: int = 0, base_url: str | None = None) -> None:
        self.spec = spec
        self.salt = salt.encode()
        self.base_url = base_url  # url mode: the image server's (loadgen.serve.image_server)
        self._path_salt = quote(salt, safe="")
        rng = np.random.default_rng(seed)
        rows = np.zeros((spec.height, spec.width * 3 + 1), dtype=np.uint8)  # filter byte 0 a row
        rows[:, 1:] = rng.integers(0, 256, size=(spec.height, spec.width * 3), dtype=np.uint8)
        self._raw = bytearray(rows.tobytes())
        self._head = b"\x89PNG\r\n\x1a\n" + _chunk(
            b"IHDR", struct.pack(">IIBBBBB", spec.width, spec.height, 8, 2, 0, 0, 0)
        )
        self._tail = _chunk(b"IEND", b"")

    def png(self, index: int, k: int) -> bytes:
        """Image ``k`` of request ``index``: the noise with its first row stamped (unique per request and position)."""
        stamp = hashlib.blake2b(b"%d/%d/" % (index, k) + self.salt, digest_size=16).digest()
        n = min(len(stamp), len(self._raw) - 1)
        raw = self._raw
        saved = bytes(raw[1 : 1 + n])
        raw[1 : 1 + n] = stamp[:n]
        try:
            idat = zlib.compress(bytes(raw), 0)
        finally:
            raw[1 : 1 + n] = saved
        return self._head + _chunk(b"IDAT", idat) + self._tail

    def data_url(self, index: int, k: int) -> str:
        return DATA_URL_PREFIX + base64.b64encode(self.png(index, k)).decode("ascii")

    def url(self, index: int, k: int) -> str:
        """Image ``k`` of request ``index`` as the request carries it: its data URL, or its URL on the image server."""
        if self.base_url is None:
            return self.data_url(index, k)
        return f"{self.base_url}/i/{self._path_salt}/{index}/{k}.png"


def with_images(messages: tuple[dict[str, Any], ...], maker: ImageMaker, index: int) -> tuple[dict[str, Any], ...]:
    """The chat ``messages`` with the request's images added to its last user message (after its text)."""
    out = [dict(m) for m in messages]
    for m in reversed(out):
        if m.get("role") == "user":
            text = m.get("content")
            parts: list[dict[str, Any]] = (
                list(text) if isinstance(text, list) else [{"type": "text", "text": text or ""}]
            )
            for k in range(maker.spec.count):
                parts.append({"type": "image_url", "image_url": {"url": maker.url(index, k)}})
            m["content"] = parts
            break
    return tuple(out)
