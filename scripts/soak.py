"""Soak: a long open-loop run against the simulated endpoint with faults sprinkled in.

Usage (``scripts/soak`` sets up the environment)::

    scripts/soak --minutes 30 --rate 200             # the 30-minute soak
    scripts/soak --minutes 480 --rate 500 --max-rss-mib 512   # the 8-hour run
    scripts/soak --minutes 1 --rate 150 --warmup-s 20 --max-growth-mib 10   # what CI runs (test_soak)

The client runs in this process through the library (``loadgen.measurement.measure`` with
an ``OpenAIEndpoint``), so its resident memory, descriptors and asyncio tasks can be
sampled while it runs (every ``--sample-s``). The simulated endpoint is a separate
process (``loadgen.sim``) on 127.0.0.1 with a small probability of each fault (429,
500, dropped connection, malformed event, in-band error, a 200 ms stall).

Printed at the end (and written as JSON with ``--json``): RSS before and after the
schedule is built, at the end of warm-up, at the end of sending, peak; growth after
warm-up (total, per hour, per request, and the least-squares slope of RSS over the
samples after warm-up, which one allocator step at either end does not sway); descriptors and tasks at warm-up, at the end, their
range after warm-up and after the endpoint is closed; request counts, error kinds,
unsent; client CPU. Exit status 1 when a bound is broken: growth after warm-up
above ``--max-growth-mib`` or ``--max-growth-mib-per-hour`` (the per-hour bound is
only judged on runs of 20 minutes or more, where it means something), peak RSS above
``--max-rss-mib``, descriptors or tasks not flat (the median of the last quarter of
the samples after warm-up more than ``--flat-slack`` above that of the first
quarter), a leak after close, or a request not accounted for.

What a long run holds per request (docs/architecture.md, "Long runs"): the schedule's
send offsets and phase flags (9 bytes a request, allocated before the run: "after
plan"); prompts are built just before their send and dropped when the request ends;
exact per-request samples stay in memory up to 4 Ki values per metric and then go to
an unnamed temporary file in the output directory (8 bytes a value on disk); loop-lag
samples are thinned past 50 000. So memory after warm-up should stay flat.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

MiB = 1024 * 1024
FAULT_FLAGS = (
    "--fault-429",
    "--fault-500",
    "--fault-drop",
    "--fault-malformed",
    "--fault-inband-error",
    "--fault-stall",
)
EXPECTED_KINDS = {"rate_limited", "http_error", "incomplete_stream", "protocol", "stream_error"}


def _status_kb(field: str) -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def rss() -> int:
    return _status_kb("VmRSS") * 1024


def fds() -> int:
    return len(os.listdir("/proc/self/fd"))


async def soak(
    *,
    minutes: float,
    rate: float,
    warmup_s: float,
    fault_p: float = 0.002,
    out_dir: Path,
    input_tokens: int = 32,
    output_tokens: int = 8,
    sample_s: float = 1.0,
    seed: int = 1,
    timeout_s: float = 5.0,
    progress: Any = None,
) -> dict[str, Any]:
    """Run the soak and return its figures (see the module docstring)."""
    from loadgen.endpoints.openai import OpenAIConfig, OpenAIEndpoint
    from loadgen.engine.runplan import LoadConfig
    from loadgen.measurement import measure
    from loadgen.sim.launch import SimProcess

    total_s = minutes * 60.0
    if total_s <= warmup_s:
        raise SystemExit("--minutes must be longer than --warmup-s")
    load = LoadConfig(
        rate_rps=rate,
        arrival="poisson",
        duration_s=total_s - warmup_s,
        warmup_s=warmup_s,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        seed=seed,
        salt="soak",
        drain_grace_s=10.0,
    )
    sim_args = ["--ttft-ms", "1", "--itl-ms", "5", "--slots", "4096", "--seed", str(seed), "--stall-ms", "200"]
    for flag in FAULT_FLAGS:
        sim_args += [flag, str(fault_p)]
    fig: dict[str, Any] = {"minutes": minutes, "rate_rps": rate, "warmup_s": warmup_s, "fault_p_each": fault_p}
    samples: list[dict[str, float]] = []
    kinds: dict[str, int] = {}
    n_rec = 0
    holder: dict[str, Any] = {}

    def on_record(rec: Any, _m: Any) -> None:
        nonlocal n_rec
        n_rec += 1
        k = rec.error_kind or "ok"
        kinds[k] = kinds.get(k, 0) + 1

    async def sampler() -> None:
        while True:
            runner = holder.get("runner")
            t0 = getattr(runner, "t0_ns", 0) if runner is not None else 0
            t = (time.perf_counter_ns() - t0) / 1e9 if t0 else -1.0
            samples.append({"t_s": t, "rss": rss(), "fds": fds(), "tasks": len(asyncio.all_tasks()), "records": n_rec})
            if progress and t >= 0 and int(t) % 60 < sample_s:
                progress(
                    f"t={t:7.0f}s rss={rss() / MiB:7.1f} MiB fds={fds()} tasks={len(asyncio.all_tasks())} "
                    f"records={n_rec}"
                )
            await asyncio.sleep(sample_s)

    with SimProcess(sim_args) as sim:
        assert sim.url is not None
        fig["rss_start_mib"] = rss() / MiB
        fds0, tasks0 = fds(), len(asyncio.all_tasks())

        def hook(runner: Any) -> None:  # measure() has built the schedule: the runner is about to start
            holder["runner"] = runner
            fig["scheduled"] = len(runner.plan.schedule)
            fig["rss_after_plan_mib"] = rss() / MiB
            fig["plan_build_s"] = time.perf_counter() - wall0

        ep = OpenAIEndpoint(
            OpenAIConfig(
                sim.url,
                model="sim-model",
                preflight=False,
                discover=False,
                timeout_s=timeout_s,
                request_id_prefix="soak",
            )
        )
        await ep.open()
        task = asyncio.create_task(sampler())
        ru0 = resource.getrusage(resource.RUSAGE_SELF)
        wall0 = time.perf_counter()
        try:
            m = await measure(ep, load, out_dir, install_signal_handlers=False, on_record=on_record, runner_hook=hook)
        finally:
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
            await ep.close()
        ru1 = resource.getrusage(resource.RUSAGE_SELF)
        spilled = m.aggregator.spill.bytes
        m.aggregator.close()  # the result is built: release the samples' spill file (one descriptor)
        fig["wall_s"] = time.perf_counter() - wall0
        fig["client_cpu_s"] = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
        for _ in range(100):  # closing sockets go within a few loop turns
            await asyncio.sleep(0.02)
            if fds() <= fds0 and len(asyncio.all_tasks()) <= tasks0:
                break
        fig["fds_before"], fig["fds_after_close"] = fds0, fds()
        fig["tasks_before"], fig["tasks_after_close"] = tasks0, len(asyncio.all_tasks())
    fig["rss_peak_mib"] = _status_kb("VmHWM") / 1024
    out = m.outcome
    send_end = (out.end_ns - out.t0_ns) / 1e9
    after = [s for s in samples if warmup_s <= s["t_s"] <= send_end]
    if len(after) < 4:
        raise SystemExit("too few samples after warm-up: lengthen the run or shorten --sample-s")
    w, e = after[0], after[-1]
    hours = max((e["t_s"] - w["t_s"]) / 3600.0, 1e-9)
    q = max(len(after) // 4, 1)
    fig.update(
        {
            "rss_warm_mib": w["rss"] / MiB,
            "rss_end_mib": e["rss"] / MiB,
            "growth_mib": (e["rss"] - w["rss"]) / MiB,
            "growth_mib_per_hour": (e["rss"] - w["rss"]) / MiB / hours,
            "growth_bytes_per_request": (e["rss"] - w["rss"]) / max(e["records"] - w["records"], 1),
            "slope_mib_per_hour": _slope([s["t_s"] for s in after], [s["rss"] / MiB for s in after]) * 3600.0,
            "spilled_bytes": spilled,
            "rss_max_after_warmup_mib": max(s["rss"] for s in after) / MiB,
            "fds_warm": w["fds"],
            "fds_end": e["fds"],
            "fds_range_after_warmup": [min(s["fds"] for s in after), max(s["fds"] for s in after)],
            "fds_first_quarter_median": statistics.median(s["fds"] for s in after[:q]),
            "fds_last_quarter_median": statistics.median(s["fds"] for s in after[-q:]),
            "tasks_warm": w["tasks"],
            "tasks_end": e["tasks"],
            "tasks_range_after_warmup": [min(s["tasks"] for s in after), max(s["tasks"] for s in after)],
            "tasks_first_quarter_median": statistics.median(s["tasks"] for s in after[:q]),
            "tasks_last_quarter_median": statistics.median(s["tasks"] for s in after[-q:]),
            "records": n_rec,
            "unsent": out.unsent + out.unsent_warmup,
            "kinds": kinds,
            "accounted": n_rec + out.unsent + out.unsent_warmup == fig["scheduled"],
            "valid": m.result.valid,
            "limited_by": m.result.validity.get("limited_by"),
            "aborted_reason": out.client.aborted_reason,
            "loop_lag_p99_ms": sorted(out.client.loop_lag_ms)[int(0.99 * (len(out.client.loop_lag_ms) - 1))]
            if out.client.loop_lag_ms
            else None,
            "samples": len(samples),
        }
    )
    return fig


def _slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of ys over xs (0 for fewer than two distinct xs)."""
    n = len(xs)
    if n < 2:
        return 0.0
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx else 0.0


