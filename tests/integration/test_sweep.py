"""``loadgen sweep`` end to end against the embedded simulated endpoint (127.0.0.1 only).

Every test is a real ``python -m loadgen.cli sweep`` process with short probes. Whole file:
about a minute on a busy 2-core machine.

* accuracy: on a fast profile (millisecond service times) the bracket contains the
  reference answer of the simulated endpoint's own model on a virtual clock
  (:mod:`loadgen.sim.reference`), taken at the probes' own length, within 15 %;
  sweep.json, the per-probe directories and report.html are checked on the same run,
  and so is ``--cost-per-hour`` (cost per million tokens from the answer's own rates);
* an overloaded probe stops early (duration well under the probe duration, a censored count);
* a client-limited case (a simulated endpoint faster than the generator) ends with exit 5
  and "client limited", not with an answer;
* a server that returns errors at high load ends with FAIL probes (exit 1), never INVALID.

Jitter bounds: the generator's validity checks (p99 schedule lag <= 5 ms, p99 event-loop
lag <= 10 ms) are built for a dedicated client machine. On a shared 2-core CI runner the
client process is now and then descheduled for 20-350 ms (an idle asyncio loop there shows
such stalls too), which on a probe of ~150 requests is the p99; an INVALID probe then ends
the sweep as "client limited" (exit 5). So the accuracy and overload tests raise those two
bounds with ``--max-schedule-lag 100ms --max-loop-lag 100ms``, and if a sweep still ends
client limited (exit 5: the generator says it could not keep up) they run it once more; a
wrong bracket or verdict is never retried. The client-limited and server-error tests use the
shipped bounds: a server's HTTP errors must give FAIL whatever the client's lag.
"""

from __future__ import annotations

import importlib.util
import json
import math
import statistics
import subprocess
from pathlib import Path
from typing import Any

import pytest

from loadgen.core.contract import SWEEP_SCHEMA_VERSION
from loadgen.core.slo import SLOTarget, parse_slo
from loadgen.core.stats import min_requests
from loadgen.sim.model import SimParams, capacity_rps
from loadgen.sim.reference import percentile_at, reference_max_rate
from tests.fixtures.cli_proc import cli_run

pytestmark = pytest.mark.timing  # asserts timing figures: the serial phase

# The fast profile: 64 slots, 5 ms prefill, 5 ms decode step + 0.5 ms per extra sequence,
# 16 input / 16 output tokens. Capacity about 73 req/s; TTFT p90 <= 100 ms holds up to about
# 66 req/s in steady state (virtual clock) and, at a 2.5 s probe's length (~21 warm-up + ~200
# measured requests), to a median of about 78 req/s over seeds (73..89: short probes are
# optimistic near saturation, and that is what the probes see). The 100 ms threshold leaves
# ~80 ms of headroom over the typical TTFT, so a CPU stall of the client or the simulated
# endpoint on a busy runner does not turn a passing rate into a FAIL (with p90 <= 50 ms it did,
# about one run in ten).
FAST = SimParams(slots=64, ttft_ms=5, itl_ms=5, itl_per_seq_ms=0.5)
FAST_SIM_ARGS = "--slots 64 --ttft-ms 5 --itl-ms 5 --itl-per-seq-ms 0.5"
FAST_SLO = "ttft:p90<=100ms"
IN_TOKENS, OUT_TOKENS = 16, 16

LAG_BOUND_MS = 100.0
RELAXED_BOUNDS = ["--max-schedule-lag", f"{LAG_BOUND_MS:g}ms", "--max-loop-lag", f"{LAG_BOUND_MS:g}ms"]

SWEEP_KEYS = {"schema_version", "slo", "conditions", "answer", "probes"}


def _validate_sweep(res: dict[str, Any]) -> None:
    """A fresh sweep.json against the published schema (docs/schemas, loadgen.core.contract)."""
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads((Path(__file__).resolve().parents[2] / "docs/schemas/sweep.schema.json").read_text())
    jsonschema.validate(res, schema)


