"""A run's report.html (loadgen.report.run_html): client and server series in one figure, one time axis."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loadgen.engine.timeseries import series
from loadgen.report.run_html import write_run_report

pytest.importorskip("matplotlib")


def _result(server: dict | None) -> dict:
    lines = [{"index": i, "phase": "measure", "status": "ok", "scheduled_s": i * 0.5, "sent_s": i * 0.5,
              "e2e_ms": 400.0, "ttft_ms": 20.0 + i, "output_tokens": 8} for i in range(24)]  # fmt: skip
    res = {"timeseries": series(lines, server=server), "counts": {"completed": 24, "failed": 0},
           "validity": {"valid": False, "limited_by": "client"}}  # fmt: skip
    if server:
        res["server"] = {"kind": "vllm", "metrics_url": "http://127.0.0.1:1/metrics", "scrapes": 40, **server}
    return res


def test_the_combined_figure_draws_the_server_beside_the_client(tmp_path: Path) -> None:
    t = [k * 0.3 for k in range(40)]
    server = {"series": {"t_s": t, "gauges": {"running": [k % 5 for k in range(40)], "waiting": [0] * 40,
                                              "kv_cache_usage": [0.01 * k for k in range(40)]}}}  # fmt: skip
    page = write_run_report(_result(server), tmp_path)
    assert page is not None
    text = page.read_text()
    for gid in ("client-ttft", "client-inflight", "server-running", "server-waiting", "server-kv"):
        assert f'id="{gid}"' in text, gid
    assert "INVALID (limited by the client)" in text and "<script" not in text
    json.dumps(_result(server))  # the timeseries block stays plain JSON


def test_without_a_server_only_the_client_panel(tmp_path: Path) -> None:
    page = write_run_report(_result(None), tmp_path)
    assert page is not None
    text = page.read_text()
    assert 'id="client-inflight"' in text and 'id="server-running"' not in text
    assert "--server-metrics URL" in text  # says how to put the server on the axis
