"""SLO search: the highest offered load whose probes meet every SLO target.

Calibrate, bracket, bisect:

1. A short closed-loop calibration run estimates capacity X (completed req/s).
2. The first probe runs at max(r_min, X/2), where r_min is the rate that reaches the
   minimum request count within the probe duration. Rates double until a probe
   FAILs (or halve until one PASSes).
3. Bisection at the geometric midpoint of the last PASS and the first FAIL until
   (fail - pass) / pass <= precision.

A probe is one sustained open-loop run at one rate (warm-up, then at least
``probe_duration_s`` and at least the requests needed to decide the percentile).
Verdict per per-request target (TTFT, time to first answer token, TPOT, E2E):
count the requests over the threshold (failures and zero-output count as over);
PASS when the one-sided Clopper-Pearson upper bound of the exceedance fraction is
within 1 - percentile at the chosen confidence, FAIL when the lower bound is past
it, else extend the probe (up to ``max_extensions`` more segments) and then
decide on the point estimate, marked ``low_confidence``. This is the binomial
test MLPerf LoadGen's early stopping uses for its latency bound. ITL is per token
(tokens within a request are correlated): judged on the pooled point estimate,
with no confidence bound.

Early stop: once FAIL is certain (known exceedances, including requests in flight
longer than the threshold without their first token — or their end, for E2E —
exceed what the largest possible probe could absorb), the probe stops and cancels
what is in flight; in-flight requests still under the threshold are *censored*
(excluded from the denominator). Both counts are reported.

Only the generator checks of a probe's validity make it ``invalid``: the search
stops and reports that the client limited it ("at least R req/s"). A probe whose
requests mostly end rate-limited (HTTP 429, more than half of those not cancelled)
is ``rate_limited``: the search stops there and reports the provider's quota as the
limit (``limited_by: rate_limit``), not as the server's latency.

Price at the answer: with ``--cost-per-hour``, cost_per_hour / (tokens/s * 3600) * 1e6;
with per-token prices, (input_tps * p_in + output_tps * p_out) / output_tps per million
output tokens (see :mod:`loadgen.pricing`); each also per successful request at the SLO.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from loadgen.clock import now_ns
from loadgen.endpoints.base import Endpoint
from loadgen.measure import measure
from loadgen.metrics import RequestMetrics
from loadgen.pricing import answer_cost
from loadgen.results import RATE_LIMIT_DOMINATED, request_value
from loadgen.runner import Runner
from loadgen.runplan import LoadConfig
from loadgen.slo import SLOTarget
from loadgen.stats import fail_threshold, lower_bound, min_requests, upper_bound
from loadgen.types import RequestRecord

SWEEP_SCHEMA_VERSION = 1


@dataclass
class SweepConfig:
    """Search settings (configuration only). ``precision`` is a ratio (0.05 = 5 %)."""

    slos: list[SLOTarget]
    probe_duration_s: float = 60.0
    probe_warmup_s: float | None = None  # default: 10 % of the probe, at most 5 s
    confidence: float = 0.95
    precision: float = 0.05
    repeats: int = 1
    max_rate_rps: float | None = None
    min_rate_rps: float | None = None
    start_rate_rps: float | None = None
    calibration_s: float = 10.0
    calibration_concurrency: int = 32
    max_extensions: int = 2
    max_probes: int = 30
    cost_per_hour_usd: float | None = None
    prices: Any = None  # loadgen.pricing.TokenPrices (per-token prices of a managed platform)
    accelerators: int | None = None
    concurrency_levels: list[int] | None = None
    workers: int = 1

    def needed_requests(self) -> int:
        pcts = [t.percentile for t in self.slos if t.metric != "itl"] or [50.0]
        return max(min_requests(p, self.confidence) for p in pcts)

    def warmup_s(self) -> float:
        if self.probe_warmup_s is not None:
            return self.probe_warmup_s
        return min(5.0, 0.1 * self.probe_duration_s)


@dataclass
class TargetJudge:
    """Exceedance counting for one SLO target within one probe."""

    target: SLOTarget
    n: int = 0
    k: int = 0
    censored: int = 0
    server_errors: int = 0  # of k: failures the generator cannot have caused


# Failures that are the server's whatever the generator's timing (not: connect, which a saturated
# client can cause too; cancelled, the probe's own early stop; client_limit).
_SERVER_ERRORS = ("timeout", "rate_limited", "http_error", "incomplete_stream", "stream_error", "protocol")


class ProbeJudge:
    """Counts exceedances as records arrive and watches in-flight requests for early stop."""

    def __init__(self, slos: list[SLOTarget], n_cap: int, confidence: float) -> None:
        self.targets = [TargetJudge(t) for t in slos]
        self.n_cap = n_cap
        self.confidence = confidence
        self.runner: Runner | None = None
        self.stopped_early = False
        self.censored = 0
        # exceedances out of n_cap that make FAIL certain, computed once: certain_fail() runs every
        # 100 ms on the event loop that sends the requests and must not evaluate binomial bounds there
        self.fail_k = {
            tj.target.label: fail_threshold(n_cap, 1 - tj.target.percentile / 100, confidence)
            for tj in self.targets
            if tj.target.metric not in ("itl", "tpot")
        }

    def on_summary(self, s: Any) -> None:
        """Count a request shipped by a worker process (no early stop across processes)."""
        if s.phase != "measure":
            return
        if s.error_kind == "cancelled":
            self.censored += 1
            for tj in self.targets:
                if tj.target.metric != "itl":
                    tj.censored += 1
            return
        for i, tj in enumerate(self.targets):
            t = tj.target
            if t.metric == "itl":
                continue
            tj.n += 1
            if not s.ok or s.zero_output or s.slo_values[i] > t.threshold_ns:
                tj.k += 1
                if not s.ok and s.error_kind in _SERVER_ERRORS:
                    tj.server_errors += 1

    def on_record(self, rec: RequestRecord | None, m: RequestMetrics | None) -> None:
        if rec is None or m is None:  # worker mode: counted in on_summary
            return
        if rec.phase != "measure":
            return
        cancelled = rec.error_kind == "cancelled"
        censored = False
        for tj in self.targets:
            t = tj.target
            if t.metric == "itl":
                continue
            if cancelled:
                if self._inflight_over(rec, t, rec.end_ns or now_ns()):
                    tj.n += 1
                    tj.k += 1
                elif self._known_under(rec, t):
                    tj.n += 1  # measured before the stop, and it conforms: not censored
                else:
                    tj.censored += 1
                    censored = True
                continue
            tj.n += 1
            if not rec.ok or m.zero_output or request_value(t, m) > t.threshold_ns:
                tj.k += 1
                if not rec.ok and rec.error_kind in _SERVER_ERRORS:
                    tj.server_errors += 1
        if censored:
            self.censored += 1

    @staticmethod
    def _known_under(rec: RequestRecord, t: SLOTarget) -> bool:
        """Was ``t``'s value already measured when ``rec`` was cancelled (and, not being over, conforming)?"""
        if t.metric == "ttft":
            return bool(rec.events)
        if t.metric == "time_to_first_answer_token":
            return any(e.answer for e in rec.events)
        return False

    @staticmethod
    def _inflight_over(rec: RequestRecord, t: SLOTarget, now: int) -> bool:
        """Is an unfinished request already certain to exceed ``t``?"""
        age = now - rec.scheduled_ns
        if t.metric == "ttft":
            if rec.events:
                return rec.events[0].t_ns - rec.scheduled_ns > t.threshold_ns
            return age > t.threshold_ns
        if t.metric == "time_to_first_answer_token":
            first = next((e for e in rec.events if e.answer), None)
            if first is not None:
                return first.t_ns - rec.scheduled_ns > t.threshold_ns
            return age > t.threshold_ns
        if t.metric == "e2e":
            return age > t.threshold_ns
        return False

    def certain_fail(self) -> bool:
        """True when the probe would FAIL even if every remaining request conformed."""
        inflight = list(self.runner.inflight_records.values()) if self.runner else []
        now = now_ns()
        for tj in self.targets:
            t = tj.target
            if t.metric in ("itl", "tpot"):
                continue
            k = tj.k + sum(1 for r in inflight if r.phase == "measure" and self._inflight_over(r, t, now))
            if k >= self.fail_k[t.label]:
                return True
        return False

    def fails_on_server_errors(self) -> bool:
        """True when the server's errors alone make a target FAIL (out of ``n_cap`` after an early
        stop): a generator that lagged cannot have caused HTTP errors, so that verdict stands."""
        for tj in self.targets:
            if tj.target.metric == "itl":
                continue
            n = self.n_cap if self.stopped_early else tj.n
            if lower_bound(tj.server_errors, n, self.confidence) > 1 - tj.target.percentile / 100:
                return True
        return False

    async def watch(self, period_s: float = 0.1) -> None:
        while True:
            await asyncio.sleep(period_s)
            if self.runner is not None and self.certain_fail():
                self.stopped_early = True
                self.runner.request_stop(interrupted=False, cancel_inflight=True)
                return


