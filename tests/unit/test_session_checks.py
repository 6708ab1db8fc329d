"""Hostile session files (issue 32 item 3): each problem one InputFileError naming file, line and field,
raised while the source is read (before any load), never a failure mid-run; waits longer than the idle
cap shortened to it, with one warning line. Rules: :mod:`loadgen.workload.session_checks`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loadgen.core.errors import ConfigError, InputFileError
from loadgen.engine.runplan import LoadConfig
from loadgen.sessions.planning import check_sessions, plan_sessions
from loadgen.workload.session_checks import IDLE_CAP_S, MAX_DELAY_S
from loadgen.workload.session_sources import load_sessions, parse_session_source

OK = '{"session_id": "ok", "turns": [{"new_tokens": 1, "output_tokens": 1}]}'
YEAR_S = 365 * 86_400


def _turns(second: str, first: str = '{"new_tokens": 5, "output_tokens": 2}') -> str:
    return '{"session_id": "a", "turns": [' + first + ", " + second + "]}"


def _round(sid: str, idx: int, t0: str, t1: str) -> str:
    return json.dumps({
        "session_id": sid, "round_index": idx, "input_tokens_total": 100 * (idx + 1), "output_tokens": 10,
        "timing_events": [{"timestamp": t0}, {"timestamp": t1}],
    })  # fmt: skip


def _weka(sid: str, think: str) -> str:
    return (
        f'{{"id": "{sid}", "tool_tokens": 0, "system_tokens": 0, "requests": [{{"in": 10, "out": 2}}, '
        f'{{"in": 20, "out": 2, "think_time": {think}}}]}}'
    )


# (file name, line 2 of the file (line 1 is good), the field named)
HOSTILE = [
    ("huge-delay.jsonl", _turns('{"new_tokens": 5, "output_tokens": 2, "delay_s": 1e308}'), "turns[1].delay_s"),
    ("inf-delay.jsonl", _turns('{"new_tokens": 5, "output_tokens": 2, "delay_s": Infinity}'), "turns[1].delay_s"),
    (
        "nan-first-delay.jsonl",
        _turns('{"new_tokens": 5, "output_tokens": 2}', '{"new_tokens": 5, "output_tokens": 2, "delay_s": NaN}'),
        "turns[0].delay_s",
    ),
    (
        "delay-over-a-day.jsonl",
        _turns(f'{{"new_tokens": 5, "output_tokens": 2, "delay_s": {MAX_DELAY_S + 1}}}'),
        "turns[1].delay_s",
    ),
    ("timestamp-turn.jsonl", _turns('{"new_tokens": 5, "output_tokens": 2, "timestamp": 12.5}'), "turns[1].timestamp"),
    ("delay-ms-turn.jsonl", _turns('{"new_tokens": 5, "output_tokens": 2, "delay_ms": 500}'), "turns[1].delay_ms"),
    (
        "timestamp-session.jsonl",
        '{"session_id": "a", "timestamp": 3, "turns": [{"new_tokens": 5, "output_tokens": 2}]}',
        "timestamp",
    ),
    (
        "huge-start.jsonl",
        '{"session_id": "a", "start_s": 1e308, "turns": [{"new_tokens": 5, "output_tokens": 2}]}',
        "start_s",
    ),
    (
        "huge-tokens.jsonl",
        '{"session_id": "a", "turns": [{"new_tokens": 1e18, "output_tokens": 2}]}',
        "turns[0].new_tokens",
    ),
    ("deep.jsonl", '{"session_id": "a", "x": ' + "[" * 100_000 + "]" * 100_000 + "}", "row"),
    ("long-integer.jsonl", '{"session_id": "a", "x": ' + "9" * 5000 + "}", "row"),
]


@pytest.mark.parametrize("name, line2, field", HOSTILE, ids=[h[0] for h in HOSTILE])
def test_a_hostile_loadgen_line_is_one_error_naming_file_line_and_field(
    tmp_path: Path, name: str, line2: str, field: str
) -> None:
    f = tmp_path / name
    f.write_text(OK + "\n" + line2 + "\n")
    src = parse_session_source(str(f))
    with pytest.raises(InputFileError) as e:
        check_sessions(src)
    assert (e.value.line, e.value.field) == (2, field), str(e.value)
    assert str(e.value).startswith(f"{f}:2: field '{field}': ") and "\n" not in str(e.value)


def test_other_formats_refuse_a_huge_think_time_duplicate_ids_rounds_and_deep_nesting(tmp_path: Path) -> None:
    cases = {
        "weka-think.jsonl": (_weka("a", "0") + "\n" + _weka("b", "1e308"), 2, "requests[1].think_time"),
        "weka-dup.jsonl": (_weka("a", "1") + "\n" + _weka("a", "1"), 2, "id"),
        "tracelab-dup.jsonl": (
            "\n".join(
                [
                    _round("s", 0, "2026-01-01T00:00:00Z", "2026-01-01T00:00:01Z"),
                    _round("s", 1, "2026-01-01T00:00:02Z", "2026-01-01T00:00:03Z"),
                    _round("s", 1, "2026-01-01T00:00:04Z", "2026-01-01T00:00:05Z"),
                ]
            ),  # fmt: skip
            3,
            "round_index",
        ),
        "sharegpt-deep.json": ('[{"conversations": ' + "[" * 100_000 + "]" * 100_000 + "}]", 1, "row"),
        "loadgen-dup.jsonl": (OK + "\n" + OK, 2, "session_id"),
    }
    for name, (text, line, field) in cases.items():
        f = tmp_path / name
        f.write_text(text + "\n")
        with pytest.raises(InputFileError) as e:
            check_sessions(parse_session_source(str(f)))
        assert (e.value.line, e.value.field) == (line, field), (name, str(e.value))
    assert "first on line 2" in str(_raised(tmp_path / "tracelab-dup.jsonl"))
    assert "first on line 1" in str(_raised(tmp_path / "loadgen-dup.jsonl"))


def _raised(f: Path) -> InputFileError:
    with pytest.raises(InputFileError) as e:
        load_sessions(parse_session_source(str(f)))
    return e.value


def test_a_year_long_gap_between_turns_is_capped_with_one_warning(tmp_path: Path) -> None:
    f = tmp_path / "tracelab-year.jsonl"
    f.write_text(
        _round("s", 0, "2025-01-01T00:00:00Z", "2025-01-01T00:00:01Z") + "\n"
        + _round("s", 1, "2026-01-01T00:00:01Z", "2026-01-01T00:00:02Z") + "\n"
    )  # fmt: skip
    src = parse_session_source(str(f))
    assert load_sessions(src)[0][0].turns[1].delay_s == YEAR_S  # the file's gap, as recorded
    (warning,) = check_sessions(src)
    assert warning.startswith(f"{f}: 1 delay(s) between turns longer than the idle cap of 1 h shortened to it")
    assert "the longest 1 year, session 's' turn 1" in warning
    plan, facts = plan_sessions(LoadConfig(rate_rps=1.0, requests=1), src)
    assert plan.sessions[0].turns[1].delay_s == IDLE_CAP_S == plan.idle_cap_s
    assert facts["warnings"] == [warning] and facts["idle_cap_s"] == IDLE_CAP_S  # kept for result.json
    plan, _ = plan_sessions(LoadConfig(rate_rps=1.0, requests=1), parse_session_source(f"{f},idle_cap=500ms"))
    assert plan.sessions[0].turns[1].delay_s == 0.5


def test_a_year_long_gap_between_session_starts_is_capped_when_the_starts_are_used(tmp_path: Path) -> None:
    f = tmp_path / "starts.jsonl"
    f.write_text(
        '{"session_id": "a", "start_s": 0, "turns": [{"new_tokens": 5, "output_tokens": 2}]}\n'
        f'{{"session_id": "b", "start_s": {YEAR_S}, "turns": [{{"new_tokens": 5, "output_tokens": 2}}]}}\n'
        f'{{"session_id": "c", "start_s": {YEAR_S + 2}, "turns": [{{"new_tokens": 5, "output_tokens": 2}}]}}\n'
    )
    src = parse_session_source(str(f))
    (warning,) = check_sessions(src, own_starts=True)
    assert "1 gap(s) between session starts longer than the idle cap of 1 h" in warning
    assert "the longest 1 year, before session 'b'" in warning
    plan, facts = plan_sessions(LoadConfig(requests=3), src)  # no --rate: the file's own starts
    assert list(plan.start_offsets_ns) == [0, 3_600_000_000_000, 3_602_000_000_000]
    assert facts["warnings"] == [warning]
    assert check_sessions(src, own_starts=False) == []  # with --rate the starts are the arrival process's
    assert plan_sessions(LoadConfig(rate_rps=2.0, requests=3), src)[1]["warnings"] == []


def test_max_delay_moves_the_bound_and_synthetic_delays_are_bounded_and_capped(tmp_path: Path) -> None:
    f = tmp_path / "two-days.jsonl"
    f.write_text(_turns('{"new_tokens": 5, "output_tokens": 2, "delay_s": 172800}') + "\n")
    with pytest.raises(InputFileError, match="over the maximum of 1 day"):
        check_sessions(parse_session_source(str(f)))
    (warning,) = check_sessions(parse_session_source(f"{f},max_delay=172800s"))  # accepted, then capped
    assert "longer than the idle cap of 1 h" in warning
    with pytest.raises(ConfigError, match="delay=90000s: over the maximum delay of 1 day"):
        check_sessions(parse_session_source("synthetic,delay=90000s"))
    (warning,) = check_sessions(parse_session_source("synthetic,delay=7200s"))
    assert warning.startswith("--sessions synthetic: every delay longer than the idle cap of 1 h shortened")
    plan, _ = plan_sessions(LoadConfig(rate_rps=1.0, requests=2), parse_session_source("synthetic,turns=2,delay=7200s"))
    assert [t.delay_s for s in plan.sessions for t in s.turns] == [0.0, IDLE_CAP_S] * 2
    assert check_sessions(parse_session_source("synthetic,delay=1m,delay_dist=exp")) == []  # e^-60: no warning
    for bad in ("idle_cap=34560000s", "max_delay=0s", "max_delay=1e400s", "time_scale=1e9"):
        with pytest.raises(ConfigError):
            check_sessions(parse_session_source(f"{f},{bad}"))


def test_the_turn_cap_is_applied_and_split_over_workers_as_the_sessions_are() -> None:
    """Issue 32 item 2: ``--max-concurrency`` reaches the session plan (it was recorded and ignored), and each
    worker's shard gets its share of it (3 over 2 workers: 2 and 1), as its share of the sessions."""
    from loadgen.sessions.planning import shard_sessions

    src = parse_session_source("synthetic,turns=2")
    plan, _ = plan_sessions(LoadConfig(rate_rps=2.0, requests=4, max_concurrency=3, sessions=src), src)
    assert plan.max_inflight == 3
    assert [shard_sessions(plan, w, 2).max_inflight for w in (0, 1)] == [2, 1]
    assert plan_sessions(LoadConfig(rate_rps=2.0, requests=4), src)[0].max_inflight is None
    # a closed loop of 2 conversations with at most 1 turn in flight is a valid configuration (not a clash)
    LoadConfig(concurrency=2, requests=4, max_concurrency=1, sessions=src).validate()
    with pytest.raises(ConfigError, match="clashes with --concurrency"):
        LoadConfig(concurrency=2, requests=4, max_concurrency=1).validate()


def test_speedup_is_n_times_faster_and_time_scale_says_it_is_deprecated(tmp_path: Path) -> None:
    """Issue 32 item 4: one time-scale meaning. ``speedup=10`` (and ``--trace-time-scale 10``, which sets it)
    replays a session file 10x faster, as a request trace's ``--trace-time-scale 10``; ``time_scale=0.1`` gives
    the same delays (its old meaning, kept) and a deprecation line."""
    f = tmp_path / "s.jsonl"
    turns = [{"new_tokens": 5, "output_tokens": 2}, {"new_tokens": 5, "output_tokens": 2, "delay_s": 20.0}]
    f.write_text(json.dumps({"session_id": "a", "start_s": 30.0, "turns": turns}) + "\n")
    fast, facts = load_sessions(parse_session_source(f"{f},speedup=10"))
    old, old_facts = load_sessions(parse_session_source(f"{f},time_scale=0.1"))
    assert fast[0].turns[1].delay_s == old[0].turns[1].delay_s == pytest.approx(2.0)
    assert fast[0].start_s == pytest.approx(3.0)
    assert (
        facts["warnings"] == []
        and "deprecated" in old_facts["warnings"][0]
        and "speedup=10" in old_facts["warnings"][0]
    )
