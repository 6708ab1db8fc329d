"""Screenshots of ``loadgen locust``'s web UI in headless Chromium: Locust's statistics, the loadgen tab, draining.

Starts ``loadgen locust`` (web UI on 127.0.0.1, the embedded simulated endpoint),
fills loadgen's fields of the start form (Custom parameters: rate, output tokens, SLO),
starts the test, lets it run ``--seconds``, and writes under ``--out`` (default
``results/screenshots``):

* ``locust-start-form.png``: the start form with loadgen's fields filled in;
* ``locust-statistics.png``: Locust's own table (one E2E row per request);
* ``locust-loadgen-tab.png``: the loadgen tab (state, settings, SLO verdict, throughput,
  charts over time, the metrics table);
* ``locust-draining.png``: the tab just after Stop, while in-flight requests finish.

Needs Debian's ``chromium`` and the ``playwright`` package (no browser download).
Usage: ``scripts/screenshot_locust [--seconds 10] [--out DIR]``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]  # fmt: skip


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f"nothing listens on 127.0.0.1:{port} after {timeout_s} s")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=10.0, help="how long the test runs before the tab is shot")
    ap.add_argument("--out", default=str(ROOT / "results" / "screenshots"))
    args = ap.parse_args()
    chromium = shutil.which("chromium") or ("/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else None)
    if chromium is None:
        raise SystemExit("no chromium binary (Debian: apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    shots = Path(args.out)
    shots.mkdir(parents=True, exist_ok=True)
    port = free_port()
    tmp = Path(tempfile.mkdtemp(prefix="loadgen-locust-shot-"))
    log = open(tmp / "locust.log", "wb")
    child = subprocess.Popen(
        [sys.executable, "-m", "loadgen.cli", "locust", "--sim-args", "--ttft-ms 60 --itl-ms 25 --slots 16",
         "--output-tokens", "64", "--out", str(tmp / "out"), "--web-port", str(port), "--stop-timeout", "20"],
        cwd=ROOT, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, process_group=0,
    )  # fmt: skip
    try:
        wait_port(port, 60)
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS, timeout=60_000)
            try:
                page = browser.new_page(viewport={"width": 1440, "height": 1000})
                page.goto(f"http://127.0.0.1:{port}/", timeout=30_000)
                page.get_by_label("Number of users").fill("1")
                page.get_by_text("Custom parameters").click()
                page.get_by_label("Loadgen rate", exact=False).fill("6")
                page.get_by_label("Loadgen slo", exact=False).fill("ttft:p99<=300ms,tpot:p99<=40ms")
                page.get_by_label("Loadgen arrival", exact=False).scroll_into_view_if_needed()
                page.locator("form").screenshot(path=str(shots / "locust-start-form.png"))
                page.get_by_role("button", name="Start").click()
                page.get_by_role("cell", name="E2E", exact=True).first.wait_for(timeout=30_000)
                time.sleep(args.seconds)
                page.screenshot(path=str(shots / "locust-statistics.png"), full_page=True)
                page.get_by_role("tab", name="loadgen").click()
                page.locator("#loadgen-panel svg").first.wait_for(timeout=15_000)
                time.sleep(2.5)
                page.screenshot(path=str(shots / "locust-loadgen-tab.png"), full_page=True)
                page.get_by_role("button", name="Stop").click()
                page.locator("[data-loadgen-state=draining]").wait_for(timeout=10_000)
                page.screenshot(path=str(shots / "locust-draining.png"), full_page=True)
                page.locator("[data-loadgen-state=stopped]").wait_for(timeout=40_000)
            finally:
                browser.close()
    finally:
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)
            try:
                child.wait(40)
            except subprocess.TimeoutExpired:
                os.killpg(child.pid, signal.SIGKILL)
                child.wait(10)
        log.close()
    for name in ("locust-start-form.png", "locust-statistics.png", "locust-loadgen-tab.png", "locust-draining.png"):
        print(shots / name)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
