"""Read a recorded trace into compact arrays: streamed, windowed, validated.

:func:`read_trace` reads a file line by line (plain or gzip) and keeps only the
rows of the selected window, in ``array``/numpy buffers (no Python object per
row is kept, and rows outside the window are parsed only as far as their
timestamp). Offsets are integer nanoseconds from the trace's first row. The
whole window is validated before anything is returned: a bad row raises
:class:`loadgen.core.errors.InputFileError` naming file, line and field.

Policies (documented in ``traces/README.md``):

* Timestamps must be non-decreasing; an out-of-order row is refused (sort the
  file first). Rows sharing a timestamp are fine (replayed together).
* Rows after the window are not read, so they are not validated.
* Rows with 0 output tokens (BurstGPT failures, and the same in any format)
  are skipped and counted in :attr:`Trace.skipped_zero_output`, unless
  ``keep_zero_output`` (``--trace-keep-zero-output``): then they are counted in
  :attr:`Trace.kept_zero_output` and ask for 1 output token (and at least 1 input
  token: a failure may log 0 of those too, which is not an error on such a row).
"""

from __future__ import annotations

import gzip
from array import array
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import IO, Any

import numpy as np

from loadgen.core.errors import ConfigError, InputFileError
from loadgen.workload.trace_fast import parse_azure_block
from loadgen.workload.trace_formats import FORMATS, MOONCAKE_BLOCK_TOKENS, AzureFormat, TraceFormat, detect_format

__all__ = ["BUILTIN_TRACES", "Trace", "read_trace", "resolve_trace_path"]

BUILTIN_TRACES: dict[str, str] = {
    "azure-code-2023": "azure_code_2023_head2000.csv",
    "azure-conv-2023": "azure_conv_2023_head2000.csv",
    "mooncake-conversation": "mooncake_conversation_head400.jsonl",
}
"""Excerpts shipped in ``loadgen/data`` (sources and licences in its README): ``builtin:NAME``."""


def resolve_trace_path(spec: str | Path) -> str:
    """A file path for ``spec``: a path, or ``builtin:NAME`` for a shipped excerpt.

    Raises ConfigError for an unknown builtin name or a missing file.
    """
    s = str(spec)
    if s.startswith("builtin:"):
        name = s[len("builtin:") :]
        if name not in BUILTIN_TRACES:
            raise ConfigError(f"unknown builtin trace {name!r}; choose one of {', '.join(sorted(BUILTIN_TRACES))}")
        return str(resources.files("loadgen") / "data" / BUILTIN_TRACES[name])
    if not Path(s).is_file():
        raise ConfigError(f"trace file not found: {s}")
    return s


@dataclass
class Trace:
    """The rows of a trace window, as parallel read-only arrays (row ``i`` is index ``i`` of each).

    8 bytes per row per array: a full 27-million-row week is ~0.9 GB; a window, what it holds.

    * ``offset_ns``: int64, ns from the *file's* first row (not re-based to the window).
    * ``input_tokens`` / ``output_tokens``: int64, -1 where the row gives none.
    * ``line``: int64, 1-based line of each row (for messages).
    * ``hash_ids`` (Mooncake): a flat int64 array; row ``i``'s ids are
      ``hash_ids[hash_start[i]:hash_start[i + 1]]``.
    * ``prompts`` / ``messages`` / ``session_ids`` (loadgen JSONL): lists, or None
      when no row has them.
    * ``next_offset_ns``: offset of the first later instant after the window when
      it was read (used to spread a window's last instant), else None.
    """

    path: str
    format: str
    format_reason: str
    offset_ns: np.ndarray
    input_tokens: np.ndarray
    output_tokens: np.ndarray
    line: np.ndarray
    has_timestamps: bool = True
    hash_ids: np.ndarray | None = None
    hash_start: np.ndarray | None = None
    prompts: list[str | None] | None = None
    messages: list[tuple[dict[str, Any], ...] | None] | None = None
    session_ids: list[str | None] | None = None
    rows_before_window: int = 0
    skipped_zero_output: int = 0
    kept_zero_output: int = 0
    next_offset_ns: int | None = None
    start_s: float = 0.0
    duration_s: float | None = None
    max_requests: int | None = None
    notes: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return int(self.offset_ns.shape[0])

    def row_hash_ids(self, i: int) -> np.ndarray | None:
        """Row ``i``'s Mooncake hash ids, or None when the trace has none."""
        if self.hash_ids is None or self.hash_start is None:
            return None
        return self.hash_ids[self.hash_start[i] : self.hash_start[i + 1]]

    @property
    def block_tokens(self) -> int:
        return MOONCAKE_BLOCK_TOKENS


