"""Exact-length prompts with a real (test) tokenizer, shared prefixes and blocks, salts."""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import pytest

from loadgen.core.errors import ConfigError
from loadgen.workload.prompts import CHAT_WORD_OVERHEAD, PromptBuilder
from loadgen.workload.spec import Workload, WorkloadOptions
from loadgen.workload.tokenizer import Tokenizer, load_tokenizer, render_chatml
from tests.fixtures.tokenizer import CHATML_TEMPLATE, tokenizer_dir  # noqa: F401 - a pytest fixture, used by name

pytest.importorskip("tokenizers")


@pytest.fixture(scope="module")
def tok(tokenizer_dir: Path) -> Tokenizer:  # noqa: F811
    return load_tokenizer(tokenizer_dir)


def test_tokenizer_counts_special_tokens_and_template(tok: Tokenizer, tokenizer_dir: Path) -> None:  # noqa: F811
    text = "The harbour town woke slowly in winter."
    assert tok.count_prompt(text) == tok.count(text) + 1  # the post-processor adds BOS
    assert tok.special_prefix == (tok.encode("<s>")[0],) and tok.special_suffix == ()
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": text}]
    rendered = tok.render_chat(msgs)
    assert rendered == render_chatml(msgs)
    assert rendered.endswith("<|im_start|>assistant\n")
    assert tok.count_chat(msgs) == len(tok.encode(rendered))
    assert tok.decode(tok.encode(text)) == text
    # a tokenizer.json path works as well as its directory
    assert load_tokenizer(tokenizer_dir / "tokenizer.json").count(text) == tok.count(text)
    assert json.loads((tokenizer_dir / "tokenizer_config.json").read_text())["chat_template"] == CHATML_TEMPLATE
    assert tok.chat_renderer in ("jinja2", "builtin-chatml")


def test_200_completion_prompts_have_exactly_the_requested_count(tok: Tokenizer) -> None:
    b = PromptBuilder(tok, seed=3, salt="f00d42")
    rng = random.Random(1)
    lo = b.overhead + 1  # 2: one content token after BOS is the shortest prompt text
    for i in range(200):
        n = rng.randint(lo, 600)
        p = b.synthetic(n, i)
        assert tok.count_prompt(p.text) == n, (i, n)
        assert p.exact and p.tokens == n and p.content_tokens == n - 1 and not p.estimated
    # below the shortest possible prompt: the nearest count is kept and marked
    p = b.synthetic(1, "tiny")
    assert not p.exact and p.tokens == tok.count_prompt(p.text) == 2


def test_200_chat_prompts_have_exactly_the_requested_templated_count(tok: Tokenizer) -> None:
    b = PromptBuilder(tok, api="chat", seed=4, salt="beef01")
    rng = random.Random(2)
    for i in range(200):
        n = rng.randint(b.overhead + 1, 600)
        p = b.synthetic(n, i)
        assert p.messages is not None
        assert tok.count_chat(list(p.messages)) == n, (i, n)
        assert p.exact and p.content_tokens == n - b.overhead


def test_token_id_prompts_are_exact_by_construction(tok: Tokenizer) -> None:
    b = PromptBuilder(tok, prompt_format="token-ids", seed=5, salt="abc123")
    for n in (2, 3, 17, 512, 4000, 9000):
        p = b.synthetic(n, n)
        assert p.token_ids is not None and len(p.token_ids) == n == p.tokens
        assert p.token_ids[0] == tok.special_prefix[0]
        assert list(p.token_ids) == tok.encode(p.text, add_special_tokens=True)
    with pytest.raises(ConfigError):
        PromptBuilder(None, prompt_format="token-ids")
    with pytest.raises(ConfigError):
        PromptBuilder(tok, api="chat", prompt_format="token-ids")


def test_word_mode_matches_the_sim_counting() -> None:
    b = PromptBuilder(None, seed=1, salt="s")
    chat = PromptBuilder(None, api="chat", seed=1, salt="s")
    for n in (1, 2, 50, 700, 9000):
        p = b.synthetic(n, n)
        assert len(p.text.split()) == n and p.estimated and p.exact
        c = chat.synthetic(n + CHAT_WORD_OVERHEAD, n)
        assert len(c.text.split()) + CHAT_WORD_OVERHEAD == n + CHAT_WORD_OVERHEAD


def test_shared_prefix_groups_share_exact_token_prefixes(tok: Tokenizer) -> None:
    opts = WorkloadOptions(input_tokens="uniform:150,400", shared_prefix_tokens=100, prefix_groups=3,
                           tokenizer=str(tok.path), salt="cafe01", seed=9)  # fmt: skip
    w = Workload(opts)
    specs = [w.spec(i) for i in range(12)]
    by_group: dict[int, list[list[int]]] = {}
    for s in specs:
        ids = tok.encode(s.prompt, add_special_tokens=True)
        assert len(ids) == s.requested_input_tokens
        assert s.prefix_group is not None
        by_group.setdefault(s.prefix_group, []).append(ids)
    assert sorted(by_group) == [0, 1, 2] and [s.prefix_group for s in specs[:4]] == [0, 1, 2, 0]
    heads = {g: {tuple(ids[:101]) for ids in members} for g, members in by_group.items()}
    assert all(len(h) == 1 for h in heads.values())  # BOS + 100 prefix tokens identical in a group
    assert len({next(iter(h)) for h in heads.values()}) == 3  # and different between groups
    # the requests differ right after the prefix
    assert len({tuple(ids[101:110]) for ids in by_group[0]}) == len(by_group[0])
    rnd = Workload(WorkloadOptions(shared_prefix_tokens=10, prefix_groups=4, prefix_assign="random", salt="x"))
    assert {rnd.spec(i).prefix_group for i in range(40)} == {0, 1, 2, 3}


