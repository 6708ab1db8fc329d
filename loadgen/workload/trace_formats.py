"""Row parsers of the trace formats: one line in, exact integers out, or an InputFileError.

Each format turns a line (bytes, without its line ending) into fields, then gives
the row's absolute timestamp in integer nanoseconds and, only for rows inside
the replay window, its lengths. Parsing is strict on purpose: a malformed value
raises :class:`loadgen.core.errors.InputFileError` naming the file, the 1-based line
and the field, so nothing is ever sent from a trace that failed validation.

Formats (schemas in ``traces/README.md``):

* ``azure``: ``TIMESTAMP,ContextTokens,GeneratedTokens`` (Azure LLM inference
  2023 and 2024). Timestamps ``YYYY-MM-DD HH:MM:SS[.f{1,9}][Z|+HH:MM|-HH:MM]``;
  without an offset they are read as UTC. Fractions are exact to the nanosecond.
* ``burstgpt``: ``Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type``;
  ``Timestamp`` is decimal seconds from the start of the trace.
* ``mooncake``: JSON lines ``{"timestamp": ms, "input_length", "output_length",
  "hash_ids"}`` with one hash id per 512-token block.
* ``loadgen``: JSON lines with optional ``timestamp_ms``, ``input_tokens``,
  ``output_tokens``, ``prompt`` or ``messages``, ``session_id``.
"""

from __future__ import annotations

import csv
import datetime as dt
from typing import Any

import orjson

from loadgen.core.errors import InputFileError

MOONCAKE_BLOCK_TOKENS = 512
"""Tokens per Mooncake hash id (the last block of a row may be shorter)."""

_MAX_LEN = 2**31 - 1
_EPOCH_ORDINAL = dt.date(1970, 1, 1).toordinal()
_COLON = ord(":")
_DOT = ord(".")
_DIGITS = b"0123456789"
_FRAC_SCALE = tuple(10 ** (9 - k) if k <= 9 else 0 for k in range(10))


def _int(value: bytes | str | Any, path: str, line: int, field: str, minimum: int = 1) -> int:
    """A strict non-negative decimal integer field (JSON ints pass through)."""
    if isinstance(value, (bytes, str)):
        v = value.strip()
        if not v:
            raise InputFileError(path, line, field, "missing value")
        if v.isdigit():
            n = int(v)
        elif v[:1] in (b"-", "-") and v[1:].isdigit():
            raise InputFileError(path, line, field, f"negative length {_show(v)}")
        else:
            raise InputFileError(path, line, field, f"not an integer: {_show(v)}")
    elif isinstance(value, int) and not isinstance(value, bool):
        n = value
        if n < 0:
            raise InputFileError(path, line, field, f"negative length {n}")
    elif isinstance(value, float) and value.is_integer():
        n = int(value)
        if n < 0:
            raise InputFileError(path, line, field, f"negative length {n}")
    elif value is None:
        raise InputFileError(path, line, field, "missing value")
    else:
        raise InputFileError(path, line, field, f"not an integer: {_show(value)}")
    if n < minimum:
        raise InputFileError(path, line, field, f"must be >= {minimum}, got {n}")
    if n > _MAX_LEN:
        raise InputFileError(path, line, field, f"too large: {n}")
    return n


def _lengths(raw_in: Any, raw_out: Any, path: str, line: int, in_field: str, out_field: str) -> tuple[int, int]:
    """(input, output) lengths of a row: output >= 0; input >= 1, except on a failed request's row.

    A row with 0 output tokens is a failed request of the original log (BurstGPT logs its
    failures with 0 response tokens, some with 0 request tokens too): the reader skips it
    (counted) or, kept, sends it asking for at least 1 token of each, so its input may be 0.
    """
    n_out = _int(raw_out, path, line, out_field, minimum=0)
    n_in = _int(raw_in, path, line, in_field, minimum=0 if n_out == 0 else 1)
    return n_in, n_out


def _show(value: object, limit: int = 40) -> str:
    """A short one-line rendering of a bad value for an error message."""
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


# -- timestamps -------------------------------------------------------------------------


_MINUTE_CACHE: dict[bytes, int] = {}


