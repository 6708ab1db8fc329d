"""The wait for an answer's headers, bounded (``--header-timeout``).

A server that accepts a request and never begins its answer (a hung replica, a stopped process
whose socket still accepts) would hold each such request for the whole total deadline
(``--timeout``, 600 s): ``--idle-timeout`` bounds the quiet between body bytes only, once the
headers are in. :class:`HeaderDeadline` ends the wait for the headers sooner; the request then
fails with :class:`~loadgen.core.errors.HeaderTimeout`, the ``header_timeout`` error kind: a failure
the server caused (it was sent and not answered), never the client's limit.

* :func:`default_header_timeout_s`: the default rule, max(30 s, 10x the TTFT target) when an SLO
  targets TTFT, else 60 s.
* :class:`HeaderDeadline`: ``async with HeaderDeadline(header_s, total_s=...) as hd`` around the
  request; :meth:`HeaderDeadline.arrived` when its headers (gRPC: its first response) arrive.

A whole (``--no-stream``) answer sends its headers with its last byte, so its wait is the
generation itself: the command line leaves the header timeout off there (``--timeout`` bounds it).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from types import TracebackType
from typing import TYPE_CHECKING

from loadgen.core.clock import timer_slack_ns
from loadgen.core.errors import HeaderTimeout

if TYPE_CHECKING:
    from loadgen.core.slo import SLOTarget

__all__ = [
    "DEFAULT_HEADER_TIMEOUT_S",
    "SLO_HEADER_TIMEOUT_FACTOR",
    "SLO_HEADER_TIMEOUT_MIN_S",
    "HeaderDeadline",
    "default_header_timeout_s",
]

DEFAULT_HEADER_TIMEOUT_S = 60.0
"""Without a TTFT target: no response headers within 60 s of the send is a ``header_timeout``.
Servers that stream send their headers as they accept the request (vLLM, SGLang, TGI, the
managed APIs) or with the first token (Triton); a minute of neither is a hung server."""

SLO_HEADER_TIMEOUT_FACTOR = 10.0
"""With a TTFT target T: the header timeout is this many times T (at least
:data:`SLO_HEADER_TIMEOUT_MIN_S`): a request that waits that long has missed the target anyway."""

SLO_HEADER_TIMEOUT_MIN_S = 30.0
"""The least default header timeout with a TTFT target (a tight target never makes it short)."""


def default_header_timeout_s(slos: Iterable[SLOTarget]) -> float:
    """``--header-timeout``'s default in seconds: max(30 s, 10 x the TTFT target) when ``slos``
    hold a target on ``ttft`` (with several, the loosest threshold), else 60 s.

    Other metrics (E2E, TPOT, ...) do not set it: they say nothing of when an answer begins.
    """
    ttft_ns = [t.threshold_ns for t in slos if t.metric == "ttft"]
    if not ttft_ns:
        return DEFAULT_HEADER_TIMEOUT_S
    return max(SLO_HEADER_TIMEOUT_MIN_S, SLO_HEADER_TIMEOUT_FACTOR * max(ttft_ns) / 1e9)


class HeaderDeadline:
    """The header timer of one request: ``async with HeaderDeadline(header_s, total_s=...) as hd``
    around the exchange, :meth:`arrived` when the headers are in.

    Expiring before :meth:`arrived` cancels the request (as :func:`asyncio.timeout` does) and raises
    :class:`~loadgen.core.errors.HeaderTimeout` at the exit. Off when ``header_s`` is None or not shorter
    than ``total_s`` (the total deadline ends the request first: a ``timeout``). ``ahead_s``: a
    request prepared ahead of its scheduled time waits that much longer (its wait counts from the
    scheduled time, as its total deadline does). Never expires before ``header_s`` (the loop's timer
    slack is added, as :func:`loadgen.core.clock.deadline_after` adds it).
    """

    __slots__ = ("header_s", "_ahead_s", "_timeout")

    def __init__(self, header_s: float | None, *, total_s: float | None = None, ahead_s: float = 0.0) -> None:
        on = header_s is not None and (total_s is None or header_s < total_s)
        self.header_s = header_s if on else None
        self._ahead_s = ahead_s
        self._timeout: asyncio.Timeout | None = None

    async def __aenter__(self) -> HeaderDeadline:
        if self.header_s is not None:
            loop = asyncio.get_running_loop()
            when = loop.time() + self._ahead_s + self.header_s + timer_slack_ns(loop) / 1e9
            self._timeout = asyncio.timeout_at(when)
            await self._timeout.__aenter__()
        return self

    def arrived(self) -> None:
        """The headers are in: the timer stops (the rest of the answer is the idle and total deadlines')."""
        t = self._timeout
        if t is not None and not t.expired():
            t.reschedule(None)

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        t = self._timeout
        if t is None:
            return
        self._timeout = None
        try:
            await t.__aexit__(exc_type, exc, tb)
        except TimeoutError as expired:
            assert self.header_s is not None
            raise HeaderTimeout(self.header_s) from expired
        if t.expired() and exc_type is not None and not issubclass(exc_type, asyncio.CancelledError):
            # our cancel surfaced as another error of the transport: still the header timeout
            assert self.header_s is not None
            raise HeaderTimeout(self.header_s) from exc