def judge_counts(k: int, n: int, t: SLOTarget, confidence: float) -> tuple[str, float, float]:
    """('pass'|'fail'|'undecided', lower, upper) for k exceedances out of n."""
    q = 1 - t.percentile / 100
    lo, hi = lower_bound(k, n, confidence), upper_bound(k, n, confidence)
    if n > 0 and hi <= q:
        return "pass", lo, hi
    if lo > q:
        return "fail", lo, hi
    return "undecided", lo, hi


@dataclass
class Probe:
    offered_rps: float
    verdict: str
    low_confidence: bool
    exceedance_fraction: dict[str, float | None]
    confidence_bounds: dict[str, list[float]]
    censored: int
    duration_s: float
    stopped_early: bool
    latency_ms: dict[str, Any]
    achieved_send_rps: float | None
    request_rps: float | None
    output_tps: float | None
    total_tps: float | None
    goodput_rps: float | None
    dir: str
    segments: int = 1
    reasons: list[str] = field(default_factory=list)
    concurrency: int | None = None
    validity_detail: list[str] = field(default_factory=list)
    rate_limited_fraction: float | None = None
    prefix_cache_reset: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


async def run_probe(
    endpoint: Endpoint,
    base: LoadConfig,
    scfg: SweepConfig,
    rate: float,
    out_dir: Path,
    *,
    index: int,
    config_record: dict[str, Any],
    redactor: Any = None,
    on_record: Callable[[RequestRecord, RequestMetrics], None] | None = None,
    concurrency: int | None = None,
    runner_hook: Callable[[Runner], None] | None = None,
    workers: int = 1,
    server_observer: Any = None,
    cluster: Any = None,
) -> Probe:
    """One probe at ``rate`` req/s (or closed loop at ``concurrency``), extended while undecided."""
    need = scfg.needed_requests()
    per_segment = max(need, math.ceil(rate * scfg.probe_duration_s)) if concurrency is None else None
    n_cap = (per_segment or need) * (1 + scfg.max_extensions)
    judge = ProbeJudge(scfg.slos, n_cap, scfg.confidence)
    segments = 0
    results: list[dict[str, Any]] = []
    total_duration = 0.0
    while True:
        seg_dir = out_dir if segments == 0 else out_dir / f"extension-{segments}"
        if concurrency is None:
            load = replace(
                base,
                rate_rps=rate,
                concurrency=None,
                requests=per_segment,
                duration_s=None,
                # the warm-up rides on the same arrival process before the measured requests
                warmup_requests=math.ceil(scfg.warmup_s() * rate) if segments == 0 else 0,
                warmup_s=0.0,
                seed=base.seed + 1000 * index + segments,
                salt=f"p{index}s{segments}-",
                slos=scfg.slos,
                # a trace window is rescaled to the probe's rate and looped if it runs out
                workload=replace(base.workload, trace_loop=True) if base.has_trace else base.workload,
            )
        else:
            load = replace(
                base,
                rate_rps=None,
                concurrency=concurrency,
                requests=None,
                duration_s=scfg.probe_duration_s,
                warmup_requests=0,
                warmup_s=scfg.warmup_s() if segments == 0 else 0.0,
                seed=base.seed + 1000 * index + segments,
                salt=f"c{index}s{segments}-",
                slos=scfg.slos,
                max_concurrency=None,
            )

        def hook(r: Runner) -> None:
            judge.runner = r
            if runner_hook is not None:
                runner_hook(r)

        def rec_cb(rec: RequestRecord, m: RequestMetrics) -> None:
            judge.on_record(rec, m)
            if on_record is not None:
                on_record(rec, m)

        watcher = asyncio.create_task(judge.watch())
        try:
            run = await measure(
                endpoint,
                load,
                seg_dir,
                config_record={**config_record, "probe": index, "offered_rps": rate, "segment": segments},
                redactor=redactor,
                on_record=rec_cb,
                install_signal_handlers=False,
                runner_hook=hook,
                workers=workers,
                on_summary=judge.on_summary,
                server_observer=server_observer,
                cluster=cluster,
            )
        finally:
            watcher.cancel()
        results.append(run.result)
        total_duration += run.result["duration_s"]
        segments += 1
        if not run.result["validity"]["valid"] or judge.stopped_early:
            break
        verdicts = [
            judge_counts(tj.k, tj.n, tj.target, scfg.confidence)[0] for tj in judge.targets if tj.target.metric != "itl"
        ]
        if "fail" in verdicts or all(v == "pass" for v in verdicts) or segments > scfg.max_extensions:
            break
        if concurrency is not None:
            break
    return _finish_probe(judge, scfg, results, rate, out_dir, total_duration, segments, concurrency)