def _minute_base_s(prefix: bytes) -> int:
    """Epoch seconds of ``YYYY-MM-DD HH:MM`` (validated once per distinct minute)."""
    base = _MINUTE_CACHE.get(prefix)
    if base is not None:
        return base
    if (
        len(prefix) != 16
        or prefix[4] != 45 or prefix[7] != 45 or prefix[10] not in (32, 84) or prefix[13] != _COLON
        or not (prefix[0:4] + prefix[5:7] + prefix[8:10] + prefix[11:13] + prefix[14:16]).isdigit()
    ):  # fmt: skip
        raise ValueError("expected YYYY-MM-DD HH:MM:SS[.fraction][+HH:MM]")
    y, mo, d = int(prefix[0:4]), int(prefix[5:7]), int(prefix[8:10])
    hh, mm = int(prefix[11:13]), int(prefix[14:16])
    try:
        days = dt.date(y, mo, d).toordinal() - _EPOCH_ORDINAL
    except ValueError as exc:
        raise ValueError(f"bad date: {exc}") from None
    if hh > 23 or mm > 59:
        raise ValueError("hour or minute out of range")
    base = days * 86400 + hh * 3600 + mm * 60
    if len(_MINUTE_CACHE) > 200_000:
        _MINUTE_CACHE.clear()
    _MINUTE_CACHE[prefix] = base
    return base


def parse_datetime_ns(text: bytes) -> int:
    """Epoch nanoseconds of ``YYYY-MM-DD[ T]HH:MM:SS[.f{1,9}][Z|±HH:MM|±HHMM|±HH]``, exactly.

    No offset means UTC. Raises ValueError with the reason. (Hot path of the Azure
    reader: one cached lookup per minute, C-level scans for the fraction.)
    """
    s = text
    if s[:1] == b" " or s[-1:] == b" ":
        s = s.strip()
    if len(s) < 19 or s[16] != _COLON or not s[17:19].isdigit():
        raise ValueError("expected YYYY-MM-DD HH:MM:SS[.fraction][+HH:MM]")
    sec = int(s[17:19])
    if sec > 59:
        raise ValueError("second out of range")
    base = _MINUTE_CACHE.get(s[:16])
    if base is None:
        base = _minute_base_s(s[:16])
    total_s = base + sec
    if len(s) == 19:
        return total_s * 1_000_000_000
    rest = s[19:]
    frac_ns = 0
    if rest[0] == _DOT:
        tail = rest[1:].lstrip(_DIGITS)
        nd = len(rest) - 1 - len(tail)
        if not 1 <= nd <= 9:
            raise ValueError("fraction must have 1 to 9 digits")
        frac_ns = int(rest[1 : 1 + nd]) * _FRAC_SCALE[nd]
        rest = tail
    if rest and rest != b"+00:00" and rest != b"Z":
        if rest[0] in (43, 45):  # + -
            tz = rest[1:].replace(b":", b"")
            if len(tz) not in (2, 4) or not tz.isdigit():
                raise ValueError(f"bad UTC offset {_show(rest)}")
            off = int(tz[:2]) * 3600 + (int(tz[2:]) * 60 if len(tz) == 4 else 0)
            total_s -= off if rest[0] == 43 else -off
        else:
            raise ValueError(f"unexpected text after the time: {_show(rest)}")
    return total_s * 1_000_000_000 + frac_ns


def parse_seconds_ns(text: bytes | str) -> int:
    """Nanoseconds of a non-negative decimal number of seconds (``12``, ``12.5``), exactly.

    Raises ValueError with the reason.
    """
    s = text.strip()
    if isinstance(s, str):
        s = s.encode()
    whole, dot, frac = s.partition(b".")
    if s[:1] == b"-":
        raise ValueError(f"negative timestamp {_show(s)}")
    if not whole.isdigit() or (dot and frac and not frac.isdigit()) or (dot and not frac and not whole):
        raise ValueError(f"not a decimal number of seconds: {_show(s)}")
    ns = int(whole) * 1_000_000_000
    if frac:
        frac = frac[:9]
        ns += int(frac) * 10 ** (9 - len(frac))
    return ns


def _json_time_ns(value: object, unit_ns: int, path: str, line: int, field: str) -> int:
    """A JSON number of ``unit_ns`` nanoseconds (ms: 1e6) as integer ns."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        if value is None:
            raise InputFileError(path, line, field, "missing value")
        raise InputFileError(path, line, field, f"not a number: {_show(value)}")
    if value < 0:
        raise InputFileError(path, line, field, f"negative timestamp {value}")
    if isinstance(value, float):
        if value != value or value == float("inf"):
            raise InputFileError(path, line, field, f"not a finite number: {value}")
        return round(value * unit_ns)
    return value * unit_ns


# -- formats ------------------------------------------------------------------------------


class TraceFormat:
    """A format's parser for one file. ``fields`` is whatever :meth:`split` returns."""

    name = ""
    timestamp_field = ""
    has_header = False

    def __init__(self, path: str) -> None:
        self.path = path

    def header(self, line: bytes, lineno: int) -> None:
        """Check the header line (CSV formats)."""

    def split(self, line: bytes, lineno: int) -> Any:
        raise NotImplementedError

    def timestamp_ns(self, fields: Any, lineno: int) -> int | None:
        """Absolute (or from-start) timestamp in ns; None for a row without one."""
        raise NotImplementedError

    def row(self, fields: Any, lineno: int) -> dict[str, Any]:
        """``input`` and ``output`` lengths (-1 when not given) plus format extras."""
        raise NotImplementedError


