"""``loadgen locust``: Locust's statistics count each request once; the loadgen tab and its start-form fields.

Every Locust process is a child started through the real CLI with the embedded
simulated endpoint on 127.0.0.1 (Locust is never imported here), bounded in time and
always stopped. The simulated endpoint's truth log counts the requests it really got.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_locust import HAVE_LOCUST, Child, free_port, read_jsonl

pytestmark = [
    pytest.mark.skipif(not HAVE_LOCUST, reason="Locust not installed: pip install 'loadgen[locust]'"),
    pytest.mark.timing,
]


def test_locust_statistics_count_each_request_once(tmp_path: Path) -> None:
    """Locust's own statistics (``--json-file``, written at exit): requests = the requests the server got.

    Before the fix every request was three Locust requests (rows E2E, TTFT, TPOT): the
    total and the RPS were three times the real ones, and the Aggregated row mixed the three.
    """
    truth_path = tmp_path / "truth.jsonl"
    out = tmp_path / "out"
    child = Child(
        ["--sim-args", f"--ttft-ms 20 --itl-ms 5 --truth-log {truth_path}", "--output-tokens", "8",
         "--headless", "-u", "2", "-r", "10", "-t", "3s", "--json-file", str(tmp_path / "stats"), "--out", str(out)],
        tmp_path / "locust.log",
    )  # fmt: skip
    try:
        child.wait(90)
    finally:
        child.kill()
    truth = [t for t in read_jsonl(truth_path) if t["request_id"]]  # the pre-flight carries no id
    stats = json.loads((tmp_path / "stats.json").read_text())
    assert {e["method"] for e in stats} == {"E2E"}, stats  # TTFT/TPOT/ITL are not requests
    locust_total = sum(e["num_requests"] for e in stats)
    res = json.loads((out / "result.json").read_text())
    assert len(truth) >= 10
    assert locust_total == len(truth) == res["counts"]["requests"], (locust_total, len(truth), res["counts"])
    assert sum(e["num_failures"] for e in stats) == res["counts"]["failed"] == 0
    at_stop = res["locust"]["locust_stats_at_stop"]
    assert [r["type"] for r in at_stop] == ["E2E"] and at_stop[0]["requests"] == len(truth)


def _get(url: str) -> tuple[int, bytes]:
    with urllib.request.urlopen(url, timeout=20) as r:
        return r.status, r.read()


def _post(url: str, fields: dict[str, str], csrf: str) -> dict[str, Any]:
    """A state-changing call as the UI's page makes it: with the page's CSRF token (issue 20 item 2)."""
    data = urllib.parse.urlencode(fields).encode()
    req = urllib.request.Request(url, data=data, method="POST", headers={"X-Loadgen-CSRF": csrf})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())


def _wait_port(base: str, child: Child, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            _get(base + "/loadgen")
            return
        except OSError:
            assert time.monotonic() < deadline, child.tail()
            time.sleep(0.2)


def _poll(base: str, ok: Any, timeout_s: float, every_s: float = 0.2) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        d = json.loads(_get(base + "/loadgen")[1])
        if ok(d):
            return d
        assert time.monotonic() < deadline, {k: d.get(k) for k in ("state", "counts", "series", "draining")}
        time.sleep(every_s)


def test_start_form_sets_the_load_and_the_tab_reports_it(tmp_path: Path) -> None:
    """The web UI: loadgen's fields in the start form (refused with one line when wrong), the test run
    with them (open loop, lengths, SLO), the tab's JSON and page carrying the metrics, charts, SLO
    verdict and throughput, "draining" after Stop, then the result."""
    port = free_port()
    out = tmp_path / "out"
    child = Child(
        ["--sim-args", "--ttft-ms 30 --itl-ms 200", "--output-tokens", "16", "--out", str(out),
         "--web-port", str(port), "--stop-timeout", "20"], tmp_path / "ui.log",
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    stopper: threading.Thread | None = None
    try:
        _wait_port(base, child, 60)
        page = _get(base + "/")[1].decode()
        assert '<script src="./loadgen/tab.js"></script>' in page  # the tab's panel
        csrf = page.split('var T="', 1)[1].split('"', 1)[0]  # the page's CSRF token (loadgen.locust.webguard)
        opts = json.loads(page.split("window.templateArgs = ", 1)[1].split("</script>", 1)[0].strip())["extra_options"]
        assert set(opts) == {"loadgen_rate", "loadgen_arrival", "loadgen_input_tokens", "loadgen_output_tokens",
                             "loadgen_slo"}, opts  # fmt: skip
        assert opts["loadgen_output_tokens"]["default_value"] == "16"  # the command line's value
        js = _get(base + "/loadgen/tab.js")[1].decode()
        assert "draining" in js and "<svg" in js
        common = {"user_count": "1", "spawn_rate": "1", "loadgen_arrival": "constant",
                  "loadgen_input_tokens": "32", "loadgen_output_tokens": "6"}  # fmt: skip
        bad = _post(base + "/swarm", {**common, "loadgen_rate": "5", "loadgen_slo": "ttft<=1s"}, csrf)
        assert bad["success"] is False and "invalid SLO" in bad["message"], bad
        assert json.loads(_get(base + "/loadgen")[1])["state"] == "idle"  # nothing started
        started = _post(
            base + "/swarm", {**common, "loadgen_rate": "5", "loadgen_slo": "ttft:p99<=5s,tpot:p99<=5s"}, csrf
        )
        assert started["success"] is True, started
        d = _poll(base, lambda d: d["state"] == "running" and len((d["series"] or {}).get("t_s", [])) >= 2, 40)
        assert d["mode"] == "open loop" and "constant arrivals at 5 req/s" in d["arrivals"]
        assert d["settings"]["rate"] == 5.0 and d["settings"]["output_tokens"] == "6"
        assert d["slo_targets"] == ["ttft:p99<=5s", "tpot:p99<=5s"]
        assert [t["target"] for t in d["slo"]["targets"]] == ["ttft:p99<=5000ms", "tpot:p99<=5000ms"]
        assert isinstance(d["slo"]["met"], bool) and d["slo"]["attainment"] is not None
        assert d["throughput"]["output_tps"] > 0 and d["throughput"]["completion_rps"] > 0
        s = d["series"]
        assert len(s["t_s"]) == len(s["output_tps"]) == len(s["ttft_p99_ms"]) and max(s["output_tps"]) > 0
        rows = {r["metric"]: r for r in d["rows"]}
        assert rows["TTFT"]["count"] > 0 and rows["ITL (per token, HDR)"]["count"] > 0 and rows["TPOT"]["count"] > 0
        stats = json.loads(_get(base + "/stats/requests")[1])
        assert {e["method"] for e in stats["stats"] if e["name"] != "Aggregated"} == {"E2E"}
        assert stats["extended_stats"][0]["data"][1]["metric"] == "TTFT"
        # Stop blocks until the requests in flight (6 tokens at 200 ms: ~1.2 s each) have finished
        stopper = threading.Thread(target=_post, args=(base + "/stop", {}, csrf), daemon=True)
        stopper.start()
        drain = _poll(base, lambda d: d["state"] != "running", 30, every_s=0.05)
        assert drain["state"] == "draining", drain["state"]
        assert drain["draining"]["in_flight"] >= 1 and drain["draining"]["stop_timeout_s"] == 20
        done = _poll(base, lambda d: d["state"] == "stopped", 60)
        assert done["result_path"] == str(out / "result.json")
    finally:
        if stopper is not None:
            stopper.join(30)
        child.terminate()
        try:
            child.wait(40)
        finally:
            child.kill()
    res = json.loads((out / "result.json").read_text())
    assert res["locust"]["mode"] == "open loop" and res["config"]["rate"] == 5.0
    assert res["config"]["output_tokens"] == "6" and res["config"]["slos"] == ["ttft:p99<=5s", "tpot:p99<=5s"]
    assert [t["target"] for t in res["slo"]["targets"]] == ["ttft:p99<=5000ms", "tpot:p99<=5000ms"]
    assert "cancelled" not in res["counts"]["errors_by_kind"]  # the drain let them finish
    recs = read_jsonl(out / "requests.jsonl")
    assert recs and all(r["requested_output_tokens"] == 6 for r in recs)
    e2e = res["locust"]["locust_stats_at_stop"]
    assert [r["type"] for r in e2e] == ["E2E"] and e2e[0]["requests"] == res["counts"]["requests"] == len(recs)
