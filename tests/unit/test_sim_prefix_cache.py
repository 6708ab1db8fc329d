"""The simulated endpoint's prefix cache: chained block keys, the last-token rule, LRU eviction,
prompt units as long as the counted prompt, and cached prefill made free in the truth log."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from loadgen.sim.model import SimParams
from loadgen.sim.prefix_cache import PrefixCache
from loadgen.sim.protocol import count_chat_tokens, count_prompt_tokens, prompt_units, reply_units
from loadgen.sim.server import SimServer


def test_lookup_counts_whole_blocks_of_a_shared_prefix() -> None:
    c = PrefixCache(100, block_tokens=4)
    a = list(range(10))
    assert c.lookup(a) == 0  # empty cache
    c.insert(a)  # blocks [0..3], [4..7]; the partial [8, 9] is not cached
    assert len(c) == 2
    assert c.lookup(list(range(10)) + [99]) == 8
    assert c.lookup([0, 1, 2, 3, 4, 5, 6, 70, 8]) == 4  # second block differs
    assert c.lookup([9, 1, 2, 3, 4, 5, 6, 7, 8]) == 0  # a block matches only with its whole prefix
    assert c.hits_tokens == 12 and c.queried_tokens == 10 + 11 + 9 + 9


def test_the_last_prompt_token_is_never_cached() -> None:
    c = PrefixCache(100, block_tokens=4)
    c.insert(list(range(8)))
    assert c.lookup(list(range(8))) == 4  # as vLLM: the last token is computed, so block 2 cannot hit
    assert c.lookup(list(range(9))) == 8


def test_lru_evicts_the_least_recent_and_tails_before_heads() -> None:
    c = PrefixCache(3, block_tokens=2)
    c.insert([1, 1, 2, 2])  # A0 A1
    c.insert([3, 3, 4, 4])  # B0 B1: capacity 3 evicts one of A's, its tail first
    assert c.evictions == 1
    assert c.lookup([1, 1, 2, 2, 0]) == 2  # A0 kept, A1 evicted
    c.reset()
    assert len(c) == 0 and c.lookup([3, 3, 4, 4, 0]) == 0


@pytest.mark.parametrize(
    "messages",
    [
        [{"role": "user", "content": "hello there  world"}],
        [{"role": "system", "content": "a b"}, {"role": "user", "content": "c"}, {"role": "assistant", "content": ""}],
    ],
)
def test_chat_units_are_as_many_as_the_counted_tokens(messages: list[dict[str, str]]) -> None:
    assert len(prompt_units(messages, "chat")) == count_chat_tokens(messages)


def test_completion_units_and_reply_units() -> None:
    assert len(prompt_units("a b  c", "completions")) == count_prompt_tokens("a b  c") == 3
    assert prompt_units([5, 6, 7], "completions") == [5, 6, 7]
    units = prompt_units([{"role": "user", "content": "x y"}], "chat")
    full = reply_units(units, "chat", 3)
    assert full is not None and full[: len(units)] == units and len(full) == len(units) + 3 + 3
    # the next turn's prompt (history + the reply as the client saw it + a new message) extends it
    nxt = [
        {"role": "user", "content": "x y"},
        {"role": "assistant", "content": " the model is"},
        {"role": "user", "content": "z"},
    ]
    assert prompt_units(nxt, "chat")[: len(full)] == full


@pytest.mark.timing
def test_sim_reports_cached_tokens_and_charges_only_uncached_prefill(tmp_path: Path) -> None:
    truth = tmp_path / "truth.jsonl"
    # prefill 1 ms per uncached token: a 300-word prompt costs 300 ms cold, ~0 once cached
    params = SimParams(ttft_ms=1.0, prefill_per_token_ms=1.0, itl_ms=1.0)
    server = SimServer(params, truth_log=str(truth), prefix_cache=PrefixCache(1000, 16))
    prompt = " ".join(f"w{i}" for i in range(300))

    async def go() -> list[dict[str, Any]]:
        port = await server.start()
        out = []
        try:
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=20)) as s:
                for _ in range(2):
                    body = {"model": "sim-model", "prompt": prompt, "max_tokens": 2}
                    async with s.post(f"http://127.0.0.1:{port}/v1/completions", json=body) as r:
                        out.append(await r.json())
        finally:
            await server.stop()
        return out

    first, second = asyncio.run(go())
    assert first["usage"]["prompt_tokens_details"] == {"cached_tokens": 0}
    assert second["usage"]["prompt_tokens_details"] == {"cached_tokens": 288}  # 18 whole blocks of 299 tokens
    lines = [json.loads(x) for x in truth.read_text().splitlines()]
    assert [x["cached_tokens"] for x in lines] == [0, 288]
    ttft = [x["first_token_ns"] - x["arrival_ns"] for x in lines]
    assert ttft[0] > 250e6 and ttft[1] < ttft[0] - 200e6  # 300 ms cold vs ~13 ms warm (bounds loose)


def test_cache_off_by_default_reports_no_details(tmp_path: Path) -> None:
    truth = tmp_path / "truth.jsonl"
    server = SimServer(SimParams(ttft_ms=1.0, itl_ms=1.0), truth_log=str(truth))

    async def go() -> dict[str, Any]:
        port = await server.start()
        try:
            async with aiohttp.ClientSession() as s:
                body = {"model": "sim-model", "prompt": "a b c", "max_tokens": 1}
                async with s.post(f"http://127.0.0.1:{port}/v1/completions", json=body) as r:
                    return dict(await r.json())
        finally:
            await server.stop()

    assert "prompt_tokens_details" not in asyncio.run(go())["usage"]
    assert json.loads(truth.read_text())["cached_tokens"] is None


def test_metrics_deltas_give_the_hit_rate_of_the_truth_log(tmp_path: Path) -> None:
    """The sim's /metrics (vLLM's counter names) read by ServerObserver: its hit rate equals the truth log's."""
    from loadgen.serve import ServerObserver

    truth = tmp_path / "truth.jsonl"
    server = SimServer(SimParams(ttft_ms=1.0, itl_ms=1.0), truth_log=str(truth), prefix_cache=PrefixCache(1000, 16))
    history = " ".join(f"w{i}" for i in range(100))

    async def go() -> dict[str, Any]:
        port = await server.start()
        obs = ServerObserver("vllm", f"http://127.0.0.1:{port}", model="sim-model", energy=False)
        try:
            await obs.begin()
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=20)) as s:
                for k in range(4):
                    body = {"model": "sim-model", "prompt": history + f" turn{k}" * (k + 1), "max_tokens": 2}
                    async with s.post(f"http://127.0.0.1:{port}/v1/completions", json=body) as r:
                        assert r.status == 200
            return await obs.end()
        finally:
            await obs.close()
            await server.stop()

    metrics = asyncio.run(go())["metrics"]
    lines = [json.loads(x) for x in truth.read_text().splitlines()]
    truth_rate = sum(x["cached_tokens"] for x in lines) / sum(x["prompt_tokens"] for x in lines)
    assert metrics["prefix_cache_hit_rate"] == pytest.approx(truth_rate, abs=1e-3) and truth_rate > 0.5
    assert metrics["prompt_tokens"] == sum(x["prompt_tokens"] for x in lines)
