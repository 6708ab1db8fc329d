"""From a live sweep to a decision, as the user types it (issue 19): ``loadgen sweep`` against the
embedded simulated endpoint, then ``loadgen plan``, ``loadgen capacity ci|gate|pareto`` on its
directory, and the plan and Pareto pages opened in headless Chromium.

One module-scoped rate sweep (FIFO, 2 slots, SLO p90 TTFT <= 200 ms, 25 % precision: ~15 s on a
busy 2-core machine; a p99 SLO needs 299 requests a probe and took ~40 s); the other systems are
checked-in real sweeps (tests/fixtures/capacity: sim8, and batch16, a concurrency sweep of the
batching model at 1, 4, 16 users whose per-user speed falls with the batch, so its front is a real
one). The same sweep shows that every judged target of every probe records its autocorrelation
times and effective counts, and that ``loadgen capacity ci`` reads its interval off those (issue
19, must-show 4; was a second, identical sweep in test_capacity_ci_smoke.py). No timing is asserted.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path

import pytest

from tests.fixtures.cli_proc import cli_run

pytestmark = pytest.mark.timing  # asserts timing figures: the serial phase

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures" / "capacity"
DAY = [20, 15, 10, 10, 10, 15, 30, 60, 90, 120, 140, 150, 160, 155, 150, 140, 130, 120, 100, 90, 70, 50, 35, 25]
SLO = "ttft:p90<=200ms"  # p90: 29 requests decide a probe (p99 needs 299)
CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else None)


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("capacity")
    rate = base / "rate"
    # one output token: fewer than 1,000 token stamps per probe, so a busy client is judged on its
    # event-loop lag (--max-loop-lag), not on the 3 ms stamp-lateness bound
    p = cli_run("sweep", "--slo", SLO, "--calibration", "2s", "--precision", "25%", "--probe-duration",
                "1s", "--input-tokens", "32", "--output-tokens", "1", "--max-loop-lag", "200ms", "--max-schedule-lag",
                "100ms", "--sim-args", "--fifo --slots 2 --ttft-ms 40 --itl-ms 2", out=rate, timeout=240)  # fmt: skip
    assert "Traceback" not in p.stderr, p.stderr
    assert (rate / "sweep.json").is_file(), p.stdout[-3000:] + p.stderr[-3000:]
    return {"rate": rate, "base": base}


@pytest.mark.timeout(150)
def test_the_live_sweep_records_its_effective_counts_and_capacity_ci_reads_them(live: dict[str, Path]) -> None:
    res = json.loads((live["rate"] / "sweep.json").read_text())
    assert "effective requests" in res["evidence_rule"]
    counted = [t for q in res["probes"] if q["verdict"] in ("pass", "fail") for t in q["targets"]]
    if not counted:  # a machine too busy to keep any schedule: every probe INVALID, on its client checks
        assert all(q["verdict"] == "invalid" and q["validity_detail"] for q in res["probes"]), res["probes"]
        return
    for t in counted:
        assert 1 <= t["effective_requests"] <= t["requests"] and t["effective_exceedances"] <= t["exceedances"]
        assert len(t["tau"]) >= 1 and min(t["tau"]) >= 1.0
        lo, hi = t["bounds"]
        assert 0.0 <= lo <= hi <= 1.0
    ci = cli_run("capacity", "ci", str(live["rate"]), timeout=60)
    assert ci.returncode == 0, ci.stdout + ci.stderr
    assert "effective counts" in " ".join(ci.stdout.split())


@pytest.mark.timeout(400)
def test_plan_from_a_live_sweep(live: dict[str, Path]) -> None:
    out = live["base"] / "plan"
    p = cli_run("plan", "--capacity", str(live["rate"]), "--label", "live", "--demand", str(FIX / "day.csv"), "--slo", SLO, "--headroom", "10%",
                "--prices", str(FIX / "prices.toml"), out=out)  # fmt: skip
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    answer = json.loads((live["rate"] / "sweep.json").read_text())["answer"]["max_rate_rps"]
    assert answer
    plan = json.loads((out / "plan.json").read_text())["plans"][0]
    # by hand, from the sweep's answer and the demand file
    want = [math.ceil(d / (answer * 0.9)) for d in DAY]
    assert [r["replicas"] for r in plan["intervals"]] == want
    assert plan["costs"]["cloud_on_demand"]["total_usd"] == pytest.approx(max(want) * 4.0 * 24)
    assert "live: max SLO load" in p.stdout and "cloud_autoscaled" in p.stdout
    ci = plan["capacity_interval"]
    assert ci["ci_lower_rps"] is None or ci["ci_lower_rps"] <= answer
    assert ci["ci_upper_rps"] is None or ci["ci_upper_rps"] > answer

    g = cli_run("capacity", "gate", "--baseline", str(FIX / "sim8"), "--candidate", str(live["rate"]))
    assert g.returncode == 2 and "different SLOs" in g.stderr, g.stdout + g.stderr
    same = cli_run("capacity", "gate", "--baseline", str(live["rate"]), "--candidate", str(live["rate"]))
    assert same.returncode == 0, same.stdout + same.stderr


@pytest.mark.timeout(400)
@pytest.mark.skipif(CHROMIUM is None, reason="no chromium binary (Debian: apt-get install chromium)")
def test_pareto_and_plan_pages_in_chromium(live: dict[str, Path]) -> None:
    pytest.importorskip("matplotlib", reason="matplotlib not installed (extra: report)")
    pytest.importorskip("playwright", reason="playwright not installed (extra: ui-test)")
    from playwright.sync_api import Request, sync_playwright

    par = live["base"] / "pareto"
    p = cli_run("capacity", "pareto", str(FIX / "batch16"), str(FIX / "sim8"), "--label", "batch16", "--label", "sim8",
                "--target-tps-per-user", "300", "--price-per-accelerator-hour", "2", out=par)  # fmt: skip
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    doc = json.loads((par / "pareto.json").read_text())
    batch = doc["systems"][0]
    assert [q["load"] for q in batch["front"]] == ["c16", "c4", "c1"]  # slower per user as the batch grows
    assert doc["systems"][1]["points"]  # a rate sweep's probes
    # 300 tok/s per user between c4 (286.5) and c1 (499.2): tok/s per accelerator interpolated along the front
    (c4, c1) = batch["front"][1:]
    f = (300 - c4["tps_per_user"]) / (c1["tps_per_user"] - c4["tps_per_user"])
    x = c4["tps_per_accelerator"] + f * (c1["tps_per_accelerator"] - c4["tps_per_accelerator"])
    a = batch["at_target"]
    assert a["tps_per_accelerator"] == pytest.approx(x) and a["between"] == ["c4", "c1"]
    assert a["cost_per_million_output_tokens_usd"] == pytest.approx(2 / (x * 3600) * 1e6)
    plan = live["base"] / "plan-conc"
    q = cli_run("plan", "--capacity", str(FIX / "batch16"), "--demand", str(FIX / "day.csv"), out=plan)
    assert q.returncode == 0 and "concurrency sweep" in q.stdout, q.stdout[-3000:] + q.stderr[-3000:]

    args = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"]
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=args, timeout=60_000)
        try:
            for page_path in (par / "pareto.html", plan / "plan.html"):
                page = browser.new_page(viewport={"width": 1280, "height": 900})
                url = page_path.resolve().as_uri()
                asked: list[str] = []

                def note(r: Request, url: str = url, asked: list[str] = asked) -> None:
                    if r.url != url:
                        asked.append(r.url)

                page.on("request", note)
                page.goto(url, wait_until="load", timeout=30_000)
                assert asked == [], page_path  # self-contained
                widths = page.evaluate(
                    "() => [...document.querySelectorAll('figure svg')].map(s => s.getBoundingClientRect().width)"
                )
                assert widths and min(widths) >= 500, (page_path, widths)  # drawn, at a readable size
                page.close()
        finally:
            browser.close()
