"""Scaling from one command, as the user types it (issue 19 item 4): ``loadgen sweep --sim-args
'--fifo --slots {1,2}'`` runs one sweep per size against the embedded simulated endpoint (127.0.0.1;
N independent FIFO servers stand in for N accelerators, as CPU vLLM cannot run tensor parallel),
each size's server started afresh in its own folder, then the scaling table and the scorecard;
``loadgen compare`` over the two folders shows the same capacity per accelerator and efficiency.

Short probes (~30 s in all on a busy 2-core machine); no timing or efficiency value is asserted:
on a busy machine a size may be client-limited (exit 5) or find no rate, and the exit code must then
agree with the sizes' own sweep.json files.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from rich.console import Console

from loadgen.capacity import load_sweep
from loadgen.capacity.scaling import scaling_document
from loadgen.cli import sweep_exit_code
from loadgen.cli.scale import ScaledOutcome
from tests.fixtures.cli_proc import cli_run

pytestmark = pytest.mark.timing  # asserts timing figures: the serial phase


@pytest.mark.timeout(300)
def test_sweep_per_size_then_scaling_table_and_scorecard(tmp_path: Path) -> None:
    out = tmp_path / "scale"
    p = cli_run("sweep", "--slo", "ttft:p90<=300ms", "--calibration", "0", "--start-rate", "8", "--precision", "50%",
                "--probe-duration", "1s", "--max-extensions", "0", "--input-tokens", "16", "--output-tokens", "1",
                "--max-loop-lag", "200ms", "--max-schedule-lag", "50ms", "--quiet",
                "--sim-args", "--fifo --slots {1,2} --ttft-ms 40 --itl-ms 2", out=out, timeout=240)  # fmt: skip
    said = p.stdout[-4000:] + p.stderr[-4000:]
    assert "Traceback" not in p.stderr, said
    docs = [json.loads((out / f"size-{n}" / "sweep.json").read_text()) for n in (1, 2)]
    # each size is its own sweep of its own server: its accelerators recorded, its --slots applied
    assert [d["settings"]["accelerators"] for d in docs] == [1, 2], said
    assert [d["config"]["sim_args"] for d in docs] == ["--fifo --slots 1 --ttft-ms 40 --itl-ms 2",
                                                       "--fifo --slots 2 --ttft-ms 40 --itl-ms 2"]  # fmt: skip
    assert [d["config"]["label"] for d in docs] == ["slots=1", "slots=2"]
    assert "--slots {1,2}" in (out / "config.used.toml").read_text()  # `--config` of it repeats the series
    # the exit code is the worst size's, from the files' own answers
    want = sweep_exit_code(ScaledOutcome(sizes=[SimpleNamespace(result=d) for d in docs]), Console(stderr=True))  # type: ignore[arg-type]  # the scaled outcome
    assert p.returncode == want, said
    scaling = json.loads((out / "scaling.json").read_text())
    again = scaling_document([(n, load_sweep(str(out / f"size-{n}"), f"slots={n}")) for n in (1, 2)])
    assert [r["capacity_rps"] for r in scaling["rows"]] == [r["capacity_rps"] for r in again["rows"]]
    assert [r["efficiency"] for r in scaling["rows"]] == [r["efficiency"] for r in again["rows"]]
    if all(d["answer"]["max_rate_rps"] for d in docs):
        assert scaling["rows"][0]["efficiency"] == 1.0 and "scaling efficiency" in p.stdout
        eff = scaling["rows"][1]["efficiency"]
        assert eff == pytest.approx(docs[1]["answer"]["max_rate_rps"] / (2 * docs[0]["answer"]["max_rate_rps"]))
        # the user's own scorecard over the two folders says the same
        c = cli_run("compare", str(out / "size-1"), str(out / "size-2"), out=tmp_path / "card")
        assert c.returncode == 0, c.stdout + c.stderr
        assert "scaling efficiency" in c.stdout and "per accelerator" in c.stdout
        for card_dir in (out / "scorecard", tmp_path / "card"):
            card = json.loads((card_dir / "scorecard.json").read_text())
            row = next(r for r in card["rows"] if r["key"] == "scaling_efficiency")
            assert row["values"]["slots=2"] == pytest.approx(eff)
            assert "<h2>Scaling</h2>" in (card_dir / "scorecard.html").read_text()