def judge(
    fig: dict[str, Any], *, max_growth_mib: float, max_growth_mib_per_hour: float, max_rss_mib: float, flat_slack: float
) -> list[str]:
    """The bounds a soak must meet; returns the broken ones (empty: pass)."""
    bad = []
    if fig["growth_mib"] > max_growth_mib:
        bad.append(f"memory grew {fig['growth_mib']:.1f} MiB after warm-up (bound {max_growth_mib})")
    if fig["minutes"] >= 20 and fig["growth_mib_per_hour"] > max_growth_mib_per_hour:
        bad.append(f"memory grew {fig['growth_mib_per_hour']:.1f} MiB/h (bound {max_growth_mib_per_hour})")
    if fig["rss_peak_mib"] > max_rss_mib:
        bad.append(f"peak RSS {fig['rss_peak_mib']:.0f} MiB (bound {max_rss_mib})")
    for what in ("fds", "tasks"):
        a, b = fig[f"{what}_first_quarter_median"], fig[f"{what}_last_quarter_median"]
        if b > a + flat_slack:
            bad.append(f"{what} not flat: median {a} in the first quarter after warm-up, {b} in the last")
    if fig["fds_after_close"] > fig["fds_before"]:
        bad.append(f"descriptor leak: {fig['fds_before']} before, {fig['fds_after_close']} after close")
    if fig["tasks_after_close"] > fig["tasks_before"]:
        bad.append(f"task leak: {fig['tasks_before']} before, {fig['tasks_after_close']} after close")
    if not fig["accounted"]:
        bad.append("requests not accounted for: records + unsent != scheduled")
    return bad


