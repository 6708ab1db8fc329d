"""Screenshots of report.html and scorecard.html in headless Chromium (issue 21, must-show 4).

Two short sweeps against the embedded simulated endpoint, two systems far apart in capacity
(``narrow``: 4 slots, ~8 req/s at the SLO; ``wide``: 16 slots, ~40 req/s), with illustrative
prices; then ``loadgen compare`` over both; then each page opened in headless Chromium (Debian's
``/usr/bin/chromium`` driven by playwright; no browser download), every request the page makes
recorded (a self-contained page makes none but its own file and data: URIs), and a full-page
PNG written. A few minutes in all (the probes are short: SLO at p90, 20 % precision). The
client-timing bounds are raised to 100 ms: the simulated server shares this machine's cores, and
these pages are about the drawing, not the numbers.

Output: results/screenshots/sweep-report-narrow.png, sweep-report-wide.png, scorecard.png (and the sweeps under
results/screenshots/runs/). ``--reuse`` keeps the sweeps whose sweep.json exist and draws their pages again.

Usage: scripts/screenshot_reports [--out DIR] [--reuse]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
SYSTEMS = {
    # label: (sim args, $/h, accelerators)
    "narrow": ("--slots 4 --ttft-ms 40 --itl-ms 12 --itl-per-seq-ms 2", 1.10, 1),
    "wide": ("--slots 16 --ttft-ms 15 --itl-ms 6 --itl-per-seq-ms 0.3", 4.40, 2),
}
SLOS = ("ttft:p90<=250ms", "e2e:p90<=1500ms")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]  # fmt: skip


def loadgen(*args: str) -> int:
    print("$ loadgen " + " ".join(args), flush=True)
    return subprocess.run([sys.executable, "-m", "loadgen.cli", *args], cwd=ROOT).returncode


def sweep(label: str, out: Path) -> None:
    sim, cost, acc = SYSTEMS[label]
    slo = [x for s in SLOS for x in ("--slo", s)]
    rc = loadgen("sweep", *slo, "--probe-duration", "4s", "--precision", "20%", "--calibration", "2s",
                 "--input-tokens", "uniform:64,256", "--output-tokens", "24", "--cost-per-hour", str(cost),
                 "--accelerators", str(acc), "--sim-args", sim, "--out", str(out),
                 "--max-schedule-lag", "100ms", "--max-loop-lag", "100ms")  # fmt: skip
    print(f"{label}: sweep exit code {rc}", flush=True)


def rewrite_report(d: Path) -> Path | None:
    """report.html again from a kept sweep.json (``--reuse``: the page as today's code draws it)."""
    import orjson

    from loadgen.report.sweep_report import write_report

    return write_report(orjson.loads((d / "sweep.json").read_bytes()), d)


def screenshot(page_path: Path, png: Path) -> list[str]:
    """Full-page PNG of a local page; returns the URLs it requested other than itself and data: URIs."""
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    if not os.path.exists(chromium):
        raise SystemExit("no chromium (Debian: apt-get install chromium)")
    url = page_path.resolve().as_uri()
    foreign: list[str] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS, timeout=60_000)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.on(
                "request", lambda r: foreign.append(r.url) if r.url != url and not r.url.startswith("data:") else None
            )
            page.goto(url, wait_until="load", timeout=60_000)
            page.screenshot(path=str(png), full_page=True)
        finally:
            browser.close()
    return foreign


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "screenshots")
    ap.add_argument("--reuse", action="store_true", help="Keep sweeps whose sweep.json exists; redraw their pages.")
    a = ap.parse_args()
    out: Path = a.out.resolve()
    runs = out / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    for label in SYSTEMS:
        if not (a.reuse and (runs / label / "sweep.json").exists()):
            shutil.rmtree(runs / label, ignore_errors=True)
            sweep(label, runs / label)
        elif rewrite_report(runs / label) is None:
            return 1
    card = runs / "scorecard"
    labels = [x for x in SYSTEMS if (runs / x / "sweep.json").exists()]
    if loadgen("compare", *[str(runs / x) for x in labels], *sum((["--label", x] for x in labels), []),
               "--out", str(card)) != 0:  # fmt: skip
        return 1
    pages = [(f"sweep-report-{x}", runs / x / "report.html") for x in labels] + [("scorecard", card / "scorecard.html")]
    for name, page in pages:
        png = out / f"{name}.png"
        foreign = screenshot(page, png)
        print(f"{png}: {png.stat().st_size:,} bytes; requests beyond the page itself: {foreign or 'none'}")
        if foreign:
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
