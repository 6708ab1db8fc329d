"""Commands that refuse what they would misread, with one line and exit 2 (usage), as the user types them.

* ``loadgen plan`` on a session sweep (``sweep.json`` with a ``sessions`` block, from ``loadgen sweep
  --sessions``): its answer is sessions/s, and a plan sizes replicas for requests/s.
* ``loadgen run`` (and ``loadgen locust``) with a brace list in ``--sim-args``/``--serve-args``: a brace
  list asks for a scaling sweep, one server per size (``loadgen sweep``); nothing is started.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests.fixtures.cli_proc import cli_run

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures" / "capacity"


def test_plan_refuses_a_session_sweep(tmp_path: Path) -> None:
    sweep = tmp_path / "sessions-sweep"
    shutil.copytree(FIX / "sim2", sweep)
    doc = json.loads((sweep / "sweep.json").read_text())
    doc["sessions"] = {"unit": "sessions/s", "source": {"source": "synthetic"}, "salted_per_session": True}
    (sweep / "sweep.json").write_text(json.dumps(doc))
    out = tmp_path / "plan"
    p = cli_run("plan", "--capacity", str(sweep), "--demand", str(FIX / "day.csv"), out=out)
    assert p.returncode == 2, p.stdout[-2000:] + p.stderr[-2000:]
    err = " ".join(p.stderr.split())  # click may wrap the line
    assert "is a session sweep" in err and "sessions/s" in err and "without --sessions" in err, p.stderr
    assert not out.exists()  # refused before anything was written
    # the same sweep without its sessions block plans (the refusal is for the session sweep only)
    p = cli_run("plan", "--capacity", str(FIX / "sim2"), "--demand", str(FIX / "day.csv"), out=out)
    assert p.returncode == 0 and (out / "plan.json").is_file(), p.stdout[-2000:] + p.stderr[-2000:]


def test_run_refuses_a_brace_list_in_sim_and_serve_args(tmp_path: Path) -> None:
    for flag, value in (("--sim-args", "--fifo --slots {4,8}"), ("--serve-args", "--tensor-parallel-size {1,2}")):
        extra = ["--serve", "vllm"] if flag == "--serve-args" else []
        p = cli_run("run", *extra, flag, value, "--rate", "1", "--requests", "1", out=tmp_path / "r")
        err = " ".join(p.stderr.split())
        assert p.returncode == 2 and "scaling sweep" in err and "loadgen sweep" in err, p.stderr
        assert "did not start" not in err  # refused before any server was started
    p = cli_run("locust", "--sim-args", "--slots {2,4}", "--headless", out=tmp_path / "l")
    assert p.returncode == 2 and "scaling sweep" in " ".join(p.stderr.split()), p.stderr