class _CSVFormat(TraceFormat):
    has_header = True
    columns: tuple[str, ...] = ()
    required: tuple[str, ...] = ()

    def header(self, line: bytes, lineno: int) -> None:
        names = [c.strip() for c in line.decode("utf-8", "replace").lstrip("\ufeff").split(",")]
        for n in names:
            if n not in self.columns:
                raise InputFileError(
                    self.path, lineno, n,
                    f"unknown column for format {self.name!r}; expected {','.join(self.columns)}",
                )  # fmt: skip
        for n in self.required:
            if n not in names:
                raise InputFileError(
                    self.path, lineno, n,
                    f"missing column; the {self.name!r} header must have {','.join(self.required)}",
                )  # fmt: skip
        self.names = names
        self.ncols = len(names)
        self.idx = {n: i for i, n in enumerate(names)}

    def lengths(self, fields: list[bytes], lineno: int, in_col: str, out_col: str) -> tuple[int, int]:
        """:func:`_lengths` of a row's ``in_col`` and ``out_col`` columns."""
        return _lengths(fields[self.idx[in_col]], fields[self.idx[out_col]], self.path, lineno, in_col, out_col)

    def split(self, line: bytes, lineno: int) -> list[bytes]:
        if b'"' in line:
            fields = [f.encode() for f in next(csv.reader([line.decode("utf-8", "replace")]))]
        else:
            fields = line.split(b",")
        if len(fields) != self.ncols:
            raise InputFileError(
                self.path, lineno, "row", f"expected {self.ncols} comma-separated fields, found {len(fields)}"
            )
        return fields


class AzureFormat(_CSVFormat):
    """Azure LLM inference trace 2023 / 2024."""

    name = "azure"
    timestamp_field = "TIMESTAMP"
    columns = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
    required = columns

    def timestamp_ns(self, fields: list[bytes], lineno: int) -> int:
        try:
            return parse_datetime_ns(fields[self.idx["TIMESTAMP"]])
        except ValueError as exc:
            raise InputFileError(
                self.path, lineno, "TIMESTAMP",
                f"unparseable timestamp {_show(fields[self.idx['TIMESTAMP']])}: {exc}",
            ) from None  # fmt: skip

    def row(self, fields: list[bytes], lineno: int) -> dict[str, Any]:
        n_in, n_out = self.lengths(fields, lineno, "ContextTokens", "GeneratedTokens")
        return {"input": n_in, "output": n_out}


class BurstGPTFormat(_CSVFormat):
    """BurstGPT (HPMLL/BurstGPT) request log."""

    name = "burstgpt"
    timestamp_field = "Timestamp"
    columns = ("Timestamp", "Model", "Request tokens", "Response tokens", "Total tokens", "Log Type")
    required = ("Timestamp", "Request tokens", "Response tokens")

    def timestamp_ns(self, fields: list[bytes], lineno: int) -> int:
        raw = fields[self.idx["Timestamp"]]
        try:
            return parse_seconds_ns(raw)
        except ValueError as exc:
            raise InputFileError(self.path, lineno, "Timestamp", f"unparseable timestamp: {exc}") from None

    def row(self, fields: list[bytes], lineno: int) -> dict[str, Any]:
        i = self.idx
        req, resp = self.lengths(fields, lineno, "Request tokens", "Response tokens")
        if "Total tokens" in i:
            _int(fields[i["Total tokens"]], self.path, lineno, "Total tokens", minimum=0)
        return {"input": req, "output": resp}


class _JSONFormat(TraceFormat):
    def split(self, line: bytes, lineno: int) -> dict[str, Any]:
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise InputFileError(self.path, lineno, "row", f"not valid JSON: {exc}") from None
        if not isinstance(obj, dict):
            raise InputFileError(self.path, lineno, "row", "each line must be a JSON object")
        return obj


