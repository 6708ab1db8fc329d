"""loadgen's exact-length prompts against the simulated endpoint counting with a real tokenizer.

The sim runs with ``--tokenizer`` (the test BPE tokenizer); every request built by
the workload layer must come back with ``usage.prompt_tokens`` equal to the
request's ``requested_input_tokens``: completions text (BOS counted), chat
(templated count) and token-id prompts, synthetic and Mooncake blocks.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from loadgen.core.types import RequestSpec
from loadgen.sim import SimProcess
from loadgen.workload.arrivals import Arrivals
from loadgen.workload.spec import Workload, WorkloadOptions
from tests.fixtures.tokenizer import tokenizer_dir  # noqa: F401 - fixture

pytest.importorskip("tokenizers")


def _body(spec: RequestSpec, api: str) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "sim-model", "max_tokens": 2}
    if api == "chat":
        body["messages"] = list(spec.messages or ())
    else:
        body["prompt"] = list(spec.prompt_token_ids) if spec.prompt_token_ids else spec.prompt
    return body


async def _usage(url: str, specs: list[RequestSpec], api: str) -> list[int]:
    path = "/v1/chat/completions" if api == "chat" else "/v1/completions"
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=20)) as session:

        async def one(spec: RequestSpec) -> int:
            async with session.post(url + path, json=_body(spec, api)) as resp:
                assert resp.status == 200, await resp.text()
                return int((await resp.json())["usage"]["prompt_tokens"])

        return list(await asyncio.gather(*(one(s) for s in specs)))


def test_sim_reports_the_requested_prompt_tokens(tokenizer_dir: Path, tmp_path: Path) -> None:  # noqa: F811
    mc = tmp_path / "mc.jsonl"
    mc.write_text(
        '{"timestamp": 0, "input_length": 1300, "output_length": 5, "hash_ids": [0, 1, 2]}\n'
        '{"timestamp": 5, "input_length": 900, "output_length": 5, "hash_ids": [0, 3]}\n'
    )
    tok = str(tokenizer_dir)
    cases = [
        ("completions", WorkloadOptions(input_tokens="uniform:2,700", tokenizer=tok, seed=1)),
        ("chat", WorkloadOptions(input_tokens="uniform:12,700", tokenizer=tok, api="chat", seed=2)),
        ("completions", WorkloadOptions(input_tokens="uniform:2,700", tokenizer=tok, prompt_format="token-ids")),
        ("completions", WorkloadOptions(input_tokens=300, shared_prefix_tokens=120, prefix_groups=2, tokenizer=tok)),
        ("completions", WorkloadOptions(trace=str(mc), tokenizer=tok)),
        ("chat", WorkloadOptions(trace=str(mc), tokenizer=tok, api="chat")),
    ]
    with SimProcess(["--tokenizer", tok, "--ttft-ms", "1", "--itl-ms", "1", "--slots", "64"]) as sim:
        assert sim.url is not None
        for api, opts in cases:
            w = Workload(opts)
            specs = (
                [s.spec for s in w.schedule(Arrivals(rate_rps=1000, requests=12))]
                if not opts.trace
                else [s.spec for s in w.schedule()]
            )
            got = asyncio.run(_usage(sim.url, specs, api))
            assert got == [s.requested_input_tokens for s in specs], (api, opts)
            if opts.trace:
                assert got == [1300, 900]
            assert w.describe()["prompts_not_exact"] == 0


def test_sim_word_counts_match_without_a_tokenizer(sim_url: str) -> None:
    for api in ("completions", "chat"):
        w = Workload(WorkloadOptions(input_tokens="uniform:5,300", api=api, seed=3))
        specs = [s.spec for s in w.schedule(Arrivals(rate_rps=1000, requests=10))]
        got = asyncio.run(_usage(sim_url, specs, api))
        assert got == [s.requested_input_tokens for s in specs]
        assert w.describe()["input_tokens_counted_by"] == "words (estimated)"
