"""One /metrics scrape that cannot hurt the run: fetched and parsed in a child process, bounded (issue 33).

A server's Prometheus page is not ours: it can hold a byte that is not UTF-8, be a gigabyte long, never
end, stall mid-body, be a gzip bomb or be malformed. Read on the run's own event loop, each of those
cost a run (a ``UnicodeDecodeError`` traceback and no load sent; a 1 GiB page took the client's RSS to
975 MB and its p99 schedule lag to 336-470 ms). Here the page is fetched and parsed by
:func:`fetch_scrape` in a child process (:class:`ScrapeWorker`, one per observer, started with
``spawn`` and at ``nice`` +10, off the client's ``--cpus`` where there are other CPUs, so that its parsing
neither holds the client's interpreter lock nor outranks it for a CPU; killed with the process that started it, ``PR_SET_PDEATHSIG``, and writing to
``/dev/null``, so an orphan can never hold the run's output pipes); the run receives only the parsed samples it needs. Every scrape is bounded:

* bytes: at most :data:`MAX_PAGE_BYTES` (16 MiB) of page, counted after decompression (``gzip`` and
  ``deflate`` are decompressed with a cap: a bomb stops at the cap);
* time: :data:`SOCKET_TIMEOUT_S` for the connection and each read (a page that stalls mid-body), and
  the whole scrape within ``timeout_s`` (a page that never ends), in the child and again by the caller,
  which replaces a child that does not answer;
* what comes back: the series a summary reads (:data:`KEEP_PREFIXES` and
  :data:`~loadgen.serve.prom.GAUGE_NAMES`), at most :data:`MAX_KEPT_SAMPLES` samples and label values
  of at most 256 characters: a few tens of KiB.

Any bad page is a skipped scrape whose reason is returned (:class:`ScrapeFailed`), named and counted
in the server section (``scrapes_failed``, ``scrape_errors``), never an exception in the run.
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import multiprocessing
import os
import time
import urllib.error
import urllib.parse
import urllib.request
import zlib
from dataclasses import dataclass
from typing import Any

from loadgen.core.child import quiet_child
from loadgen.serve import prom

__all__ = ["MAX_PAGE_BYTES", "ScrapeFailed", "ScrapeWorker", "fetch_scrape"]

MAX_PAGE_BYTES = 16 << 20
"""A scrape reads at most this many bytes of page (after decompression); a longer one is skipped."""
SOCKET_TIMEOUT_S = 2.0
"""Connecting, and each read of the body: a page that stalls this long mid-body is skipped."""
MAX_KEPT_SAMPLES = 4000
"""Samples a scrape returns to the run at most (those of :data:`KEEP_PREFIXES` and the gauges)."""
KEEP_PREFIXES = ("vllm:", "nv_", "sglang:", "tgi_", "DCGM_FI_")
"""Series the summaries read (:mod:`loadgen.serve.prom`): the rest of a page stays in the child."""
CHUNK = 1 << 16
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # no proxy from the environment, as aiohttp


@dataclass(frozen=True)
class ScrapeFailed:
    """A skipped scrape: ``kind`` (``http``, ``network``, ``timeout``, ``too_large``, ``encoding``,
    ``no_samples``, ``child``) and one line saying why."""

    kind: str
    reason: str


def _keep(name: str) -> bool:
    return name.startswith(KEEP_PREFIXES) or name in prom.GAUGE_NAMES


def _bounded(scrape: prom.Scrape) -> prom.Scrape:
    out: prom.Scrape = {}
    n = 0
    for name, samples in scrape.items():
        if not _keep(name):
            continue
        for labels, v in samples:
            if n >= MAX_KEPT_SAMPLES:
                return out
            out.setdefault(name, []).append((tuple((k, lv[:256]) for k, lv in labels), v))
            n += 1
    return out


def fetch_scrape(url: str, timeout_s: float, max_bytes: int = MAX_PAGE_BYTES) -> prom.Scrape | ScrapeFailed:
    """Fetch and parse one page (in the child process): the kept samples, or why it was skipped."""
    deadline = time.monotonic() + timeout_s
    headers = {"Accept-Encoding": "gzip, deflate", "Accept": "text/plain"}
    parts_url = urllib.parse.urlsplit(url)
    if parts_url.username is not None:  # userinfo is HTTP Basic (as aiohttp sends it), never part of the host
        user = urllib.parse.unquote(parts_url.username)
        pw = urllib.parse.unquote(parts_url.password or "")
        headers["Authorization"] = "Basic " + base64.b64encode(f"{user}:{pw}".encode()).decode()
        netloc = parts_url.hostname or ""
        netloc = f"[{netloc}]" if ":" in netloc else netloc
        netloc += f":{parts_url.port}" if parts_url.port else ""
        url = urllib.parse.urlunsplit(parts_url._replace(netloc=netloc))
    req = urllib.request.Request(url, headers=headers)
    try:
        with _OPENER.open(req, timeout=min(SOCKET_TIMEOUT_S, timeout_s)) as resp:
            enc = (resp.headers.get("Content-Encoding") or "").strip().lower()
            dec = zlib.decompressobj(16 + zlib.MAX_WBITS if enc == "gzip" else zlib.MAX_WBITS) if enc in (
                "gzip", "deflate") else None  # fmt: skip
            parts: list[bytes] = []
            size = 0
            while True:
                if time.monotonic() > deadline:
                    return ScrapeFailed("timeout", f"the page did not end within {timeout_s:g} s")
                chunk = resp.read1(CHUNK) if hasattr(resp, "read1") else resp.read(CHUNK)
                if not chunk:
                    break
                if dec is not None:
                    chunk = dec.decompress(chunk, max_bytes + 1 - size)
                size += len(chunk)
                if size > max_bytes:
                    return ScrapeFailed("too_large", f"the page is over {max_bytes >> 20} MiB (after decompression)")
                parts.append(chunk)
    except urllib.error.HTTPError as exc:
        return ScrapeFailed("http", f"HTTP {exc.code}")
    except TimeoutError:
        return ScrapeFailed("timeout", f"no byte for {SOCKET_TIMEOUT_S:g} s (connecting or mid-body)")
    except (urllib.error.URLError, OSError, zlib.error, ValueError) as exc:
        reason = getattr(exc, "reason", None) or exc
        if isinstance(reason, TimeoutError):
            return ScrapeFailed("timeout", f"no byte for {SOCKET_TIMEOUT_S:g} s (connecting or mid-body)")
        return ScrapeFailed("network", f"{type(exc).__name__}: {str(reason)[:200]}")
    body = b"".join(parts)
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        return ScrapeFailed("encoding", f"a byte that is not UTF-8 at offset {exc.start} (0x{body[exc.start]:02x})")
    scrape = _bounded(prom.parse(text))
    if not scrape and body.strip():
        # a page with no series we read (malformed, or another exporter's): not an error to the run, said
        return ScrapeFailed("no_samples", "no sample of a series loadgen reads (malformed lines are skipped)")
    return scrape


class ScrapeWorker:
    """One child process that fetches and parses pages (:func:`fetch_scrape`); replaced when it fails
    to answer within its time (a hung or dead child is killed, never waited for)."""

    def __init__(self, timeout_s: float = 5.0) -> None:
        self.timeout_s = timeout_s
        self._pool: concurrent.futures.ProcessPoolExecutor | None = None

    def _executor(self) -> concurrent.futures.ProcessPoolExecutor:
        if self._pool is None:
            self._pool = concurrent.futures.ProcessPoolExecutor(
                max_workers=1,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=quiet_child,
                initargs=(os.getpid(),),
            )
        return self._pool

    async def scrape(self, url: str) -> prom.Scrape | ScrapeFailed:
        loop = asyncio.get_running_loop()
        try:
            fut = loop.run_in_executor(self._executor(), fetch_scrape, url, self.timeout_s)
            # the child's own deadline is timeout_s; its start (spawn, ~0.5 s once) and its answer get more.
            # asyncio.timeout, not wait_for: in 3.11 wait_for can swallow a cancellation that arrives as the inner
            # future completes, and the observer's sampler then never stopped (CI, session 15: a 300 s hang)
            async with asyncio.timeout(self.timeout_s + 5.0):
                return await fut
        except TimeoutError:
            self.close()
            return ScrapeFailed("child", f"the scraping process did not answer within {self.timeout_s + 5.0:g} s")
        except concurrent.futures.process.BrokenProcessPool:
            self.close()
            return ScrapeFailed("child", "the scraping process died (replaced for the next scrape)")

    def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is None:
            return
        procs: dict[Any, Any] = dict(getattr(pool, "_processes", None) or {})
        pool.shutdown(wait=False, cancel_futures=True)
        for p in procs.values():
            if p.is_alive():
                p.kill()
        for p in procs.values():
            p.join(timeout=2)
