"""Re-run and label from the command line: ``--config FILE`` (TOML, YAML), the ``config.used.toml``
each result carries (no secrets), ``--label`` as the system's name in ``loadgen compare``, and the
``requests.csv`` beside ``requests.jsonl``. Against the session's simulated endpoint (127.0.0.1)."""

from __future__ import annotations

import csv
import json
import subprocess
import tomllib
from pathlib import Path

from click.testing import CliRunner

from loadgen.cli import main
from tests.fixtures.cli_proc import cli_run

SECRET = "sk-config-SENTINEL-98765"


def _ran(p: subprocess.CompletedProcess[str]) -> None:
    # 0, or 1 when a busy machine made the client's timing INVALID: the run itself happened
    assert p.returncode in (0, 1), p.stderr[-2000:]


def test_run_config_used_repeats_the_run_without_secrets(sim_url: str, tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    _ran(cli_run("run", "--endpoint", sim_url, "--request-rate", "40", "--num-prompts", "12", "--input-tokens",
                 "uniform:20,40", "--output-tokens", "6", "--seed", "7", "--label", "system-a", "--header",
                 f"Authorization: Bearer {SECRET}", "--header", "X-Team: perf", "--extra-body",
                 f'{{"temperature": 0.5, "api_key": "{SECRET}"}}', out=a))  # fmt: skip
    used = (a / "config.used.toml").read_text()
    assert SECRET not in used and "Authorization" in used  # named in a comment, never its value
    cfg = tomllib.loads(used)
    assert cfg["rate"] == 40.0 and cfg["requests"] == 12 and cfg["input-tokens"] == "uniform:20,40"
    assert cfg["seed"] == 7 and cfg["label"] == "system-a" and cfg["header"] == ["X-Team: perf"]
    assert json.loads(cfg["extra-body"]) == {"temperature": 0.5, "api_key": "***"}
    assert "out" not in cfg and "salt" not in cfg  # a re-run writes a new directory, with a fresh salt
    # the re-run, from another directory, with the secret given again and a new label (the command line wins)
    _ran(cli_run("run", "--config", str(a / "config.used.toml"), "--label", "system-b", "--header",
                 f"Authorization: Bearer {SECRET}", out=b, cwd=tmp_path))  # fmt: skip
    ra, rb = (json.loads((d / "result.json").read_text()) for d in (a, b))
    for k in ("rate", "n_requests", "input_tokens", "output_tokens", "seed", "endpoint", "arrival", "timeout"):
        assert ra["config"][k] == rb["config"][k], k
    assert ra["config"]["header_names"] == rb["config"]["header_names"] == ["Authorization", "X-Team"]
    assert (ra["config"]["label"], rb["config"]["label"]) == ("system-a", "system-b")
    assert rb["counts"]["requests"] == 12
    assert (b / "config.used.toml").read_text() == used.replace('"system-a"', '"system-b"')
    # requests.csv: one row per requests.jsonl line, the same values
    lines = [json.loads(x) for x in (a / "requests.jsonl").read_text().splitlines()]
    with open(a / "requests.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == len(lines) == 12
    for row, line in zip(rows, lines, strict=True):
        assert int(row["index"]) == line["index"] and row["status"] == line["status"]
        assert float(row["e2e_ms"]) == line["e2e_ms"] and int(row["output_tokens"]) == line["output_tokens"]
    # --label names the system in the scorecard
    cmp_out = tmp_path / "cmp"
    p = cli_run("compare", str(a), str(b), "--force", out=cmp_out)
    assert p.returncode == 0, p.stderr
    card = json.loads((cmp_out / "scorecard.json").read_text())
    assert [s["label"] for s in card["systems"]] == ["system-a", "system-b"]


def test_yaml_config_and_its_errors(sim_url: str, tmp_path: Path) -> None:
    y = tmp_path / "run.yaml"
    y.write_text(f"endpoint: {sim_url}\nrate: 50\nnum_prompts: 5\noutput-tokens: 4\nslo: 'e2e:p99<=60s'\n")
    _ran(cli_run("run", "--config", str(y), out=tmp_path / "y"))
    r = json.loads((tmp_path / "y" / "result.json").read_text())
    assert r["counts"]["requests"] == 5 and r["config"]["slos"] == ["e2e:p99<=60s"] and r["config"]["rate"] == 50.0
    bad = tmp_path / "bad.toml"
    bad.write_text("rat = 5\n")
    res = CliRunner().invoke(main, ["run", "--config", str(bad)])
    assert res.exit_code == 2 and "unknown option 'rat' for 'loadgen run' (did you mean 'rate'?)" in res.output
    bad.write_text("rate = [1, 2]\n")
    res = CliRunner().invoke(main, ["sweep", "--config", str(bad)])
    assert res.exit_code == 2 and "'rate' takes one value" not in res.output  # sweep has no --rate: unknown
    assert "unknown option 'rate' for 'loadgen sweep'" in res.output, res.output
    bad.write_text("probe-duration = \n")
    res = CliRunner().invoke(main, ["sweep", "--config", str(bad)])
    assert res.exit_code == 2 and "not valid TOML" in res.output, res.output


def test_sweep_from_a_config_file_and_again_from_its_config_used(tmp_path: Path) -> None:
    """A short sweep (embedded sim) from a TOML file, then again from the config.used.toml it wrote:
    the same options, the same answer, its --label in sweep.json. A sweep stopped before any
    load (nothing listens: exit 3) writes nothing, config.used.toml included."""
    conf = tmp_path / "sweep.toml"
    conf.write_text('slo = ["ttft:p50<=2s"]\nprobe-duration = "1s"\ncalibration = "0"\nstart-rate = 20\n'
                    'max-rate = 30\nprecision = "90%"\ninput-tokens = 16\noutput-tokens = 4\n'
                    'sim-args = "--ttft-ms 1 --itl-ms 1"\nlabel = "sim-fast"\n')  # fmt: skip
    p = cli_run("sweep", "--config", str(conf), out=tmp_path / "s1")
    assert p.returncode in (0, 5), p.stderr[-2000:]  # 5: a lower bound when the busy client was the limit
    used = tomllib.loads((tmp_path / "s1" / "config.used.toml").read_text())
    assert used == {**tomllib.loads(conf.read_text()), "input-tokens": "16", "output-tokens": "4",
                    "start-rate": 20.0, "max-rate": 30.0}  # fmt: skip
    p = cli_run("sweep", "--config", str(tmp_path / "s1" / "config.used.toml"), out=tmp_path / "s2")
    assert p.returncode in (0, 5), p.stderr[-2000:]
    s1, s2 = (json.loads((tmp_path / d / "sweep.json").read_text()) for d in ("s1", "s2"))
    assert s1["config"]["label"] == s2["config"]["label"] == "sim-fast"
    for k in ("slos", "probe_duration", "start_rate", "max_rate", "precision", "input_tokens", "sim_args"):
        assert s1["config"][k] == s2["config"][k], k
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    p = cli_run("sweep", "--config", str(conf), "--endpoint", f"http://127.0.0.1:{port}", out=tmp_path / "s3")
    assert p.returncode == 3 and "cannot reach" in p.stderr, p.stderr
    assert not (tmp_path / "s3" / "config.used.toml").exists()
