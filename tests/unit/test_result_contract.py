"""The result files are a versioned contract (issue 29 item 6, ``loadgen.core.contract``).

Files written by an earlier loadgen (``tests/data/results_v1``: a run and a one-probe sweep written
by the commit before the contract, schema version 1) are read by ``compare`` and ``capacity``; a
newer version is refused in one line naming the file; the published JSON Schemas accept what this
loadgen writes (the run's files here; a fresh sweep.json in tests/integration/test_sweep.py).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from loadgen.core.contract import READS, RESULT_SCHEMA_VERSION, SWEEP_SCHEMA_VERSION, check_version
from loadgen.core.errors import InputFileError
from tests.fixtures.cli_proc import REPO, cli_run

jsonschema = pytest.importorskip("jsonschema")

V1 = REPO / "tests" / "data" / "results_v1"
SCHEMAS = REPO / "docs" / "schemas"


def schema(kind: str) -> dict:
    return json.loads((SCHEMAS / f"{kind}.schema.json").read_text())


def test_the_versions_written_are_the_versions_read_and_published() -> None:
    assert READS["result"][1] == RESULT_SCHEMA_VERSION and READS["sweep"][1] == SWEEP_SCHEMA_VERSION
    assert schema("result")["properties"]["schema_version"]["maximum"] == RESULT_SCHEMA_VERSION
    assert schema("sweep")["properties"]["schema_version"]["maximum"] == SWEEP_SCHEMA_VERSION
    notes = (SCHEMAS / "CHANGES.md").read_text()
    assert f"- **{RESULT_SCHEMA_VERSION}**" in notes


@pytest.mark.parametrize(
    ("doc", "kind", "expected"),
    [
        ({"schema_version": 1, "counts": {}, "latency_ms": {}}, "result", 1),
        ({"schema_version": 2, "answer": {}, "probes": []}, "sweep", 2),
        ({"counts": {}, "latency_ms": {}}, "result", 1),  # the kind's keys without a version: the first form
    ],
)
def test_known_versions_are_read(doc: dict, kind: str, expected: int) -> None:
    assert check_version(doc, kind, "x.json") == expected


@pytest.mark.parametrize(
    ("doc", "words"),
    [
        ({"schema_version": 99, "counts": {}}, "version 99, written by a newer loadgen"),
        ([1, 2], "not a JSON object"),
        ({"hello": 1}, "not a loadgen result.json"),
        ({"schema_version": "2"}, "is not a whole number"),
        ({"schema_version": 0}, "older than this loadgen reads"),
    ],
)
def test_other_files_are_refused_in_one_line_naming_the_file(doc: object, words: str) -> None:
    with pytest.raises(InputFileError) as exc:
        check_version(doc, "result", "runs/a/result.json")
    msg = str(exc.value)
    assert msg.startswith("runs/a/result.json") and words in msg and "\n" not in msg


def test_files_of_version_1_validate_against_the_published_schemas() -> None:
    res = json.loads((V1 / "run" / "result.json").read_text())
    assert res["schema_version"] == 1  # written before the contract: the previous version
    jsonschema.validate(res, schema("result"))
    jsonschema.validate(json.loads((V1 / "sweep" / "sweep.json").read_text()), schema("sweep"))
    for line in (V1 / "run" / "requests.jsonl").read_text().splitlines():
        jsonschema.validate(json.loads(line), schema("requests"))


def test_compare_reads_the_previous_version_and_refuses_a_newer_one(tmp_path: Path) -> None:
    out = cli_run("compare", str(V1 / "run"), str(V1 / "sweep"), "--label", "run-v1", "--label", "sweep-v1",
                  out=tmp_path / "card")  # fmt: skip
    assert out.returncode == 0, out.stderr
    card = json.loads((tmp_path / "card" / "scorecard.json").read_text())
    assert "run-v1" in json.dumps(card) and "sweep-v1" in json.dumps(card)
    newer = tmp_path / "newer"
    shutil.copytree(V1 / "run", newer)
    res = json.loads((newer / "result.json").read_text())
    res["schema_version"] = RESULT_SCHEMA_VERSION + 1
    (newer / "result.json").write_text(json.dumps(res))
    bad = cli_run("compare", str(newer), str(V1 / "sweep"), out=tmp_path / "card2")
    assert bad.returncode == 2, bad.stderr
    errors = [ln for ln in bad.stderr.splitlines() if "Error" in ln]  # (click's usage lines around it)
    assert len(errors) == 1 and "written by a newer loadgen" in errors[0] and str(newer / "result.json") in errors[0]
    assert "Traceback" not in bad.stderr


def test_a_run_writes_files_the_schemas_accept(tmp_path: Path) -> None:
    out = cli_run("run", "--rate", "40", "--requests", "20", "--quiet", out=tmp_path / "run")
    assert out.returncode in (0, 1, 5), out.stderr  # the verdict is not this test's subject: the files are
    res = json.loads((tmp_path / "run" / "result.json").read_text())
    assert res["schema_version"] == RESULT_SCHEMA_VERSION and res["records_schema_version"] >= 2
    jsonschema.validate(res, schema("result"))
    lines = (tmp_path / "run" / "requests.jsonl").read_text().splitlines()
    assert len(lines) == 20
    for line in lines:
        jsonschema.validate(json.loads(line), schema("requests"))
