"""Read a recorded trace into compact arrays: streamed, windowed, validated.

:func:`read_trace` reads a file line by line (plain or gzip) and keeps only the
rows of the selected window, in ``array``/numpy buffers (no Python object per
row is kept, and rows outside the window are parsed only as far as their
timestamp). Offsets are integer nanoseconds from the trace's first row. The
whole window is validated before anything is returned: a bad row raises
:class:`loadgen.errors.InputFileError` naming file, line and field.

Policies (documented in ``traces/README.md``):

* Timestamps must be non-decreasing; an out-of-order row is refused (sort the
  file first). Rows sharing a timestamp are fine (replayed together).
* Rows after the window are not read, so they are not validated.
* Rows with 0 output tokens (BurstGPT failures, and the same in any format)
  are skipped and counted in :attr:`Trace.skipped_zero_output`, unless
  ``keep_zero_output``.
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

from loadgen.errors import ConfigError, InputFileError
from loadgen.workload.trace_formats import FORMATS, MOONCAKE_BLOCK_TOKENS, detect_format

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
    """The rows of a trace window, as parallel arrays (row ``i`` is index ``i`` of each).

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
        if fh.peek(2)[:2] == b"\x1f\x8b":
            with gzip.GzipFile(fileobj=fh, mode="rb") as gz:
                yield gz  # type: ignore[misc]
        else:
            yield fh


def _lines(fh: IO[bytes]) -> Iterator[tuple[int, bytes]]:
    """(1-based line number, line without its ending) for every non-blank line."""
    for n, raw in enumerate(fh, 1):
        line = raw.rstrip(b"\r\n")
        if line.strip():
            yield n, line


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

    offs, ins, outs, lines = array("q"), array("q"), array("q"), array("q")
    hflat, hstart = array("q"), array("q", [0])
    prompts: list[Any] = []
    messages: list[Any] = []
    sessions: list[Any] = []
    before = skipped = 0
    next_off: int | None = None
    with _open(path) as fh:
        it = _lines(fh)
        first = next(it, None)
        if first is None:
            raise InputFileError(path, 1, "row", "the file is empty")
        if fmt == "auto":
            name, reason = detect_format(path, first[1], first[0])
        else:
            name, reason = fmt, "given"
        parser = FORMATS[name](path)
        if parser.has_header:
            parser.header(first[1], first[0])
            rows: Iterator[tuple[int, bytes]] = it
        else:
            rows = _chain(first, it)
        t0: int | None = None
        prev_t: int | None = None
        prev_line = 0
        has_ts: bool | None = None
        for lineno, raw in rows:
            fields = parser.split(raw, lineno)
            t = parser.timestamp_ns(fields, lineno)
            if has_ts is None:
                has_ts = t is not None
                if not has_ts and (start_ns or end_ns is not None):
                    raise ConfigError(f"{path}: rows have no {parser.timestamp_field}; a time window needs timestamps")
            elif has_ts != (t is not None):
                raise InputFileError(
                    path, lineno, parser.timestamp_field,
                    "missing here but present on the first row (give it on every row or on none)",
                )  # fmt: skip
            if t is not None:
                if prev_t is not None and t < prev_t:
                    raise InputFileError(
                        path, lineno, parser.timestamp_field,
                        f"out of order: {(t - prev_t) / 1e9:+.9f} s before line {prev_line}; "
                        "loadgen refuses unsorted traces (sort the file by timestamp)",
                    )  # fmt: skip
                if t0 is None:
                    t0 = t
                off = t - t0
                if prev_t is not None and t > prev_t and next_off is None and len(offs) and _full(len(offs), max_requests):
                    next_off = off
                    break
                prev_t, prev_line = t, lineno
                if off < start_ns:
                    before += 1
                    continue
                if end_ns is not None and off >= end_ns:
                    next_off = off
                    break
            else:
                off = 0
            if _full(len(offs), max_requests):
                if t is None:
                    break
                continue  # reading on only to find the next instant
            r = parser.row(fields, lineno)
            if r["output"] == 0 and not keep_zero_output:
                skipped += 1
                continue
            offs.append(off)
            ins.append(r["input"])
            outs.append(1 if r["output"] == 0 else r["output"])  # kept 0-output rows ask for 1
            lines.append(lineno)
            if "hash_ids" in r:
                hflat.extend(r["hash_ids"])
                hstart.append(len(hflat))
            if name == "loadgen":
                prompts.append(r["prompt"])
                messages.append(r["messages"])
                sessions.append(r["session_id"])
    if not offs:
        span = "" if prev_t is None or t0 is None else f" (the trace spans {(prev_t - t0) / 1e9:.3f} s)"
        raise ConfigError(f"{path}: no rows in the selected window{span}")
    tr = Trace(
        path=path,
        format=name,
        format_reason=reason,
        offset_ns=np.frombuffer(offs, dtype=np.int64).copy(),
        input_tokens=np.frombuffer(ins, dtype=np.int64).copy(),
        output_tokens=np.frombuffer(outs, dtype=np.int64).copy(),
        line=np.frombuffer(lines, dtype=np.int64).copy(),
        has_timestamps=bool(has_ts),
        rows_before_window=before,
        skipped_zero_output=skipped,
        next_offset_ns=next_off,
        start_s=start_s,
        duration_s=duration_s,
        max_requests=max_requests,
    )
    if name == "mooncake":
        tr.hash_ids = np.frombuffer(hflat, dtype=np.int64).copy()
        tr.hash_start = np.frombuffer(hstart, dtype=np.int64).copy()
    if name == "loadgen":
        tr.prompts = prompts if any(p is not None for p in prompts) else None
        tr.messages = messages if any(m is not None for m in messages) else None
        tr.session_ids = sessions if any(s is not None for s in sessions) else None
    if fmt == "auto":
        tr.notes.append(f"format: {name} (auto: {reason})")
    if skipped:
        tr.notes.append(f"skipped {skipped} rows with 0 output tokens (failed requests)")
    return tr


def _full(n: int, max_requests: int | None) -> bool:
    return max_requests is not None and n >= max_requests


def _chain(first: tuple[int, bytes], rest: Iterator[tuple[int, bytes]]) -> Iterator[tuple[int, bytes]]:
    yield first
    yield from rest
