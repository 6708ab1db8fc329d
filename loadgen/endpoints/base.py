"""The Endpoint protocol the runner needs, and transport-error classification."""

from __future__ import annotations

import asyncio
import email.utils
import errno
import time
from typing import Any, Protocol

import aiohttp

from loadgen.types import RequestRecord, RequestSpec


class Endpoint(Protocol):
    """What the runner drives. ``send`` fills ``record`` and never raises
    (except ``asyncio.CancelledError``, which the runner turns into ``cancelled``)."""

    async def open(self) -> None: ...

    async def close(self) -> None: ...

    async def send(self, spec: RequestSpec, record: RequestRecord) -> None: ...

    def describe(self) -> dict[str, Any]:
        """Client settings and negotiated options for the result's conditions (no secrets)."""
        ...


_CLIENT_LIMIT_ERRNOS = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.EADDRNOTAVAIL}


def _errno_of(exc: BaseException) -> int | None:
    seen = 0
    e: BaseException | None = exc
    while e is not None and seen < 8:
        if isinstance(e, OSError) and e.errno is not None:
            return e.errno
        os_error = getattr(e, "os_error", None)
        if isinstance(os_error, OSError) and os_error.errno is not None:
            return os_error.errno
        e = e.__cause__ or e.__context__
        seen += 1
    return None


def classify_exception(exc: BaseException, *, response_started: bool) -> str:
    """Map a transport exception to an error kind from ``loadgen.types.ERROR_KINDS``.

    ``response_started``: the response headers had arrived (errors after that are
    an ``incomplete_stream``, before that a ``connect`` failure).
    """
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError)):
        return "timeout"
    if _errno_of(exc) in _CLIENT_LIMIT_ERRNOS:
        return "client_limit"
    if response_started:
        return "incomplete_stream"
    if isinstance(exc, aiohttp.ClientConnectorError | aiohttp.ServerDisconnectedError):
        return "connect"
    if isinstance(exc, aiohttp.ClientOSError | ConnectionError | OSError):
        return "connect"
    if isinstance(exc, aiohttp.ClientPayloadError):
        return "incomplete_stream"
    return "connect"


def parse_retry_after(value: str | None, date_header: str | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header: delta-seconds or an HTTP date.

    An HTTP date is read against the response's ``Date`` header when present, else
    against the local wall clock. Negative or unparseable values give None.
    """
    if not value:
        return None
    value = value.strip()
    try:
        s = float(value)
        return s if s >= 0 else None
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError, IndexError):
        return None
    ref = time.time()
    if date_header:
        try:
            ref = email.utils.parsedate_to_datetime(date_header).timestamp()
        except (TypeError, ValueError, IndexError):
            pass
    return max(when - ref, 0.0)