def render(fig: dict[str, Any]) -> str:
    return "\n".join(
        [
            f"soak: {fig['minutes']:g} min at {fig['rate_rps']:g} req/s (warm-up {fig['warmup_s']:g} s), "
            f"{fig['scheduled']} scheduled, faults {fig['fault_p_each']:g} each",
            f"memory   start {fig['rss_start_mib']:.1f} MiB, after plan {fig['rss_after_plan_mib']:.1f} MiB "
            f"({fig['plan_build_s']:.1f} s to build), "
            f"warm-up {fig['rss_warm_mib']:.1f} MiB, end {fig['rss_end_mib']:.1f} MiB, peak {fig['rss_peak_mib']:.1f} MiB",
            f"growth   {fig['growth_mib']:+.2f} MiB after warm-up = {fig['growth_mib_per_hour']:+.1f} MiB/h "
            f"({fig['growth_bytes_per_request']:+.1f} B/request; least-squares slope {fig['slope_mib_per_hour']:+.1f} MiB/h); "
            f"samples spilled to disk {fig['spilled_bytes'] / MiB:.1f} MiB",
            f"fds      {fig['fds_before']} before, warm-up {fig['fds_warm']}, end {fig['fds_end']}, "
            f"range {fig['fds_range_after_warmup']}, after close {fig['fds_after_close']}",
            f"tasks    {fig['tasks_before']} before, warm-up {fig['tasks_warm']}, end {fig['tasks_end']}, "
            f"range {fig['tasks_range_after_warmup']}, after close {fig['tasks_after_close']}",
            f"requests {fig['records']} recorded + {fig['unsent']} unsent (accounted: {fig['accounted']}); "
            f"kinds {fig['kinds']}",
            f"client   {fig['client_cpu_s']:.0f} s CPU over {fig['wall_s']:.0f} s; loop lag p99 "
            f"{fig['loop_lag_p99_ms']} ms; valid {fig['valid']} (limited by {fig['limited_by']})",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--rate", type=float, default=200.0)
    ap.add_argument("--warmup-s", type=float, default=60.0)
    ap.add_argument("--faults", type=float, default=0.002, help="probability of each fault kind per request")
    ap.add_argument("--input-tokens", type=int, default=32)
    ap.add_argument("--output-tokens", type=int, default=8)
    ap.add_argument("--sample-s", type=float, default=5.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--max-growth-mib", type=float, default=64.0)
    ap.add_argument("--max-growth-mib-per-hour", type=float, default=6.0)
    ap.add_argument("--max-rss-mib", type=float, default=512.0)
    ap.add_argument("--flat-slack", type=float, default=16.0, help="allowed rise of descriptors/tasks (medians)")
    ap.add_argument("--out", type=Path, default=None, help="result directory (default: a temp dir)")
    ap.add_argument("--json", type=Path, default=None, help="also write the figures here")
    a = ap.parse_args(argv)
    import tempfile

    out = a.out or Path(tempfile.mkdtemp(prefix="loadgen-soak-"))
    fig = asyncio.run(
        soak(
            minutes=a.minutes,
            rate=a.rate,
            warmup_s=a.warmup_s,
            fault_p=a.faults,
            out_dir=out,
            input_tokens=a.input_tokens,
            output_tokens=a.output_tokens,
            sample_s=a.sample_s,
            seed=a.seed,
            progress=lambda s: print(s, file=sys.stderr, flush=True),
        )
    )
    bad = judge(
        fig,
        max_growth_mib=a.max_growth_mib,
        max_growth_mib_per_hour=a.max_growth_mib_per_hour,
        max_rss_mib=a.max_rss_mib,
        flat_slack=a.flat_slack,
    )
    fig["broken_bounds"] = bad
    print(render(fig))
    print("results in", out)
    if a.json:
        a.json.write_text(json.dumps(fig, indent=2))
    for b in bad:
        print("FAIL:", b)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
