"""Requests prepared before the clock (issue 31 item 1): every spec a run of a known count sends is
built before t0, none inside the run; the budgets (memory, time, a timed run's count, a stop) end
preparation and the run builds the rest itself, counted; ``client.preparation`` says which; a word
prompt's length is counted by construction and equals the split count it replaced."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import numpy as np
import pytest

from loadgen.core.clock import now_ns
from loadgen.core.schedule import Schedule
from loadgen.core.types import RequestRecord, RequestSpec, ScheduledRequest
from loadgen.engine import prepare as prep_mod
from loadgen.engine.prepare import Preparation, prepare_specs, spec_bytes
from loadgen.engine.runner import Runner, RunPlan
from loadgen.workload.prompts import PromptBuilder


class Fake:
    """An endpoint that answers at once (one token)."""

    def accepts_send_gate(self) -> bool:
        return False

    async def send(self, spec: RequestSpec, rec: RequestRecord, gate: Any = None) -> None:
        rec.sent_ns = now_ns()
        await asyncio.sleep(0.001)
        rec.end_ns = now_ns()
        rec.status = "ok"


class Builds:
    """A spec factory that stamps when each spec was built."""

    def __init__(self, size: int = 1000) -> None:
        self.at: dict[int, int] = {}
        self.size = size

    def __call__(self, i: int) -> RequestSpec:
        self.at[i] = now_ns()
        return RequestSpec(index=i, prompt="x" * self.size)


def _run(plan: RunPlan) -> tuple[Runner, list[RequestRecord]]:
    recs: list[RequestRecord] = []

    async def main() -> Runner:
        r = Runner(Fake(), plan, recs.append, install_signal_handlers=False)  # type: ignore[arg-type]  # a fake endpoint
        await asyncio.wait_for(r.run(), 30)
        return r

    return asyncio.run(main()), recs


def test_a_closed_loop_of_known_count_builds_every_request_before_t0() -> None:
    b = Builds()
    r, recs = _run(RunPlan(mode="closed", concurrency=4, make_spec=b, max_requests=40))
    assert len(recs) == 40 and sorted(b.at) == list(range(40))
    assert max(b.at.values()) < r.t0_ns  # built before the clock
    assert r.preparation is not None
    p = r.preparation.describe()
    assert (p["requests"], p["of"], p["stopped_by"], p["built_in_run"]) == (40, 40, None, 0)
    assert p["bytes"] >= 40 * 1000


def test_an_open_loop_schedule_is_built_before_t0() -> None:
    b = Builds()
    offsets = [k * 2_000_000 for k in range(30)]
    sched = Schedule(np.asarray(offsets), np.zeros(30, dtype=bool), b)
    r, recs = _run(RunPlan(mode="open", schedule=sched))
    assert len(recs) == 30 and max(b.at.values()) < r.t0_ns
    assert r.preparation is not None and r.preparation.built_in_run == 0


def test_a_memory_budget_leaves_the_rest_to_the_run_and_counts_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(prep_mod, "PREPARE_BYTES", 10 * 1200)  # ten specs of ~1.2 KB
    b = Builds()
    r, recs = _run(RunPlan(mode="closed", concurrency=2, make_spec=b, max_requests=30))
    assert len(recs) == 30
    p = r.preparation
    assert p is not None and p.stopped_by == "memory" and p.requests == 10
    assert p.built_in_run == 20 and p.built_in_run_cpu_s > 0
    assert sum(1 for t in b.at.values() if t >= r.t0_ns) == 20  # the rest built in the run


def test_a_timed_closed_loop_prepares_a_bounded_number_a_user() -> None:
    b = Builds(10)
    r, recs = _run(RunPlan(mode="closed", concurrency=2, make_spec=b, duration_s=0.3, ramp_s=0))
    p = r.preparation
    assert p is not None and p.of is None and p.stopped_by in ("turns", "time", "cheap")
    assert p.requests <= 2 * prep_mod.PREPARE_TURNS
    assert len(recs) >= 10


def test_prepare_specs_budgets() -> None:
    async def go(**kw: Any) -> tuple[list[RequestSpec], Preparation]:
        return await prepare_specs(Builds(), **kw)

    specs, p = asyncio.run(go(count=5, deadline_ns=now_ns() + 10**9))
    assert len(specs) == 5 and p.stopped_by is None
    specs, p = asyncio.run(go(count=None, deadline_ns=now_ns() - 1))  # time spent: the first only
    assert len(specs) == 1 and p.stopped_by == "time"
    specs, p = asyncio.run(go(count=100, deadline_ns=now_ns() + 10**9, budget_bytes=3000))
    assert len(specs) == 3 and p.stopped_by == "memory"
    specs, p = asyncio.run(go(count=100, deadline_ns=now_ns() + 10**9, stop=lambda: True))
    assert specs == [] and p.stopped_by == "stop"
    specs, p = asyncio.run(go(count=0, deadline_ns=now_ns() + 10**9))
    assert specs == [] and p.stopped_by is None


def test_cheap_requests_past_a_few_hundred_are_left_to_the_run() -> None:
    class Slow(Builds):
        def __call__(self, i: int) -> RequestSpec:
            t = now_ns() + 2 * prep_mod.PREPARE_CHEAP_NS
            while now_ns() < t:
                pass
            return super().__call__(i)

    async def go(b: Builds, n: int) -> Preparation:
        return (await prepare_specs(b, n, deadline_ns=now_ns() + 10**10))[1]

    cheap = asyncio.run(go(Builds(10), 5000))
    assert cheap.stopped_by == "cheap" and cheap.requests == prep_mod.PREPARE_CHEAP_AFTER
    slow = asyncio.run(go(Slow(10), prep_mod.PREPARE_CHEAP_AFTER + 20))
    assert slow.stopped_by is None and slow.requests == prep_mod.PREPARE_CHEAP_AFTER + 20


def test_spec_bytes_counts_text_messages_and_ids() -> None:
    base = spec_bytes(RequestSpec(index=0, prompt=""))
    assert spec_bytes(RequestSpec(index=0, prompt="abcd")) == base + 4
    msgs = ({"role": "user", "content": "x" * 50},)
    assert spec_bytes(RequestSpec(index=0, prompt="", messages=msgs)) == base + 50
    assert spec_bytes(RequestSpec(index=0, prompt="", prompt_token_ids=(1, 2, 3))) > base


def test_merge_adds_counts_and_keeps_the_longest_time() -> None:
    p = Preparation(of=0)
    p.merge({"requests": 3, "of": 5, "bytes": 10, "seconds": 0.5, "stopped_by": None, "built_in_run": 2,
             "built_in_run_cpu_s": 0.1})  # fmt: skip
    p.merge({"requests": 4, "of": 5, "bytes": 20, "seconds": 0.2, "stopped_by": "memory", "built_in_run": 1,
             "built_in_run_cpu_s": 0.2})  # fmt: skip
    d = p.describe()
    assert (d["requests"], d["of"], d["bytes"], d["seconds"], d["stopped_by"], d["built_in_run"]) == (
        7, 10, 30, 0.5, "memory", 3)  # fmt: skip


@pytest.mark.parametrize("salt", ["", "abc123", "a b"])
@pytest.mark.parametrize("api", ["completions", "chat"])
def test_word_prompts_counted_by_construction_equal_the_split_count(salt: str, api: str) -> None:
    b = PromptBuilder(api=api, seed=3, salt=salt)
    rnd = random.Random(1)
    for i in range(200):
        n = rnd.choice([1, 2, 3, 5, 17, 100, 4000, 40000])
        if i % 3 == 0:
            p = b.synthetic(n, i, prefix_group=i % 4, prefix_tokens=rnd.choice([0, 1, 10, 50]))
        elif i % 3 == 1:
            ids = [rnd.randrange(50) for _ in range(5)]
            p = b.from_blocks(n, ids, block_tokens=rnd.choice([1, 7, 512]), generation=i % 2)
        else:
            p = b.synthetic(n, f"k{i}")
        assert p.content_tokens == len(p.text.split()), (i, n)


def test_unsent_counts_are_unchanged_by_preparation() -> None:
    # a stop before t0: nothing is sent, every request is counted unsent (none lost to preparation)
    b = Builds()
    sched = [ScheduledRequest(offset_ns=k * 1_000_000, spec=b(k), phase="measure") for k in range(5)]

    async def main() -> Runner:
        r = Runner(Fake(), RunPlan(mode="open", schedule=sched), lambda rec: None, install_signal_handlers=False)  # type: ignore[arg-type]  # a fake endpoint
        r.request_stop(True)
        await asyncio.wait_for(r.run(), 10)
        return r

    r = asyncio.run(main())
    assert r.unsent == 5


def test_session_messages_prepared_before_the_run_are_the_ones_built_late() -> None:
    from loadgen.workload.lengths import parse_length_spec
    from loadgen.workload.session_model import SessionHistory, SessionPrompter, synthetic_sessions

    sessions = synthetic_sessions(
        5, turns=parse_length_spec(4), new_tokens=parse_length_spec(300), output_tokens=parse_length_spec(8),
        delay_s=0.0, seed=2,
    )  # fmt: skip
    late = SessionPrompter(api="chat", salt="ab", seed=2)
    early = SessionPrompter(api="chat", salt="ab", seed=2)
    done, total, held = early.prepare(sessions[:3], budget_bytes=10**9, deadline_ns=now_ns() + 10**9)
    assert (done, total) == (12, 12) and held > 12 * 300
    for s in sessions:
        a, b = SessionHistory(s, late), SessionHistory(s, early)
        for k in range(len(s.turns)):
            assert a.spec(k, k).messages == b.spec(k, k).messages
    assert early.built_late == 8 and late.built_late == 20  # sessions 3 and 4 were not prepared
    assert early.built_late_cpu_s > 0 and not early._ready  # each prepared message taken once
    _, _, held = SessionPrompter(api="chat").prepare(sessions, budget_bytes=1, deadline_ns=now_ns() + 10**9)
    assert held > 0  # the budget ends it after the first message


def test_session_words_wrap_round_the_corpus_as_before() -> None:
    import zlib

    from loadgen.workload.prompts import corpus_words
    from loadgen.workload.session_model import SessionPrompter

    words = corpus_words()
    p = SessionPrompter(seed=5)
    for i, n in enumerate([0, 1, 2, 50, len(words) - 1, len(words), len(words) + 3, 3 * len(words) + 7]):
        pos = zlib.crc32(f"5:k{i}".encode()) % len(words)
        assert p.words(n, f"k{i}") == " ".join(words[(pos + k) % len(words)] for k in range(max(n, 1)))


def test_a_long_preparation_says_so_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(prep_mod, "PREPARE_NOTICE_NS", 0)
    monkeypatch.setattr(prep_mod, "PREPARE_YIELD_NS", 0)
    said: list[str] = []
    asyncio.run(prepare_specs(Builds(), 50, deadline_ns=now_ns() + 10**9, notice=said.append))
    assert len(said) == 1 and "preparing requests before the clock" in said[0] and "of 50" in said[0]
    said.clear()
    monkeypatch.setattr(prep_mod, "PREPARE_NOTICE_NS", 10**12)  # a short one says nothing
    asyncio.run(prepare_specs(Builds(), 50, deadline_ns=now_ns() + 10**9, notice=said.append))
    assert said == []
