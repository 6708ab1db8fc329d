"""Each dialect end to end over loopback HTTP against a byte-exact fake (127.0.0.1 only).

The fakes play the streams of ``tests/fixtures/fake_platforms.py`` on absolute
deadlines; the client's facts are checked against what the server logged: URL,
credentials and body it received, each token event stamped no earlier than the
server flushed it (and not much later), token counts and status exactly. (Exact
nanosecond values of TTFT/TPOT from the same bytes: tests/unit/test_provider_parsers.py.)
"""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest

from loadgen.core.clock import now_ns
from loadgen.core.metrics import compute
from loadgen.core.redact import Redactor
from loadgen.core.types import RequestRecord, RequestSpec
from loadgen.endpoints.anthropic import AnthropicEndpoint
from loadgen.endpoints.providers import make_endpoint
from tests.fixtures.fake_platforms import (
    PlatformServer,
    anthropic_error_event,
    anthropic_writes,
    azure_chat_writes,
    openai_chat_writes,
)

MS = 1_000_000
LATE_NS = 40 * MS  # how late a stamp may be on a loaded 2-core machine


def spec(i: int = 0, out: int = 4) -> RequestSpec:
    return RequestSpec(i, "Say hello", requested_input_tokens=3, requested_output_tokens=out)


async def one(ep: Any, s: RequestSpec | None = None) -> RequestRecord:
    rec = RequestRecord(0, "measure", now_ns())
    await ep.send(s or spec(), rec)
    return rec


def check_stamps(rec: RequestRecord, flushes: list[int], token_write_idx: list[int]) -> None:
    """Each token event arrived after the server flushed its write, and soon after."""
    for ev, i in zip(rec.events, token_write_idx):
        assert 0 <= ev.t_ns - flushes[i] <= LATE_NS, (ev.t_ns - flushes[i]) / 1e6


@pytest.mark.timing
def test_azure_deployment_stream_with_content_filter_chunks(client: str = "aiohttp") -> None:
    async def go() -> None:
        writes = azure_chat_writes(
            ["Hel", "lo", " wor", "ld"],
            [0.100, 0.130, 0.160, 0.190],
            filter_at_s=0.020,
            role_at_s=0.030,
            finish_at_s=0.195,
            offsets_at_s=0.200,
            usage={"completion_tokens": 4, "prompt_tokens": 12, "total_tokens": 16},
        )
        async with PlatformServer(
            [
                {
                    "writes": writes,
                    "headers": {
                        "x-ratelimit-remaining-requests": "99",
                        "x-ratelimit-remaining-tokens": "9984",
                    },
                }
            ]
        ) as srv:
            key = "azure-KEY-0123456789abcdef"
            ep = make_endpoint(
                "azure", base_url=srv.url, deployment="gpt4o", api_key=key, preflight=False, redactor=Redactor(),
                http_client=client,
            )  # fmt: skip
            await ep.open()
            try:
                rec = await one(ep)
            finally:
                await ep.close()
            log = srv.posts[0]
            assert log.path == "/openai/deployments/gpt4o/chat/completions?api-version=2024-10-21"
            assert log.headers["api-key"] == key and "authorization" not in log.headers
            assert log.json["stream_options"] == {"include_usage": True} and log.json["max_tokens"] == 4
            assert rec.status == "ok" and rec.finish_reason == "stop", rec.error_detail
            assert [e.text for e in rec.events] == ["Hel", "lo", " wor", "ld"]
            assert rec.completion_tokens == 4 and rec.prompt_tokens == 12 and not rec.buffered
            assert rec.ratelimit == {"remaining_requests": 99, "remaining_tokens": 9984}
            check_stamps(rec, log.flush_ns, [2, 3, 4, 5])  # not the filter (0) or role (1) chunk
            m = compute(rec, origin="sent")
            assert m.output_tokens == 4 and m.ttft_ns is not None and m.ttft_ns >= 100 * MS
            assert m.tpot_ns == (rec.events[-1].t_ns - rec.events[0].t_ns) / 3

    asyncio.run(go())


