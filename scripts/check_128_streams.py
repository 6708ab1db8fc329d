"""Issue 7, item 2: at 128 streams of 256 tokens with 1 ms ITL, TTFT is right or the run says INVALID.

Against the simulated endpoint in its own process (truth log on, 4096 slots so it queues
nothing, 10 ms prefill, 1 ms decode step), closed loop with 128 concurrent users of 16 input /
256 output tokens. Each measured request's reported TTFT is paired with the server's truth: the
write time of its first token minus the request's scheduled time (both CLOCK_MONOTONIC on this
host). Prints reported vs true TTFT p50/p99, the per-request error, the client's CPU, event-loop
lag and the validity verdict, then the invariant:

    |reported TTFT p50 - true TTFT p50| <= 5 ms   or   INVALID with limited_by: client

With ``--stall-ms S`` the client is deliberately overloaded: a callback blocks its event loop for
S ms every ``--stall-every-ms`` (what a saturated client does to its own timing); the run must
then be INVALID, limited by the client (and its TTFT is visibly wrong against the truth).
``--json FILE`` writes the rows for tests. Exit 0 when the invariant holds for every row.
On this 2-core machine the simulated endpoint shares the cores with the client.

Each row also gives this process's memory at stages (issue 22, must-show 4), in MiB (2**20
bytes) from ``/proc/self/status``: ``VmRSS`` before the run (imports done), after the endpoint
is open, at the end, and ``VmHWM`` (the peak so far: the first row's is the 128-stream run's own,
later rows' include earlier ones). ``scripts/bench_client`` gives the same figure for the
``loadgen run`` command (``/usr/bin/time``'s maximum resident set).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import LoadConfig, SimProcess, read_jsonl, tmpdir

from loadgen.endpoints.openai import OpenAIConfig, OpenAIEndpoint
from loadgen.measurement import measure

BOUND_MS = 5.0


def _mem_mib() -> dict[str, float]:
    """``VmRSS`` and ``VmHWM`` (peak) of this process in MiB; empty where ``/proc`` is not there."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return {}
    return {k: int(v.split()[0]) / 1024 for k, v in (x.split(":", 1) for x in lines) if k in ("VmRSS", "VmHWM")}


def _stall_hook(stall_ms: float, every_ms: float, tasks: list[asyncio.Task[None]]) -> Any:
    """A runner hook that blocks the event loop for ``stall_ms`` every ``every_ms`` (an overloaded client)."""

    def hook(runner: Any) -> None:
        async def hog() -> None:
            while True:
                await asyncio.sleep(every_ms / 1e3)
                time.sleep(stall_ms / 1e3)  # deliberately blocking: the loop can do nothing else

        tasks.append(asyncio.get_running_loop().create_task(hog()))

    return hook


