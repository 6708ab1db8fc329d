"""Requests beside the load (discovery, pre-flight, the network baseline): bounded, and a
failure said in one line that names the phase it stopped in and the time waited.

:func:`side_request` sends one request under a total deadline and reads at most ``limit``
bytes of its body; :class:`SideFailure` says why it failed: ``timed out after 5.0 s waiting
for the response headers (connected, request sent)``. The phases, in order: ``connect`` (TCP),
``TLS`` (the handshake), ``headers`` (the request is written; no status line yet), ``first
byte`` (the headers came; no byte of the body yet), ``body`` (the rest of the body).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING

import aiohttp

from loadgen.core.clock import now_ns
from loadgen.core.errors import EndpointUnreachable
from loadgen.endpoints.pool import SidePhase, connect_error_text, side_timeout

if TYPE_CHECKING:
    from multidict import CIMultiDictProxy

__all__ = ["PHASE_TEXT", "SideAnswer", "SideFailure", "side_request"]

PHASE_TEXT = {
    "connect": "the TCP connection",
    "TLS": "the TLS handshake",
    "headers": "the response headers (connected, request sent)",
    "first byte": "the first byte of the body (the headers came)",
    "body": "the rest of the body",
}
"""What each phase waits for, as the error line says it."""


class SideFailure(EndpointUnreachable):
    """A request beside the load failed: ``phase`` (a key of :data:`PHASE_TEXT`), ``waited_s``."""

    def __init__(self, message: str, phase: str, waited_s: float) -> None:
        super().__init__(message)
        self.phase = phase
        self.waited_s = waited_s


@dataclass
class SideAnswer:
    """An answer beside the load: its status, headers and the first ``limit`` bytes of its body
    (``complete``: the whole body was read; else the connection was dropped after ``limit``)."""

    status: int
    headers: CIMultiDictProxy[str]
    body: bytes
    complete: bool


async def side_request(
    session: aiohttp.ClientSession,
    method: str,
    url: str,
    *,
    headers: dict[str, str],
    data: bytes | None = None,
    connect_s: float,
    total_s: float,
    limit: int,
) -> SideAnswer:
    """One request beside the load, ``total_s`` in all (the connect alone: ``connect_s``); reads
    at most ``limit`` bytes of the body (the connection is dropped past them). Redirects are not
    followed. Raises :class:`SideFailure` (an :class:`~loadgen.core.errors.EndpointUnreachable`) on a
    timeout or transport error, its message one line: what went wrong, in which phase, after how
    long; ``asyncio.CancelledError`` (Ctrl-C) passes through."""
    phase = SidePhase()
    t0 = now_ns()
    try:
        async with asyncio.timeout(total_s):
            async with session.request(
                method, url, data=data, headers=headers, allow_redirects=False, trace_request_ctx=phase,
                timeout=side_timeout(connect_s, total_s + 1.0),
            ) as resp:  # fmt: skip
                phase.phase = "first byte"
                body = bytearray()
                complete = True
                async for chunk in resp.content.iter_any():
                    phase.phase = "body"
                    body += chunk
                    if len(body) >= limit:
                        complete = len(body) == limit and resp.content.at_eof()
                        del body[limit:]
                        if not complete:
                            resp.close()
                        break
                return SideAnswer(resp.status, resp.headers, bytes(body), complete)
    except (TimeoutError, aiohttp.ClientError, OSError) as exc:
        waited_s = (now_ns() - t0) / 1e9
        text = connect_error_text(exc)
        where = phase.phase
        if isinstance(exc, TimeoutError):
            if text.startswith("timeout: TLS"):  # "timeout: TLS handshake with HOST:PORT did not finish within N s"
                raise SideFailure(text, "TLS", waited_s) from None
            text = f"timed out after {waited_s:.1f} s waiting for {PHASE_TEXT[where]}"
        elif where != "connect":
            text = f"{text} (after {waited_s:.1f} s, waiting for {PHASE_TEXT[where]})"
        raise SideFailure(text, where, waited_s) from None