def _mooncake(tmp_path: Path) -> Path:
    rows = [
        '{"timestamp": 0, "input_length": 1300, "output_length": 5, "hash_ids": [0, 1, 2]}',
        '{"timestamp": 0, "input_length": 1100, "output_length": 6, "hash_ids": [0, 1, 3]}',
        '{"timestamp": 3000, "input_length": 700, "output_length": 7, "hash_ids": [0, 4]}',
        '{"timestamp": 6000, "input_length": 512, "output_length": 8, "hash_ids": [5]}',
    ]
    p = tmp_path / "mc.jsonl"
    p.write_text("\n".join(rows) + "\n")
    return p


@pytest.mark.parametrize("prompt_format", ["text", "token-ids"])
def test_mooncake_blocks_identical_across_rows_sharing_a_hash_id(
    tok: Tokenizer, tmp_path: Path, prompt_format: str
) -> None:
    w = Workload(WorkloadOptions(trace=str(_mooncake(tmp_path)), tokenizer=str(tok.path), salt="d00d",
                                 prompt_format=prompt_format))  # fmt: skip
    sched = w.schedule()
    ids = []
    for s, n in zip(sched, (1300, 1100, 700, 512)):
        got = (
            list(s.spec.prompt_token_ids)
            if s.spec.prompt_token_ids
            else tok.encode(s.spec.prompt, add_special_tokens=True)
        )
        assert len(got) == n == s.spec.requested_input_tokens
        assert got == tok.encode(s.spec.prompt, add_special_tokens=True)  # blocks survive re-tokenization
        ids.append(got)
    blk = lambda ids_, k: ids_[1 + 512 * k : 1 + 512 * (k + 1)]
    assert blk(ids[0], 0) == blk(ids[1], 0) == blk(ids[2], 0)  # hash id 0
    assert blk(ids[0], 1) == blk(ids[1], 1)  # hash id 1
    assert blk(ids[0], 2)[:50] != blk(ids[1], 2)[:50]  # ids 2 and 3 differ
    assert blk(ids[2], 1) != blk(ids[0], 1)[: len(blk(ids[2], 1))]  # id 4 is not id 1
    assert [s.spec.prefix_group for s in sched] == [0, 0, 0, 5]


def test_mooncake_blocks_in_word_mode(tmp_path: Path) -> None:
    w = Workload(WorkloadOptions(trace=str(_mooncake(tmp_path)), salt="w1"))
    words = [s.spec.prompt.split() for s in w.schedule()]
    assert [len(x) for x in words] == [1300, 1100, 700, 512]
    assert words[0][:1024] == words[1][:1024] and words[0][:512] == words[2][:512]
    assert words[0][1024:1100] != words[1][1024:1100]


def test_salts_differ_between_runs_and_a_given_salt_repeats(tmp_path: Path) -> None:
    a, b = Workload(WorkloadOptions(seed=1)), Workload(WorkloadOptions(seed=1))
    assert a.salt != b.salt
    assert a.spec(0).prompt != b.spec(0).prompt
    assert a.spec(0).prompt.split()[1:] == b.spec(0).prompt.split()[1:]  # same seed: same corpus text
    c, d = Workload(WorkloadOptions(seed=1, salt="fixed")), Workload(WorkloadOptions(seed=1, salt="fixed"))
    assert [c.spec(i).prompt for i in range(5)] == [d.spec(i).prompt for i in range(5)]
    # prefixes and Mooncake blocks are salted too: shared within a run, fresh in the next
    p1 = Workload(WorkloadOptions(shared_prefix_tokens=20, salt="r1")).spec(0).prompt.split()[:20]
    p2 = Workload(WorkloadOptions(shared_prefix_tokens=20, salt="r2")).spec(0).prompt.split()[:20]
    assert p1 != p2
    m1 = Workload(WorkloadOptions(trace=str(_mooncake(tmp_path)))).schedule()[0].spec.prompt
    m2 = Workload(WorkloadOptions(trace=str(_mooncake(tmp_path)))).schedule()[0].spec.prompt
    assert m1 != m2
    # requests of one run differ from each other from their first token
    assert len({c.spec(i).prompt.split()[0] for i in range(20)}) == 20


def test_missing_tokenizers_package_is_a_clear_config_error(
    tokenizer_dir: Path,  # noqa: F811 - the fixture imported above
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "tokenizers", None)
    with pytest.raises(ConfigError, match=r"pip install 'loadgen\[tokenizers\]'"):
        load_tokenizer(tokenizer_dir)
    with pytest.raises(ConfigError, match="not found"):
        load_tokenizer(tokenizer_dir / "nope")
