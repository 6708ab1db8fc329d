"""Trace readers on the real public traces and on written fixtures; replay transforms."""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import Any, cast

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadgen.core.errors import ConfigError, InputFileError
from loadgen.workload.replay import loop_offsets, replay_offsets, spread_instants, trace_stats
from loadgen.workload.trace_formats import parse_datetime_ns, parse_seconds_ns
from loadgen.workload.traces import BUILTIN_TRACES, read_trace

REPO = Path(__file__).resolve().parents[2]
SHARED = REPO.parent / "shared" / "traces"
AZ_CODE = SHARED / "AzureLLMInferenceTrace_code.csv"
AZ_CONV = SHARED / "AzureLLMInferenceTrace_conv.csv"
MOONCAKE = SHARED / "mooncake_conversation_trace.jsonl"
MOONCAKE_SYN = SHARED / "mooncake_synthetic_trace.jsonl"

needs_shared = pytest.mark.skipif(not AZ_CODE.is_file(), reason="shared public traces not present")


# -- real files -----------------------------------------------------------------------


@needs_shared
def test_azure_2023_code_rows_offsets_and_crlf_last_row() -> None:
    raw = AZ_CODE.read_bytes()
    assert raw.count(b"\r\n") == 8819 and not raw.endswith(b"\n")  # CRLF, no trailing newline
    tr = read_trace(AZ_CODE)
    assert tr.format == "azure" and "auto" in tr.notes[0]
    assert len(tr) == 8819
    # 18:17:03.9799600 -> 18:17:04.0319600 -> 18:17:04.0781490, seven fractional digits, exact ns
    assert tr.offset_ns[:3].tolist() == [0, 52_000_000, 98_189_000]
    assert tr.input_tokens[:3].tolist() == [4808, 3180, 110]
    assert tr.output_tokens[:3].tolist() == [10, 8, 27]
    # last row "2023-11-16 19:14:19.9280160,549,173" (no line ending after it)
    assert int(tr.offset_ns[-1]) == (57 * 60 + 15) * 10**9 + 948_056_000
    assert (int(tr.input_tokens[-1]), int(tr.output_tokens[-1])) == (549, 173)
    assert tr.line[-1] == 8820


@needs_shared
def test_azure_2023_conv_rows_and_first_offsets() -> None:
    tr = read_trace(AZ_CONV, "azure")
    assert len(tr) == 19366
    assert tr.offset_ns[:3].tolist() == [0, 4_314_579_000, 4_541_877_000]
    assert trace_stats(tr)["timestamp_resolution_ns"] == 1000