@pytest.mark.timing
def test_azure_deployment_stream_with_content_filter_chunks_lean() -> None:
    """``test_azure_deployment_stream_with_content_filter_chunks`` with ``--http-client lean`` (loadgen.endpoints.lean_pool)."""
    test_azure_deployment_stream_with_content_filter_chunks(client="lean")


@pytest.mark.timing
def test_anthropic_messages_stream() -> None:
    async def go() -> None:
        writes = anthropic_writes(
            [("thinking", [(0.050, "Hmm")]), ("text", [(0.100, "Hello"), (0.130, " there"), (0.160, "!")])],
            start_at_s=0.020,
            ping_at_s=0.030,
            input_tokens=25,
            cache_read=10,
            output_deltas=[(0.170, 9)],
            stop_at_s=0.175,
        )
        async with PlatformServer(
            [
                {
                    "writes": writes,
                    "headers": {
                        "anthropic-ratelimit-requests-remaining": "49",
                        "anthropic-ratelimit-requests-limit": "50",
                    },
                }
            ],
            models=["claude-sonnet-4-20250514"],
        ) as srv:
            key = "sk-ant-api03-SENTINEL0123456789"
            ep = cast(AnthropicEndpoint, make_endpoint("anthropic", base_url=srv.url, model="claude-x", api_key=key))
            await ep.open()
            try:
                rec = await one(ep)
            finally:
                await ep.close()
            assert ep.served_models == ["claude-sonnet-4-20250514"]
            log = srv.posts[0]
            assert log.path == "/v1/messages"
            assert log.headers["x-api-key"] == key and log.headers["anthropic-version"] == "2023-06-01"
            assert "authorization" not in log.headers
            assert log.json == {
                "model": "claude-x",
                "max_tokens": 4,
                "stream": True,
                "messages": [{"role": "user", "content": "Say hello"}],
            }
            assert rec.status == "ok" and rec.finish_reason == "end_turn", rec.error_detail
            assert [(e.text, e.answer) for e in rec.events] == [
                ("Hmm", False),
                ("Hello", True),
                (" there", True),
                ("!", True),
            ]
            assert rec.completion_tokens == 9 and rec.prompt_tokens == 35 and rec.cached_prompt_tokens == 10
            assert rec.ratelimit == {"limit_requests": 50, "remaining_requests": 49}
            idx = [
                i
                for i, (_, text) in enumerate(writes)
                if "_delta" in text and "signature" not in text and "message_delta" not in text
            ]
            check_stamps(rec, log.flush_ns, idx)
            m = compute(rec)
            assert m.ttft_ns is not None and m.time_to_first_answer_token_ns is not None
            assert m.output_tokens == 9 and m.ttft_ns < m.time_to_first_answer_token_ns

    asyncio.run(go())


