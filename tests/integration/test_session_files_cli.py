"""Hostile session files through the real command line (issue 32 item 3): ``run``, ``sweep`` and ``locust``
each refuse a bad file before any load, with exit code 2, exactly one ``Error:`` line naming the file, the
line and the field, and no traceback; nothing a later run could take for a result is written. A year-long
gap is not an error: the dry run's schedule holds it capped at the idle cap, and one warning line says so.

The commands are those of the brief (``--rate 2 --requests 2 --api chat``, the embedded simulated endpoint):
the check runs before the endpoint starts, so each case costs the CLI's start-up only.
"""

from __future__ import annotations

import concurrent.futures
import importlib.util
import json
import re
import subprocess
from pathlib import Path

import pytest

from tests.fixtures.cli_proc import cli_run

RUN = ["run", "--rate", "2", "--requests", "2", "--api", "chat"]
TURN = '{"new_tokens": 5, "output_tokens": 2'
GOOD = '{"session_id": "ok", "turns": [' + TURN + "}]}"
ROUND = (
    '{{"session_id": "s", "round_index": {i}, "input_tokens_total": {n}, "output_tokens": 4, '
    '"timing_events": [{{"timestamp": "{a}"}}, {{"timestamp": "{b}"}}]}}'
)

# name -> (file text, the field the error names on line 2)
FILES = {
    "huge-delay.jsonl": (
        GOOD + '\n{"session_id": "a", "turns": [' + TURN + "}, " + TURN + ', "delay_s": 1e308}]}',
        "turns[1].delay_s",
    ),
    "negative-delay.jsonl": (
        GOOD + '\n{"session_id": "a", "turns": [' + TURN + "}, " + TURN + ', "delay_s": -1}]}',
        "turns[1].delay_s",
    ),
    "timestamp-turn.jsonl": (
        GOOD + '\n{"session_id": "a", "turns": [' + TURN + "}, " + TURN + ', "timestamp": 9}]}',
        "turns[1].timestamp",
    ),
    "deep.jsonl": (GOOD + '\n{"session_id": "a", "x": ' + "[" * 50_000 + "]" * 50_000 + "}", "row"),
    "duplicate-round.jsonl": (
        ROUND.format(i=0, n=100, a="2026-01-01T00:00:00Z", b="2026-01-01T00:00:01Z")
        + "\n"
        + ROUND.format(i=0, n=200, a="2026-01-01T00:00:02Z", b="2026-01-01T00:00:03Z"),
        "round_index",
    ),
}
HAVE_LOCUST = importlib.util.find_spec("locust") is not None


def _one_error(p: subprocess.CompletedProcess[str], f: Path, field: str, out: Path) -> None:
    assert "Traceback" not in p.stderr, p.stderr[-2000:]
    assert p.returncode == 2, (p.returncode, p.stderr[-800:])
    errors = [ln for ln in p.stderr.splitlines() if ln.startswith("Error:")]
    assert len(errors) == 1, p.stderr
    assert re.match(rf"Error: {re.escape(str(f))}:2: field '{re.escape(field)}': \S", errors[0]), errors[0]
    written = {x.name for x in out.iterdir()} if out.exists() else set()
    assert not {"result.json", "requests.jsonl", "schedule.jsonl"} & written, written


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("hostile")
    for name, (text, _) in FILES.items():
        (d / name).write_text(text + "\n")
    return {name: d / name for name in FILES}


def test_run_refuses_each_hostile_file_in_one_line_before_load(files: dict[str, Path], tmp_path: Path) -> None:
    with concurrent.futures.ThreadPoolExecutor(max_workers=3) as pool:
        jobs = {
            name: pool.submit(cli_run, *RUN, "--sessions", str(f), out=tmp_path / name, cwd=tmp_path)
            for name, f in files.items()
        }
        for name, job in jobs.items():
            _one_error(job.result(), files[name], FILES[name][1], tmp_path / name)


def test_sweep_refuses_each_hostile_file_in_one_line_before_load(files: dict[str, Path], tmp_path: Path) -> None:
    _each(files, tmp_path, ["sweep", "--slo", "ttft:p90<=80ms", "--api", "chat"])


@pytest.mark.skipif(not HAVE_LOCUST, reason="Locust not installed: pip install 'loadgen[locust]'")
def test_locust_refuses_each_hostile_file_once_before_any_user(files: dict[str, Path], tmp_path: Path) -> None:
    _each(files, tmp_path, ["locust", "--api", "chat", "--headless", "-u", "2", "-t", "3s"])


def _each(files: dict[str, Path], tmp_path: Path, cmd: list[str]) -> None:
    """``cmd --sessions FILE`` for every hostile file (issue 32 must-show 3: run, sweep and locust alike)."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=3) as pool:
        jobs = {name: pool.submit(cli_run, *cmd, "--sessions", str(f), out=tmp_path / name, cwd=tmp_path)
                for name, f in files.items()}  # fmt: skip
        for name, job in jobs.items():
            _one_error(job.result(), files[name], FILES[name][1], tmp_path / name)


def test_a_year_long_start_gap_is_capped_with_one_warning(tmp_path: Path) -> None:
    f = tmp_path / "year.jsonl"
    f.write_text(
        '{"session_id": "a", "start_s": 0, "turns": [' + TURN + "}]}\n"
        '{"session_id": "b", "start_s": 31536000, "turns": [' + TURN + "}]}\n"
    )
    out = tmp_path / "dry"
    p = cli_run("run", "--sessions", str(f), "--api", "chat", "--dry-run", out=out, cwd=tmp_path)
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr[-2000:]
    warnings = [ln for ln in p.stderr.splitlines() if ln.startswith("warning:")]
    assert len(warnings) == 1 and str(f) in warnings[0] and "idle cap of 1 h" in warnings[0], p.stderr
    starts = [json.loads(x)["start_s"] for x in (out / "schedule.jsonl").read_text().splitlines()]
    assert starts == [0.0, 3600.0]
