"""A buffering proxy in front of the endpoint: requests flagged ``buffered``, TPOT not measurable.

:class:`~tests.fixtures.fake_platforms.BufferingProxy` reads each whole response from
upstream before writing it to the client in one write, as a buffering reverse proxy
does to a stream. Every request through it must be marked ``buffered``: its TTFT equals
its E2E, and it contributes no TPOT, ITL or inter-chunk sample (never a 0). The same
load without the proxy is not flagged.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from loadgen.core.clock import now_ns
from loadgen.core.metrics import compute
from loadgen.core.types import RequestRecord, RequestSpec
from loadgen.endpoints.providers import make_endpoint
from loadgen.engine.runplan import LoadConfig
from loadgen.measurement import measure
from loadgen.sim.launch import SimProcess
from tests.fixtures.fake_platforms import BufferingProxy, PlatformServer, openai_chat_writes

MS = 1_000_000


@pytest.mark.timing
def test_buffered_stream_through_proxy_has_no_tpot() -> None:
    writes = openai_chat_writes(
        ["a", "b", "c", "d"],
        [0.02, 0.05, 0.08, 0.11],
        usage={"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7},
    )

    async def go() -> tuple[RequestRecord, RequestRecord]:
        async with PlatformServer([{"writes": writes}, {"writes": writes}]) as srv, BufferingProxy(srv.port) as proxy:
            out = []
            for url in (proxy.url, srv.url):
                ep = make_endpoint(
                    "openai-compatible", base_url=url, api="chat", model="m", preflight=False, discover=False
                )
                await ep.open()
                try:
                    rec = RequestRecord(0, "measure", now_ns())
                    await ep.send(RequestSpec(0, "hi", requested_output_tokens=4), rec)
                finally:
                    await ep.close()
                out.append(rec)
            assert proxy.responses == 1
            return out[0], out[1]

    buffered, direct = asyncio.run(go())
    assert buffered.ok and buffered.buffered and buffered.completion_tokens == 4
    assert len({e.t_ns for e in buffered.events}) == 1
    m = compute(buffered)
    assert m.ttft_ns is not None
    assert m.ttft_ns == m.e2e_ns and m.ttft_ns >= 110 * MS
    assert m.tpot_ns is None and m.itl_ns == [] and m.inter_chunk_ns == []
    assert direct.ok and not direct.buffered
    d = compute(direct)
    assert d.tpot_ns is not None and d.tpot_ns > 0 and len(d.itl_ns) == 3


def test_run_against_the_simulated_endpoint_behind_a_buffering_proxy(tmp_path: Path) -> None:
    with SimProcess(["--ttft-ms", "20", "--itl-ms", "5"]) as sim:
        assert sim.port is not None

        async def go() -> Any:
            async with BufferingProxy(sim.port) as proxy:
                ep = make_endpoint("openai-compatible", base_url=proxy.url, api="completions", preflight=False)
                await ep.open()
                try:
                    return await measure(
                        ep,
                        LoadConfig(rate_rps=20, arrival="constant", requests=8, input_tokens=8, output_tokens=6),
                        tmp_path,
                        install_signal_handlers=False,
                    )
                finally:
                    await ep.close()

        run = asyncio.run(go())
    res = run.result.to_dict()
    lines = [json.loads(x) for x in (tmp_path / "requests.jsonl").read_text().splitlines()]
    assert res["counts"]["completed"] == 8 and res["counts"]["buffered"] == 8
    assert all(ln["buffered"] is True and ln["tpot_ms"] is None and ln["itl_ms"] == [] for ln in lines)
    assert all(ln["ttft_ms"] == ln["e2e_ms"] for ln in lines)
    assert res["latency_ms"]["tpot"]["count"] == 0 and res["latency_ms"]["itl"]["count"] == 0
    assert res["latency_ms"]["ttft"]["count"] == 8
    warn = {c["name"]: c for c in res["validity"]["checks"]}["streaming_not_buffered"]
    assert warn["ok"] is False and "8 of 8" in warn["detail"]
