"""``--header-timeout``'s default rule, its resolution from the command's options, and its timer.

The rule (:func:`loadgen.endpoints.header_wait.default_header_timeout_s`): max(30 s, 10x the TTFT
target) when an SLO targets TTFT (the loosest, if several), else 60 s; off with ``--no-stream``.
The request-level behaviour against a real server: ``tests/integration/test_header_timeout.py``.
"""

from __future__ import annotations

import asyncio
from typing import Any

import click
import pytest

from loadgen.cli.target import header_timeout_s
from loadgen.cli.target_options import EndpointOptions
from loadgen.core.errors import HeaderTimeout
from loadgen.core.slo import parse_slo
from loadgen.core.types import ERROR_KINDS
from loadgen.endpoints.header_wait import DEFAULT_HEADER_TIMEOUT_S, HeaderDeadline, default_header_timeout_s
from loadgen.endpoints.http import classify_exception


@pytest.mark.parametrize(
    ("slos", "want_s"),
    [
        ([], 60.0),  # no SLO: 60 s
        (["e2e:p99<=2s", "tpot:p99<=50ms"], 60.0),  # no target on TTFT: 60 s
        (["ttft:p99<=300ms"], 30.0),  # 10 x 0.3 s = 3 s, raised to the 30 s floor
        (["ttft:p99<=3s"], 30.0),  # exactly the floor
        (["ttft:p99<=5s"], 50.0),  # 10 x 5 s
        (["ttft:p50<=1s", "ttft:p99<=8s", "e2e:p99<=60s"], 80.0),  # several: the loosest TTFT target
        (["time_to_first_answer_token:p99<=10s"], 60.0),  # not TTFT
    ],
)
def test_default_rule(slos: list[str], want_s: float) -> None:
    assert default_header_timeout_s([parse_slo(s) for s in slos]) == pytest.approx(want_s)


def _kw(**kw: Any) -> dict[str, Any]:
    return {"header_timeout": None, "no_stream": False, "slos": (), **kw}


@pytest.mark.parametrize(
    ("kw", "want_s"),
    [
        (_kw(), DEFAULT_HEADER_TIMEOUT_S),  # run without --slo
        (_kw(slos=("ttft:p99<=300ms",)), 30.0),  # run --slo 'ttft:p99<=300ms'
        (_kw(slos=("ttft:p99<=6s",)), 60.0),
        (_kw(slos=("ttft:p99<=9s",)), 90.0),
        (_kw(slo_p99="4s", slo_metric="ttft"), 40.0),  # sweep --slo-p99 4s (TTFT by default)
        (_kw(slo_p99="4s", slo_metric="e2e"), 60.0),  # sweep --slo-p99 4s --slo-metric e2e
        (_kw(header_timeout="2s", slos=("ttft:p99<=9s",)), 2.0),  # given: it wins
        (_kw(no_stream=True), None),  # --no-stream: the headers come with the whole answer
        ({}, DEFAULT_HEADER_TIMEOUT_S),  # a front end that passes no such option (a plan, a test's dict)
    ],
)
def test_resolved_from_the_options(kw: dict[str, Any], want_s: float | None) -> None:
    assert header_timeout_s(EndpointOptions.from_kw(kw)) == want_s


@pytest.mark.parametrize(
    "kw", [_kw(header_timeout="0s"), _kw(header_timeout="soon"), _kw(no_stream=True, header_timeout="5s")]
)
def test_bad_values_are_usage_errors(kw: dict[str, Any]) -> None:
    with pytest.raises(click.UsageError):
        header_timeout_s(EndpointOptions.from_kw(kw))


def test_header_timeout_is_its_own_error_kind() -> None:
    assert "header_timeout" in ERROR_KINDS
    assert classify_exception(HeaderTimeout(1.0), response_started=False) == "header_timeout"
    assert str(HeaderTimeout(1.5)) == "no response headers within 1.5 s of the send (--header-timeout)"


def test_timer_expires_without_headers_and_stops_when_they_arrive() -> None:
    async def silent() -> None:
        async with HeaderDeadline(0.05, total_s=10.0):
            await asyncio.sleep(5.0)  # a server that never answers

    async def answered() -> str:
        async with HeaderDeadline(0.05, total_s=10.0) as hd:
            hd.arrived()
            await asyncio.sleep(0.15)  # the body may take longer than the header timeout
        return "done"

    async def off() -> str:
        async with HeaderDeadline(1.0, total_s=1.0):  # not shorter than the total deadline: off
            await asyncio.sleep(0.01)
        async with HeaderDeadline(None):
            await asyncio.sleep(0.01)
        return "done"

    with pytest.raises(HeaderTimeout):
        asyncio.run(asyncio.wait_for(silent(), 10.0))
    assert asyncio.run(asyncio.wait_for(answered(), 10.0)) == "done"
    assert asyncio.run(asyncio.wait_for(off(), 10.0)) == "done"
    assert HeaderDeadline(1.0, total_s=1.0).header_s is None and HeaderDeadline(0.5, total_s=1.0).header_s == 0.5
