"""Session sources: the readers of ../shared/traces/sessions, loadgen's JSONL, ShareGPT, the synthetic
generator, ``--sessions`` parsing, and the file:line:field errors of bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loadgen.core.errors import ConfigError, InputFileError
from loadgen.workload.lengths import parse_length_spec
from loadgen.workload.session_model import SessionHistory, SessionPrompter, synthetic_sessions
from loadgen.workload.session_sources import load_sessions, parse_session_source

TRACES = Path(__file__).resolve().parents[3] / "shared" / "traces" / "sessions"
WEKA = TRACES / "kvcache_tester_claude_code_sessions.jsonl"
TRACELAB = TRACES / "tracelab_example_round_trace.jsonl"


@pytest.mark.skipif(not WEKA.exists(), reason="shared session traces not present")
def test_weka_reader_keeps_every_main_request() -> None:
    sessions, facts = load_sessions(parse_session_source(str(WEKA)))
    assert facts["format"] == "weka" and len(sessions) == 64
    assert sum(len(s.turns) for s in sessions) == 707  # SOURCES.md: 707 main-agent requests
    assert facts["skipped_subagents"] == 6
    first = json.loads(WEKA.read_text().splitlines()[0])
    s0 = sessions[0]
    assert s0.system_tokens == first["tool_tokens"] + first["system_tokens"]
    r = first["requests"]
    assert s0.turns[0].new_tokens == r[0]["in"] - s0.system_tokens
    assert s0.turns[1].new_tokens == r[1]["in"] - r[0]["in"] - r[0]["out"]
    assert s0.turns[1].delay_s == r[1]["think_time"] and s0.turns[0].delay_s == 0.0


@pytest.mark.skipif(not TRACELAB.exists(), reason="shared session traces not present")
def test_tracelab_reader_groups_rounds_with_their_own_starts_and_gaps() -> None:
    sessions, facts = load_sessions(parse_session_source(f"{TRACELAB},time_scale=0.5"))
    assert facts["format"] == "tracelab" and [len(s.turns) for s in sessions] == [10, 9]
    claude = sessions[0]
    assert claude.start_s is not None and sessions[1].start_s == 0.0  # the Codex session is older
    # round 1 starts 0.049 s after round 0's last event (05:40:31.647 -> 05:40:31.696), halved
    assert claude.turns[1].delay_s == pytest.approx(0.049 / 2, abs=1e-6)
    assert facts["resets"] == 1  # Codex round 5's prompt shrank


def test_loadgen_format_and_synthetic(tmp_path: Path) -> None:
    f = tmp_path / "s.jsonl"
    f.write_text(
        '{"session_id": "a", "start_s": 1.5, "turns": [{"new_tokens": 5, "output_tokens": 2},'
        ' {"text": "and then", "output_tokens": 3, "delay_s": 0.25, "role": "tool"}]}\n'
    )
    (s,), facts = load_sessions(parse_session_source(str(f)))
    assert facts["format"] == "loadgen" and s.start_s == 1.5
    assert s.turns[1].text == "and then" and s.turns[1].delay_s == 0.25 and s.turns[1].role == "tool"
    src = parse_session_source("synthetic,turns=uniform:3,5,input=10,output=4,delay=1s,system=7")
    assert src.options["turns"] == "uniform:3,5"
    syn, _ = load_sessions(src, 20, seed=3)
    assert len(syn) == 20 and all(3 <= len(x.turns) <= 5 for x in syn) and syn[0].system_tokens == 7
    assert all(t.delay_s == 1.0 for x in syn for t in x.turns[1:])
    assert load_sessions(src, 20, seed=3)[0] == syn  # seeded


@pytest.mark.parametrize(
    "line, field",
    [
        ('{"session_id": "a", "turns": [{"new_tokens": 5}]}', "turns[0].output_tokens"),
        (
            '{"session_id": "a", "turns": [{"new_tokens": 5, "output_tokens": 1}, {"new_tokens": 1, "output_tokens": 1, "delay_s": -2}]}',
            "turns[1].delay_s",
        ),
        ('{"session_id": "a", "turns": []}', "turns"),
        ('{"turns": [{"new_tokens": 5, "output_tokens": 1}]}', "session_id"),
        ('{"session_id": "a", "turns": [{"output_tokens": 1}]}', "turns[0].new_tokens"),
    ],
)
def test_bad_session_lines_name_file_line_and_field(tmp_path: Path, line: str, field: str) -> None:
    f = tmp_path / "bad.jsonl"
    f.write_text('{"session_id": "ok", "turns": [{"new_tokens": 1, "output_tokens": 1}]}\n' + line + "\n")
    with pytest.raises(InputFileError) as e:
        load_sessions(parse_session_source(str(f)))
    assert e.value.line == 2 and e.value.field == field and str(f) in str(e.value)


def test_bad_session_options() -> None:
    with pytest.raises(ConfigError, match="unknown option"):
        parse_session_source("synthetic,bogus=1")
    with pytest.raises(ConfigError, match="no such file"):
        parse_session_source("/nonexistent/sessions.jsonl")
    with pytest.raises(ConfigError, match="salt"):
        parse_session_source("synthetic,salt=maybe")


def test_history_holds_earlier_prompts_and_actual_replies() -> None:
    (s,) = synthetic_sessions(
        1, turns=parse_length_spec(3), new_tokens=parse_length_spec(4), output_tokens=parse_length_spec(2),
        delay_s=0.0, system_tokens=5,
    )  # fmt: skip
    p = SessionPrompter(api="chat", salt="abc")
    h = SessionHistory(s, p)
    a = h.spec(0, 0)
    assert a.messages is not None and [m["role"] for m in a.messages] == ["system", "user"]
    assert a.messages[0]["content"].split()[0] == "abc"  # the run salt opens the shared system prompt
    assert a.messages[1]["content"].split()[0] == "abc-s0"  # the session salt opens its first message
    assert len(a.messages[1]["content"].split()) == 4
    h.reply(0, " the reply")
    b = h.spec(1, 1)
    assert b.messages is not None and b.messages[:2] == a.messages
    assert b.messages[2] == {"role": "assistant", "content": " the reply"} and b.messages[3]["role"] == "user"
    unsalted = SessionHistory(s, SessionPrompter(api="completions", salt="abc", salt_sessions=False)).spec(0, 0)
    assert unsalted.messages is None and "abc-s0" not in unsalted.prompt