@contextmanager
def _open(path: str) -> Iterator[IO[bytes]]:
    """The file in binary, gunzipped when it starts with the gzip magic."""
    with open(path, "rb", buffering=1 << 20) as fh:
        if fh.peek(2)[:2] == b"\x1f\x8b":  # type: ignore[attr-defined]  # open(..., "rb", buffering) is a BufferedReader, typed BinaryIO
            with gzip.GzipFile(fileobj=fh, mode="rb") as gz:
                yield gz  # type: ignore[misc]  # GzipFile is a binary stream
        else:
            yield fh


_BLOCK_BYTES = 1 << 20


def _blocks(fh: IO[bytes]) -> Iterator[bytes]:
    """Blocks of complete lines, each ending in ``\\n`` (one is added after a last line without it)."""
    carry = b""
    while True:
        data = fh.read(_BLOCK_BYTES)
        if not data:
            if carry:
                yield carry + b"\n"
            return
        buf = carry + data if carry else data
        cut = buf.rfind(b"\n")
        if cut < 0:
            carry = buf
            continue
        carry = buf[cut + 1 :]
        yield buf[: cut + 1]


class _Stop(Exception):
    """The window is complete: stop reading."""


class _Reader:
    """The window state machine, fed row by row (reference path) or a block at a time (fast path)."""

    def __init__(self, path: str, parser: TraceFormat, start_ns: int, end_ns: int | None,
                 max_requests: int | None, keep_zero_output: bool) -> None:  # fmt: skip
        self.path, self.parser = path, parser
        self.start_ns, self.end_ns = start_ns, end_ns
        self.max_requests, self.keep_zero = max_requests, keep_zero_output
        self.offs, self.ins, self.outs, self.lines = array("q"), array("q"), array("q"), array("q")
        self.hflat, self.hstart = array("q"), array("q", [0])
        self.prompts: list[Any] = []
        self.messages: list[Any] = []
        self.sessions: list[Any] = []
        self.before = self.skipped = self.kept = 0
        self.next_off: int | None = None
        self.t0: int | None = None
        self.prev_t: int | None = None
        self.prev_line = 0
        self.has_ts: bool | None = None

    def full(self) -> bool:
        return self.max_requests is not None and len(self.offs) >= self.max_requests

    def line(self, lineno: int, raw: bytes) -> None:
        """One row, line by line: the reference semantics (raises _Stop at the window's end)."""
        parser, path = self.parser, self.path
        fields = parser.split(raw, lineno)
        t = parser.timestamp_ns(fields, lineno)
        if self.has_ts is None:
            self.has_ts = t is not None
            if not self.has_ts and (self.start_ns or self.end_ns is not None):
                raise ConfigError(f"{path}: rows have no {parser.timestamp_field}; a time window needs timestamps")
        elif self.has_ts != (t is not None):
            raise InputFileError(
                path, lineno, parser.timestamp_field,
                "missing here but present on the first row (give it on every row or on none)",
            )  # fmt: skip
        off = 0
        if t is not None:
            prev_t = self.prev_t
            if prev_t is not None and t < prev_t:
                raise InputFileError(
                    path, lineno, parser.timestamp_field,
                    f"out of order: {(prev_t - t) / 1e9:.9f} s earlier than line {self.prev_line}; "
                    "loadgen refuses unsorted traces (sort the file by timestamp)",
                )  # fmt: skip
            if self.t0 is None:
                self.t0 = t
            off = t - self.t0
            if prev_t is not None and t > prev_t and self.full():
                self.next_off = off
                raise _Stop
            self.prev_t, self.prev_line = t, lineno
            if off < self.start_ns:
                self.before += 1
                return
            if self.end_ns is not None and off >= self.end_ns:
                self.next_off = off
                raise _Stop
        if self.full():
            if t is None:
                raise _Stop
            return  # reading on only to find the next instant
        r = parser.row(fields, lineno)
        if r["output"] == 0:
            if not self.keep_zero:
                self.skipped += 1
                return
            self.kept += 1
        self.offs.append(off)
        self.ins.append(max(r["input"], 1) if r["output"] == 0 else r["input"])  # kept failures ask for 1
        self.outs.append(1 if r["output"] == 0 else r["output"])
        self.lines.append(lineno)
        if "hash_ids" in r:
            self.hflat.extend(r["hash_ids"])
            self.hstart.append(len(self.hflat))
        if "prompt" in r:
            self.prompts.append(r["prompt"])
            self.messages.append(r["messages"])
            self.sessions.append(r["session_id"])

    def block(self, first_line: int, blk: bytes) -> bool:
        """A block through the vectorised Azure path; False when it must go line by line.

        Same rules as :meth:`line`; any doubt (a bad timestamp anywhere in the
        block, disorder, bad lengths inside the window) returns False untouched.
        """
        b = parse_azure_block(blk)
        if b is None:
            return False
        ts = b.ts_ns
        n = ts.size
        if (self.prev_t is not None and ts[0] < self.prev_t) or bool(np.any(ts[1:] < ts[:-1])):
            return False
        t0 = self.t0 if self.t0 is not None else int(ts[0])
        off = ts - t0
        if self.full():  # only looking for the next instant
            assert self.prev_t is not None  # full: at least one row was taken
            j = int(np.searchsorted(ts, self.prev_t, side="right"))
            return self._commit(t0, ts, first_line, j, stop_at=j if j < n else None, off=off)
        i0 = int(np.searchsorted(off, self.start_ns, side="left"))
        i1 = n if self.end_ns is None else int(np.searchsorted(off, self.end_ns, side="left"))
        i1 = max(i1, i0)
        inp, out, len_ok = b.lengths(i0, i1)
        if not len_ok.all():
            return False
        keep = np.arange(i0, i1)
        zero = out == 0
        stop = i1 if i1 < n else None
        if not self.keep_zero:
            keep = keep[~zero]
        if self.max_requests is not None and keep.size >= self.max_requests - len(self.offs):
            keep = keep[: self.max_requests - len(self.offs)]
            last = int(keep[-1]) if keep.size else i0
            j = int(np.searchsorted(ts, ts[last], side="right"))
            stop = j if j < n else None
            processed_end = last + 1
        else:
            processed_end = i1
        if self.keep_zero:
            self.kept += int(np.count_nonzero(zero[keep - i0]))
        else:
            self.skipped += int(np.count_nonzero(zero[: processed_end - i0]))
        self.before += i0
        self.offs.frombytes(off[keep].astype(np.int64).tobytes())
        self.ins.frombytes(np.maximum(inp[keep - i0], 1).astype(np.int64).tobytes())  # 0 only on kept failures
        self.outs.frombytes(np.maximum(out[keep - i0], 1).astype(np.int64).tobytes())
        self.lines.frombytes((first_line + keep).astype(np.int64).tobytes())
        last_seen = (stop if stop is not None else n) - 1
        return self._commit(t0, ts, first_line, last_seen + 1, stop_at=stop, off=off)

    def _commit(self, t0: int, ts: np.ndarray, first_line: int, upto: int, *, stop_at: int | None,
                off: np.ndarray) -> bool:  # fmt: skip
        self.t0 = t0
        self.has_ts = True
        if upto > 0:
            self.prev_t = int(ts[upto - 1])
            self.prev_line = first_line + upto - 1
        if stop_at is not None:
            self.next_off = int(off[stop_at])
            raise _Stop
        return True