def check(
    *,
    streams: int = 128,
    tokens: int = 256,
    itl_ms: float = 1.0,
    duration_s: float = 8.0,
    warmup_s: float = 1.0,
    workers: int = 1,
    stall_ms: float = 0.0,
    stall_every_ms: float = 40.0,
    out: Path | None = None,
) -> dict[str, Any]:
    """One run; reported TTFT against the truth log, the verdict and whether the invariant holds."""
    d = out or tmpdir(f"check-{streams}-streams-")
    mem = {"before_run": _mem_mib().get("VmRSS")}
    truth_path = d / "truth.jsonl"
    prefix = "c"
    with SimProcess(
        ["--slots", "4096", "--ttft-ms", "10", "--itl-ms", str(itl_ms), "--truth-log", str(truth_path)]
    ) as sim:
        load = LoadConfig(
            concurrency=streams, duration_s=duration_s, warmup_s=warmup_s, input_tokens=16, output_tokens=tokens, seed=1
        )

        async def go() -> Any:
            ep = OpenAIEndpoint(OpenAIConfig(base_url=sim.url, api="completions", request_id_prefix=prefix))
            await ep.open()
            mem["endpoint_open"] = _mem_mib().get("VmRSS")
            tasks: list[asyncio.Task[None]] = []
            try:
                return await measure(
                    ep,
                    load,
                    d / "run",
                    install_signal_handlers=False,
                    workers=workers,
                    runner_hook=_stall_hook(stall_ms, stall_every_ms, tasks) if stall_ms > 0 else None,
                )
            finally:
                for t in tasks:
                    t.cancel()
                await ep.close()

        try:
            import uvloop

            run = uvloop.run(go())
        except ImportError:
            run = asyncio.run(go())
    end = _mem_mib()
    mem["end"], mem["peak"] = end.get("VmRSS"), end.get("VmHWM")
    time.sleep(0.3)  # the sim's last truth lines
    res = run.result.to_dict()
    t0 = res["conditions"]["t0_monotonic_ns"]
    truth = {
        t["request_id"]: t
        for t in read_jsonl(truth_path)
        if t.get("request_id") and t.get("first_token_ns") is not None
    }
    rep, tru = [], []
    true_itl: list[float] = []
    for r in read_jsonl(d / "run" / "requests.jsonl"):
        if r["phase"] != "measure" or r["status"] != "ok" or r["ttft_ms"] is None:
            continue
        t = truth.get(f"{prefix}-{r['index']}")
        if t is None:
            continue
        rep.append(r["ttft_ms"])
        w = [c[0] for c in t.get("chunks") or []]
        true_itl.extend((b - a) / 1e6 for a, b in zip(w, w[1:]))
        origin_s = r["sent_s"] if res["conditions"].get("latency_origin") == "sent" else r["scheduled_s"]
        tru.append((t["first_token_ns"] - (t0 + round(origin_s * 1e9))) / 1e6)  # from the run's own latency origin
    rep_a, tru_a = np.asarray(rep), np.asarray(tru)
    err = rep_a - tru_a
    v = res["validity"]
    row = {
        "streams": streams,
        "tokens": tokens,
        "itl_ms": itl_ms,
        "workers": workers,
        "stall_ms": stall_ms,
        "stall_every_ms": stall_every_ms,
        "scenario_output_tps": streams * 1000.0 / itl_ms,
        "paired_requests": len(rep),
        "measured_requests": res["counts"]["requests"],
        "output_tps": res["throughput"]["output_tps"] or 0.0,
        "true_itl_p50_ms": float(np.percentile(true_itl, 50)) if true_itl else float("nan"),
        "reported_ttft_p50_ms": res["latency_ms"]["ttft"]["p50"],
        "reported_ttft_p99_ms": res["latency_ms"]["ttft"]["p99"],
        "true_ttft_p50_ms": float(np.percentile(tru_a, 50)) if len(tru) else float("nan"),
        "true_ttft_p99_ms": float(np.percentile(tru_a, 99)) if len(tru) else float("nan"),
        "paired_reported_ttft_p50_ms": float(np.percentile(rep_a, 50)) if len(rep) else float("nan"),
        "paired_reported_ttft_p99_ms": float(np.percentile(rep_a, 99)) if len(rep) else float("nan"),
        "error_p50_ms": float(np.percentile(err, 50)) if len(rep) else float("nan"),
        "error_p99_ms": float(np.percentile(err, 99)) if len(rep) else float("nan"),
        "client_cpu_fraction": res["client"].get("cpu_fraction"),
        "valid": v["valid"],
        "limited_by": v["limited_by"],
        "failed_generator_checks": [c["detail"] for c in v["checks"] if not c["ok"] and c["group"] == "generator"],
        "dir": str(d),
        "rss_mib": mem,
    }
    row["p50_error_ms"] = abs(row["paired_reported_ttft_p50_ms"] - row["true_ttft_p50_ms"])
    # the errors of the reported figures, as the verdict grid defines them (scripts/bench_truth.py):
    # reported percentile - true percentile (error_p50_ms / error_p99_ms above: percentiles of each
    # request's own error, a stricter view the verdict does not claim to bound)
    row["ttft_p50_err_ms"] = row["paired_reported_ttft_p50_ms"] - row["true_ttft_p50_ms"]
    row["ttft_p99_err_ms"] = row["paired_reported_ttft_p99_ms"] - row["true_ttft_p99_ms"]
    row["within_bound"] = row["p50_error_ms"] <= BOUND_MS
    row["flagged_client"] = (not v["valid"]) and v["limited_by"] == "client"
    row["invariant_holds"] = row["within_bound"] or row["flagged_client"]
    # the verdict judges the stamps, not the loop (issue 22): a stalled client whose stalls moved no
    # reported TTFT (p50 and p99 within BOUND_MS of the truth: e.g. the saturated server queued the
    # first tokens, so few landed in a stall) is rightly VALID; a VALID one with a moved figure is wrong
    row["right_or_flagged"] = row["flagged_client"] or (
        bool(v["valid"]) and abs(row["ttft_p50_err_ms"]) <= BOUND_MS and abs(row["ttft_p99_err_ms"]) <= BOUND_MS
    )
    return row


