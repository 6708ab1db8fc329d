"""The vectorised Azure path gives exactly what the line-by-line reference path gives."""

from __future__ import annotations

import datetime as dt
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from loadgen.core.errors import InputFileError
from loadgen.workload import traces
from loadgen.workload.trace_fast import parse_azure_block
from loadgen.workload.trace_formats import parse_datetime_ns

FIELDS = ("offset_ns", "input_tokens", "output_tokens", "line")


def _azure_file(path: Path, n: int, seed: int, *, crlf: bool, bad_line: int | None = None) -> None:
    rng = random.Random(seed)
    t = dt.datetime(2024, 2, 28, 23, 59, 0, tzinfo=dt.UTC)  # crosses a leap day
    lines = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    for _i in range(n):
        if rng.random() > 0.1:  # 10 % share the previous instant
            t += dt.timedelta(microseconds=rng.randrange(1, 3_000_000))
        form = rng.randrange(6)
        if form == 0:
            ts = t.strftime("%Y-%m-%d %H:%M:%S.%f") + "0"  # 2023: seven digits, no offset
        elif form == 1:
            ts = str(t)  # 2024: '+00:00', no fraction when microsecond == 0
        elif form == 2:
            if t.microsecond:  # up to the next whole second (never back in time)
                t = t.replace(microsecond=0) + dt.timedelta(seconds=1)
            ts = t.isoformat(sep=" ")  # whole second, +00:00
        elif form == 3:
            ts = t.astimezone(dt.timezone(dt.timedelta(hours=1))).isoformat(sep=" ", timespec="microseconds")
        elif form == 4:
            if t.microsecond % 1000:  # up to the next whole millisecond
                t += dt.timedelta(microseconds=1000 - t.microsecond % 1000)
            ts = t.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
        else:
            ts = t.strftime("%Y-%m-%d %H:%M:%S.%f")
        out = 0 if rng.random() < 0.05 else rng.randrange(1, 2000)
        inp = 0 if out == 0 and rng.random() < 0.5 else rng.randrange(1, 100_000)  # failures may log 0 input
        lines.append(f"{ts},{inp},{out}")
    if bad_line is not None:
        ts, a, b = lines[bad_line - 1].split(",")
        lines[bad_line - 1] = f"{ts},{a},x{b}"
    eol = "\r\n" if crlf else "\n"
    path.write_bytes(eol.join(lines).encode())  # no trailing newline


def _read(path: Path, fast: bool, monkeypatch: pytest.MonkeyPatch, **kw: Any) -> traces.Trace:
    with monkeypatch.context() as m:
        m.setattr(traces, "_BLOCK_BYTES", 997)  # many blocks, lines split across reads
        if not fast:
            m.setattr(traces, "parse_azure_block", lambda block: None)
        return traces.read_trace(path, **kw)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_fast_path_equals_reference(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int) -> None:
    path = tmp_path / "az.csv"
    _azure_file(path, 3000, seed, crlf=seed % 2 == 1)
    full = _read(path, False, monkeypatch)
    mid_s = float(full.offset_ns[1500]) / 1e9
    windows: list[dict[str, Any]] = [
        {},
        {"start_s": mid_s, "duration_s": 300.0},
        {"start_s": mid_s, "max_requests": 37},
        {"max_requests": 1},
        {"start_s": mid_s, "duration_s": 200.0, "keep_zero_output": True},
    ]
    for kw in windows:
        ref = _read(path, False, monkeypatch, **kw)
        got = _read(path, True, monkeypatch, **kw)
        for f in FIELDS:
            assert np.array_equal(getattr(ref, f), getattr(got, f)), (kw, f)
        assert (ref.rows_before_window, ref.skipped_zero_output, ref.kept_zero_output, ref.next_offset_ns) == (
            got.rows_before_window, got.skipped_zero_output, got.kept_zero_output, got.next_offset_ns), kw  # fmt: skip


def test_fast_path_errors_name_the_same_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "bad.csv"
    _azure_file(path, 3000, 4, crlf=True, bad_line=2500)
    for fast in (False, True):
        with pytest.raises(InputFileError) as info:
            _read(path, fast, monkeypatch)
        assert (info.value.line, info.value.field) == (2500, "GeneratedTokens")


def test_block_timestamps_match_the_scalar_parser() -> None:
    samples = [
        b"2023-11-16 18:17:03.9799600", b"2024-05-10 00:00:00+00:00", b"2024-05-10 00:00:00.015230+00:00",
        b"2024-02-29T23:59:59.123456789Z", b"2024-05-10 01:30:00.5-02:30", b"1999-12-31 23:59:59",
    ]  # fmt: skip
    blk = parse_azure_block(b"".join(s + b",1,2\n" for s in samples))
    assert blk is not None
    assert blk.ts_ns.tolist() == [parse_datetime_ns(s) for s in samples]
    for bad in (b"2023-02-29 00:00:00", b"2024-05-10 00:00:00.", b"2024-05-10 00:00:00+5", b"2024-05-10 24:00:00"):
        assert parse_azure_block(bad + b",1,2\n") is None
    assert parse_azure_block(b"2024-05-10 00:00:00,1\n") is None  # field count
    blk = parse_azure_block(b"2024-05-10 00:00:00,12,0\n2024-05-10 00:00:00,-1,3\n")
    assert blk is not None
    inp, out, ok = blk.lengths(0, 2)
    assert inp[0] == 12 and out[0] == 0 and ok.tolist() == [True, False]
