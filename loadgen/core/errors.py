"""Exceptions raised by loadgen's library code.

The tree::

    LoadgenError                      root of everything loadgen raises on purpose
    ├── ConfigError                   bad options, flags or values (cli maps it to exit 2)
    │   └── InputFileError            bad data file: names file, line and field
    ├── EndpointUnreachable           preflight could not reach the endpoint (exit 3)
    ├── OutputError                   results could not be written (disk full, --out gone): exit 7
    ├── HeaderTimeout                 no response headers within --header-timeout; becomes
    │                                 the ``header_timeout`` error kind of a RequestRecord
    └── ProtocolError                 malformed SSE/JSON from the server; becomes the
                                      ``protocol`` error kind of a RequestRecord, never
                                      escapes the runner

Per-request failures are *not* exceptions once they leave ``loadgen.endpoints``:
they are :class:`loadgen.core.types.RequestRecord` values with ``status="error"`` and an
``error_kind`` from :data:`loadgen.core.types.ERROR_KINDS`.
"""

from __future__ import annotations

import re


class LoadgenError(Exception):
    """Root of loadgen's exception tree."""


class ConfigError(LoadgenError):
    """A configuration value, flag or combination of flags is invalid."""


class InputFileError(ConfigError):
    """A data file is malformed; the message names the file, the line and the field."""

    def __init__(self, path: str, line: int | None, field: str | None, message: str) -> None:
        self.path = path
        self.line = line
        self.field = field
        where = path
        if line is not None:
            where += f":{line}"
        if field:
            where += f": field '{field}'"
        super().__init__(f"{where}: {message}")


class EndpointUnreachable(LoadgenError):
    """The endpoint could not be reached before the run started."""


class OutputError(LoadgenError):
    """Writing a result failed (a full disk, a removed ``--out``): sending stopped at the first
    failure and every whole line written before it is kept."""


class ConnectTimeout(TimeoutError):
    """No connection within the connect timeout (``--connect-timeout``), its message the whole line:
    ``TLS handshake with HOST:PORT did not finish within N s`` (the TCP connect was made) or
    ``connection to HOST:PORT timed out (N s)``. Raised by the lean client; a ``timeout``."""


class HeaderTimeout(LoadgenError):
    """A sent request got no response headers within the header timeout (``--header-timeout``;
    gRPC: no first response): the server accepted it and never began to answer. The request's
    ``header_timeout`` error kind, a failure the server caused; never escapes the runner."""

    def __init__(self, header_s: float) -> None:
        super().__init__(f"no response headers within {header_s:g} s of the send (--header-timeout)")
        self.header_s = header_s


class ProtocolError(LoadgenError):
    """The server sent bytes that do not follow the streaming protocol."""


class Abandoned(Exception):  # a user's choice, not a fault
    """Raised by a stream reader when its request's user walks away (``--abandon SHARE,Ntok``,
    :mod:`loadgen.engine.abandon`): the read stops and the connection is dropped."""


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_EXC_LINE = re.compile(r"^[A-Za-z_][\w.]*(?:Error|Exception): .+$")


def strip_ansi(text: str) -> str:
    """``text`` without terminal colour codes (a Ray error's traceback carries them)."""
    return _ANSI.sub("", text)


def cause_line(text: str) -> str:
    """The line of an error text (a traceback, maybe nested) that names its cause: the last
    ``SomeError: message`` line, an import error first; else the text's first line ("" when empty)."""
    lines = [ln.strip() for ln in strip_ansi(text).splitlines() if ln.strip()]
    causes = [ln for ln in lines if _EXC_LINE.match(ln)]
    for ln in reversed(causes):
        if ln.startswith(("ModuleNotFoundError", "ImportError")):
            return ln
    return causes[-1] if causes else (lines[0] if lines else "")
