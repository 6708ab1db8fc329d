"""report.html and scorecard.html as a reader opens them (issue 21, items 9 and 10).

``loadgen sweep`` (a short concurrency sweep against the embedded simulated endpoint) writes its
report.html; a second system is a sweep directory of the fixture shape with a stopped-early probe
(tests/fixtures/report_data.py); ``loadgen compare`` writes the scorecard of both. Each page is
then opened in real headless Chromium (Debian's ``/usr/bin/chromium`` through playwright; no
browser download; skipped with the reason without them): it asks for nothing but itself (no
network, no script), its figures are drawn at a readable size, its conditions section is there,
and in the scorecard no plain cell is a link. Screenshots go to ``$LOADGEN_UI_SCREENSHOTS``
when set. About 25 s on a busy 2-core machine.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
from pathlib import Path

import pytest

from loadgen.report.sweep_report import write_report
from tests.fixtures.cli_proc import cli_run
from tests.fixtures.report_data import H200_SERVER, make_sweep

CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else None)
pytestmark = [
    pytest.mark.skipif(
        importlib.util.find_spec("matplotlib") is None, reason="matplotlib not installed (extra: report)"
    ),
    pytest.mark.skipif(CHROMIUM is None, reason="no chromium binary (Debian: apt-get install chromium)"),
    pytest.mark.skipif(
        importlib.util.find_spec("playwright") is None, reason="playwright not installed (extra: ui-test)"
    ),
]
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]  # fmt: skip


# in the page: every <td> outside the files row, with its link count and computed text decoration
PLAIN_CELLS_JS = """() => [...document.querySelectorAll('tr:not(.files) td')].map(td => [
  td.querySelectorAll('a').length, getComputedStyle(td).textDecorationLine, getComputedStyle(td).cursor])"""
SVG_SIZES_JS = "() => [...document.querySelectorAll('figure svg')].map(s => s.getBoundingClientRect().width)"


@pytest.mark.timeout(180)
def test_sweep_report_and_scorecard_in_chromium(tmp_path: Path) -> None:
    from playwright.sync_api import Request, sync_playwright

    live = tmp_path / "live"
    p = cli_run("sweep", "--slo", "ttft:p50<=100ms", "--slo", "e2e:p50<=400ms", "--concurrency-levels", "1,4,16",
                "--probe-duration", "1s", "--calibration", "0", "--input-tokens", "32", "--output-tokens", "8",
                "--cost-per-hour", "1.5", "--max-loop-lag", "200ms", "--sim-args", "--slots 4 --ttft-ms 10 --itl-ms 3",
                out=live)  # fmt: skip
    assert (live / "report.html").is_file(), p.stdout[-2000:] + p.stderr[-2000:]
    fixture = tmp_path / "h200"
    doc = make_sweep(fixture, rates=[10.0, 20.0, 40.0, 30.0, 35.0], fail_from_rps=35.0, stopped_rps=40.0,
                     cost_per_hour=8.8, server=H200_SERVER)  # fmt: skip
    write_report(doc, fixture)
    card = tmp_path / "card"
    c = cli_run("compare", str(live), str(fixture), "--label", "sim", "--label", "h200", "--force", out=card)
    assert c.returncode == 0, c.stdout[-2000:] + c.stderr[-2000:]
    assert "2 x NVIDIA H200 (driver 570.1)" in c.stdout and "$8.80" in c.stdout  # the rows that say what it is
    rows = {r["key"]: r["values"] for r in json.loads((card / "scorecard.json").read_text())["description_rows"]}
    assert rows["cost_per_hour"] == {"sim": "$1.50", "h200": "$8.80"}

    shots = Path(os.environ.get("LOADGEN_UI_SCREENSHOTS") or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    pages = {"live": live / "report.html", "fixture": fixture / "report.html", "scorecard": card / "scorecard.html"}
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, timeout=60_000)
        try:
            for name, path in pages.items():
                page = browser.new_page(viewport={"width": 1280, "height": 900})
                url = path.resolve().as_uri()
                asked: list[str] = []

                def note(r: Request, url: str = url, asked: list[str] = asked) -> None:
                    if r.url != url:
                        asked.append(r.url)

                page.on("request", note)
                page.goto(url, wait_until="load", timeout=30_000)
                page.screenshot(path=str(shots / f"report-page-{name}.png"), full_page=True)
                assert [u for u in asked if not u.startswith("data:")] == [], name  # self-contained
                widths = page.evaluate(SVG_SIZES_JS)
                assert widths and min(widths) >= 500, (name, widths)  # drawn, at a readable size
                if name == "scorecard":
                    cells = page.evaluate(PLAIN_CELLS_JS)
                    assert cells and all(n == 0 and deco == "none" and cur != "pointer" for n, deco, cur in cells)
                    assert page.get_by_role("cell", name="2 x NVIDIA H200 (driver 570.1)").is_visible()
                else:
                    assert page.get_by_role("heading", name="Test conditions").is_visible()
                    assert page.get_by_role("rowheader", name="Accelerator", exact=True).is_visible()
                page.close()
        finally:
            browser.close()
    fixture_page = (fixture / "report.html").read_text()
    assert fixture_page.count('id="probe-stopped-early') == 1 + 1  # the TTFT panel and the throughput panel