@needs_shared
def test_mooncake_millisecond_unit_and_same_instant_rows() -> None:
    tr = read_trace(MOONCAKE)
    assert tr.format == "mooncake" and len(tr) == 12031
    raw_ms = [orjson.loads(line)["timestamp"] for line in MOONCAKE.read_bytes().splitlines()]
    assert tr.offset_ns.tolist() == [t * 1_000_000 for t in raw_ms]  # ms -> ns, first row at 0
    assert int(tr.offset_ns[-1]) == 3_536_999_000_000
    # many rows share timestamp 0: replayed literally by default (sent together)
    n0 = int(np.sum(tr.offset_ns == 0))
    assert n0 > 1
    plan = replay_offsets(tr)
    assert plan.offset_ns[:n0].tolist() == [0] * n0
    # spread mode: the first instant's rows are spread evenly over the step to the next instant
    nxt = int(tr.offset_ns[n0])
    sp = replay_offsets(tr, spread="uniform").offset_ns
    assert sp[:n0].tolist() == [j * nxt // n0 for j in range(n0)]
    assert np.all(np.diff(sp) >= 0) and sp[n0] == nxt
    # hash ids per row, validated against ceil(input_length / 512)
    hash_ids = tr.row_hash_ids(0)
    assert hash_ids is not None
    assert hash_ids.tolist() == list(range(14))


@needs_shared
def test_mooncake_window_spread_uses_next_instant_after_window() -> None:
    full = read_trace(MOONCAKE)
    inst = np.unique(full.offset_ns)
    start_ns, end_ns = int(inst[3]), int(inst[5])
    tr = read_trace(MOONCAKE, start_s=start_ns / 1e9, duration_s=(end_ns - start_ns) / 1e9)
    assert set(tr.offset_ns.tolist()) == {int(inst[3]), int(inst[4])}
    assert tr.next_offset_ns == int(inst[5])
    assert tr.rows_before_window == int(np.sum(full.offset_ns < start_ns))
    sp = spread_instants(tr.offset_ns, tr.next_offset_ns)
    last = tr.offset_ns == inst[4]
    k = int(last.sum())
    assert sp[last].tolist() == [int(inst[4]) + j * int(inst[5] - inst[4]) // k for j in range(k)]


@needs_shared
def test_max_requests_window_and_synthetic_mooncake() -> None:
    tr = read_trace(MOONCAKE_SYN, max_requests=5)
    assert len(tr) == 5 and tr.offset_ns.tolist() == [0, 0, 40_000_000, 277_000_000, 471_000_000]
    assert tr.next_offset_ns is not None and tr.next_offset_ns > 471_000_000


def test_builtin_excerpts_load() -> None:
    sizes = {"azure-code-2023": 2000, "azure-conv-2023": 2000, "mooncake-conversation": 400}
    for name in BUILTIN_TRACES:
        assert len(read_trace(f"builtin:{name}")) == sizes[name]
    with pytest.raises(ConfigError):
        read_trace("builtin:nope")


# -- written fixtures ---------------------------------------------------------------------


def _write(tmp_path: Path, name: str, text: str, *, crlf: bool = False, trailing: bool = True) -> Path:
    lines = text.strip("\n").split("\n")
    eol = "\r\n" if crlf else "\n"
    p = tmp_path / name
    p.write_bytes((eol.join(lines) + (eol if trailing else "")).encode())
    return p


def test_azure_2024_offsets_and_rows_without_fraction(tmp_path: Path) -> None:
    p = _write(
        tmp_path, "az24.csv",
        """
TIMESTAMP,ContextTokens,GeneratedTokens
2024-05-10 00:00:00.015230+00:00,513,12
2024-05-10 00:00:01+00:00,100,5
2024-05-10 00:00:01.5+00:00,7,3
2024-05-10 02:00:02.000001+02:00,8,4
2024-05-10 00:00:02.0000019Z,9,1
2024-05-10T00:00:03,10,2
""",
        crlf=True, trailing=False,
    )  # fmt: skip
    tr = read_trace(p)
    assert tr.format == "azure"
    base = 15_230_000
    assert tr.offset_ns.tolist() == [
        0, 10**9 - base, 1_500_000_000 - base, 2_000_001_000 - base, 2_000_001_900 - base, 3 * 10**9 - base,
    ]  # fmt: skip
    assert tr.input_tokens.tolist() == [513, 100, 7, 8, 9, 10]


def test_datetime_parser_exact_and_across_midnight() -> None:
    a = parse_datetime_ns(b"2023-11-16 23:59:59.9999999")
    b = parse_datetime_ns(b"2023-11-17 00:00:00.0000001")
    assert b - a == 200
    assert parse_datetime_ns(b"1970-01-01 00:00:00+00:00") == 0
    assert parse_datetime_ns(b"1970-01-01 01:00:00+01:00") == 0
    assert parse_seconds_ns(b"12.000000001") == 12_000_000_001
    assert parse_seconds_ns("7") == 7_000_000_000


def test_burstgpt_skips_zero_response_rows_and_counts_them(tmp_path: Path) -> None:
    p = _write(
        tmp_path, "burst.csv",
        """
Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type
5,ChatGPT,472,18,490,Conversation log
5,GPT-4,1000,0,1000,API log
6.25,ChatGPT,30,7,37,Conversation log
9,GPT-4,12,0,12,Conversation log
10,ChatGPT,40,2,42,API log
""",
    )  # fmt: skip
    tr = read_trace(p)
    assert tr.format == "burstgpt"
    assert tr.offset_ns.tolist() == [0, 1_250_000_000, 5_000_000_000]
    assert tr.input_tokens.tolist() == [472, 30, 40]
    assert tr.output_tokens.tolist() == [18, 7, 2]
    assert tr.skipped_zero_output == 2
    assert any("skipped 2 rows" in n for n in tr.notes)
    kept = read_trace(p, keep_zero_output=True)
    assert len(kept) == 5 and kept.skipped_zero_output == 0
    assert trace_stats(tr)["skipped_zero_output_rows"] == 2


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("b.csv", "Timestamp,Request tokens,Response tokens\n0,20,8\n1,0,0\n2,30,0\n3,10,5\n"),
        ("a.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n"
         + "".join(f"2023-11-16 18:17:0{i}.5,{n},{m}\n" for i, (n, m) in enumerate([(20, 8), (0, 0), (30, 0), (10, 5)]))),
        ("m.jsonl", "".join(orjson.dumps({"timestamp": i * 1000, "input_length": n, "output_length": m,
                                          "hash_ids": list(range(-(-n // 512)))}).decode() + "\n"
                            for i, (n, m) in enumerate([(20, 8), (0, 0), (30, 0), (10, 5)]))),
    ],
)  # fmt: skip
def test_a_failed_row_may_log_0_input_tokens_too(tmp_path: Path, name: str, text: str) -> None:
    """A row with 0 output tokens is a failed request: its 0 input is no error (skipped or kept),
    on the line-by-line path and the Azure block path alike; a 0 input on a row with output is."""
    p = _write(tmp_path, name, text)
    tr = read_trace(p)
    assert (tr.input_tokens.tolist(), tr.output_tokens.tolist()) == ([20, 10], [8, 5])
    assert (tr.skipped_zero_output, tr.kept_zero_output) == (2, 0)
    kept = read_trace(p, keep_zero_output=True)
    assert (kept.input_tokens.tolist(), kept.output_tokens.tolist()) == ([20, 1, 30, 10], [8, 1, 1, 5])
    assert (kept.skipped_zero_output, kept.kept_zero_output) == (0, 2)
    assert any("kept 2 rows" in n for n in kept.notes)
    bad = _write(
        tmp_path, "bad-" + name, text.replace("10,5", "0,5").replace('"input_length":10,', '"input_length":0,')
    )
    with pytest.raises(InputFileError, match="must be >= 1, got 0"):
        read_trace(bad)


def test_loadgen_jsonl_with_and_without_timestamps(tmp_path: Path) -> None:
    p = _write(
        tmp_path, "lg.jsonl",
        """
{"timestamp_ms": 1000, "input_tokens": 10, "output_tokens": 3, "session_id": "a"}
{"timestamp_ms": 1000.5, "prompt": "hello there", "output_tokens": 4}
{"timestamp_ms": 2500, "messages": [{"role": "user", "content": "hi"}], "session_id": 7}
""",
    )  # fmt: skip
    tr = read_trace(p)
    assert tr.format == "loadgen" and tr.has_timestamps
    assert tr.offset_ns.tolist() == [0, 500_000, 1_500_000_000]
    assert tr.input_tokens.tolist() == [10, -1, -1]
    assert tr.prompts == [None, "hello there", None]
    assert tr.session_ids == ["a", None, "7"]
    q = _write(tmp_path, "ds.jsonl", '{"prompt": "a b c"}\n{"prompt": "d", "output_tokens": 9}\n')
    ds = read_trace(q)
    assert not ds.has_timestamps and len(ds) == 2
    with pytest.raises(ConfigError):
        read_trace(q, duration_s=10)


def test_gzip_trace_is_read_transparently(tmp_path: Path) -> None:
    p = tmp_path / "t.csv.gz"
    with gzip.open(p, "wb") as fh:
        fh.write(b"TIMESTAMP,ContextTokens,GeneratedTokens\n2024-01-01 00:00:00,5,6\n2024-01-01 00:00:00.25,7,8\n")
    tr = read_trace(p)
    assert tr.offset_ns.tolist() == [0, 250_000_000]


def test_window_by_start_duration_and_max_requests(tmp_path: Path) -> None:
    rows = "\n".join(f"{t},ChatGPT,{t + 1},1,{t + 2},API log" for t in range(20))
    p = _write(tmp_path, "b.csv", "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n" + rows)
    tr = read_trace(p, start_s=5, duration_s=4)
    assert tr.offset_ns.tolist() == [5e9, 6e9, 7e9, 8e9]
    assert tr.rows_before_window == 5 and tr.next_offset_ns == 9e9
    tr = read_trace(p, start_s=5, duration_s=100, max_requests=2)
    assert tr.offset_ns.tolist() == [5e9, 6e9]
    with pytest.raises(ConfigError, match="no rows in the selected window"):
        read_trace(p, start_s=100)


# -- replay transforms ----------------------------------------------------------------------


def _trace(tmp_path: Path, times: list[float]) -> Path:
    rows = "\n".join(f"{t},ChatGPT,10,5,15,API log" for t in times)
    return _write(tmp_path, "r.csv", "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n" + rows)


def test_time_scale_rate_and_loop(tmp_path: Path) -> None:
    tr = read_trace(_trace(tmp_path, [10, 11, 13, 14]))  # offsets 0, 1, 3, 4 s
    assert replay_offsets(tr).offset_ns.tolist() == [0, 1e9, 3e9, 4e9]
    fast = replay_offsets(tr, time_scale=10)
    assert fast.offset_ns.tolist() == [0, 1e8, 3e8, 4e8]
    r = replay_offsets(tr, rate_rps=1.5)  # source mean rate 3 / 4 s = 0.75 req/s -> factor 0.5
    assert r.source_rate_rps == pytest.approx(0.75) and r.factor == pytest.approx(0.5)
    assert r.offset_ns.tolist() == [0, 5e8, 15e8, 2e9]
    with pytest.raises(ConfigError):
        replay_offsets(tr, time_scale=2, rate_rps=1)
    plan = replay_offsets(tr)  # period: span 4 s + mean gap 4/3 s
    offs, rows = loop_offsets(plan, count=10, loop=True)
    assert rows.tolist() == [0, 1, 2, 3, 0, 1, 2, 3, 0, 1]
    period = 4_000_000_000 + round(4e9 / 3)
    assert offs[4] == period and offs[9] == 2 * period + 1e9
    offs, rows = loop_offsets(plan, until_ns=12_000_000_000, loop=True)
    assert offs[-1] < 12e9 and len(offs) == 10
    offs, _ = loop_offsets(plan, count=2)
    assert offs.tolist() == [0, 1e9]
    windowed = read_trace(_trace(tmp_path, [0, 1, 2, 3, 4, 5]), duration_s=2.5)
    assert replay_offsets(windowed).period_ns == 2_500_000_000  # the window's selected duration


def test_trace_stats_burstiness(tmp_path: Path) -> None:
    st = cast(dict[str, Any], trace_stats(read_trace(_trace(tmp_path, [0, 1, 2, 3, 4]))))  # values of mixed types
    assert st["rows"] == 5 and st["duration_s"] == 4.0 and st["mean_rate_rps"] == 1.0
    assert st["interarrival_cv"] == 0.0 and st["gamma_burstiness"] is None
    assert st["timestamp_resolution_ns"] == 10**9
    st = cast(dict[str, Any], trace_stats(read_trace(_trace(tmp_path, [0, 0, 0, 3]))))
    gaps = np.array([0.0, 0.0, 3.0])
    assert st["interarrival_cv"] == pytest.approx(gaps.std() / gaps.mean())
    assert st["gamma_burstiness"] == pytest.approx(1 / st["interarrival_cv"] ** 2)
    assert st["same_instant_fraction"] == pytest.approx(2 / 3)
    assert st["input_tokens"]["p50"] == 10.0 and st["output_tokens"]["max"] == 5


@settings(max_examples=60, deadline=None)
@given(
    gaps=st.lists(st.sampled_from([0, 0, 0, 1, 7, 1000, 3_000_000]), min_size=1, max_size=60),
    tail=st.one_of(st.none(), st.integers(1, 10**7)),
)
def test_spread_keeps_order_count_and_stays_inside_each_step(gaps: list[int], tail: int | None) -> None:
    off = np.cumsum(np.array(gaps, dtype=np.int64))
    nxt = None if tail is None else int(off[-1]) + tail
    sp = spread_instants(off, nxt)
    assert sp.shape == off.shape and np.all(np.diff(sp) >= 0)
    inst = np.unique(off)
    for k, t in enumerate(inst):
        mine = sp[off == t]
        assert mine[0] == t  # the first row of an instant keeps its time
        if k + 1 < len(inst):
            assert np.all(mine < inst[k + 1])
        elif nxt is not None:
            assert np.all(mine < nxt)
