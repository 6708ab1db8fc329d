"""A /metrics page that cannot hurt the run (issue 33): each hostile page is a skipped scrape, named.

The pages come from a real HTTP server on 127.0.0.1 (tests/fixtures/hostile_metrics.py); each test fails
before loadgen/serve/scrape.py: the page was read whole on the run's loop and decoded strictly.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest

from loadgen.serve.observe import ServerObserver
from loadgen.serve.scrape import ScrapeFailed, ScrapeWorker, fetch_scrape
from tests.fixtures.hostile_metrics import hostile_metrics_server


@pytest.fixture(scope="module")
def hostile() -> Iterator[str]:
    with hostile_metrics_server() as url:
        yield url


def test_a_good_page_keeps_only_the_series_a_summary_reads(hostile: str) -> None:
    got = fetch_scrape(hostile + "/good", 5.0)
    assert not isinstance(got, ScrapeFailed)
    assert got["vllm:num_requests_running"][0][1] == 3.0
    assert "process_cpu_seconds_total" not in got  # stays in the child


def test_userinfo_is_sent_as_basic_auth(hostile: str) -> None:
    got = fetch_scrape(hostile.replace("http://", "http://bob:s3cr%25t@") + "/auth", 5.0)
    assert not isinstance(got, ScrapeFailed), got
    assert isinstance(fetch_scrape(hostile + "/auth", 5.0), ScrapeFailed)


@pytest.mark.parametrize(
    "path,kind",
    [
        ("/byte-first", "encoding"),
        ("/byte-mid", "encoding"),
        ("/huge", "too_large"),
        ("/bomb", "too_large"),
        ("/endless", "timeout"),
        ("/stall", "timeout"),
        ("/malformed", "no_samples"),
        ("/status-500", "http"),
    ],
)
def test_each_hostile_page_is_a_skipped_scrape_named_by_kind(hostile: str, path: str, kind: str) -> None:
    t0 = time.monotonic()
    got = fetch_scrape(hostile + path, 3.0)
    assert isinstance(got, ScrapeFailed), got
    assert got.kind == kind, got
    assert time.monotonic() - t0 < 8.0  # bounded: the stall and the endless page end at their timeouts


def test_the_observer_runs_through_a_bad_byte_and_counts_it(hostile: str) -> None:
    async def go() -> dict[str, Any]:
        obs = ServerObserver("auto", hostile, metrics_url=hostile + "/byte-first", sample_period_s=0.2, energy=False)
        try:
            await obs.begin()
            await asyncio.sleep(0.6)
            return await obs.end({"conditions": {}})
        finally:
            await obs.close()

    s = asyncio.run(go())
    assert s["metrics"] is None
    assert s["scrapes_failed"] >= 2 and s["scrapes_failed_by_kind"].get("encoding", 0) >= 2
    assert "not UTF-8" in s["scrape_errors"][0]


def test_a_child_that_dies_costs_one_scrape_and_is_replaced(hostile: str) -> None:
    async def go() -> tuple[Any, Any, Any]:
        w = ScrapeWorker(timeout_s=3.0)
        try:
            first = await w.scrape(hostile + "/good")
            for p in list(getattr(w._pool, "_processes", {}).values()):
                p.kill()
                p.join(5)
            return first, await w.scrape(hostile + "/good"), await w.scrape(hostile + "/good")
        finally:
            w.close()

    a, b, c = asyncio.run(go())
    assert not isinstance(a, ScrapeFailed)
    assert isinstance(b, ScrapeFailed) and b.kind == "child", b
    assert not isinstance(c, ScrapeFailed)


_ORPHAN = """
import asyncio, sys, time
sys.path.insert(0, sys.argv[2])
from loadgen.serve.scrape import ScrapeWorker
async def go():
    w = ScrapeWorker(timeout_s=5.0)
    await w.scrape(sys.argv[1])
    print(*[p.pid for p in w._pool._processes.values()], flush=True)
    time.sleep(60)
asyncio.run(go())
"""


def test_a_killed_run_leaves_no_scraper_holding_its_pipes(hostile: str) -> None:
    # CI, session 15: an orphaned scraper held a `loadgen run`'s stdout/stderr, and the caller waited 300 s for EOF
    import os
    import signal
    import subprocess
    import sys
    from pathlib import Path

    repo = str(Path(__file__).resolve().parents[2])
    p = subprocess.Popen([sys.executable, "-c", _ORPHAN, hostile + "/good", repo], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert p.stdout is not None
        child = int(p.stdout.readline().split()[0])
        os.kill(p.pid, signal.SIGKILL)
        out, _ = p.communicate(timeout=10)  # EOF on both pipes: no child holds them
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate(timeout=10)  # reaped, its pipes closed
    stat = Path(f"/proc/{child}/stat")  # read_text: each read closes the file (-W error: no ResourceWarning)
    for _ in range(100):  # bounded: 5 s
        if not stat.exists() or "Z" in stat.read_text().split()[2]:
            break
        time.sleep(0.05)
    assert not stat.exists() or "Z" in stat.read_text().split()[2]