def read_trace(
    path: str | Path,
    fmt: str = "auto",
    *,
    start_s: float = 0.0,
    duration_s: float | None = None,
    max_requests: int | None = None,
    keep_zero_output: bool = False,
) -> Trace:
    """Read the window ``[start_s, start_s + duration_s)`` (trace time, from the first row).

    ``max_requests`` keeps at most that many rows of the window. ``fmt`` is a
    name from :data:`FORMATS` or ``auto`` (detected from the header or the
    first JSON keys; the choice and its reason are in the result).
    Raises InputFileError for malformed rows, ConfigError for bad options or an
    empty window.
    """
    path = resolve_trace_path(path)
    if fmt != "auto" and fmt not in FORMATS:
        raise ConfigError(f"unknown trace format {fmt!r}; choose auto or one of {', '.join(FORMATS)}")
    if start_s < 0 or (duration_s is not None and duration_s <= 0):
        raise ConfigError("trace window: start must be >= 0 and duration > 0")
    if max_requests is not None and max_requests < 1:
        raise ConfigError("trace window: max requests must be >= 1")
    start_ns = round(start_s * 1e9)
    end_ns = None if duration_s is None else start_ns + round(duration_s * 1e9)
    with _open(path) as fh:
        lineno = 0
        first = b""
        while not first.strip():
            raw = fh.readline()
            if not raw:
                raise InputFileError(path, 1, "row", "the file is empty")
            lineno += 1
            first = raw.rstrip(b"\r\n")
        if fmt == "auto":
            name, reason = detect_format(path, first, lineno)
        else:
            name, reason = fmt, "given"
        parser = FORMATS[name](path)
        rd = _Reader(path, parser, start_ns, end_ns, max_requests, keep_zero_output)
        try:
            if parser.has_header:
                parser.header(first, lineno)
            else:
                rd.line(lineno, first)
            fast = isinstance(parser, AzureFormat) and parser.names == list(AzureFormat.columns)
            for blk in _blocks(fh):
                if fast and rd.block(lineno + 1, blk):
                    lineno += blk.count(b"\n")
                    continue
                for raw in blk.split(b"\n")[:-1]:
                    lineno += 1
                    line = raw.rstrip(b"\r")
                    if line.strip():
                        rd.line(lineno, line)
        except _Stop:
            pass
    if not rd.offs:
        span = (
            ""
            if rd.prev_t is None or rd.t0 is None
            else f" (the trace spans at least {(rd.prev_t - rd.t0) / 1e9:.3f} s)"
        )
        raise ConfigError(f"{path}: no rows in the selected window{span}")
    tr = Trace(
        path=path,
        format=name,
        format_reason=reason,
        offset_ns=np.frombuffer(rd.offs, dtype=np.int64),
        input_tokens=np.frombuffer(rd.ins, dtype=np.int64),
        output_tokens=np.frombuffer(rd.outs, dtype=np.int64),
        line=np.frombuffer(rd.lines, dtype=np.int64),
        has_timestamps=bool(rd.has_ts),
        rows_before_window=rd.before,
        skipped_zero_output=rd.skipped,
        kept_zero_output=rd.kept,
        next_offset_ns=rd.next_off,
        start_s=start_s,
        duration_s=duration_s,
        max_requests=max_requests,
    )
    if name == "mooncake":
        tr.hash_ids = np.frombuffer(rd.hflat, dtype=np.int64)
        tr.hash_start = np.frombuffer(rd.hstart, dtype=np.int64)
    if name == "loadgen":
        tr.prompts = rd.prompts if any(p is not None for p in rd.prompts) else None
        tr.messages = rd.messages if any(m is not None for m in rd.messages) else None
        tr.session_ids = rd.sessions if any(x is not None for x in rd.sessions) else None
    if fmt == "auto":
        tr.notes.append(f"format: {name} (auto: {reason})")
    if rd.skipped:
        tr.notes.append(f"skipped {rd.skipped} rows with 0 output tokens (failed requests)")
    if rd.kept:
        tr.notes.append(f"kept {rd.kept} rows with 0 output tokens (failed requests): each asks for 1 token")
    return tr
