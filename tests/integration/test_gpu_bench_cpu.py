"""``scripts/gpu_bench --cpu`` as a person types it (issue 19 item 6): the prepared accelerator benchmark's
every step on the CPU build of vLLM (.venv-vllm), with the tiny trunk of the 8B model's builder.

Needs ``.venv-vllm`` (``scripts/setup_servers vllm``) or ``$LOADGEN_VLLM_PYTHON``; skipped with the reason
otherwise. One vLLM start (~30-45 s on two quiet cores; ~100 s when the machine is shared) and two
2-second probes; nothing timed is asserted. On a busy machine a probe may be INVALID (client-limited,
exit 5 of the sweep): the script still writes the scorecard, and the answer must agree with its probes.
The CPU form gives vLLM no KV-cache size and no dtype: its ``sweep --serve vllm`` is also the CI's check
of loadgen's CPU defaults (``conditions.server.cpu_defaults``: float32 and a 1 GiB KV cache), the one
the README's ``sweep --serve vllm`` line ran as a third vLLM start.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from loadgen.serve.vllm import find_server_python

pytestmark = [pytest.mark.slow, pytest.mark.timing, pytest.mark.alone]  # alone: vLLM on CPU stalls its neighbours

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(600)
def test_gpu_bench_cpu_form(tmp_path: Path) -> None:
    py, source = find_server_python("vllm")
    if "no --server-python" in source or not os.path.exists(py):
        pytest.skip("no vLLM environment: run scripts/setup_servers vllm (or set LOADGEN_VLLM_PYTHON)")
    pytest.importorskip("tokenizers")
    out = tmp_path / "bench"
    p = subprocess.run([str(ROOT / "scripts" / "gpu_bench"), "--cpu", "--out", str(out)], cwd=ROOT,
                       capture_output=True, text=True, timeout=560)  # fmt: skip
    said = p.stdout[-4000:] + p.stderr[-3000:]
    assert p.returncode == 0, said
    bench = json.loads((out / "bench.json").read_text())
    steps = {s["step"]: s for s in bench["steps"]}
    assert list(steps) == ["gpu", "vllm", "model", "sweep", "scorecard"], said
    assert all(s["ok"] for k, s in steps.items() if k != "sweep") and steps["sweep"]["rc"] in (0, 1, 5), steps
    assert bench["form"] == "cpu" and bench["vllm"]["cpu_build"] is True
    assert bench["model"]["shape"] == "tiny" and bench["model"]["weights"] == "files"
    assert (out / "model" / "model.safetensors.index.json").exists()  # vLLM served the files the script wrote
    sweep = json.loads((out / "sweep" / "sweep.json").read_text())
    server = sweep["conditions"]["server"]
    assert server["kind"] == "vllm" and (out / "sweep" / "server" / "vllm-server.log").exists()
    # loadgen's CPU defaults let the CPU build start and answer (no engine memory or dtype options given)
    kv = [] if os.environ.get("VLLM_CPU_KVCACHE_SPACE") else ["VLLM_CPU_KVCACHE_SPACE=1"]  # the user's own wins
    assert server["dtype"] == "float32" and server["cpu_defaults"] == ["--dtype", "float32", *kv], server
    # the latest verdict at a rate stands (a certifying probe judges its requests with the probe it continues);
    # where the highest standing PASS stayed a point estimate, the answer may be the certified one below it, said
    latest = {p["offered_rps"]: p for p in sweep["probes"] if p.get("concurrency") is None}
    passed = [r for r, p in latest.items() if p["verdict"] == "pass"]
    certified = [r for r, p in latest.items() if p["verdict"] == "pass" and not p["low_confidence"]]
    a = sweep["answer"]
    assert a["max_rate_rps"] == (max(passed) if passed else None) or (
        a["max_rate_rps"] == max(certified, default=None) and a.get("point_estimate_pass_above_rps") == max(passed)
    ), (a, sweep["probes"])
    for q in sweep["probes"]:
        if q["verdict"] == "pass":  # random weights, ignore_eos: every output exactly the 8 tokens asked
            res = json.loads((out / "sweep" / q["dir"] / "result.json").read_text())
            assert res["counts"]["failed"] == 0 and res["tokens"]["output"] == 8 * res["counts"]["completed"]
            assert res["server"]["energy"]["measured"] is False  # no NVIDIA GPU here: said, never a made-up figure
    card = json.loads((out / "scorecard" / "scorecard.json").read_text())
    assert [s["label"] for s in card["systems"]] == ["sweep"] and (out / "scorecard" / "scorecard.html").exists()
    tpj = next(r for r in card["rows"] if r["key"] == "output_tokens_per_joule")
    assert tpj["values"]["sweep"] == "not measured"
    assert bench["results"][0]["max_rate_rps"] == sweep["answer"]["max_rate_rps"]
