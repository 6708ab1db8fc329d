"""``loadgen sweep --resume DIR`` as the user types it (issue 35, item 3): a sweep whose process died after
its second probe goes on from its directory; the finished probes are read (said per probe, never run
again), the rest run and written there; options that differ from the recorded ones are refused in one line."""

from __future__ import annotations

import json
from pathlib import Path

from tests.fixtures.cli_proc import cli_run

SWEEP = ["sweep", "--slo", "ttft:p99<=200ms", "--sim-args", "--slots 4 --ttft-ms 5 --itl-ms 1 --tokens-per-chunk 4",
         "--probe-duration", "1s", "--max-probe-duration", "1s", "--calibration", "1s", "--precision", "50%",
         "--confidence", "50%", "--input-tokens", "16", "--output-tokens", "16", "--max-schedule-lag", "200ms",
         "--max-loop-lag", "200ms"]  # fmt: skip


def test_a_sweep_killed_after_two_probes_resumes_from_its_directory(tmp_path: Path) -> None:
    out = tmp_path / "sweep"
    p = cli_run(*SWEEP, out=out, timeout=240)
    assert p.returncode in (0, 1, 5), p.stdout[-2000:] + p.stderr[-2000:]
    first = json.loads((out / "sweep.json").read_text())
    assert len(first["probes"]) >= 3, first["probes"]
    assert (out / "config.used.toml").exists() and (out / "search_state.json").exists()
    lines = (out / "probes.jsonl").read_text().splitlines()
    assert len(lines) == len(first["probes"])
    # as if killed while its third probe ran: two finished probes on disk, no sweep.json
    (out / "probes.jsonl").write_text("\n".join(lines[:2]) + "\n")
    (out / "sweep.json").unlink()
    kept = [(out / q["dir"] / "result.json").stat().st_mtime_ns for q in first["probes"][:2]]

    p = cli_run("sweep", "--resume", str(out), timeout=240)
    assert p.returncode in (0, 1, 5), p.stdout[-2000:] + p.stderr[-2000:]
    said = p.stdout + p.stderr
    assert "probe 1: read from" in said and "probe 2: read from" in said and "probe 3: read from" not in said
    assert "calibration: " not in said and "unloaded check:" not in said  # both read, not run again
    res = json.loads((out / "sweep.json").read_text())
    assert res["resumed"]["probes_read"] == 2 and res["resumed"]["from"] == str(out)
    assert [q["offered_rps"] for q in res["probes"][:2]] == [q["offered_rps"] for q in first["probes"][:2]]
    assert [(out / q["dir"] / "result.json").stat().st_mtime_ns for q in res["probes"][:2]] == kept  # not run again
    assert res["calibration"] == first["calibration"]
    assert len((out / "probes.jsonl").read_text().splitlines()) == len(res["probes"])

    clash = cli_run("sweep", "--resume", str(out), "--precision", "20%", timeout=60)
    err = [ln for ln in clash.stderr.splitlines() if ln.startswith("Error:")]
    assert clash.returncode == 2 and len(err) == 1 and "--precision" in err[0] and "Traceback" not in clash.stderr
    elsewhere = cli_run("sweep", "--resume", str(out), "--out", str(tmp_path / "other"), timeout=60)
    assert elsewhere.returncode == 2 and "--out" in elsewhere.stderr and not (tmp_path / "other").exists()
    nothing = cli_run("sweep", "--resume", str(tmp_path), timeout=60)
    assert nothing.returncode == 2 and "no config.used.toml there" in nothing.stderr
