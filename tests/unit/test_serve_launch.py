"""How servers are launched: commands, environments, interpreters, option errors (no server started)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from loadgen.core.errors import ConfigError
from loadgen.serve import SERVER_KINDS, server_process
from loadgen.serve.command import serve_group
from loadgen.serve.vllm import find_server_python, vllm_process


def test_vllm_command_and_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "")
    monkeypatch.setenv("PYTHONPATH", "/somewhere")
    model = tmp_path / "m"
    model.mkdir()
    p = vllm_process(str(model), served_model_name="tiny", server_python="/py", port=1234,
                     engine_args=["--max-model-len", "1024"], log_dir=str(tmp_path))  # fmt: skip
    assert p.command == ["/py", "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
                         "--served-model-name", "tiny", "--host", "127.0.0.1", "--port", "1234",
                         "--max-model-len", "1024"]  # fmt: skip
    assert p.ready_url == "http://127.0.0.1:1234/health" and p.base_url == "http://127.0.0.1:1234"
    env = p.env
    assert env["VLLM_SERVER_DEV_MODE"] == "1" and env["VLLM_NO_USAGE_STATS"] == "1" and env["DO_NOT_TRACK"] == "1"
    assert env["HF_HUB_OFFLINE"] == "1" and env["VLLM_HOST_IP"] == "127.0.0.1"
    assert "VLLM_CPU_KVCACHE_SPACE" not in env and "PYTHONPATH" not in env
    assert p.info["engine_options"] == ["--max-model-len", "1024"] and p.info["served_model_name"] == "tiny"
    assert p.log_path == str(tmp_path / "vllm-server.log")


def test_vllm_hub_name_is_not_forced_offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    p = vllm_process("org/some-model", server_python="/py")
    assert "HF_HUB_OFFLINE" not in p.env and p.info["served_model_name"] == "org/some-model"
    assert 1024 <= p.info["port"] <= 65535


def test_server_python_resolution(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("LOADGEN_VLLM_PYTHON", "/a/python")
    assert find_server_python("vllm", "/given") == ("/given", "--server-python")
    assert find_server_python("vllm") == ("/a/python", "$LOADGEN_VLLM_PYTHON")
    monkeypatch.delenv("LOADGEN_VLLM_PYTHON")
    monkeypatch.setenv("LOADGEN_SERVER_PYTHON", "/b/python")
    assert find_server_python("triton") == ("/b/python", "$LOADGEN_SERVER_PYTHON")
    monkeypatch.delenv("LOADGEN_SERVER_PYTHON")
    monkeypatch.chdir(tmp_path)
    venv = tmp_path / ".venv-nosuch" / "bin"
    venv.mkdir(parents=True)
    (venv / "python").write_text("")
    assert find_server_python("nosuch")[0] == str(venv / "python")
    assert find_server_python("other")[0] == sys.executable


def test_triton_pytriton_command(tmp_path: Path) -> None:
    mod = tmp_path / "mod.py"
    mod.write_text("")
    p = server_process("triton", pytriton=str(mod), server_python=sys.executable, port=8000, grpc_port=8001,
                       metrics_port=8002, triton_model="tiny_llm", log_dir=str(tmp_path))  # fmt: skip
    assert p.command == [sys.executable, str(mod), "--host", "127.0.0.1", "--http-port", "8000",
                         "--grpc-port", "8001", "--metrics-port", "8002"]  # fmt: skip
    assert p.ready_url == "http://127.0.0.1:8000/v2/health/ready"
    assert p.also_ready == ["http://127.0.0.1:8000/v2/models/tiny_llm/ready"]
    assert p.info["grpc_url"] == "127.0.0.1:8001" and p.info["metrics_url"] == "http://127.0.0.1:8002/metrics"
    assert p.env["LD_LIBRARY_PATH"].split(":")[0]  # the interpreter's LIBDIR first


def test_triton_model_repository_with_a_tritonserver_binary(tmp_path: Path) -> None:
    p = server_process("triton", model_repository=str(tmp_path), tritonserver="/opt/tritonserver/bin/tritonserver",
                       port=8000, grpc_port=8001, metrics_port=8002, engine_args=["--log-verbose", "1"])  # fmt: skip
    assert p.command[0] == "/opt/tritonserver/bin/tritonserver"
    assert p.command[1:3] == ["--model-repository", str(tmp_path)]
    assert "--grpc-port" in p.command and p.command[-2:] == ["--log-verbose", "1"]


@pytest.mark.parametrize(
    "kind,kw,match",
    [
        ("vllm", {}, "needs --serve-model"),
        ("vllm", {"serve_model": "m", "pytriton": "x.py"}, "are for --serve triton"),
        ("triton", {}, "exactly one of"),
        ("triton", {"model_repository": "a", "pytriton": "b"}, "exactly one of"),
        ("triton", {"pytriton": "b", "serve_model": "m"}, "is for --serve vllm"),
        ("sglang", {}, "unknown server kind"),
    ],
)
def test_option_errors(kind: str, kw: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        server_process(kind, **kw)
    assert SERVER_KINDS == ("vllm", "triton")


def test_cli_usage_errors() -> None:
    r = CliRunner().invoke(serve_group, ["triton"])
    assert r.exit_code == 2 and "exactly one of --model-repository" in r.output
    r = CliRunner().invoke(serve_group, ["vllm"])
    assert r.exit_code == 2 and "--serve-model" in r.output
    r = CliRunner().invoke(serve_group, ["--help"])
    assert r.exit_code == 0 and "vllm" in r.output and "triton" in r.output


def test_cli_registers_serve() -> None:
    from loadgen.cli import main

    assert "serve" in main.commands
    assert os.path.basename(main.commands["serve"].callback.__module__) == "loadgen.serve.command"
