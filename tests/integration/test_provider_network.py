"""DNS, TCP connect, TLS and time to headers per request, through a local TLS endpoint.

The server is a :class:`~tests.fixtures.fake_platforms.PlatformServer` on 127.0.0.1
with a self-signed certificate for ``localhost`` (made by the openssl CLI) that the
client trusts through ``ca_file``. With keep-alive only the first request pays the
set-up; with ``connection_reuse="none"`` every request does. TTFT is read with the
set-up (from the scheduled time) and without it (from the send).
"""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from loadgen.core.clock import now_ns
from loadgen.core.metrics import compute
from loadgen.core.types import RequestRecord, RequestSpec
from loadgen.endpoints.providers import make_endpoint
from loadgen.engine.runplan import LoadConfig
from loadgen.engine.summary import network_ns
from loadgen.measurement import measure
from tests.fixtures.fake_platforms import PlatformServer, openai_chat_writes, self_signed_cert

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl CLI")

MS = 1_000_000


@pytest.fixture(scope="module")
def cert(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return self_signed_cert(tmp_path_factory.mktemp("tls"))


def stream() -> dict[str, Any]:
    return {
        "writes": openai_chat_writes(
            ["x", "y"], [0.030, 0.040], usage={"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
        )
    }


async def three(srv: PlatformServer, cert: Path, reuse: str) -> tuple[list[RequestRecord], Any]:
    ep = make_endpoint(
        "openai-compatible",
        base_url=srv.url,
        api="chat",
        model="m",
        preflight=False,
        discover=False,
        ca_file=str(cert),
        connection_reuse=reuse,
    )
    await ep.open()
    recs = []
    try:
        for i in range(3):
            rec = RequestRecord(i, "measure", now_ns())
            await ep.send(RequestSpec(i, "hi", requested_output_tokens=2), rec)
            recs.append(rec)
    finally:
        await ep.close()
    return recs, ep


def test_keep_alive_first_request_pays_the_setup(cert: tuple[Path, Path]) -> None:
    async def go() -> None:
        async with PlatformServer([stream() for _ in range(3)], tls=cert) as srv:
            assert srv.url.startswith("https://localhost:")
            recs, ep = await three(srv, cert[0], "keep-alive")
            assert srv.connections == 1
        assert all(r.ok for r in recs), [r.error_detail for r in recs]
        first, *rest = recs
        assert first.connection_reused is False
        assert first.dns_ns is not None and first.dns_ns >= 0  # "localhost" is resolved
        assert first.tcp_connect_ns is not None and first.tls_ns is not None and first.connect_ns is not None
        assert first.tcp_connect_ns > 0 and first.tls_ns > 0
        assert first.connect_ns >= first.tcp_connect_ns + first.tls_ns
        for r in rest:
            assert r.connection_reused is True and r.tls_ns is None and r.tcp_connect_ns is None
            assert r.connect_ns == 0
        # TTFT with the set-up (from the scheduled time) and without it (from the send)
        dns, tcp, tls, headers, ttft_sent = network_ns(first)
        ttft = compute(first).ttft_ns
        assert ttft is not None and ttft_sent is not None and tcp is not None and tls is not None
        assert headers is not None and 0 < headers <= ttft_sent
        assert ttft - ttft_sent >= tcp + tls
        assert ttft_sent >= 30 * MS  # the server's first token at 30 ms after the request
        assert ep.describe()["client"]["connection_reuse"] == "keep-alive"

    asyncio.run(go())


def test_no_reuse_every_request_pays_the_setup(cert: tuple[Path, Path]) -> None:
    async def go() -> None:
        async with PlatformServer([stream() for _ in range(3)], tls=cert) as srv:
            recs, ep = await three(srv, cert[0], "none")
            assert srv.connections == 3
        assert all(r.ok for r in recs)
        for r in recs:
            assert r.tls_ns is not None and r.tcp_connect_ns is not None
            assert r.connection_reused is False and r.tls_ns > 0 and r.tcp_connect_ns > 0
        assert recs[1].dns_ns == 0  # from aiohttp's DNS cache
        assert ep.describe()["client"]["connection_reuse"] == "none"

    asyncio.run(go())


def test_untrusted_certificate_is_a_connect_error(cert: tuple[Path, Path]) -> None:
    async def go() -> None:
        async with PlatformServer([stream()], tls=cert) as srv:
            ep = make_endpoint(
                "openai-compatible", base_url=srv.url, api="chat", model="m", preflight=False, discover=False
            )
            await ep.open()
            try:
                rec = RequestRecord(0, "measure", now_ns())
                await ep.send(RequestSpec(0, "hi", requested_output_tokens=2), rec)
            finally:
                await ep.close()
        assert rec.error_kind == "connect" and "certificate" in (rec.error_detail or "").lower()

    asyncio.run(go())


def test_run_records_network_per_request_and_baseline(cert: tuple[Path, Path], tmp_path: Path) -> None:
    async def go() -> Any:
        async with PlatformServer([stream() for _ in range(6)], tls=cert) as srv:
            ep = make_endpoint(
                "openai-compatible",
                base_url=srv.url,
                api="chat",
                model="m",
                preflight=False,
                discover=False,
                ca_file=str(cert[0]),
                connection_reuse="none",
                network_baseline=True,
            )
            await ep.open()
            try:
                run = await measure(
                    ep,
                    LoadConfig(rate_rps=20, arrival="constant", requests=6, input_tokens=4, output_tokens=2),
                    tmp_path,
                    install_signal_handlers=False,
                )
            finally:
                await ep.close()
            return run

    run = asyncio.run(go())
    lines = [json.loads(x) for x in (tmp_path / "requests.jsonl").read_text().splitlines()]
    assert len(lines) == 6 and all(ln["status"] == "ok" for ln in lines)
    for ln in lines:
        assert ln["connection_reused"] is False and ln["tls_ms"] > 0 and ln["tcp_connect_ms"] > 0
        assert 0 < ln["time_to_headers_ms"] and ln["ttft_from_sent_ms"] < ln["ttft_ms"]
    net = run.result.conditions["endpoint"]["network"]
    assert net["host"] == "localhost" and "127.0.0.1" in net["resolved_addresses"]
    assert len(net["tcp_connect_ms"]) == 3 and all(v is not None for v in net["cheap_request_ms"])
    pr = run.aggregator.provider_result()
    assert pr["network_ms"]["new_connections"] == 6 and pr["network_ms"]["tls"]["count"] == 6
