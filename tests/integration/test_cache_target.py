"""``loadgen run --cache-hit-target F`` against the simulated endpoint's prefix cache (issue 32 item 5).

The run builds block-aligned shared prefixes for the target, primes the cache with one request per prefix
group before its window, and says whether the share the server reported (``cached_tokens`` over prompt
tokens of the measured requests) held within 5 points. Before, there was no such option (a usage error).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.fixtures.cli_proc import cli_run


@pytest.mark.parametrize(("target", "groups", "block"), [("0.5", "1", "16"), ("30%", "3", "32")])
def test_the_cache_hit_target_is_built_primed_and_held(tmp_path: Path, target: str, groups: str, block: str) -> None:
    out = tmp_path / "run"
    p = cli_run("run", "--rate", "10", "--requests", "30", "--input-tokens", "320", "--output-tokens", "2",
                "--cache-hit-target", target, "--cache-block-size", block, "--prefix-groups", groups,
                "--sim-args", f"--prefix-cache-blocks 4000 --prefix-block-tokens {block}", out=out)  # fmt: skip
    assert p.returncode in (0, 1), p.stderr[-2000:]
    r = json.loads((out / "result.json").read_text())
    t = r["cache_hit_target"]
    want = 0.5 if target == "0.5" else 0.3
    assert t["primed"] == {"requests": int(groups), "ok": int(groups)}, t
    assert t["held"] is True and abs(t["achieved_client"] - want) <= 0.05, t
    assert r["tokens"]["cached_input_reported_requests"] == 30  # the priming requests are not in the run
    assert "prefix cache: " in p.stdout and f"--cache-hit-target {float(want):g}: held" in p.stdout, p.stdout


def test_every_run_says_its_hit_share_or_why_it_has_none(tmp_path: Path) -> None:
    p = cli_run("run", "--rate", "10", "--requests", "5", "--output-tokens", "2", out=tmp_path / "a")
    assert "prefix cache: no hit share (the server reported no usage.prompt_tokens_details.cached_tokens" in p.stdout
    r = json.loads((tmp_path / "a" / "result.json").read_text())
    assert r["tokens"]["cached_input_rate"] is None and r["tokens"]["cached_input_reported_requests"] == 0