def _finish_probe(
    judge: ProbeJudge,
    scfg: SweepConfig,
    results: list[dict[str, Any]],
    rate: float,
    out_dir: Path,
    duration: float,
    segments: int,
    concurrency: int | None,
) -> Probe:
    first = results[0]
    last = results[-1]
    invalid = [r for r in results if not r["validity"]["valid"]]
    ef: dict[str, float | None] = {}
    cb: dict[str, list[float]] = {}
    reasons: list[str] = []
    verdict = "pass"
    low_conf = False
    for tj in judge.targets:
        t = tj.target
        if t.metric == "itl":
            v_ms = last["latency_ms"]["itl"].get(_pkey(t.percentile))
            if v_ms is None:
                v_ms = _pool_itl(results, t)
            ok = v_ms is not None and v_ms * 1e6 <= t.threshold_ns
            ef[t.label] = None
            cb[t.label] = []
            reasons.append(f"{t.label}: pooled per-token value {v_ms} ms (no confidence bound)")
            if not ok:
                verdict = "fail"
            continue
        v, lo, hi = judge_counts(tj.k, tj.n, t, scfg.confidence)
        frac = tj.k / tj.n if tj.n else None
        ef[t.label] = frac
        cb[t.label] = [lo, hi]
        if v == "undecided":
            low_conf = True
            v = "pass" if (frac is not None and frac <= 1 - t.percentile / 100) else "fail"
        if judge.stopped_early:
            v = "fail"
        reasons.append(f"{t.label}: {tj.k} of {tj.n} over ({v}; bounds {lo:.4f}..{hi:.4f})")
        if v == "fail":
            verdict = "fail"
    validity_detail: list[str] = []
    if invalid:
        if judge.fails_on_server_errors():
            verdict = "fail"
            reasons.append("FAIL on the server's errors alone, whatever the generator's lag (see validity)")
        else:
            verdict = "invalid"
        for r in invalid:
            validity_detail += [c["detail"] for c in r["validity"]["checks"] if not c["ok"] and c["group"] == "generator"]
    counts = [r.get("counts") or {} for r in results]
    limited = sum((c.get("errors_by_kind") or {}).get("rate_limited", 0) for c in counts)
    decided = sum((c.get("requests") or 0) - (c.get("errors_by_kind") or {}).get("cancelled", 0) for c in counts)
    rl_frac = limited / decided if decided else None
    if verdict != "invalid" and rl_frac is not None and rl_frac > RATE_LIMIT_DOMINATED:
        verdict = "rate_limited"
        reasons.append(f"{limited} of {decided} requests answered 429: the provider's quota, not the server's latency")
    thr = first["throughput"]
    lat = {t.metric: first["latency_ms"].get(t.metric) for t in scfg.slos}
    return Probe(
        offered_rps=rate,
        verdict=verdict,
        low_confidence=low_conf,
        exceedance_fraction=ef,
        confidence_bounds=cb,
        censored=judge.censored,
        duration_s=duration,
        stopped_early=judge.stopped_early,
        latency_ms=lat,
        achieved_send_rps=thr["achieved_send_rps"],
        request_rps=thr["request_rps"],
        output_tps=thr["output_tps"],
        total_tps=thr["total_tps"],
        goodput_rps=thr["goodput_rps"],
        dir=out_dir.name,  # relative to the sweep's directory, so results can be moved
        segments=segments,
        reasons=reasons,
        concurrency=concurrency,
        validity_detail=validity_detail,
        rate_limited_fraction=rl_frac,
    )


