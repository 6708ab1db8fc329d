"""``loadgen run --serve vllm`` on a CPU machine with no memory or dtype options: the CPU defaults
(a 1 GiB KV cache instead of 92 % of RAM, float32 instead of the bfloat16 kernel that dies of
SIGILL on some CPUs) let the real vLLM start and answer, as the user types it.

Slow (one vLLM start, ~40 s); skipped without ``.venv-vllm`` (``scripts/setup_servers vllm``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from loadgen.serve.vllm import find_server_python, is_cpu_build
from tests.fixtures.cli_proc import cli_run
from tests.fixtures.tiny_model import build_tiny_model

pytestmark = [
    pytest.mark.timing,  # asserts timing figures: the timing phase
    pytest.mark.alone,  # vLLM on CPU stalls its neighbours: by itself
    pytest.mark.slow,
    pytest.mark.skipif(
        os.environ.get("CI") == "true",
        reason="in CI, scripts/gpu_bench --cpu (tests/integration/test_gpu_bench_cpu.py) runs `sweep --serve vllm` "
        "without engine memory or dtype options and checks conditions.server.cpu_defaults: one vLLM start fewer",
    ),
]


def test_cli_run_serve_vllm_on_cpu_without_engine_options(tmp_path: Path) -> None:
    py, source = find_server_python("vllm")
    if "no --server-python" in source or not os.path.exists(py):
        pytest.skip("no vLLM environment: run scripts/setup_servers vllm (or set LOADGEN_VLLM_PYTHON)")
    if not is_cpu_build(py):
        pytest.skip("the vLLM environment is not a CPU build")
    pytest.importorskip("tokenizers")
    model = build_tiny_model(tmp_path / "tiny")
    env: dict[str, str | None] = {"VLLM_CACHE_ROOT": str(tmp_path / "cache"), "VLLM_CPU_KVCACHE_SPACE": None}
    if (os.cpu_count() or 1) <= 4:
        env["VLLM_CPU_OMP_THREADS_BIND"] = "0"  # keep a core for the client (as tests/integration/test_real_vllm.py)
    out = tmp_path / "run"
    p = cli_run("run", "--serve", "vllm", "--serve-model", str(model),
                "--served-model-name", "tiny", "--server-python", py, "--serve-args", "--max-model-len 512 --enforce-eager",
                "--rate", "2", "--requests", "6", "--input-tokens", "16", "--output-tokens", "8", out=out,
                timeout=400, env=env)  # fmt: skip
    print(p.stdout[-3000:], p.stderr[-3000:])
    # 0, or 1 when the busy machine made the client's timing INVALID; never 4 (no start) or 6 (all failed)
    assert p.returncode in (0, 1), p.stderr[-2000:]
    result = json.loads((out / "result.json").read_text())
    assert result["counts"]["completed"] == result["counts"]["requests"] == 6
    server = result["conditions"]["server"]
    assert server["dtype"] == "float32", server
    assert server["cpu_defaults"] == ["--dtype", "float32", "VLLM_CPU_KVCACHE_SPACE=1"]