ANSWER_KEYS = {
    "max_rate_rps",
    "bracket_rps",
    "request_rps",
    "output_tps",
    "total_tps",
    "goodput_rps",
    "cost_per_million_output_tokens_usd",
    "cost_per_million_total_tokens_usd",
    "limited_by",
}
PROBE_KEYS = {
    "offered_rps",
    "achieved_send_rps",
    "verdict",
    "low_confidence",
    "exceedance_fraction",
    "confidence_bounds",
    "censored",
    "duration_s",
    "stopped_early",
    "latency_ms",
    "dir",
}


def sweep_cli(
    args: list[str], out: Path, *, relaxed: bool = True, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    bounds = RELAXED_BOUNDS if relaxed else []
    return cli_run("sweep", *args, *bounds, out=out, timeout=timeout)


def sweep_cli_retry(args: list[str], out: Path, attempts: int = 2) -> tuple[subprocess.CompletedProcess[str], Path]:
    """``sweep_cli`` (relaxed), run again while it ends client limited (exit 5), into fresh dirs."""
    for i in range(attempts):
        d = out.with_name(f"{out.name}-{i}")
        p = sweep_cli(args, d)
        if p.returncode != 5:
            break
        print(
            f"\nattempt {i + 1} ended client limited (a CPU stall on this machine?): "
            + " | ".join(ln for ln in p.stdout.splitlines() if "client limit" in ln)
        )
    return p, d


def flat(text: str) -> str:
    return " ".join(text.split())


def load_sweep(out: Path) -> dict[str, Any]:
    return json.loads((out / "sweep.json").read_text())


def check_bounds_in_force(probe_dir: Path, relaxed: bool) -> None:
    """The probe ran under the schedule-lag bound this test meant."""
    res = json.loads((probe_dir / "result.json").read_text())
    detail = next(c["detail"] for c in res["validity"]["checks"] if c["name"] == "schedule_lag_p99")
    # relaxed: the test's --max-schedule-lag; shipped: the sweep default max(5 ms, 2 % of the tightest
    # TTFT/E2E threshold), printed with its rule
    want = f"<= {LAG_BOUND_MS:g} ms (set by --max-schedule-lag)" if relaxed else "<= 5 ms (sweep default"
    assert want in detail, detail


# --------------------------------------------------------------------------- reference answers


def ref_max_rate(
    params: SimParams, target: SLOTarget, *, requests: int, warmup: int, seed: int, rel_precision: float = 0.005
) -> float:
    """Highest rate whose percentile meets ``target`` on a virtual run shaped like one probe:
    ``warmup`` warm-up requests then the measured ones, from an idle server."""
    wf = (warmup + 0.5) / requests

    def ok(r: float) -> bool:
        v = percentile_at(
            params,
            r,
            target,
            input_tokens=IN_TOKENS,
            output_tokens=OUT_TOKENS,
            requests=requests,
            seed=seed,
            warmup_fraction=wf,
        )
        return v <= target.threshold_ns

    hi = capacity_rps(params, IN_TOKENS, OUT_TOKENS) * 1.5
    lo = hi / 50
    if not ok(lo):
        return 0.0
    while ok(hi):
        lo, hi = hi, hi * 2
    while (hi - lo) / lo > rel_precision:
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    return lo


def probe_length_reference(
    params: SimParams, target: SLOTarget, probe_s: float, warmup_s: float, seeds: range = range(9)
) -> tuple[float, list[float]]:
    """Median over seeds of the per-seed answer at the probe's own request count near the answer."""
    need = min_requests(target.percentile, 0.95)
    r = 0.8 * capacity_rps(params, IN_TOKENS, OUT_TOKENS)
    vals: list[float] = []
    for _ in range(2):  # the request count depends on the rate: settle it once
        meas, warm = max(need, math.ceil(r * probe_s)), math.ceil(warmup_s * r)
        vals = [ref_max_rate(params, target, requests=meas + warm, warmup=warm, seed=s) for s in seeds]
        r = statistics.median(vals)
    return r, vals


# --------------------------------------------------------------------------- tests


@pytest.mark.timeout(240)
# alone: its reference is the simulated endpoint's own model, which holds while the endpoint has its core; beside
# another sweep (CI, session 24's stop) or a same-priority hog the endpoint itself falls behind, and the probe at
# 75 % of the reference was rightly "unstable: backlog growing" for the endpoint that ran (passes by itself)
@pytest.mark.alone
def test_fast_profile_bracket_contains_reference_and_files(tmp_path: Path) -> None:
    probe_s, cost = 2.5, 3.6
    p, out = sweep_cli_retry(
        [
            "--slo",
            FAST_SLO,
            "--probe-duration",
            f"{probe_s}s",
            "--calibration",
            "2s",
            "--calibration-concurrency",
            "64",
            "--precision",
            "15%",
            "--input-tokens",
            str(IN_TOKENS),
            "--output-tokens",
            str(OUT_TOKENS),
            "--cost-per-hour",
            str(cost),
            "--sim-args",
            FAST_SIM_ARGS,
        ],
        tmp_path / "sweep",
    )
    assert "Traceback" not in p.stderr, p.stderr
    assert p.returncode == 0, p.stdout + p.stderr
    res = load_sweep(out)

    # -- the answer against the virtual-clock reference ---------------------------------
    target = parse_slo(FAST_SLO)
    # the reference at the answer probe's own length: probes are sized for their evidence (issue 30), so
    # a probe after the first holds its evidence rule's count times the dependence seen below its rate
    ans = next(q for q in res["probes"] if q["offered_rps"] == res["answer"]["max_rate_rps"])
    ans_s = max(probe_s, (ans["judged_requests"] or 0) / ans["offered_rps"])
    ref, per_seed = probe_length_reference(FAST, target, ans_s, warmup_s=0.1 * probe_s)
    steady = reference_max_rate(
        FAST, target, input_tokens=IN_TOKENS, output_tokens=OUT_TOKENS, requests=8000, rel_precision=0.005
    )
    a = res["answer"]
    lo, hi = a["bracket_rps"]
    print(
        f"\nbracket {lo:.2f}..{hi:.2f} req/s; reference at the probe length {ref:.2f} "
        f"(seeds {min(per_seed):.1f}..{max(per_seed):.1f}), steady state {steady:.2f}"
    )
    assert a["limited_by"] is None
    assert a["max_rate_rps"] == lo
    assert lo < hi and (hi - lo) / lo <= 0.15 + 1e-9
    assert lo <= ref * 1.15, (lo, hi, ref)
    assert hi >= ref * 0.85, (lo, hi, ref)
    assert f"max rate meeting {FAST_SLO}" in flat(p.stdout)

    # -- sweep.json: documented keys ---------------------------------------------------
    assert SWEEP_KEYS <= set(res)
    assert res["schema_version"] == SWEEP_SCHEMA_VERSION  # loadgen.core.contract (version 1 until issue 29)
    _validate_sweep(res)
    assert res["slo"] == [{"target": FAST_SLO, "metric": "ttft", "percentile": 90.0, "threshold_ms": 100.0}]
    assert res["conditions"]["endpoint"]
    assert ANSWER_KEYS <= set(a)
    for k in ("request_rps", "output_tps", "total_tps", "goodput_rps"):
        assert a[k] is not None and a[k] > 0, k
    assert len(res["probes"]) >= 3
    assert res["probe_time_s"] == pytest.approx(sum(q["duration_s"] for q in res["probes"]))
    verdicts = {}
    for q in res["probes"]:
        assert PROBE_KEYS <= set(q), set(PROBE_KEYS) - set(q)
        assert q["verdict"] in ("pass", "fail"), q
        assert isinstance(q["low_confidence"], bool) and isinstance(q["stopped_early"], bool)
        assert isinstance(q["censored"], int) and q["censored"] >= 0
        assert q["duration_s"] > 0 and q["achieved_send_rps"] > 0
        frac = q["exceedance_fraction"][FAST_SLO]
        b_lo, b_hi = q["confidence_bounds"][FAST_SLO]
        assert 0 <= b_lo <= frac <= b_hi <= 1
        assert set(q["latency_ms"]) == {"ttft"}
        assert not Path(q["dir"]).is_absolute() and "/" not in q["dir"]  # relative to the sweep directory
        d = out / q["dir"]
        assert d.is_dir()
        assert (d / "result.json").is_file() and (d / "requests.jsonl").is_file()
        lines = (d / "requests.jsonl").read_text().splitlines()
        assert sum(1 for ln in lines if json.loads(ln)["phase"] == "measure") >= min_requests(90, 0.95)
        verdicts[q["offered_rps"]] = q["verdict"]
    check_bounds_in_force(out / res["probes"][0]["dir"], relaxed=True)
    assert verdicts[lo] == "pass" and verdicts[hi] == "fail"
    assert len({q["dir"] for q in res["probes"]}) == len(res["probes"])
    assert (out / "calibration" / "result.json").is_file()
    if importlib.util.find_spec("matplotlib") is not None:
        assert (out / "report.html").is_file()
        assert (out / "report.html").stat().st_size > 1000

    # -- --cost-per-hour: cost per million tokens from the answer's own rates, exactly ----
    assert a["cost_per_million_output_tokens_usd"] == cost / (a["output_tps"] * 3600.0) * 1e6
    assert a["cost_per_million_total_tokens_usd"] == cost / (a["total_tps"] * 3600.0) * 1e6
    assert f"${a['cost_per_million_output_tokens_usd']:.4f} per million output tokens" in flat(p.stdout)


@pytest.mark.timeout(120)
def test_overloaded_probe_stops_early_with_a_censored_count(tmp_path: Path) -> None:
    # 4 slots, 20 ms prefill, 20 ms decode, 8 output tokens: capacity ~16.7 req/s; offer 50.
    probe_s = 5.0
    p, out = sweep_cli_retry(
        [
            "--slo",
            "ttft:p90<=200ms",
            "--probe-duration",
            f"{probe_s:g}s",
            "--calibration",
            "0",
            "--start-rate",
            "50",
            "--min-rate",
            "50",
            "--input-tokens",
            "16",
            "--output-tokens",
            "8",
            "--sim-args",
            "--slots 4 --ttft-ms 20 --itl-ms 20",
        ],
        tmp_path / "sweep",
    )
    assert "Traceback" not in p.stderr, p.stderr
    res = load_sweep(out)
    assert len(res["probes"]) == 1  # the lowest rate allowed failed: nothing else to try
    q = res["probes"][0]
    assert q["stopped_early"] is True
    assert q["verdict"] == "fail", q
    assert p.returncode == 1, p.stdout + p.stderr
    assert q["duration_s"] < 0.7 * probe_s, q["duration_s"]
    assert res["probe_time_s"] == pytest.approx(q["duration_s"])
    # requests still in flight under the threshold when it stopped: censored, and counted
    assert isinstance(q["censored"], int) and q["censored"] >= 1
    records = [json.loads(ln) for ln in (out / q["dir"] / "requests.jsonl").read_text().splitlines()]
    cancelled = [r for r in records if r["phase"] == "measure" and r["error_kind"] == "cancelled"]
    assert q["censored"] <= len(cancelled)
    assert all("stopped early" in r["error_detail"] for r in cancelled)
    assert q["exceedance_fraction"]["ttft:p90<=200ms"] > 0.5
    assert res["answer"]["max_rate_rps"] is None and res["answer"]["bracket_rps"] == [None, 50.0]
    # the table shows the early stop, its duration and the censored count
    row = next(ln for ln in p.stdout.splitlines() if ln.lstrip("│┃ ").startswith("1 "))
    cells = [c.strip() for c in row.strip().strip("│").split("│")]
    assert cells[5] == "FAIL (stopped early)", cells  # the probe's one verdict text (issue 23)
    t = q["targets"][0]  # the one count (issue 30): over of measured, as sweep.json holds it
    assert cells[6] == f"{t['exceedances']} of {t['requests']}", cells
    assert cells[8] == f"{q['duration_s']:.1f}" and cells[9] == str(q["censored"]), cells
    assert "client limited" not in flat(p.stdout)
    check_bounds_in_force(out / q["dir"], relaxed=True)


@pytest.mark.timeout(120)
def test_client_limited_ends_with_exit_5(tmp_path: Path) -> None:
    # A simulated endpoint with no service time, 1 output token, 4096 slots and a generous SLO:
    # at 12000 req/s the generator, not the server, is what cannot keep up (one Python client on this machine
    # kept up with 4,000-4,700 req/s of 1-token requests when CI's machine was fast: 4000 passed there). Shipped bounds.
    out = tmp_path / "sweep"
    p = sweep_cli(
        [
            "--slo",
            "ttft:p90<=200ms",  # the sweep's default lag bound: max(5 ms, 2 % of 200 ms) = 5 ms
            "--probe-duration",
            "1s",
            "--calibration",
            "0",
            "--start-rate",
            "12000",
            "--min-rate",  # the search goes below a client-limited rate (issue 23): not here
            "12000",
            "--input-tokens",
            "4",
            "--output-tokens",
            "1",
            "--sim-args",
            "--slots 4096 --ttft-ms 0 --itl-ms 0",
        ],
        out,
        relaxed=False,
    )
    assert "Traceback" not in p.stderr, p.stderr
    assert p.returncode == 5, p.stdout + p.stderr
    assert "client limited" in flat(p.stdout)
    res = load_sweep(out)
    assert res["answer"]["limited_by"] == "client"
    last = res["probes"][-1]
    assert last["verdict"] == "invalid"
    # a transient stall is re-run twice before the sweep concludes client-limited
    assert [q["verdict"] for q in res["probes"]] == ["invalid"] * 3 and last["reruns"] == 2
    assert len(res["reruns"]) == 2
    assert last["validity_detail"], last
    assert all(q["verdict"] != "fail" for q in res["probes"])
    for d in last["validity_detail"]:
        assert f"client limit: {d}" in flat(p.stdout)
    check_bounds_in_force(out / last["dir"], relaxed=False)


@pytest.mark.timeout(120)
def test_server_errors_at_high_load_are_fail_probes_not_client_limited(tmp_path: Path) -> None:
    # Every request gets HTTP 500 at once; 300 then 150 req/s (the lowest rate allowed). The
    # 10 s probes (up to 9000 requests with extensions) need hundreds of errors before FAIL is
    # certain, so the early-stop watcher runs many times with large counts on the event loop.
    # Shipped bounds: HTTP errors are the server's, whatever the generator's lag. Every request
    # fails, so the threshold only sets how late the client may wake before it is refused as
    # starved (10 % of it, at least 5 ms): 250 ms keeps a busy CI machine from that refusal.
    out = tmp_path / "sweep"
    p = sweep_cli(
        [
            "--slo",
            "ttft:p90<=250ms",
            "--probe-duration",
            "10s",
            "--calibration",
            "0",
            "--start-rate",
            "300",
            "--min-rate",
            "150",
            "--input-tokens",
            "16",
            "--output-tokens",
            "8",
            "--sim-args",
            "--fault-500 1.0 --ttft-ms 5 --itl-ms 5",
        ],
        out,
        relaxed=False,
    )
    assert "Traceback" not in p.stderr, p.stderr
    res = load_sweep(out)
    verdicts = [(q["offered_rps"], q["verdict"]) for q in res["probes"]]
    details = [q["validity_detail"] for q in res["probes"]]
    assert verdicts == [(300.0, "fail"), (150.0, "fail")], (verdicts, details)
    assert p.returncode == 1, p.stdout + p.stderr
    for q in res["probes"]:
        assert q["stopped_early"] and q["duration_s"] < 0.7 * 10, q
        assert q["exceedance_fraction"]["ttft:p90<=250ms"] == 1.0
        check_bounds_in_force(out / q["dir"], relaxed=False)
    assert res["answer"]["limited_by"] is None and res["answer"]["max_rate_rps"] is None
    assert res["answer"]["bracket_rps"] == [None, 150.0]
    text = flat(p.stdout)
    assert "client limit" not in text
    assert "no rate met ttft:p90<=250ms: even the lowest probe failed" in text
