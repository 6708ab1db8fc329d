"""The workload entry point: schedules, spec factories, data sets, dry-run file, CLI, public API."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

import loadgen.workload as workload
from loadgen.core.errors import ConfigError, InputFileError
from loadgen.workload.arrivals import Arrivals, arrival_offsets_ns
from loadgen.workload.command import trace_group
from loadgen.workload.spec import Workload, WorkloadOptions, build_schedule, spec_factory, write_schedule
from loadgen.workload.traces import read_trace


def test_public_api_is_pinned() -> None:
    assert workload.__all__ == sorted(workload.__all__)
    assert workload.__all__ == [
        "LengthSpec", "Tokenizer", "Trace", "Workload", "WorkloadOptions", "build_schedule",
        "load_tokenizer", "parse_length_spec", "read_trace", "spec_factory", "write_schedule",
    ]  # fmt: skip


def test_synthetic_open_loop_matches_arrivals_and_closed_loop_specs() -> None:
    opts = WorkloadOptions(input_tokens="uniform:20,40", output_tokens="normal:30,5", seed=11, salt="abc")
    sched = build_schedule(opts, Arrivals(rate_rps=20, arrival="gamma", burstiness=0.5, requests=30, warmup_requests=5))
    assert [s.offset_ns for s in sched] == arrival_offsets_ns("gamma", 20, count=35, seed=11, burstiness=0.5)
    assert [s.phase for s in sched] == ["warmup"] * 5 + ["measure"] * 30
    make = spec_factory(opts)
    for s in sched:
        assert make(s.spec.index) == s.spec  # request i is the same in open and closed loop
        assert s.spec.requested_input_tokens is not None
        assert 20 <= s.spec.requested_input_tokens <= 40
        assert len(s.spec.prompt.split()) == s.spec.requested_input_tokens
    timed = build_schedule(opts, Arrivals(rate_rps=50, duration_s=2, warmup_s=1))
    assert all(s.offset_ns < 3e9 for s in timed)
    assert {s.phase for s in timed if s.offset_ns < 1e9} == {"warmup"}
    assert {s.phase for s in timed if s.offset_ns >= 1e9} == {"measure"}


def test_trace_schedule_time_scale_rate_override_and_loop() -> None:
    tr = read_trace("builtin:azure-conv-2023", max_requests=50)
    opts = WorkloadOptions(trace="builtin:azure-conv-2023", trace_max_requests=50, trace_time_scale=10, salt="t")
    w = Workload(opts)
    sched = w.schedule()
    assert len(sched) == 50
    assert [s.offset_ns for s in sched] == [round(o / 10) for o in tr.offset_ns.tolist()]
    assert [s.spec.requested_input_tokens for s in sched] == tr.input_tokens.tolist()
    assert [s.spec.requested_output_tokens for s in sched] == tr.output_tokens.tolist()
    d = w.describe()
    assert d["source"] == "trace" and d["trace"]["format"] == "azure" and d["trace"]["rows"] == 50
    over = build_schedule(WorkloadOptions(trace="builtin:azure-conv-2023", trace_max_requests=5,
                                          output_tokens=7, output_tokens_override=True))  # fmt: skip
    assert [s.spec.requested_output_tokens for s in over] == [7] * 5
    at_rate = build_schedule(
        WorkloadOptions(trace="builtin:azure-conv-2023", trace_max_requests=50), Arrivals(rate_rps=100)
    )
    span_s = at_rate[-1].offset_ns / 1e9
    assert 49 / span_s == pytest.approx(100, rel=1e-6)
    looped = build_schedule(WorkloadOptions(trace="builtin:azure-conv-2023", trace_max_requests=10, trace_loop=True),
                            Arrivals(requests=25, warmup_requests=5))  # fmt: skip
    assert len(looped) == 30 and [s.phase for s in looped].count("warmup") == 5
    assert all(a.offset_ns <= b.offset_ns for a, b in zip(looped, looped[1:]))
    assert looped[10].spec.requested_input_tokens == looped[0].spec.requested_input_tokens
    assert looped[10].spec.prompt != looped[0].spec.prompt  # a repeat is a new request
    cut = build_schedule(WorkloadOptions(trace="builtin:azure-conv-2023"), Arrivals(duration_s=30))
    assert cut and all(s.offset_ns < 30e9 for s in cut) and len(cut) < 2000


def test_option_clashes() -> None:
    with pytest.raises(ConfigError):
        Workload(WorkloadOptions(trace="builtin:azure-code-2023", dataset="x.json"))
    with pytest.raises(ConfigError):
        build_schedule(WorkloadOptions(), Arrivals(requests=3))  # open loop without a rate or a trace
    with pytest.raises(ConfigError):
        build_schedule(WorkloadOptions(trace="builtin:mooncake-conversation", shared_prefix_tokens=10))
    with pytest.raises(ConfigError):
        build_schedule(WorkloadOptions(trace="builtin:azure-code-2023", trace_rate_rps=2), Arrivals(rate_rps=3))


SHAREGPT = [
    {"id": "a", "conversations": [{"from": "human", "value": "What is a lighthouse for?"},
                                  {"from": "gpt", "value": "It warns ships away from rocks at night."}]},
    {"id": "b", "conversations": [{"from": "human", "value": "only a question"}]},
    {"id": "c", "conversations": [{"from": "system", "value": "sys"}, {"from": "human", "value": "Hi there"},
                                  {"from": "gpt", "value": "Hello"}, {"from": "human", "value": "more"}]},
]  # fmt: skip


def test_sharegpt_dataset(tmp_path: Path) -> None:
    p = tmp_path / "sg.json"
    p.write_text(json.dumps(SHAREGPT, indent=1))
    w = Workload(WorkloadOptions(dataset=str(p), seed=1, salt="q"))
    assert w.entries is not None
    assert len(w.entries) == 2 and w.dataset_skipped == 1
    specs = {w.spec(i).prompt: w.spec(i) for i in range(4)}
    assert set(specs) == {"What is a lighthouse for?", "Hi there"}
    assert specs["What is a lighthouse for?"].requested_output_tokens == 8  # words of the reply
    assert specs["What is a lighthouse for?"].requested_input_tokens == 5
    chat = Workload(WorkloadOptions(dataset=str(p), api="chat", salt="q")).spec(0)
    assert chat.messages is not None and chat.messages[0]["role"] == "user"
    bad = tmp_path / "bad.json"
    bad.write_text('[\n {"conversations": []},\n {"conversations": [{"from": "human"}]}\n]')
    with pytest.raises(InputFileError) as info:
        Workload(WorkloadOptions(dataset=str(bad)))
    assert info.value.line == 3 and info.value.field == "[1].conversations[0]"


def test_jsonl_dataset(tmp_path: Path) -> None:
    p = tmp_path / "ds.jsonl"
    p.write_text('{"prompt": "one two three", "output_tokens": 9}\n{"input_tokens": 12}\n')
    w = Workload(WorkloadOptions(dataset=str(p), output_tokens=4, salt="z"))
    got = sorted((s.requested_input_tokens, s.requested_output_tokens) for s in (w.spec(0), w.spec(1)))
    assert got == [(3, 9), (12, 4)]
    sched = w.schedule(Arrivals(rate_rps=10, requests=4))
    assert len(sched) == 4


def test_write_schedule(tmp_path: Path) -> None:
    w = Workload(WorkloadOptions(shared_prefix_tokens=8, prefix_groups=2, input_tokens=20, salt="s"))
    sched = w.schedule(Arrivals(rate_rps=5, requests=3, warmup_requests=1))
    out = tmp_path / "schedule.jsonl"
    write_schedule(out, sched, w)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["index"] for r in rows] == [0, 1, 2, 3]
    assert rows[0] == {"index": 0, "scheduled_s": 0.0, "phase": "warmup", "requested_input_tokens": 20,
                       "requested_output_tokens": 64, "prefix_group": 0, "content_input_tokens": 20}  # fmt: skip
    assert [r["prefix_group"] for r in rows] == [0, 1, 0, 1]
    assert rows[1]["scheduled_s"] == sched[1].offset_ns / 1e9


def test_trace_inspect_cli() -> None:
    r = CliRunner().invoke(trace_group, ["inspect", "builtin:mooncake-conversation"])
    assert r.exit_code == 0, r.output
    for word in ("rows       400", "mean rate", "resolution", "interarrival CV", "gamma", "p99", "prefix"):
        assert word in r.output
    r = CliRunner().invoke(trace_group, ["inspect", "builtin:azure-code-2023", "--json", "--max-requests", "10"])
    st = json.loads(r.output)
    assert (
        st["rows"] == 10 and st["format"] == "azure" and set(st["input_tokens"]) == {"mean", "p50", "p90", "p99", "max"}
    )
    r = CliRunner().invoke(trace_group, ["inspect", "builtin:azure-code-2023", "--trace-format", "mooncake"])
    assert r.exit_code == 2 and "field 'row'" in r.output


def test_plan_builds_the_same_requests_just_in_time() -> None:
    opts = WorkloadOptions(trace="builtin:mooncake-conversation", trace_max_requests=6, trace_loop=True, salt="p")
    sched = Workload(opts).schedule(Arrivals(requests=14))
    w = Workload(opts)
    plan = w.plan(Arrivals(requests=14))
    assert w.builder.built == 0  # no prompt built yet
    assert [(p.offset_ns, p.phase, p.row, p.generation) for p in plan][5:8] == [
        (sched[5].offset_ns, "measure", 5, 0), (sched[6].offset_ns, "measure", 0, 1), (sched[7].offset_ns, "measure", 1, 1)
    ]  # fmt: skip
    assert [w.spec_for(p) for p in plan] == [s.spec for s in sched]