def show(row: dict[str, Any]) -> None:
    label = f"{row['streams']} streams x {row['tokens']} tokens @ {row['itl_ms']:g} ms ITL, {row['workers']} worker(s)"
    if row["stall_ms"]:
        label += f", client loop blocked {row['stall_ms']:g} ms after every {row['stall_every_ms']:g} ms (deliberate overload)"
    print(f"\n== {label}")
    print(
        f"  measured requests {row['measured_requests']} (paired with the truth log: {row['paired_requests']}), "
        f"{row['output_tps']:,.0f} output tok/s, true ITL p50 {row['true_itl_p50_ms']:.2f} ms, client CPU {row['client_cpu_fraction'] or 0:.2f} of a core"
    )
    if row["output_tps"] < 0.5 * row["scenario_output_tps"]:
        print(
            f"  the scenario asks ~{row['scenario_output_tps']:,.0f} tok/s: the simulated endpoint delivered "
            f"{row['output_tps']:,.0f} (it is the bottleneck on this machine; TTFT includes its queueing)"
        )
    print(
        f"  TTFT p50: reported {row['reported_ttft_p50_ms']:.3f} ms, true {row['true_ttft_p50_ms']:.3f} ms "
        f"(|error| {row['p50_error_ms']:.3f} ms, bound {BOUND_MS:g} ms)"
    )
    print(f"  TTFT p99: reported {row['reported_ttft_p99_ms']:.3f} ms, true {row['true_ttft_p99_ms']:.3f} ms")
    print(f"  per-request error: p50 {row['error_p50_ms']:+.3f} ms, p99 {row['error_p99_ms']:+.3f} ms")
    print(
        f"  figures' error (reported - true): TTFT p50 {row['ttft_p50_err_ms']:+.3f} ms, p99 {row['ttft_p99_err_ms']:+.3f} ms"
    )
    m = row["rss_mib"]
    if m.get("peak") is not None:
        print(
            f"  memory (MiB): RSS {m['before_run']:.1f} before the run, {m['endpoint_open']:.1f} with the endpoint "
            f"open, {m['end']:.1f} at the end; peak (VmHWM) {m['peak']:.1f}"
        )
    verdict = "VALID" if row["valid"] else f"INVALID (limited by {row['limited_by']})"
    print(f"  Result is: {verdict}")
    for r in row["failed_generator_checks"]:
        print(f"    - {r}")
    how = (
        "within the bound"
        if row["within_bound"]
        else ("flagged INVALID, limited by client" if row["flagged_client"] else "SILENTLY WRONG")
    )
    print(
        f"  invariant (|p50 error| <= {BOUND_MS:g} ms or INVALID/client): {'HOLDS' if row['invariant_holds'] else 'BROKEN'} ({how})"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--streams", type=int, default=128)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--itl-ms", type=float, default=1.0)
    ap.add_argument("--duration", type=float, default=8.0)
    ap.add_argument("--workers", default="1", help="comma-separated worker counts, e.g. 1,2")
    ap.add_argument("--stall-ms", type=float, default=30.0, help="the overloaded-client row (0: skip it)")
    ap.add_argument("--json", type=Path, help="write the rows here")
    a = ap.parse_args()
    rows = []
    for w in [int(x) for x in a.workers.split(",")]:
        rows.append(check(streams=a.streams, tokens=a.tokens, itl_ms=a.itl_ms, duration_s=a.duration, workers=w))
        show(rows[-1])
    if a.stall_ms > 0:
        rows.append(
            check(streams=a.streams, tokens=a.tokens, itl_ms=a.itl_ms, duration_s=a.duration, stall_ms=a.stall_ms)
        )
        show(rows[-1])
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1))
    ok = all(r["invariant_holds"] for r in rows) and all(r["right_or_flagged"] for r in rows if r["stall_ms"])
    print(
        f"\ninvariant held on every row{' and the overloaded client was flagged' if a.stall_ms > 0 else ''}: {'PASS' if ok else 'FAIL'}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
