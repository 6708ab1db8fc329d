"""The run result in memory (:class:`loadgen.core.run_result.RunResult`) is ``result.json``'s body, block by block."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

from loadgen.core.run_result import RunResult
from tests.fixtures.run_results import run_result

ROOT = Path(__file__).resolve().parents[2]


def test_one_field_per_block_of_the_published_schema() -> None:
    schema = json.loads((ROOT / "docs" / "schemas" / "result.schema.json").read_text())
    assert set(RunResult.__struct_fields__) == set(schema["properties"])
    assert set(schema["required"]) <= set(RunResult.__struct_fields__)


def test_a_body_with_every_block_round_trips_exactly() -> None:
    body = run_result({}).to_dict()
    for name in RunResult.__struct_fields__:
        if name not in body:
            body[name] = [{"stage": 0}] if name == "stages" else {"from": name}
    body.update(validity={"valid": False, "checks": []}, throughput={"request_rps": 12}, duration_s=3)
    r = RunResult.from_dict(body)
    assert r.to_dict() == body
    assert r.valid is False and r.request_rps == 12.0 and r.duration_s == 3.0
    assert r.block("why") == {"from": "why"}


def test_a_block_written_as_null_stays_null_and_one_not_written_stays_out() -> None:
    r = run_result({"server": None})
    d = r.to_dict()
    assert d["server"] is None and r.block("server") is None
    assert "slo" not in d and r.block("slo") is None
    assert "energy" not in d


def test_an_unknown_block_is_refused_not_dropped() -> None:
    with pytest.raises(msgspec.ValidationError, match="new_block"):
        run_result({"new_block": {}})
