"""The engine's deterministic output, captured before a redesign and compared after (issue 29).

Usage:
  scripts/engine_baseline --write FILE     capture (e.g. .ci/engine_baseline.json)
  scripts/engine_baseline --compare FILE   capture again and compare, field by field (exit 1 on a difference)

Each case runs the CLI as a user types it, with fixed seeds and a fixed ``--salt``, against a
recording server on 127.0.0.1 that answers every request with a fixed stream of as many tokens
as it asks for (so a session's history, which carries the actual replies, is fixed too):

- ``plain``: ``run --rate 20 --requests 30`` (completions, Poisson);
- ``sessions``: ``run --sessions synthetic,turns=3,... --rate 4 --requests 6 --api chat``;
- ``workers2``: ``run --rate 20 --requests 30 --workers 2``;
- ``closed``: ``run --concurrency 4 --requests 12 --warmup 2``;
- ``sweep``: ``sweep --calibration 0 --start-rate 5 --max-rate 5`` (its configuration and its first
  probe's schedule and bodies: what the search offers first does not depend on timing).

The committed list of deterministic fields (``RESULT_FIELDS``, ``RECORD_FIELDS``): the run's
configuration (less its output path), its counts and token totals, and per request its index,
phase, scheduled time (to the microsecond; not where a reply's end sets it: closed-loop sends and
session turns after the first), requested lengths, status and session position; and the multiset of request bodies the server received (SHA-1 of each canonical JSON body). A field
that only the new output has is listed as added, not failed. Timing figures are not compared: they are measurements, not outputs of the engine's rules.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from loadgen.core.contract import RESULT_SCHEMA_VERSION  # noqa: E402
from tests.fixtures.recording_server import RecordingServer, sse  # noqa: E402

RESULT_FIELDS = [
    "schema_version",
    "counts",
    "tokens",
    "config",
]
# keys of the config block that name this machine's paths or the recording server's port, not a rule
CONFIG_VOLATILE = {"out_dir", "out", "config_file", "endpoint"}
RECORD_FIELDS = [
    "index",
    "phase",
    "scheduled_s",
    "requested_input_tokens",
    "requested_output_tokens",
    "status",
    "error_kind",
    "session_id",
    "session",
    "turn",
    "turn_index",
]
SALT = "baseline"
CASES: dict[str, tuple[str, list[str]]] = {
    "plain": ("run", ["--rate", "20", "--requests", "30", "--seed", "7"]),
    "sessions": (
        "run",
        [
            "--sessions",
            "synthetic,turns=3,input=32,output=8,delay=50ms,system=20",
            "--rate",
            "4",
            "--requests",
            "6",
            "--api",
            "chat",
            "--seed",
            "7",
        ],
    ),  # fmt: skip
    "workers2": ("run", ["--rate", "20", "--requests", "30", "--workers", "2", "--seed", "7"]),
    "closed": ("run", ["--concurrency", "4", "--requests", "12", "--warmup", "2", "--seed", "7"]),
    "sweep": (
        "sweep",
        [
            "--calibration",
            "0",
            "--start-rate",
            "5",
            "--max-rate",
            "5",
            "--probe-duration",
            "3s",
            "--probe-warmup",
            "0s",
            "--slo-p99",
            "2s",
            "--seed",
            "7",
            "--max-extensions",
            "0",
        ],
    ),  # fmt: skip
}


def _respond(_n: int, req: dict[str, Any]) -> bytes:
    body = json.loads(req["body"] or b"{}")
    n = int(body.get("max_tokens") or body.get("max_completion_tokens") or 4)
    chat = req["target"].startswith("/v1/chat")
    out = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
    for i in range(n):
        fin = "length" if i == n - 1 else None
        choice = {"index": 0, "delta": {"content": f" w{i}"}} if chat else {"index": 0, "text": f" w{i}"}
        out += sse({"choices": [{**choice, "finish_reason": fin}]})
    usage = {"prompt_tokens": 0, "completion_tokens": n, "total_tokens": n}
    return out + sse({"choices": [], "usage": usage}) + b"data: [DONE]\n\n"


class _Server:
    def __init__(self) -> None:
        self.srv = RecordingServer(_respond)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    def __enter__(self) -> RecordingServer:
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self.srv.start(), self.loop).result(10)
        return self.srv

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self.srv.stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


def _get(d: Any, path: str) -> Any:
    for part in path.split("."):
        if not isinstance(d, dict):
            return None
        d = d.get(part)
    return d


def _body_hash(body: bytes) -> str:
    try:
        canon = json.dumps(json.loads(body), sort_keys=True).encode()
    except ValueError:
        canon = body
    return hashlib.sha1(canon).hexdigest()[:16]


def capture_case(name: str, tmp: Path) -> dict[str, Any]:
    command, args = CASES[name]
    out = tmp / name
    with _Server() as srv:
        env = dict(
            os.environ,
            COLUMNS="250",
            PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        )
        env.pop("OPENAI_API_KEY", None)
        cmd = [sys.executable, "-m", "loadgen.cli", command, "--endpoint", srv.url, "--model", "rec", "--salt", SALT,
               "--quiet", *args, "--out", str(out)]  # fmt: skip
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300, check=False)
        posts = [r for r in srv.requests if r["method"] == "POST"]
    if command == "sweep":
        sweep = json.loads((out / "sweep.json").read_text()) if (out / "sweep.json").exists() else {}
        probes = sorted(p for p in out.iterdir() if p.is_dir())
        first = probes[0] if probes else out
        result: dict[str, Any] = {
            "config": {k: v for k, v in (sweep.get("config") or {}).items() if k not in CONFIG_VOLATILE}
        }
        recs_file = first / "requests.jsonl"
    else:
        res = json.loads((out / "result.json").read_text()) if (out / "result.json").exists() else {}
        result = {f: _get(res, f) for f in RESULT_FIELDS}
        if isinstance(result.get("config"), dict):
            result["config"] = {k: v for k, v in result["config"].items() if k not in CONFIG_VOLATILE}
        recs_file = out / "requests.jsonl"
    records = []
    if recs_file.exists():
        for line in recs_file.read_text().splitlines():
            r = json.loads(line)
            row = {k: r[k] for k in RECORD_FIELDS if k in r}
            if isinstance(row.get("scheduled_s"), float):
                row["scheduled_s"] = round(row["scheduled_s"], 6)
            records.append(row)
    records.sort(key=lambda r: (r.get("phase") or "", r.get("index") or 0))
    for row in records:  # a time set by a reply's end is a measurement, not a rule's output
        if name == "closed" or (name == "sessions" and row.get("turn")):
            row.pop("scheduled_s", None)
    # the sweep's later probes depend on timing, and its bodies interleave with its checks: not compared
    bodies = [] if command == "sweep" else sorted(_body_hash(p["body"]) for p in posts)
    if not records:  # the exit code itself is a verdict (timing): only a run that wrote nothing is a failure here
        raise SystemExit(f"{name}: no requests.jsonl ({proc.returncode}): {proc.stderr[-2000:]}")
    return {"result": result, "records": records, "bodies": bodies}


def capture() -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="engine-baseline-") as tmp:
        return {name: capture_case(name, Path(tmp)) for name in CASES}


ADDED = "added "


def diff(a: Any, b: Any, path: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        out: list[str] = []
        for k in sorted(set(a) | set(b), key=str):
            where = f"{path}.{k}" if path else str(k)
            if k not in a:  # a field the redesign (or a later issue) added: an addition, not a change
                out.append(f"{ADDED}{where}: {b[k]!r}")
                continue
            out += diff(a.get(k), b.get(k), where)
        return out
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{path}: {len(a)} items before, {len(b)} after"]
        out = []
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            out += diff(x, y, f"{path}[{i}]")
        return out
    return [] if a == b else [f"{path}: {a!r} before, {b!r} after"]


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("--write", "--compare"):
        print(__doc__.split("\n\n")[1])
        return 2
    now = capture()
    if argv[0] == "--write":
        Path(argv[1]).write_text(json.dumps(now, indent=1, sort_keys=True) + "\n")
        print(f"captured {len(now)} cases into {argv[1]}")
        return 0
    before = json.loads(Path(argv[1]).read_text())
    found = diff(before, now)
    # a documented version bump (loadgen.core.contract, docs/schemas/CHANGES.md) is a change on purpose
    bumped = [p for p in found if ".result.schema_version: " in p and p.endswith(f"{RESULT_SCHEMA_VERSION} after")]
    for p in bumped:
        print(f"  {p} (documented: docs/schemas/CHANGES.md)")
    problems = [p for p in found if not p.startswith(ADDED) and p not in bumped]
    for p in found:
        if p.startswith(ADDED):
            print("  " + p)
    for case in CASES:
        n = len(now.get(case, {}).get("records", []))
        bad = [p for p in problems if p.startswith(case + ".")]
        print(f"{case:<10} {n:>4} records  {'same' if not bad else f'{len(bad)} differences'}")
    for p in problems[:50]:
        print("  " + p)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
