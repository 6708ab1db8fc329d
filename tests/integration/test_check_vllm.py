"""``loadgen check`` on the real vLLM (tiny model) at temperature 0: against itself, 100 % agreement.

Reuses the module-scoped vLLM fixture of ``test_real_vllm`` (skipped with the reason when
``.venv-vllm`` is missing). Two checks of the shipped questions, one at light load and one
open loop at 20 req/s (outputs batched together), compared token by token.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from loadgen.check import CheckSettings, run_check
from loadgen.serve import ServerProcess
from tests.integration.test_real_vllm import model_dir, vllm  # noqa: F401  (fixtures)

pytestmark = pytest.mark.slow


def test_check_against_itself_is_full_agreement(vllm: ServerProcess, tmp_path: Path) -> None:  # noqa: F811
    s = CheckSettings(model="tiny", max_tokens=16)
    ref = run_check(vllm.base_url, settings=s, answers=True, out_dir=tmp_path / "ref")
    assert ref["summary"]["errors"] == 0 and ref["token_ids"] is True
    assert all(len(o["token_ids"]) == o["output_tokens"] for o in ref["outputs"])
    loaded = CheckSettings(model="tiny", max_tokens=16, rate_rps=20.0)
    doc = run_check(vllm.base_url, settings=loaded, reference=str(tmp_path / "ref"), answers=True, out_dir=tmp_path / "c")
    ag = doc["agreement"]
    print("\nagreement:", ag, "accuracy:", doc["summary"]["accuracy"])
    assert ag["token_unit"] == "token_ids" and ag["prompts"] == 40 and ag["warnings"] == []
    assert ag["first_token_agreement"] == 1.0
    assert ag["exact_match_rate"] == 1.0
    assert ag["mean_lcp_fraction"] == 1.0
    assert ag["output_length_agreement"] == 1.0 and ag["output_length_ratio"] == 1.0
    # a random tiny model answers nothing right; the grading ran all 40 questions
    assert doc["summary"]["accuracy"]["questions"] == 40
