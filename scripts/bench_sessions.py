"""Sessions (issue 17), the full forms of must-show 1 and 2, against the simulated endpoint.

1. ``conversations``: a 10-turn synthetic chat workload (``--sessions synthetic,turns=10,...``,
   ``--sessions-n`` sessions at ``--rate``) against the simulator with its prefix cache, both
   sides counting with the test BPE tokenizer (tests/fixtures/tokenizer.py; a real tokenizer
   with ``--tokenizer DIR``): the share of turns whose ``usage.prompt_tokens`` equals the exact
   history length the client computed (bar: 100 %), the truth log's mean cached tokens by depth
   (bar: rising), loadgen's hit rate against the truth log's (bar: within 2 points).
2. ``replay``: a public session trace (../shared/traces/sessions, kv-cache-tester Claude Code
   sessions by default) replayed at two time scales: every turn reaches the server no earlier
   than its previous reply's end (truth log: the last token's write, stamped before it left the
   server) + its delay (bar: 100 %), and p99 of (server
   arrival - due time) (bar: <= 5 ms), the client and the simulator on separate CPUs (``--cpus``)
   and the simulator with ``--busy-poll``.
3. ``search``: ``loadgen sweep --sessions`` (:mod:`loadgen.sweep.session_search`) against the
   simulator, salted and unsalted, each against the virtual-clock reference of the same profile
   (:mod:`loadgen.sim.session_reference`): bars 0.9-1.1 x the reference, and the unsalted answer
   higher.

Prints one line per figure and PASS/FAIL per bar; exit 0 when every bar passes.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
TRACES = REPO.parent / "shared" / "traces" / "sessions"


def run(args: list[str], timeout: float = 1800) -> subprocess.CompletedProcess[str]:
    p = subprocess.run(
        [sys.executable, "-m", "loadgen.cli", "run", *args], cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)),
        capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip
    if p.returncode not in (0, 1):
        print(p.stdout[-2000:], p.stderr[-3000:])
        raise SystemExit(2)
    return p


def read(out: Path, truth: Path) -> tuple[dict[str, Any], list[dict[str, Any]], dict[str, dict[str, Any]]]:
    res = json.loads((out / "result.json").read_text())
    recs = [json.loads(x) for x in (out / "requests.jsonl").read_text().splitlines()]
    tr = {}
    for line in truth.read_text().splitlines():
        t = json.loads(line)
        if t.get("request_id"):
            tr[t["request_id"].rsplit("-", 1)[1]] = t
    return res, recs, tr


def bar(name: str, ok: bool) -> bool:
    print(f"  bar: {name}: {'PASS' if ok else 'FAIL'}")
    return ok


def conversations(a: argparse.Namespace, d: Path) -> bool:
    tok = a.tokenizer
    if tok is None:
        from tests.fixtures.tokenizer import build_test_tokenizer

        tok = str(build_test_tokenizer(d / "tokenizer"))
    out, truth = d / "conv", d / "conv-truth.jsonl"
    src = f"synthetic,turns=10,input={a.input},output={a.output},delay={a.delay},system={a.system}"
    run([
        "--sessions", src, "--rate", str(a.rate), "--requests", str(a.sessions_n), "--api", "chat",
        "--tokenizer", tok, "--out", str(out), "--no-token-lists",
        "--sim-args", f"--tokenizer {tok} --prefix-cache-blocks {a.cache_blocks} --truth-log {truth}",
    ])  # fmt: skip
    res, recs, tr = read(out, truth)
    ok_recs = [r for r in recs if r["status"] == "ok"]
    exact = sum(r["input_tokens"] == r["requested_input_tokens"] for r in ok_recs)
    by_depth = []
    for k in range(10):
        c = [tr[str(r["index"])]["cached_tokens"] for r in ok_recs if r["turn"] == k]
        by_depth.append(sum(c) / len(c) if c else float("nan"))
    tt = [tr[str(r["index"])] for r in ok_recs]
    truth_rate = sum(t["cached_tokens"] for t in tt) / sum(t["prompt_tokens"] for t in tt)
    lg = res["sessions"]["prefix_cache_hit_rate"]
    print(f"1. {a.sessions_n} sessions x 10 turns ({src}) at {a.rate:g} sessions/s: {len(recs)} turns, "
          f"{len(ok_recs)} ok")  # fmt: skip
    print(f"  prompt tokens == exact history length: {exact} of {len(ok_recs)} turns")
    print("  truth-log mean cached tokens by turn: " + ", ".join(f"{x:.0f}" for x in by_depth))
    print(f"  hit rate: loadgen {lg * 100:.2f} %, truth log {truth_rate * 100:.2f} %")
    good = bar("100 % exact", exact == len(ok_recs) == len(recs))
    good &= bar("cached tokens rise with depth", all(b > a_ for a_, b in zip(by_depth[1:], by_depth[2:])))
    return good & bar("hit rate within 2 points", abs(lg - truth_rate) <= 0.02)


def replay(a: argparse.Namespace, d: Path, scale: float) -> bool:
    from loadgen.workload.session_sources import load_sessions, parse_session_source

    out, truth = d / f"replay-{scale:g}", d / f"replay-{scale:g}-truth.jsonl"
    src = f"{a.trace},time_scale={scale},token_scale={a.token_scale},max_sessions={a.max_sessions},max_turns={a.max_turns}"
    pin_client = ["--cpus", a.client_cpu] if not a.no_pin else []
    sim_pin = f" --cpus {a.sim_cpu}" if not a.no_pin else ""
    run([
        "--sessions", src, "--rate", str(a.replay_rate), "--api", "chat", "--out", str(out), "--no-token-lists",
        "--sim-args", f"--slots 256 --ttft-ms 2 --itl-ms 2 --prefix-cache-blocks {a.cache_blocks} "
        f"--truth-log {truth} --busy-poll{sim_pin}", *pin_client,
    ])  # fmt: skip
    res, recs, tr = read(out, truth)
    sessions, _ = load_sessions(parse_session_source(src))
    delays = {s.session_id: [t.delay_s for t in s.turns] for s in sessions}
    t0 = res["conditions"]["t0_monotonic_ns"]
    causal = total = 0
    lag_ms = []
    for sid in {r["session_id"] for r in recs}:
        turns = sorted((r for r in recs if r["session_id"] == sid), key=lambda r: r["turn"])
        base = sid.split("~")[0]
        for prev, cur in zip(turns, turns[1:]):
            total += 1
            gap = tr[str(cur["index"])]["arrival_ns"] - tr[str(prev["index"])]["chunks"][-1][0]  # last token written
            causal += gap >= round(delays[base][cur["turn"]] * 1e9)
        for r in turns:
            lag_ms.append((tr[str(r["index"])]["arrival_ns"] - t0) / 1e6 - r["scheduled_s"] * 1e3)
    lag = np.asarray(lag_ms)
    where = "shared CPUs" if a.no_pin else f"client CPU {a.client_cpu}, simulator CPU {a.sim_cpu} --busy-poll"
    print(f"2. replay {Path(a.trace).name} at time scale {scale:g} ({len(sessions)} sessions, {len(recs)} turns, "
          f"{res['duration_s']:.1f} s, {where}); hit rate {res['sessions']['prefix_cache_hit_rate'] * 100:.1f} %")  # fmt: skip
    print(f"  later turns sent no earlier than previous reply end + delay: {causal} of {total}")
    print(f"  server arrival - due time (ms): p50 {np.percentile(lag, 50):.3f}  p99 {np.percentile(lag, 99):.3f}  "
          f"max {lag.max():.3f}  min {lag.min():.3f}")  # fmt: skip
    good = bar("causal 100 %", causal == total)
    return good & bar("p99 arrival - due <= 5 ms", float(np.percentile(lag, 99)) <= 5.0)


def search(a: argparse.Namespace, d: Path) -> bool:
    """Must-show 3 (``loadgen sweep --sessions``, open loop): the session-capacity search against the
    virtual-clock reference, salted (no cross-session reuse) and unsalted (sessions share their
    prefixes): the answer rises, and the report says why (its salting line and hit rates)."""
    from loadgen.core.slo import parse_slo
    from loadgen.sim.model import SimParams
    from loadgen.sim.session_reference import session_capacity
    from loadgen.workload.session_sources import load_sessions, parse_session_source

    params = SimParams(slots=16, ttft_ms=2, prefill_per_token_ms=0.25, itl_ms=2)
    sim = "--slots 16 --ttft-ms 2 --prefill-per-token-ms 0.25 --itl-ms 2 --prefix-cache-blocks 20000"
    slo_text = "ttft:p90<=80ms"
    slo = parse_slo(slo_text)
    answers = {}
    good = True
    for salt in ("on", "off"):
        text = f"synthetic,turns=3,input=60,output=4,delay=50ms,salt={salt}"
        sessions, _ = load_sessions(parse_session_source(text), 3000)  # 300: +-25 % over seeds
        ref = session_capacity(params, sessions, slo, cache_blocks=20_000, warmup_sessions=3, salted=salt == "on")
        out = d / f"search-{salt}"
        cpus = [] if a.no_pin else ["--cpus", a.client_cpu]
        p = subprocess.run(
            [sys.executable, "-m", "loadgen.cli", "sweep", "--sessions", text, "--slo", slo_text, "--api",
             "completions", "--sim-args", sim, "--probe-duration", a.search_probe, "--calibration", "0",
             "--start-rate", f"{ref / 2:.4f}", "--precision", "5%", "--out", str(out), *cpus],
            cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO), COLUMNS="200"), capture_output=True, text=True,
            timeout=3600,
        )  # fmt: skip
        if p.returncode not in (0, 5):
            print(p.stdout[-3000:], p.stderr[-3000:])
            return bar(f"salt={salt}: the sweep ran", False)
        res = json.loads((out / "sweep.json").read_text())
        got = res["answer"]["max_rate_rps"] or 0.0
        answers[salt] = got
        hits = [q["prefix_cache_hit_rate"] for q in res["sessions"]["probes"]]
        print(f"3. loadgen sweep --sessions, salt={salt}: reference {ref:.2f} sessions/s, found {got:.2f} "
              f"({got / ref:.3f} x; {len(res['probes'])} probes, limited_by {res['answer']['limited_by']}); "
              f"hit rate {min(hits):.3f}-{max(hits):.3f}; {res['sessions']['salting']}")  # fmt: skip
        good &= bar(f"salt={salt}: 0.9-1.1 x the reference", 0.9 <= got / ref <= 1.1)
    return good & bar("salting off raises the answer", answers["off"] > answers["on"])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", choices=("conversations", "replay", "search"))
    ap.add_argument("--search-probe", default="20s", help="--probe-duration of the session sweeps")
    ap.add_argument("--tokenizer", help="a Hugging Face tokenizer directory (default: the test BPE tokenizer)")
    ap.add_argument("--sessions-n", type=int, default=20)
    ap.add_argument("--rate", type=float, default=2.0, help="sessions/s of the synthetic workload")
    ap.add_argument("--input", type=int, default=60)
    ap.add_argument("--output", type=int, default=20)
    ap.add_argument("--delay", default="300ms")
    ap.add_argument("--system", type=int, default=200)
    ap.add_argument("--cache-blocks", type=int, default=100_000)
    ap.add_argument("--trace", default=str(TRACES / "kvcache_tester_claude_code_sessions.jsonl"))
    ap.add_argument("--scales", default="0.02,0.05", help="two (or more) time scales for the replay")
    ap.add_argument("--token-scale", type=float, default=0.02)
    ap.add_argument("--max-sessions", type=int, default=16)
    ap.add_argument("--max-turns", type=int, default=30)
    ap.add_argument("--replay-rate", type=float, default=1.0, help="session starts per second of the replay")
    ap.add_argument("--client-cpu", default="0")
    ap.add_argument("--sim-cpu", default="1")
    ap.add_argument("--no-pin", action="store_true")
    a = ap.parse_args()
    d = Path(tempfile.mkdtemp(prefix="bench-sessions-"))
    print(f"(files in {d}; the machine may be shared: timing figures are this run's)")
    ok = True
    if a.only in (None, "conversations"):
        ok &= conversations(a, d)
    if a.only in (None, "replay"):
        for s in a.scales.split(","):
            ok &= replay(a, d, float(s))
    if a.only in (None, "search"):
        ok &= search(a, d)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