class MooncakeFormat(_JSONFormat):
    """Mooncake (kvcache-ai/Mooncake FAST'25) JSON-lines trace."""

    name = "mooncake"
    timestamp_field = "timestamp"

    def timestamp_ns(self, obj: dict[str, Any], lineno: int) -> int:
        return _json_time_ns(obj.get("timestamp"), 1_000_000, self.path, lineno, "timestamp")

    def row(self, obj: dict[str, Any], lineno: int) -> dict[str, Any]:
        n_in, n_out = _lengths(
            obj.get("input_length"), obj.get("output_length"), self.path, lineno, "input_length", "output_length"
        )
        ids = obj.get("hash_ids")
        if not isinstance(ids, list):
            raise InputFileError(self.path, lineno, "hash_ids", "missing or not a list")
        want = -(-n_in // MOONCAKE_BLOCK_TOKENS)
        if len(ids) != want:
            raise InputFileError(
                self.path, lineno, "hash_ids",
                f"{len(ids)} ids for input_length {n_in}; expected ceil({n_in}/{MOONCAKE_BLOCK_TOKENS}) = {want}",
            )  # fmt: skip
        for h in ids:
            if isinstance(h, bool) or not isinstance(h, int) or h < 0:
                raise InputFileError(
                    self.path, lineno, "hash_ids", f"ids must be non-negative integers, got {_show(h)}"
                )
        return {"input": n_in, "output": n_out, "hash_ids": ids}


LOADGEN_KEYS = ("timestamp_ms", "input_tokens", "output_tokens", "prompt", "messages", "session_id")


class LoadgenFormat(_JSONFormat):
    """loadgen's own JSON lines: one request per line."""

    name = "loadgen"
    timestamp_field = "timestamp_ms"

    def timestamp_ns(self, obj: dict[str, Any], lineno: int) -> int | None:
        if "timestamp_ms" not in obj:
            return None
        return _json_time_ns(obj["timestamp_ms"], 1_000_000, self.path, lineno, "timestamp_ms")

    def row(self, obj: dict[str, Any], lineno: int) -> dict[str, Any]:
        p = self.path
        for key in obj:
            if key not in LOADGEN_KEYS:
                raise InputFileError(p, lineno, key, f"unknown key; allowed: {', '.join(LOADGEN_KEYS)}")
        out: dict[str, Any] = {"input": -1, "output": -1, "prompt": None, "messages": None, "session_id": None}
        if obj.get("input_tokens") is not None:
            out["input"] = _int(obj["input_tokens"], p, lineno, "input_tokens")
        if obj.get("output_tokens") is not None:
            out["output"] = _int(obj["output_tokens"], p, lineno, "output_tokens")
        prompt, messages = obj.get("prompt"), obj.get("messages")
        if prompt is not None and messages is not None:
            raise InputFileError(p, lineno, "messages", "give prompt or messages, not both")
        if prompt is not None:
            if not isinstance(prompt, str) or not prompt:
                raise InputFileError(p, lineno, "prompt", "must be a non-empty string")
            out["prompt"] = prompt
        if messages is not None:
            if not isinstance(messages, list) or not messages:
                raise InputFileError(p, lineno, "messages", "must be a non-empty list of messages")
            for k, m in enumerate(messages):
                if (
                    not isinstance(m, dict)
                    or not isinstance(m.get("role"), str)
                    or not isinstance(m.get("content"), str)
                ):
                    raise InputFileError(
                        p, lineno, f"messages[{k}]", 'each message must be {"role": str, "content": str}'
                    )
            out["messages"] = tuple(messages)
        if prompt is None and messages is None and out["input"] < 0:
            raise InputFileError(p, lineno, "input_tokens", "missing: give input_tokens, prompt or messages")
        sid = obj.get("session_id")
        if sid is not None:
            if isinstance(sid, bool) or not isinstance(sid, (str, int)):
                raise InputFileError(p, lineno, "session_id", "must be a string or an integer")
            out["session_id"] = str(sid)
        return out


FORMATS: dict[str, type[TraceFormat]] = {
    "azure": AzureFormat,
    "burstgpt": BurstGPTFormat,
    "mooncake": MooncakeFormat,
    "loadgen": LoadgenFormat,
}
"""Trace formats by name (``auto`` picks one of these from the first line)."""


def detect_format(path: str, first_line: bytes, lineno: int) -> tuple[str, str]:
    """(format name, reason) from the first non-blank line; InputFileError when none fits."""
    text = first_line.lstrip(b"\xef\xbb\xbf").strip()
    if text.startswith(b"{"):
        try:
            obj = orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            raise InputFileError(path, lineno, "row", f"not valid JSON: {exc}") from None
        if isinstance(obj, dict) and ("hash_ids" in obj or "input_length" in obj):
            return "mooncake", "JSON lines with input_length/hash_ids keys"
        return "loadgen", "JSON lines without Mooncake keys"
    names = {c.strip() for c in text.decode("utf-8", "replace").split(",")}
    if "TIMESTAMP" in names and "ContextTokens" in names:
        return "azure", "CSV header TIMESTAMP,ContextTokens,..."
    if "Timestamp" in names and "Request tokens" in names:
        return "burstgpt", "CSV header Timestamp,...,Request tokens,..."
    first = text.decode("utf-8", "replace").split(",")[0].strip()
    if not first.isprintable() or len(first) > 40:  # a binary file's bytes are no field name to print
        first = "row"
    raise InputFileError(
        path, lineno, first or "row",
        "unknown columns: cannot detect the trace format (expected an Azure, BurstGPT, "
        "Mooncake or loadgen header); give the format explicitly",
    )  # fmt: skip
