"""``loadgen sweep ... | cat`` as the user runs it (issue 30, item 5): whole numbers, one count per probe.

One short sweep against the embedded simulated endpoint (127.0.0.1), its stdout a pipe with no
``COLUMNS`` (rich's default would be 80 columns): no cell ends in "…", each probe's table row and its
progress line count what sweep.json counts, and report.html is headed by ``--label``. The rates are
high enough that a busy machine's probes may be INVALID; the test holds either way.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.fixtures.cli_proc import cli_run, flat

ARGS = ["--slo", "ttft:p90<=2000ms", "--probe-duration", "0.5s", "--calibration", "0", "--start-rate", "1000",
        "--max-rate", "1000", "--precision", "50%", "--input-tokens", "4", "--output-tokens", "1",
        "--sim-args", "--slots 4096 --ttft-ms 0 --itl-ms 0", "--max-schedule-lag", "100ms", "--max-loop-lag", "100ms",
        "--label", "my-system", "--no-progress"]  # fmt: skip


@pytest.mark.timeout(90)
def test_a_piped_sweep_keeps_whole_numbers_and_one_count_per_probe(tmp_path: Path) -> None:
    out = tmp_path / "sw"
    p = cli_run("sweep", *ARGS, out=out, timeout=80, env={"COLUMNS": None})
    assert "Traceback" not in p.stderr, p.stderr
    assert (out / "sweep.json").exists(), p.stdout + p.stderr
    assert "…" not in p.stdout, p.stdout
    res = json.loads((out / "sweep.json").read_text())
    rows = {}
    for ln in p.stdout.splitlines():
        cells = [c.strip() for c in ln.strip().strip("│").split("│")]
        if len(cells) == 10 and cells[0].isdigit():
            rows[int(cells[0])] = cells
    assert len(rows) == len(res["probes"]) >= 1, p.stdout
    err = flat(p.stderr)
    for i, q in enumerate(res["probes"], 1):
        [t] = q["targets"]
        k, n = t["exceedances"], t["requests"]
        assert rows[i][5] == q["verdict_text"] and rows[i][6] == f"{k} of {n}", (rows[i], t)
        # the probe's line: its verdict, then its reasons (a growing backlog's FAIL names the trend first: a
        # busy CI machine's 1000 req/s probe read "FAIL; unstable: backlog growing ...; ttft:p90<=2000ms: 0 of 500")
        head = f"probe {i}: {q['offered_rps']:.3f} req/s: {q['verdict_text']}; "
        assert head in err, err
        line = err.split(head, 1)[1].split(f"probe {i + 1}: ", 1)[0]
        assert f"ttft:p90<=2000ms: {k} of {n} measured requests over" in line, line
        assert f"{q['offered_rps']:.2f}" in rows[i][1] and "met" not in rows[i]
    page = (out / "report.html").read_text()
    assert "<h1>my-system: load sweep" in page
    assert "System: sim-model on loadgen-sim" in page
