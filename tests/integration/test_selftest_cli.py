"""``loadgen selftest`` as a user types it (issue 31 item 5): real ``loadgen run`` levels against the
``--fast`` simulator's truth log; the certificate printed and written as selftest.json, each
level's figures measured (finite errors paired with the truth, throughput, CPU, memory)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tests.fixtures.cli_proc import cli_run


@pytest.mark.timing
def test_selftest_writes_and_prints_a_certificate(tmp_path: Path) -> None:
    out = tmp_path / "cert"
    p = cli_run("selftest", "--users", "8", "--rates", "50", "--duration", "1.5s", out=out, timeout=180)
    assert p.returncode in (0, 1), p.stdout[-2000:] + p.stderr[-2000:]
    cert = json.loads((out / "selftest.json").read_text())
    assert [(x["kind"], x["level"]) for x in cert["levels"]] == [("closed", 8), ("open", 50)]
    for x in cert["levels"]:
        assert x["output_tps"] > 0 and x["client_cores"] > 0 and x["rss_mib"] and x["rss_mib"] > 10
        for k in ("ttft_p50_err_ms", "ttft_p99_err_ms", "itl_p99_err_ms"):
            assert math.isfinite(x[k]), (k, x)
        assert x["honest"] == (
            x["valid"] and all(abs(x[k]) <= 2.0 for k in ("ttft_p50_err_ms", "ttft_p99_err_ms", "itl_p99_err_ms"))
        )
    assert cert["levels"][1]["schedule_lag_p99_ms"] is not None
    assert "this machine's client:" in p.stdout and "selftest.json" in p.stdout
    assert (p.returncode == 0) == bool(cert["highest_honest_closed"] or cert["highest_honest_open"])
    assert (out / "levels" / "closed-8" / "run" / "requests.jsonl").exists()