def _pkey(p: float) -> str:
    return {50.0: "p50", 90.0: "p90", 95.0: "p95", 99.0: "p99", 99.9: "p999"}.get(p, "p99")


def _pool_itl(results: list[dict[str, Any]], t: SLOTarget) -> float | None:
    return results[-1]["latency_ms"]["itl"].get("p99")


@dataclass
class SweepOutcome:
    result: dict[str, Any]
    probes: list[Probe]
    exit_code: int


class Sweep:
    """Runs the search (or a concurrency sweep) against one opened endpoint."""

    def __init__(
        self,
        endpoint: Endpoint,
        base: LoadConfig,
        scfg: SweepConfig,
        out_dir: Path,
        *,
        config_record: dict[str, Any],
        redactor: Any = None,
        progress: Callable[[str], None] | None = None,
        on_record: Callable[[RequestRecord, RequestMetrics], None] | None = None,
        server_observer: Any = None,
        cluster: Any = None,
    ) -> None:
        self.server_observer = server_observer
        self.cluster = cluster  # a connected loadgen.cluster.Cluster: probes run on its actors
        self.endpoint = endpoint
        self.base = base
        self.scfg = scfg
        self.out_dir = out_dir
        self.config_record = config_record
        self.redactor = redactor
        self.progress = progress or (lambda s: None)
        self.on_record = on_record
        self.probes: list[Probe] = []
        self.calibration: dict[str, Any] | None = None
        self.interrupted = False
        self.rate_limited_at: float | None = None  # the rate (or concurrency) where 429s took over

    async def _probe(self, rate: float, concurrency: int | None = None) -> Probe:
        idx = len(self.probes) + 1
        name = f"probe-{idx:02d}-" + (f"c{concurrency}" if concurrency else f"{rate:.3f}rps")
        label = f"concurrency {concurrency}" if concurrency else f"{rate:.3f} req/s"
        self.progress(f"probe {idx}: {label} ...")
        reset = None
        if self.server_observer is not None:
            # a warm prefix cache must not flatter later probes
            reset = await self.server_observer.reset_prefix_cache()
        p = await run_probe(
            self.endpoint,
            self.base,
            self.scfg,
            rate,
            self.out_dir / name,
            index=idx,
            config_record=self.config_record,
            redactor=self.redactor,
            on_record=self.on_record,
            concurrency=concurrency,
            runner_hook=self._set_runner,
            workers=self.scfg.workers,
            server_observer=self.server_observer,
            cluster=self.cluster,
        )
        p.prefix_cache_reset = reset
        self.probes.append(p)
        extra = " (stopped early)" if p.stopped_early else ""
        self.progress(f"probe {idx}: {label}: {p.verdict.upper()}{extra}; " + "; ".join(p.reasons))
        return p

    def _set_runner(self, r: Runner) -> None:
        self.current_runner = r
        if self.interrupted:
            r.request_stop(True)

    def interrupt(self) -> None:
        """Stop the search: the probe in progress drains and the sweep reports what it has."""
        self.interrupted = True
        r = getattr(self, "current_runner", None)
        if r is not None:
            r.request_stop(True)

    async def _verdict_at(self, rate: float) -> str:
        verdicts = []
        for _ in range(max(self.scfg.repeats, 1)):
            p = await self._probe(rate)
            verdicts.append(p.verdict)
            if p.verdict != "pass":
                break
        if "invalid" in verdicts:
            return "invalid"
        if "rate_limited" in verdicts:
            return "rate_limited"
        return "pass" if all(v == "pass" for v in verdicts) else "fail"

    async def calibrate(self) -> float | None:
        """Closed-loop burst to estimate capacity (completed req/s)."""
        if self.scfg.calibration_s <= 0:
            return None
        self.progress(f"calibration: {self.scfg.calibration_concurrency} concurrent users for {self.scfg.calibration_s:g} s ...")
        load = replace(
            self.base,
            rate_rps=None,
            concurrency=self.scfg.calibration_concurrency,
            requests=None,
            duration_s=self.scfg.calibration_s,
            warmup_requests=0,
            warmup_s=0.0,
            max_concurrency=None,
            salt="cal-",
            slos=[],
        )
        run = await measure(
            self.endpoint,
            load,
            self.out_dir / "calibration",
            config_record={**self.config_record, "calibration": True},
            redactor=self.redactor,
            install_signal_handlers=False,
            runner_hook=self._set_runner,
        )
        x = run.result["throughput"]["request_rps"]
        self.calibration = {
            "concurrency": self.scfg.calibration_concurrency,
            "duration_s": run.result["duration_s"],
            "request_rps": x,
            "dir": "calibration",
        }
        self.progress(f"calibration: about {x or 0:.2f} req/s completed")
        return x

    async def search(self) -> SweepOutcome:
        s = self.scfg
        cap = await self.calibrate()
        if s.start_rate_rps:
            r = s.start_rate_rps
        elif cap:
            r = cap / 2
        else:
            # the rate that reaches the minimum request count within the probe duration
            r = s.needed_requests() / s.probe_duration_s
        if s.max_rate_rps:
            r = min(r, s.max_rate_rps)
        r_min = s.min_rate_rps or r / 64
        last_pass: float | None = None
        first_fail: float | None = None
        limited_by: str | None = None
        while len(self.probes) < s.max_probes and not self.interrupted:
            v = await self._verdict_at(r)
            if self.interrupted:
                break
            if v == "invalid":
                limited_by = "client"
                break
            if v == "rate_limited":
                limited_by = "rate_limit"
                self.rate_limited_at = r
                break
            if v == "pass":
                last_pass = r if last_pass is None else max(last_pass, r)
                if first_fail is None:
                    if s.max_rate_rps and r >= s.max_rate_rps:
                        limited_by = "max_rate"
                        break
                    r = r * 2
                    if s.max_rate_rps:
                        r = min(r, s.max_rate_rps)
                    continue
            else:
                first_fail = r if first_fail is None else min(first_fail, r)
                if last_pass is None:
                    if r <= r_min * 1.0001:
                        break  # even the lowest decidable rate fails
                    r = max(r / 2, r_min)
                    continue
            if last_pass is not None and first_fail is not None:
                if (first_fail - last_pass) / last_pass <= s.precision:
                    break
                r = math.sqrt(last_pass * first_fail)
        return self._outcome(last_pass, first_fail, limited_by)

    async def concurrency_sweep(self) -> SweepOutcome:
        for c in self.scfg.concurrency_levels or []:
            if self.interrupted:
                break
            p = await self._probe(0.0, concurrency=c)
            if p.verdict == "invalid":
                break
            if p.verdict == "rate_limited":
                self.rate_limited_at = p.concurrency
                break
        passing = [p for p in self.probes if p.verdict == "pass"]
        best = max(passing, key=lambda p: p.concurrency or 0) if passing else None
        out = self._outcome(None, None, "rate_limit" if self.rate_limited_at else None, best_probe=best)
        out.result["interactivity"] = self._interactivity()
        return out

    def _interactivity(self) -> list[dict[str, Any]]:
        rows = []
        for p in self.probes:
            tpot = None
            try:
                import orjson

                res = orjson.loads((self.out_dir / p.dir / "result.json").read_bytes())
                tpot = res["latency_ms"]["tpot"]["p50"]
            except Exception:
                pass
            per_user = (1000.0 / tpot) if tpot else None
            total = p.output_tps
            rows.append(
                {
                    "concurrency": p.concurrency,
                    "per_user_output_tps": per_user,
                    "output_tps": total,
                    "output_tps_per_accelerator": (total / self.scfg.accelerators)
                    if (total is not None and self.scfg.accelerators)
                    else None,
                    "meets_slo": p.verdict == "pass",
                }
            )
        return rows

    def _outcome(
        self, last_pass: float | None, first_fail: float | None, limited_by: str | None, best_probe: Probe | None = None
    ) -> SweepOutcome:
        s = self.scfg
        at = best_probe
        if at is None and last_pass is not None:
            at = next(p for p in reversed(self.probes) if p.offered_rps == last_pass and p.verdict == "pass")
        out_tps = at.output_tps if at else None
        tot_tps = at.total_tps if at else None
        in_tps = (tot_tps - out_tps) if (tot_tps is not None and out_tps is not None) else None
        priced = answer_cost(
            prices=s.prices, cost_per_hour_usd=s.cost_per_hour_usd, input_tps=in_tps, output_tps=out_tps,
            goodput_rps=at.goodput_rps if at else None,
        )
        token_per_m_out = priced["token_priced_cost_per_million_output_tokens_usd"]
        answer = {
            "max_rate_rps": last_pass,
            "bracket_rps": [last_pass, first_fail],
            "request_rps": at.request_rps if at else None,
            "output_tps": out_tps,
            "total_tps": tot_tps,
            "goodput_rps": at.goodput_rps if at else None,
            "cost_per_million_output_tokens_usd": cost_per_million(s.cost_per_hour_usd, out_tps)
            if s.cost_per_hour_usd
            else token_per_m_out,
            "cost_per_million_total_tokens_usd": cost_per_million(s.cost_per_hour_usd, tot_tps)
            if s.cost_per_hour_usd
            else (token_per_m_out * out_tps / tot_tps if (token_per_m_out is not None and tot_tps) else None),
            "cost_per_successful_request_usd": priced["hourly_cost_per_successful_request_usd"]
            if s.cost_per_hour_usd
            else priced["token_priced_cost_per_successful_request_usd"],
            "pricing": "per_hour" if s.cost_per_hour_usd else ("per_token" if s.prices is not None else None),
            **({k: v for k, v in priced.items() if k.startswith("token_priced")} if s.prices is not None else {}),
            "output_tps_per_accelerator": (out_tps / s.accelerators) if (out_tps and s.accelerators) else None,
            "limited_by": limited_by,
            "concurrency": at.concurrency if at else None,
        }
        if limited_by == "rate_limit":
            answer["rate_limited_at"] = self.rate_limited_at
        flags = non_monotonic(self.probes)
        result = {
            "schema_version": SWEEP_SCHEMA_VERSION,
            "slo": [
                {"target": t.label, "metric": t.metric, "percentile": t.percentile, "threshold_ms": t.threshold_ns / 1e6}
                for t in s.slos
            ],
            "settings": {
                "probe_duration_s": s.probe_duration_s,
                "probe_warmup_s": s.warmup_s(),
                "confidence": s.confidence,
                "precision": s.precision,
                "repeats": s.repeats,
                "max_rate_rps": s.max_rate_rps,
                "min_requests_per_probe": s.needed_requests(),
                "max_extensions": s.max_extensions,
                "cost_per_hour_usd": s.cost_per_hour_usd,
                "prices": s.prices.describe() if s.prices is not None else None,
                "accelerators": s.accelerators,
            },
            "calibration": self.calibration,
            "answer": answer,
            "non_monotonic": flags,
            "probe_time_s": sum(p.duration_s for p in self.probes),
            "probes": [p.to_json() for p in self.probes],
            "interrupted": self.interrupted,
        }
        if self.interrupted:
            code = 130
        elif limited_by == "client":
            code = 5
        elif last_pass is None and best_probe is None:
            code = 1
        else:
            code = 0
        return SweepOutcome(result, self.probes, code)


def cost_per_million(cost_per_hour_usd: float | None, tokens_per_s: float | None) -> float | None:
    """USD per million tokens at a sustained rate: cost_per_hour / (tokens_per_s * 3600) * 1e6."""
    if not cost_per_hour_usd or not tokens_per_s:
        return None
    return cost_per_hour_usd / (tokens_per_s * 3600.0) * 1e6


def non_monotonic(probes: list[Probe]) -> list[str]:
    """Rates that FAILed below a rate that PASSed (or mixed verdicts at one rate)."""
    flags = []
    open_loop = [p for p in probes if p.concurrency is None and p.verdict in ("pass", "fail")]
    passes = [p.offered_rps for p in open_loop if p.verdict == "pass"]
    for p in open_loop:
        if p.verdict == "fail" and any(r >= p.offered_rps for r in passes):
            flags.append(f"{p.offered_rps:.3f} req/s failed although a rate at or above it passed")
    return flags
