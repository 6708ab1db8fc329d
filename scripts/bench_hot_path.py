"""The client's per-event CPU on its read path and record path, side by side in one run.

Feeds the same OpenAI completions stream (``--tokens`` events of the simulated endpoint's exact
bytes, continuous usage on, one event per read) through the read path (``OpenAIStreamParser.feed``,
one monotonic stamp per read) and the record path (``metrics.compute`` + ``Aggregator.add`` +
the ``requests.jsonl`` line) of each variant, interleaved round by round so a shared machine's
noise falls on every variant alike:

* ``before``: another checkout (``--before DIR``, e.g. ``git worktree add /tmp/before HEAD``
  of today's main), imported in a child process;
* ``now``: this checkout;
* ``reference``: the local limit of the read path: split on blank lines, ``orjson.loads``,
  take the text and a stamp; no bookkeeping.

Prints µs per event for each path and the ratios now/before and reference/now. Not a test:
speed is never asserted in tests (CONVENTIONS.md).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

EVENT = (
    'data: {{"id":"cmpl-f28c03323a4845fd847d9036c3fcd055","object":"text_completion","created":1796160231,'
    '"model":"sim-model","choices":[{{"index":0,"text":" tok","logprobs":null,"finish_reason":{fr}}}],'
    '"usage":{{"prompt_tokens":16,"completion_tokens":{k},"total_tokens":{t}}}}}\n\n'
)

CHILD = r"""
import sys, time, json, io, tempfile, orjson
from pathlib import Path
sys.path.insert(0, sys.argv[1])
tokens, requests = int(sys.argv[2]), int(sys.argv[3])
from loadgen.core.clock import now_ns
from loadgen.endpoints.openai_stream import OpenAIStreamParser
from loadgen.core.metrics import compute
from loadgen.core.redact import Redactor
from loadgen.engine.results import Aggregator
from loadgen.engine.recordlog import record_line
from loadgen.core.types import RequestRecord
EVENT = sys.stdin.read()
reads = [(EVENT.format(fr='"length"' if k == tokens else "null", k=k, t=k + 16)).encode() for k in range(1, tokens + 1)]
reads.append(b'data: {"choices":[],"usage":{"prompt_tokens":16,"completion_tokens":%d,"total_tokens":%d}}\n\n' % (tokens, tokens + 16))
reads.append(b"data: [DONE]\n\n")
red = Redactor([])
agg = Aggregator()
read_ns = rec_ns = 0
for i in range(requests):
    rec = RequestRecord(index=i, phase="measure", scheduled_ns=now_ns(), requested_output_tokens=tokens)
    rec.sent_ns = rec.scheduled_ns
    p = OpenAIStreamParser(rec, chat=False, redact=red)
    t0 = time.perf_counter_ns()
    for chunk in reads:
        if p.feed(chunk, now_ns()):
            break
    p.finish(now_ns())
    t1 = time.perf_counter_ns()
    m = compute(rec, None, "sent")
    agg.add(rec, m)
    orjson.dumps(record_line(rec, m, rec.scheduled_ns, save_text=False, token_lists=True))  # as RecordWriter
    t2 = time.perf_counter_ns()
    read_ns += t1 - t0
    rec_ns += t2 - t1
    assert rec.ok, rec.error_detail
print(json.dumps({"read_us": read_ns / requests / tokens / 1e3, "record_us": rec_ns / requests / tokens / 1e3}))
"""

REFERENCE = r"""
import sys, time, json, orjson
tokens, requests = int(sys.argv[2]), int(sys.argv[3])
EVENT = sys.stdin.read()
reads = [(EVENT.format(fr='"length"' if k == tokens else "null", k=k, t=k + 16)).encode() for k in range(1, tokens + 1)]
reads.append(b"data: [DONE]\n\n")
mono = time.monotonic_ns
total = 0
for i in range(requests):
    stamps = []
    buf = b""
    t0 = time.perf_counter_ns()
    for chunk in reads:
        t = mono()
        buf += chunk
        *events, buf = buf.split(b"\n\n")
        for ev in events:
            data = ev[6:]
            if data == b"[DONE]":
                break
            obj = orjson.loads(data)
            if obj["choices"] and obj["choices"][0]["text"]:
                stamps.append(t)
    total += time.perf_counter_ns() - t0
print(json.dumps({"read_us": total / requests / tokens / 1e3, "record_us": 0.0}))
"""


def one(code: str, root: str, tokens: int, requests: int) -> dict[str, float]:
    env = dict(os.environ, PYTHONPATH=root)
    p = subprocess.run(
        [sys.executable, "-c", code, root, str(tokens), str(requests)],
        input=EVENT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        cwd=root,
    )
    if p.returncode:
        raise SystemExit(p.stderr[-3000:])
    return json.loads(p.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--before", default="/tmp/before", help="a checkout of today's main (git worktree add)")
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    variants = {"now": (CHILD, str(REPO)), "reference": (REFERENCE, str(REPO))}
    if Path(a.before, "loadgen").is_dir():
        variants = {"before": (CHILD, a.before), **variants}
    got: dict[str, list[dict[str, float]]] = {k: [] for k in variants}
    t = time.monotonic()
    for _ in range(a.rounds):  # interleaved: each round runs every variant once
        for k, (code, root) in variants.items():
            got[k].append(one(code, root, a.tokens, a.requests))
    best = {k: {f: min(r[f] for r in v) for f in ("read_us", "record_us")} for k, v in got.items()}
    print(
        f"{a.requests} requests x {a.tokens} events, best of {a.rounds} interleaved rounds ({time.monotonic() - t:.0f} s)"
    )
    print(f"{'variant':>10s} {'read µs/event':>14s} {'record µs/event':>16s} {'total µs/event':>15s}")
    for k, r in best.items():
        print(f"{k:>10s} {r['read_us']:14.2f} {r['record_us']:16.2f} {r['read_us'] + r['record_us']:15.2f}")
    now = best["now"]
    if "before" in best:
        b = best["before"]
        print(
            f"now / before: read {now['read_us'] / b['read_us']:.2f}, record {now['record_us'] / b['record_us']:.2f}, "
            f"total {(now['read_us'] + now['record_us']) / (b['read_us'] + b['record_us']):.2f}"
        )
    print(f"reference / now (read path): {best['reference']['read_us'] / now['read_us']:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
