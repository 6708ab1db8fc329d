"""A full disk on ``--out`` (issue 20 item 5), through the real command line: ``requests.jsonl`` is
/dev/full (every write fails with ENOSPC). Before: the writer died silently, the run sent its whole
schedule and ended in a 55-line traceback. Now: sending stops at the first failed write, one
``error:`` line, exit 7, whole lines only; in one process and with worker processes."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.fixtures.cli_proc import cli_run

pytestmark = pytest.mark.timing  # asserts timing figures: the serial phase


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux)")
@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_full_disk_stops_the_run_with_one_line(tmp_path: Path, workers: str) -> None:
    out, truth = tmp_path / "out", tmp_path / "truth.jsonl"
    out.mkdir()
    (out / "requests.jsonl").symlink_to("/dev/full")
    p = cli_run(
        "run", "--rate", "20", "--requests", "200", "--output-tokens", "4",
        "--workers", workers, "--sim-args", f"--ttft-ms 5 --itl-ms 1 --truth-log {truth}", out=out, timeout=120,
    )  # fmt: skip
    assert p.returncode == 7, p.stderr
    assert "Traceback" not in p.stderr
    errors = [ln for ln in p.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and "No space left on device" in errors[0] and "stopped" in errors[0], p.stderr
    assert not (out / "result.json").exists()
    sent = [json.loads(x) for x in truth.read_text().splitlines() if x.strip()]
    assert len(sent) < 60, f"{len(sent)} of 200 requests sent after the first failed write"  # 10 s of schedule
