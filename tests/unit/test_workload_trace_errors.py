"""Malformed traces: each is refused with an InputFileError naming file, line and field, on one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadgen.core.errors import InputFileError
from loadgen.workload.spec import WorkloadOptions, build_schedule
from loadgen.workload.traces import read_trace

AZ = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
AZ_OK = "2023-11-16 18:17:03.9799600,4808,10\n"
BG = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
MC_OK = '{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [0, 1]}\n'

# (name, file text, format, expected line, expected field)
CASES: list[tuple[str, str, str, int, str]] = [
    ("bad_month", AZ + AZ_OK + "2023-13-16 18:17:04.0,1,1\n", "auto", 3, "TIMESTAMP"),
    ("bad_day", AZ + "2023-02-30 00:00:00,1,1\n", "azure", 2, "TIMESTAMP"),
    ("garbage_timestamp", AZ + AZ_OK + "yesterday,1,1\n", "auto", 3, "TIMESTAMP"),
    ("ten_fraction_digits", AZ + "2023-11-16 18:17:03.1234567891,1,1\n", "auto", 2, "TIMESTAMP"),
    ("bad_utc_offset", AZ + "2024-05-10 00:00:00+5,1,1\n", "auto", 2, "TIMESTAMP"),
    ("negative_context", AZ + AZ_OK + "2023-11-16 18:17:04.0,-5,1\n", "auto", 3, "ContextTokens"),
    ("missing_generated", AZ + "2023-11-16 18:17:04.0,5,\n", "auto", 2, "GeneratedTokens"),
    ("fractional_length", AZ + "2023-11-16 18:17:04.0,12.5,3\n", "auto", 2, "ContextTokens"),
    ("zero_context", AZ + "2023-11-16 18:17:04.0,0,3\n", "auto", 2, "ContextTokens"),
    ("missing_column", "TIMESTAMP,ContextTokens\n2023-11-16 18:17:04.0,5\n", "auto", 1, "GeneratedTokens"),
    ("unknown_column", AZ.strip() + ",Foo\n2023-11-16 18:17:04.0,5,1,x\n", "azure", 1, "Foo"),
    ("undetectable_header", "time,in,out\n1,2,3\n", "auto", 1, "time"),
    ("field_count", AZ + AZ_OK + "2023-11-16 18:17:05.0,5\n", "auto", 3, "row"),
    ("out_of_order", AZ + AZ_OK + "2023-11-16 18:17:05.0,5,1\n2023-11-16 18:17:04.0,5,1\n", "auto", 4, "TIMESTAMP"),
    ("burst_negative_ts", BG + "0,ChatGPT,1,1,2,API log\n-1,ChatGPT,1,1,2,API log\n", "auto", 3, "Timestamp"),
    ("burst_bad_tokens", BG + "0,ChatGPT,abc,1,2,API log\n", "burstgpt", 2, "Request tokens"),
    ("mooncake_hash_count", MC_OK + '{"timestamp": 1, "input_length": 1025, "output_length": 5, "hash_ids": [0, 1]}\n',
     "auto", 2, "hash_ids"),
    ("mooncake_missing_input", MC_OK + '{"timestamp": 1, "output_length": 5, "hash_ids": [0]}\n', "mooncake", 2,
     "input_length"),
    ("mooncake_string_timestamp", MC_OK + '{"timestamp": "12", "input_length": 5, "output_length": 5, "hash_ids": [0]}\n',
     "auto", 2, "timestamp"),
    ("mooncake_negative_output", MC_OK + '{"timestamp": 1, "input_length": 5, "output_length": -2, "hash_ids": [0]}\n',
     "auto", 2, "output_length"),
    ("mooncake_bad_json", MC_OK + '{"timestamp": 1, "input_length": 5,\n', "auto", 2, "row"),
    ("loadgen_unknown_key", '{"timestamp_ms": 0, "input_token": 5}\n', "auto", 1, "input_token"),
    ("loadgen_missing_timestamp", '{"timestamp_ms": 0, "input_tokens": 5}\n{"input_tokens": 6}\n', "loadgen", 2,
     "timestamp_ms"),
    ("loadgen_bad_message", '{"messages": [{"role": "user"}]}\n', "loadgen", 1, "messages[0]"),
    ("loadgen_missing_length", '{"timestamp_ms": 0, "output_tokens": 5}\n', "loadgen", 1, "input_tokens"),
]  # fmt: skip


@pytest.mark.parametrize(("name", "text", "fmt", "line", "field"), CASES, ids=[c[0] for c in CASES])
def test_malformed_trace_names_file_line_and_field(
    tmp_path: Path, name: str, text: str, fmt: str, line: int, field: str
) -> None:
    path = tmp_path / f"{name}.txt"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(InputFileError) as info:
        read_trace(path, fmt)
    exc = info.value
    msg = str(exc)
    assert (exc.path, exc.line, exc.field) == (str(path), line, field)
    assert msg.startswith(f"{path}:{line}: field '{field}': ")
    assert "\n" not in msg and "\r" not in msg


def test_at_least_twenty_cases() -> None:
    assert len(CASES) >= 20


def test_nothing_is_scheduled_from_a_window_with_a_bad_last_row(tmp_path: Path) -> None:
    good = "".join(f"2024-05-10 00:00:{s:02d},10,5\n" for s in range(30))
    path = tmp_path / "late_error.csv"
    path.write_text(AZ + good + "2024-05-10 00:00:31,10,-1\n", encoding="utf-8")
    with pytest.raises(InputFileError) as info:
        build_schedule(WorkloadOptions(trace=str(path), salt="x"))
    assert info.value.line == 32
    # rows after the window are not read, so a window that stops before the bad row is fine
    sched = build_schedule(WorkloadOptions(trace=str(path), trace_duration_s=30, salt="x"))
    assert len(sched) == 30
