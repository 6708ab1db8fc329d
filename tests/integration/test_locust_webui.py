"""The Locust web UI of ``loadgen locust``, driven in real headless Chromium.

Fill loadgen's fields of the start form (Custom parameters: an SLO), start a test from
the page, see Locust's table hold one E2E row (each request counted once) and loadgen's
own tab fill in (TTFT, ITL in its table; the panel's SLO verdict and four charts), stop
it from the page, find ``result.json``. Needs Debian's ``chromium``
(``/usr/bin/chromium``) and the ``playwright`` Python package (its bundled browsers
are not used: ``playwright install`` is never run); skipped with the reason when
either is missing. The screenshots go to ``$LOADGEN_UI_SCREENSHOTS`` (default: the
test's tmp dir).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import socket
import time
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_locust import HAVE_LOCUST, Child, free_port

CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else None)
HAVE_PLAYWRIGHT = importlib.util.find_spec("playwright") is not None
pytestmark = [
    pytest.mark.timing,  # asserts timing figures: the serial phase
    pytest.mark.skipif(not HAVE_LOCUST, reason="Locust not installed: pip install 'loadgen[locust]'"),
    pytest.mark.skipif(CHROMIUM is None, reason="no chromium binary (Debian: apt-get install chromium)"),
    pytest.mark.skipif(
        not HAVE_PLAYWRIGHT, reason="playwright not installed (pip install playwright; no browser download needed)"
    ),
]

CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]  # fmt: skip


def wait_port(port: int, timeout_s: float, child: Child | None = None) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and (child is None or child.proc.poll() is None):
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.2)
    log = child.tail() if child is not None else ""
    raise AssertionError(f"nothing listens on 127.0.0.1:{port} after {timeout_s} s:\n{log}")


def test_start_watch_and_stop_from_the_page(tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    shots = Path(os.environ.get("LOADGEN_UI_SCREENSHOTS") or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    port = free_port()
    out = tmp_path / "out"
    child = Child(
        ["--sim-args", "--ttft-ms 20 --itl-ms 5", "--output-tokens", "16", "--out", str(out),
         "--web-port", str(port), "-u", "2", "-r", "10"], tmp_path / "locust.log",
    )  # fmt: skip
    try:
        wait_port(port, 60, child)
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, timeout=60_000)
            try:
                page = browser.new_page(viewport={"width": 1400, "height": 900})
                page.goto(f"http://127.0.0.1:{port}/", timeout=30_000)
                page.get_by_text("Custom parameters").click()
                page.get_by_label("Loadgen slo", exact=False).fill("ttft:p99<=10s")
                page.get_by_role("button", name="Start").click()
                # Locust's own table: one row per request, type E2E, named by the endpoint path
                page.get_by_role("cell", name="E2E", exact=True).first.wait_for(timeout=30_000)
                types = page.locator("table tbody tr td:first-child").all_inner_texts()
                assert "TTFT" not in types and "TPOT" not in types, types
                page.screenshot(path=str(shots / "locust-statistics.png"))
                # loadgen's tab: HDR/exact figures from loadgen's own records, SLO verdict, charts
                page.get_by_role("tab", name="loadgen").click()
                row = page.get_by_role("row").filter(has_text="TTFT").first
                row.wait_for(timeout=15_000)
                count = _wait_count(page, timeout_s=15)
                assert count > 0
                table = page.get_by_role("table").first.inner_text()
                assert "closed loop: 2 Locust users" in table and "ITL (per token, HDR)" in table, table
                page.locator("[data-loadgen-slo]").wait_for(timeout=15_000)
                assert page.locator("#loadgen-panel svg.loadgen-chart").count() == 4
                panel = page.locator("#loadgen-panel").inner_text()
                assert "ttft:p99<=10000ms" in panel and "output tok/s" in panel, panel
                page.screenshot(path=str(shots / "locust-loadgen-tab.png"))
                page.get_by_role("button", name="Stop").click()
                page.wait_for_function("document.body.innerText.includes('STOPPED')", timeout=60_000)
                assert (out / "result.json").exists(), child.tail()
                # the panel keeps polling after the stop (Locust's table stops at STOPPED, so its last
                # refresh may come before the result is written)
                page.locator("[data-loadgen-state=stopped]").wait_for(timeout=15_000)
                assert str(out / "result.json") in page.locator("#loadgen-panel").inner_text()
                page.screenshot(path=str(shots / "locust-stopped.png"))
            finally:
                browser.close()
    finally:
        child.terminate()
        try:
            child.wait(40)
        finally:
            child.kill()
    res = json.loads((out / "result.json").read_text())
    assert res["counts"]["requests"] >= count and res["counts"]["failed"] == 0
    assert res["locust"]["mode"] == "closed loop"
    assert res["config"]["slos"] == ["ttft:p99<=10s"] and res["slo"]["targets"][0]["target"] == "ttft:p99<=10000ms"


def _wait_count(page: Any, timeout_s: float) -> int:
    """The TTFT sample count shown in the loadgen tab, once it is above zero."""
    deadline = time.monotonic() + timeout_s
    while True:
        cells = page.get_by_role("row").filter(has_text="TTFT").first.get_by_role("cell").all_inner_texts()
        if len(cells) > 1 and cells[1].strip().isdigit() and int(cells[1]) > 0:
            return int(cells[1])
        if time.monotonic() > deadline:
            raise AssertionError(f"the loadgen tab's TTFT row stayed empty: {cells}")
        time.sleep(0.3)
