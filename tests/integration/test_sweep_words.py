"""``loadgen sweep`` says what it decided, on enough evidence (issue 23), as the user types it.

Real ``python -m loadgen.cli sweep`` processes against the embedded simulated endpoint
(127.0.0.1 only), short probes; the whole file takes about a minute on a busy 2-core machine.

* concurrency probes hold the evidence rule's request count (extended in time), or say
  "(point estimate)" in the live line, the table, sweep.json, the answer and the report;
* one verdict text per probe and per target, the same in every place it is shown;
* an SLO below what the server does with one request ends before any probe, in one line;
* a rate the client cannot test bounds the search from above: the answer is a lower bound
  with "rates above Y could not be tested by this client" and the remedy.

The report check reads report.html for the same text where the report shows the stored
``verdict_text`` (``loadgen.report.sweep_html``, being rebuilt alongside this issue).
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.cli_proc import cli_run, flat, table_verdicts

pytestmark = pytest.mark.timing  # asserts timing figures: the serial phase

RELAXED = ["--max-schedule-lag", "100ms", "--max-loop-lag", "100ms"]
# 4 slots, 20 ms to the first token and 20 ms a token, 8 tokens: ~180 ms a request, ~5.5 req/s at c=1
SLOW = ["--input-tokens", "16", "--output-tokens", "8", "--sim-args", "--slots 4 --ttft-ms 20 --itl-ms 20"]


def sweep_cli(args: list[str], out: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return cli_run("sweep", *args, out=out, timeout=timeout)


def shown_alike(p: subprocess.CompletedProcess[str], out: Path) -> dict[str, Any]:
    """Every probe's sweep.json verdict_text is the live line's, the table's and the report's."""
    assert "Traceback" not in p.stderr, p.stderr
    res = json.loads((out / "sweep.json").read_text())
    table = table_verdicts(p.stdout)
    html = (out / "report.html").read_text() if (out / "report.html").exists() else None
    for i, q in enumerate(res["probes"], 1):
        text = q["verdict_text"]
        assert text, q
        label = f"concurrency {q['concurrency']}" if q["concurrency"] else f"{q['offered_rps']:.3f} req/s"
        assert f"probe {i}: {label}: {text};" in flat(p.stderr), (text, p.stderr)
        assert table[i] == text, (table, text)
        if html is not None and importlib.util.find_spec("loadgen.report.sweep_html") is not None:
            assert text in html, text
    return res


@pytest.mark.timeout(120)
def test_concurrency_probes_hold_the_stated_minimum_or_say_point_estimate(tmp_path: Path) -> None:
    # p90 at 95 % needs 29 requests; c=1 sends ~11 in its 2 s: it is extended in time
    p = sweep_cli(["--slo", "ttft:p90<=500ms", "--probe-duration", "2s", "--concurrency-levels", "1,4", "--confidence", "95%", *SLOW, *RELAXED], tmp_path / "a")  # fmt: skip
    res = shown_alike(p, tmp_path / "a")
    assert p.returncode == 0, p.stdout + p.stderr
    need = res["settings"]["min_requests_per_probe"]
    assert need == 29
    assert f"extended in time until it holds at least {need} judged requests" in res["evidence_rule"]
    assert res["evidence_rule"] in flat(p.stdout).replace("evidence rule: ", "")
    c1, c4 = res["probes"]
    assert c1["segments"] >= 2, c1  # the extension
    for q in (c1, c4):
        assert q["judged_requests"] >= need or q["verdict_text"].endswith("(point estimate)"), q
        assert q["sent_rps"] is not None and q["sent_rps"] < 4 / 0.15, q  # at most c / E2E, not a ramp burst
    assert res["answer"]["concurrency"] == 4 and res["answer"]["point_estimate"] is False
    # the plan, before the first probe and after each level
    err = flat(p.stderr)
    assert "plan: each probe at least 2 s and 29 requests (p90 at 95 % confidence cannot pass on fewer" in err
    assert "plan: 2 user levels; estimated total" in err and "plan: 1 probe in" in err
    assert len(res["plan"]["estimates"]) == 2

    # no extension allowed: the thin probe is the answer, and says so everywhere
    p = sweep_cli(["--slo", "ttft:p90<=500ms", "--probe-duration", "2s", "--concurrency-levels", "1", "--max-extensions", "0", *SLOW, *RELAXED], tmp_path / "b")  # fmt: skip
    res = shown_alike(p, tmp_path / "b")
    (q,) = res["probes"]
    assert q["judged_requests"] < 29 and q["verdict_text"] == "PASS (point estimate)", q
    assert res["answer"]["point_estimate"] is True and res["answer"]["verdict_text"] == "PASS (point estimate)"
    assert "1 users (a point estimate" in flat(p.stdout)


@pytest.mark.timeout(120)
def test_one_verdict_text_per_probe_and_target_in_every_place(tmp_path: Path) -> None:
    # capacity ~16.7 req/s, offered 50: TTFT makes FAIL certain early; E2E (10 s) is not missed
    ttft, e2e = "ttft:p90<=200ms", "e2e:p90<=10000ms"
    args = ["--slo", ttft, "--slo", e2e, "--probe-duration", "5s", "--calibration", "0", "--start-rate", "50",
            "--min-rate", "50", *SLOW, *RELAXED]  # fmt: skip
    p = sweep_cli(args, tmp_path / "s")
    res = shown_alike(p, tmp_path / "s")
    i, q = len(res["probes"]), res["probes"][-1]  # earlier ones: re-runs of a client stall, if any
    assert all(x["verdict"] == "invalid" for x in res["probes"][:-1]), res["probes"]
    assert q["stopped_early"] is True and q["verdict_text"] == "FAIL (stopped early)", q
    by = {t["target"]: t for t in q["targets"]}
    assert by[ttft]["verdict_text"] == "FAIL (stopped early)"
    assert not by[e2e]["verdict_text"].startswith("FAIL"), by[e2e]  # none over: not a FAIL
    line = f"probe {i} targets: {ttft}: FAIL (stopped early) ({by[ttft]['exceedances']} of {by[ttft]['requests']} over)"
    assert line in flat(p.stdout)
    assert f"{e2e}: {by[e2e]['verdict_text']} (0 of {by[e2e]['requests']} over)" in flat(p.stdout)
    assert f"{e2e}: 0 of {by[e2e]['requests']} measured requests over ({by[e2e]['verdict_text']};" in flat(p.stderr)


@pytest.mark.timeout(60)
def test_an_slo_below_the_unloaded_latency_ends_before_any_probe(tmp_path: Path) -> None:
    # one request alone takes ~30 ms to its first token; the SLO asks for 5 ms
    args = ["--slo", "ttft:p99<=5ms", "--probe-duration", "10s", "--input-tokens", "16", "--output-tokens", "8",
            "--sim-args", "--ttft-ms 30 --itl-ms 5"]  # fmt: skip
    p = sweep_cli(args, tmp_path / "u", timeout=55)
    assert "Traceback" not in p.stderr, p.stderr
    assert p.returncode == 1, p.stdout + p.stderr  # as "no rate met"
    res = json.loads((tmp_path / "u" / "sweep.json").read_text())
    assert res["probes"] == [] and res["calibration"] is None
    (why,) = res["unloaded"]["over"]
    v = res["unloaded"]["median_ms"]["ttft:p99<=5ms"]
    assert v > 5 and f"its ttft median was {v:.1f} ms over 5 requests, above the 5 ms threshold" in why
    assert f"no rate can meet the SLO: {why}" in flat(p.stderr)
    assert f"no rate met ttft:p99<=5ms: {why}; no probe was run" in flat(p.stdout)


@pytest.mark.timeout(150)
@pytest.mark.alone  # the client's own limit is the subject: beside another test every rate was INVALID (037163f)
def test_a_client_limited_rate_bounds_the_search_and_the_answer_is_a_lower_bound(tmp_path: Path) -> None:
    # no service time, one token, 4096 slots: at 6000 req/s the generator is the limit (a quiet CI machine's
    # client once kept up with 4,000-4,700 req/s; session 22's with ~2,000-2,800, and from 8000 the search's last
    # halving, 2000, was INVALID too: no PASS); the search goes on below it, to 1500 at most. The relaxed lag bounds
    # keep a busy runner's stalls from making every rate down to the lowest client-limited, and the
    # generous SLO keeps a starved simulated endpoint from FAILing a rate below the client's limit. The aiohttp
    # client: these rates are set by its limit (the lean client, the default since session 25, PASSed 6000 req/s
    # on a quiet CI machine: the test's subject is the sweep's handling of a client's limit, not which client)
    args = ["--slo", "ttft:p90<=2000ms", "--probe-duration", "0.5s", "--calibration", "0", "--start-rate", "6000",
            "--precision", "50%", "--input-tokens", "4", "--output-tokens", "1", "--http-client", "aiohttp",
            "--sim-args", "--slots 4096 --ttft-ms 0 --itl-ms 0", *RELAXED]  # fmt: skip
    p = sweep_cli(args, tmp_path / "c", timeout=140)
    res = shown_alike(p, tmp_path / "c")
    a = res["answer"]
    verdicts = [q["verdict"] for q in res["probes"]]
    assert verdicts[:3] == ["invalid"] * 3 and "pass" in verdicts, verdicts
    assert "client limit: generator send rate" in flat(p.stdout)  # the 6000 req/s probes say why
    server_bound = ("unstable: backlog growing", "FAIL on the server's errors alone")
    unstable = [
        q for q in res["probes"] if q["verdict"] == "fail" and any(r.startswith(server_bound) for r in q["reasons"])
    ]
    if unstable and p.returncode == 0:
        # the simulated endpoint shares this machine's cores: on a busy one its backlog can grow (or it
        # fails requests) below the client's limit (the CI machine's FAILed at 2000 req/s, 0 % over). Then the server is the limit and the
        # answer is an ordinary one, below the rate whose backlog grew, with no client lower bound.
        assert a["limited_by"] != "client" and a["max_rate_rps"] is not None, a
        assert a["max_rate_rps"] < min(q["offered_rps"] for q in unstable), (a, unstable)
        assert "could not be tested by this client" not in flat(p.stdout)
        return
    assert p.returncode == 5, p.stdout + p.stderr  # a lower bound, as before
    assert a["limited_by"] == "client" and a["max_rate_rps"] is not None
    y = a["untested_above_rps"]
    assert y > a["max_rate_rps"] and (y - a["max_rate_rps"]) / a["max_rate_rps"] <= 0.5
    assert any(q["verdict"] == "invalid" and q["offered_rps"] == y for q in res["probes"])
    err = flat(p.stderr)
    assert "plan: about 3 probes to reach 50 % precision; estimated total" in err  # 4000, 8000, then 1 step
    assert err.count("estimated total") == len(res["plan"]["estimates"]) >= 2  # updated as probes finish
    text = flat(p.stdout)
    assert f"client limited: {a['max_rate_rps']:,.2f} req/s meets ttft:p90<=2000ms" in text
    assert f"rates above {y:,.2f} req/s could not be tested by this client" in text
    assert "(--cpus), more client processes (--workers), or another machine" in text