def test_anthropic_failures() -> None:
    async def go() -> None:
        no_stop = anthropic_writes([("text", [(0.01, "a")])], output_deltas=[(0.02, 1)], stop=False)
        err = anthropic_writes([("text", [(0.01, "a")])], stop=False) + [anthropic_error_event(0.02)]
        scripts: list[dict[str, Any]] = [
            {"writes": no_stop},
            {"writes": err},
            {
                "status": 429,
                "headers": {"retry-after": "3", "anthropic-ratelimit-requests-remaining": "0"},
                "body": {"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}},
            },
            {"status": 529, "body": {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}},
        ]
        async with PlatformServer(scripts) as srv:
            ep = make_endpoint(
                "anthropic", base_url=srv.url + "/v1", model="m", api_key="sk-ant-x-123456", discover=False
            )
            await ep.open()
            try:
                recs = [await one(ep) for _ in scripts]
            finally:
                await ep.close()
        assert [r.error_kind for r in recs] == ["incomplete_stream", "stream_error", "rate_limited", "http_error"]
        assert recs[1].error_detail == "overloaded_error: Overloaded"
        assert recs[2].retry_after_s == 3.0 and recs[2].ratelimit == {"remaining_requests": 0}
        assert recs[3].http_status == 529

    asyncio.run(go())


def test_openai_quota_headers_retry_after_ms_and_opt_in_retry(client: str = "aiohttp") -> None:
    async def go() -> None:
        ok = openai_chat_writes(
            ["a", "b"], [0.01, 0.02], usage={"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
        )
        limited = {
            "status": 429,
            "headers": {
                "retry-after": "20",
                "retry-after-ms": "80",
                "x-ratelimit-remaining-requests": "0",
                "x-ratelimit-reset-requests": "80ms",
            },
            "body": {"error": {"message": "Rate limit reached", "type": "requests"}},
        }
        async with PlatformServer([dict(limited), dict(limited), {"writes": ok}]) as srv:
            plain = make_endpoint("openai-compatible", base_url=srv.url, model="m", preflight=False, discover=False,
                                  http_client=client)  # fmt: skip
            retrying = make_endpoint("openai-compatible", base_url=srv.url, model="m", preflight=False,
                                     discover=False, retry_429=2, http_client=client)  # fmt: skip
            await plain.open()
            await retrying.open()
            try:
                first = await one(plain)
                second = await one(retrying)
            finally:
                await plain.close()
                await retrying.close()
            assert first.error_kind == "rate_limited" and first.retry_after_s == 0.08  # retry-after-ms wins
            assert first.ratelimit == {"remaining_requests": 0, "reset_requests_s": 0.08}
            assert second.attempts is not None
            assert second.ok and len(second.attempts) == 1 and second.attempts[0]["http_status"] == 429
            assert len(srv.posts) == 3  # one try without --retry-429, two with it
            gap = srv.posts[2].arrival_ns - srv.posts[1].arrival_ns
            assert gap >= 80 * MS
            m = compute(second)
            assert m.e2e_ns is not None and m.e2e_ns >= 80 * MS  # the advised wait is in the latency

    asyncio.run(go())


def test_openai_quota_headers_retry_after_ms_and_opt_in_retry_lean() -> None:
    """``test_openai_quota_headers_retry_after_ms_and_opt_in_retry`` with ``--http-client lean`` (loadgen.endpoints.lean_pool)."""
    test_openai_quota_headers_retry_after_ms_and_opt_in_retry(client="lean")


def test_redirect_never_carries_credentials_to_another_origin() -> None:
    async def go() -> None:
        async with PlatformServer([]) as other:
            moved = {"status": 307, "headers": {"Location": other.url + "/v1/chat/completions"}, "body": ""}
            async with PlatformServer([moved]) as srv:
                ep = make_endpoint(
                    "openai-compatible",
                    base_url=srv.url,
                    api="chat",
                    model="m",
                    api_key="sk-REDIRECT-0123456789",
                    preflight=False,
                    discover=False,
                )
                await ep.open()
                try:
                    rec = await one(ep)
                finally:
                    await ep.close()
            assert rec.error_kind == "http_error" and rec.http_status == 307
            assert srv.posts[0].headers["authorization"] == "Bearer sk-REDIRECT-0123456789"
            assert other.log == []  # never followed

    asyncio.run(go())


@pytest.mark.parametrize("provider", ["azure", "anthropic"])
def test_keys_never_reach_the_record(provider: str) -> None:
    key = f"{provider}-SENTINEL-KEY-0123456789"

    async def go() -> None:
        echo = {"status": 401, "body": {"error": {"message": f"bad key {key}"}}}
        async with PlatformServer([echo]) as srv:
            kw: dict[str, Any] = (
                {"deployment": "d", "preflight": False} if provider == "azure" else {"model": "m", "discover": False}
            )
            ep = make_endpoint(provider, base_url=srv.url, api_key=key, **kw)
            await ep.open()
            try:
                rec = await one(ep)
            finally:
                await ep.close()
        assert rec.http_status == 401 and key not in (rec.error_detail or "") and "***" in (rec.error_detail or "")
        assert key not in repr(ep.describe())

    asyncio.run(go())
