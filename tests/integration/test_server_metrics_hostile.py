"""``loadgen run --server-metrics`` against hostile /metrics pages (issue 33 item 1): the run is whole.

Before loadgen/serve/scrape.py a 0xff byte at the start of the page was a traceback and no load sent,
mid-run it lost result.json; a page that stalled made each scrape wait 10 s. Now each bad page is a
skipped scrape, counted by kind in result.json, and the run writes everything a run without it does.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.fixtures.cli_proc import cli_run
from tests.fixtures.hostile_metrics import hostile_metrics_server


@pytest.mark.parametrize("page,kind", [("byte-first", "encoding"), ("byte-mid", "encoding"), ("stall", "timeout"),
                                       ("bomb", "too_large")])  # fmt: skip
def test_a_run_beside_a_hostile_metrics_page_is_whole(tmp_path: Path, sim_url: str, page: str, kind: str) -> None:
    out = tmp_path / "out"
    with hostile_metrics_server() as metrics:
        proc = cli_run("run", "--endpoint", sim_url, "--rate", "20", "--requests", "40", "--output-tokens", "3",
                       "--server-metrics", f"{metrics}/{page}", "--server-metrics-interval", "0.5s",
                       "--out", str(out))  # fmt: skip
    assert proc.returncode in (0, 1), proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    res = json.loads((out / "result.json").read_text())
    assert res["counts"]["requests"] == 40
    assert sum(1 for _ in (out / "requests.jsonl").open()) == 40
    srv = res["server"]
    assert srv["scrapes_failed"] >= 2 and srv["scrapes_failed_by_kind"].get(kind, 0) >= 2, srv
    assert srv["metrics"] is None and srv["scrape_errors"]
