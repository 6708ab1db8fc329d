"""Issue 32 must-shows 1 and 4 against a real vLLM on this CPU (a bench script: minutes, not in CI).

Starts vLLM (``.venv-vllm`` or ``LOADGEN_VLLM_PYTHON``) serving the tiny random-weight test model with
automatic tool choice and a tool parser (``--enable-auto-tool-choice --tool-call-parser pythonic``), then,
as a user types them:

1. a recorded 4-turn tool-using agent session (``--sessions FILE,replies=recorded``: the recorded
   assistant replies and their tool calls, ``--tools`` schemas) and 6 synthetic sessions with tool turns
   (``tools=0.5``): every turn must be accepted (HTTP 200, ok) with the tool-call history in the
   messages; the tiny model emits no call itself, so the recorded calls stand in and are counted missing;
2. ``--cache-hit-target 0.5`` with ``--server-metrics``: the block size read from vLLM's
   ``vllm:cache_config_info``, the cache primed, and the share vLLM's own counters give over the window
   (Δhits / Δqueries, priming excluded) within 5 points of 0.5.

Usage: ``scripts/check_vllm_agent [--out DIR]``; prints one line per check and exits 1 when one fails.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from loadgen.serve import launch  # noqa: E402  (after the path)
from loadgen.serve.vllm import find_server_python  # noqa: E402
from tests.fixtures.tiny_model import build_tiny_model  # noqa: E402

CPU_ARGS = ["--max-model-len", "1024", "--enforce-eager", "--kv-cache-memory-bytes", str(64 << 20), "--dtype",
            "float32", "--enable-prompt-tokens-details", "--enable-auto-tool-choice", "--tool-call-parser",
            "pythonic"]  # fmt: skip
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
                                           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                          "required": ["city"]}}}]  # fmt: skip
SESSION = {"session_id": "agent", "turns": [
    {"text": "What is the weather in Oslo?", "output_tokens": 8, "reply_text": "",
     "calls": [{"name": "get_weather", "arguments": '{"city": "Oslo"}', "id": "call_1"}]},
    {"text": "sunny, 21 degrees", "output_tokens": 8, "role": "tool", "delay_s": 0.01, "reply_text": "It is sunny."},
    {"text": "And in Bergen?", "output_tokens": 8, "delay_s": 0.01, "reply_text": "",
     "calls": [{"name": "get_weather", "arguments": '{"city": "Bergen"}', "id": "call_2"}]},
    {"text": "rain, 12 degrees", "output_tokens": 8, "role": "tool", "delay_s": 0.01, "reply_text": "Rain."},
]}  # fmt: skip


def loadgen(*args: str) -> subprocess.CompletedProcess[str]:
    cmd = [str(ROOT / ".venv" / "bin" / "loadgen"), *args]
    print("$ loadgen " + " ".join(args), flush=True)
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    out = Path(a.out or tempfile.mkdtemp(prefix="vllm-agent-"))
    out.mkdir(parents=True, exist_ok=True)
    py, _ = find_server_python("vllm", os.environ.get("LOADGEN_VLLM_PYTHON"))
    model = build_tiny_model(out / "model")
    env = {"VLLM_CACHE_ROOT": str(out / "cache")}
    if (os.cpu_count() or 1) <= 4:
        env["VLLM_CPU_OMP_THREADS_BIND"] = "0"
    srv = launch("vllm", serve_model=str(model), served_model_name="tiny", server_python=py, engine_args=CPU_ARGS,
                 env=env, log_dir=str(out / "log"), ready_timeout_s=300)  # fmt: skip
    print(f"vLLM ready in {srv.ready_s:.1f} s at {srv.base_url}", flush=True)
    fails = 0
    try:
        (out / "agent.jsonl").write_text(json.dumps(SESSION) + "\n")
        (out / "tools.json").write_text(json.dumps(TOOLS))
        for name, src in (("recorded", f"{out / 'agent.jsonl'},salt=off,replies=recorded"),
                          ("synthetic", "synthetic,turns=4,input=40,output=8,tools=0.5")):  # fmt: skip
            p = loadgen("run", "--endpoint", srv.base_url, "--api", "chat", "--model", "tiny", "--sessions", src,
                        "--tools", str(out / "tools.json"), "--rate", "2", "--requests", "1" if name == "recorded" else "6",
                        "--out", str(out / name), "--quiet")  # fmt: skip
            recs = [json.loads(x) for x in (out / name / "requests.jsonl").read_text().splitlines()]
            r = json.loads((out / name / "result.json").read_text())
            bad = [x for x in recs if x["status"] != "ok"]
            tc = r["sessions"]["tool_calls"]
            tool_turns = sum(1 for x in recs if x.get("turn") and name == "recorded" and x["turn"] in (1, 3))
            ok = not bad and p.returncode in (0, 1)
            fails += not ok
            print(
                f"{'PASS' if ok else 'FAIL'} tool-call history ({name}): {len(recs) - len(bad)} of {len(recs)} turns "
                f"accepted (HTTP 200) by vLLM with --tool-call-parser pythonic; tool_calls {tc}"
                + (f"; tool turns {tool_turns}" if name == "recorded" else "")
                + (f"; first refusal: {bad[0].get('error_kind')} {bad[0].get('error_detail')}" if bad else "")
            )
        p = loadgen("run", "--endpoint", srv.base_url, "--model", "tiny", "--rate", "4", "--requests", "40",
                    "--input-tokens", "512", "--output-tokens", "2", "--cache-hit-target", "0.5",
                    "--server-metrics", srv.base_url.rstrip("/").removesuffix("/v1") + "/metrics",
                    "--out", str(out / "cache"), "--quiet")  # fmt: skip
        r = json.loads((out / "cache" / "result.json").read_text())
        t = r["cache_hit_target"]
        server = t.get("achieved_server")
        ok = server is not None and abs(server - 0.5) <= 0.05 and "cache_config_info" in t["block_size_source"]
        fails += not ok
        print(
            f"{'PASS' if ok else 'FAIL'} --cache-hit-target 0.5 on vLLM: block {t['block_size']} from "
            f"{t['block_size_source']}, shared prefix {t['shared_prefix_tokens']} tokens, primed {t['primed']}; "
            f"vLLM's counters over the window {server}, the client's {t['achieved_client']}; held {t['held']}"
        )
        if p.returncode not in (0, 1):
            print(p.stderr[-2000:])
    finally:
        srv.stop()
    print(f"files in {out}")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
