"""SLO search: the highest offered load whose probes meet every SLO target.

Calibrate, bracket, bisect:

1. A short closed-loop calibration run estimates capacity X (completed req/s).
2. The first probe runs at max(r_min, X/2), where r_min is the rate that reaches the
   minimum request count within the probe duration. Rates double until a probe
   FAILs (or halve until one PASSes).
3. Bisection at the geometric midpoint of the last PASS and the first FAIL until
   (fail - pass) / pass <= precision.

Each probe is :func:`loadgen.sweep.probe.run_probe`. A probe ``invalid`` on the client's timing
alone (the verdict table in docs/measurement.md) is run again at most ``max_reruns`` (2) times
(not when its client's condition is steady, :func:`loadgen.sweep.client_error.steady_error`;
``sweep.json`` ``reruns``); the search halves its rate on INVALID probes alone at most
:data:`MAX_INVALID_HALVINGS` times. Still invalid, it bounds the search from above without being
a FAIL: with no FAIL under it the answer is a lower bound (``limited_by: client``,
``untested_above_rps``); with a FAIL the client could test above it, the answer is bracketed by
that FAIL. A ``rate_limited`` probe stops the search (``limited_by: rate_limit``).

When the search ends on an answer whose PASS is a point estimate of the evidence rule, certifying
probes at its rate add their requests to it (:mod:`loadgen.sweep.certify`).

Signals (:meth:`Sweep.interrupt`): the first stops the search; the probe in progress drains, gets no
verdict unless its FAIL was already certain, and the answer is at most what the decided probes show
(exit 130); a second cancels what is in flight (docs/measurement.md "Sweep").

The unloaded check (:mod:`loadgen.sweep.unloaded`) comes first; the plan (:mod:`loadgen.sweep.plan`)
is printed and updated as probes finish; each verdict is one text (:mod:`loadgen.sweep.verdict`).

Price at the answer: with ``--cost-per-hour``, cost_per_hour / (tokens/s * 3600) * 1e6;
with per-token prices, (input_tps * p_in + output_tps * p_out) / output_tps per million
output tokens (see :mod:`loadgen.core.pricing`); each also per successful request at the SLO.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from loadgen.core.clock import now_ns
from loadgen.core.metrics import RequestMetrics
from loadgen.core.pricing import answer_cost
from loadgen.core.pricing import hourly_cost_per_million_tokens_usd as cost_per_million
from loadgen.core.types import RequestRecord
from loadgen.endpoints.base import Endpoint
from loadgen.engine.runner import Runner
from loadgen.engine.runplan import LoadConfig
from loadgen.measurement import measure
from loadgen.sweep.answer import (
    certified_interval,
    interactivity_rows,
    interval_settled,
    interval_width,
    non_monotonic,
)
from loadgen.sweep.certify import certify_answer
from loadgen.sweep.client_error import steady_error
from loadgen.sweep.config import SWEEP_SCHEMA_VERSION, SweepConfig, SweepContext
from loadgen.sweep.plan import Plan, calibration_little_rps
from loadgen.sweep.probe import Probe, run_probe
from loadgen.sweep.resume import Progress, Replay
from loadgen.sweep.session_search import calibration_sps, measure_load, session_turns
from loadgen.sweep.starved import StarvedCheck
from loadgen.sweep.unloaded import unloaded_check
from loadgen.sweep.verdict import evidence_rule

MAX_INVALID_HALVINGS = 2
"""A sweep halves its rate at most this many times on INVALID probes alone (issue 30): a client that cannot
test three rates, each half the one above, on its own timing will not test the next; it stops and says why."""


@dataclass
class SweepOutcome:
    result: dict[str, Any]
    probes: list[Probe]


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
        replay: Replay | None = None,
    ) -> None:
        self.replay = replay  # --resume: what an interrupted sweep finished (loadgen.sweep.resume)
        self.record = Progress(out_dir)  # each finished probe, as it finishes
        self.server_observer = server_observer
        self.cluster = cluster  # a connected loadgen.spread.cluster.Cluster: probes run on its actors
        self.ctx = SweepContext(endpoint, base, scfg, config_record, redactor)  # what each probe and check is given
        self.base = base
        self.scfg = scfg
        self.out_dir = out_dir
        self.progress = progress or (lambda s: None)
        self.on_record = on_record
        self.probes: list[Probe] = []
        self.calibration: dict[str, Any] | None = None
        self.interrupted = False
        self.cancelled = False  # a second signal: what is in flight is cancelled at once
        self.rate_limited_at: float | None = None  # the rate (or concurrency) where 429s took over
        self.reruns: list[dict[str, Any]] = []  # INVALID probes run again (a transient client stall)
        self.unloaded: dict[str, Any] | None = None  # the unloaded check (loadgen.sweep.unloaded)
        self.plan = Plan(scfg)
        self.starved = StarvedCheck.for_sweep(scfg.slos, self.progress, server_observer, cluster)  # issue 30
        self.started_ns = now_ns()
        self.untested_above: float | None = None  # the lowest rate the client could not test (INVALID after re-runs)
        self.untested_users: int | None = None  # the same for a concurrency sweep: the user count
        self.point_estimate_above: float | None = None  # a PASS above the certified answer, on a point estimate

    def elapsed_s(self) -> float:
        return (now_ns() - self.started_ns) / 1e9

    async def _probe(self, rate: float, concurrency: int | None = None, resume: Probe | None = None) -> Probe:
        done = self.replay.next(rate, concurrency, resume is not None) if self.replay is not None else None
        if done is not None:  # --resume: this probe finished before the interrupt; read, not run again
            self._add(done, rate, concurrency)
            self.progress(f"probe {len(self.probes)}: read from {self.replay.src} (not run again): {done.verdict_text}")  # type: ignore[union-attr]  # a probe read means a replay
            return done
        idx = len(self.probes) + 1
        name = f"probe-{idx:02d}-" + (f"c{concurrency}" if concurrency else f"{rate:.3f}rps")
        unit = "sessions/s" if self.base.sessions is not None else "req/s"  # issue 17: a session sweep
        label = f"concurrency {concurrency}" if concurrency else f"{rate:.3f} {unit}"
        self.progress(f"probe {idx}: {label} ...")
        reset = None
        if resets_prefix_cache(self.server_observer):  # a warm prefix cache must not flatter later probes
            reset = await self.server_observer.reset_prefix_cache()
        p = await run_probe(
            self.ctx,
            rate,
            self.out_dir / name,
            index=idx,
            on_record=self.on_record,
            concurrency=concurrency,
            runner_hook=self._set_runner,
            workers=self.scfg.workers,
            server_observer=self.server_observer,
            cluster=self.cluster,
            stop_requested=lambda: self.interrupted,
            tau_hint=self.tau_at(rate) if concurrency is None else 1.0,
            resume=resume,
        )
        p.continues = self.probes.index(resume) + 1 if resume is not None else None
        p.prefix_cache_reset = reset
        self._add(p, rate, concurrency)
        sent = f"; sent {p.sent_rps:.2f} req/s" if (concurrency and p.sent_rps is not None) else ""
        self.progress(f"probe {idx}: {label}: {p.verdict_text}{sent}; " + "; ".join(p.reasons))
        return p

    def _add(self, p: Probe, rate: float, concurrency: int | None) -> None:
        """A finished probe: kept, written to ``probes.jsonl`` (loadgen.sweep.resume), its E2E to the plan."""
        self.probes.append(p)
        self.record.probe(p)
        if concurrency is None and p.verdict in ("pass", "fail") and not p.stopped_early:
            self.plan.observe(rate, p.e2e_p99_ms / 1e3 if p.e2e_p99_ms is not None else None)

    def tau_at(self, rate: float) -> float:
        """The largest dependence between requests (tau, :mod:`loadgen.sweep.evidence`) any earlier open-loop probe
        at or below ``rate`` measured (1 when none): tau rises toward capacity, so a probe sized with it holds the
        effective requests its percentile needs (issue 30's definition)."""
        taus = [
            max(x.get("tau") or [1.0])
            for p in self.probes
            if p.concurrency is None and p.offered_rps <= rate * (1 + 1e-9) and p.verdict in ("pass", "fail")
            for x in p.targets
        ]
        return max(taus, default=1.0)

    async def check_unloaded(self) -> bool:
        """The unloaded check; True when the SLO is out of reach at any load (said in one line)."""
        if await self.starved.before_load(last=self.scfg.unloaded_requests <= 0):
            return True  # a starved client, said at once with its cause and remedy (loadgen.sweep.starved)
        if self.scfg.unloaded_requests <= 0:
            return False
        n = self.scfg.unloaded_requests
        if self.replay is not None and self.replay.state.get("unloaded"):
            self.unloaded = self.replay.state["unloaded"]  # --resume: read, not run again
        else:
            self.progress(f"unloaded check: {n} requests one at a time ...")
            self.unloaded = await self.starved.during(  # the client's wake-up lateness meanwhile
                unloaded_check(self.ctx, self.out_dir, runner_hook=self._set_runner)
            )
            if self.starved.refusal is not None:
                return True
            self.record.state({"unloaded": self.unloaded})
        u = self.unloaded
        if u["e2e_p50_ms"] is not None:
            self.plan.e2e_p50_s = u["e2e_p50_ms"] / 1e3
            self.plan.e2e_p99_s = (u["e2e_max_ms"] or 0.0) / 1e3
        for line in u["over"]:
            self.progress(f"no rate can meet the SLO: {line}")
        return bool(u["over"]) and not self.interrupted

    async def _probe_rerun(self, rate: float, concurrency: int | None = None) -> Probe:
        """:meth:`_probe`, run again (at most ``max_reruns`` times) while INVALID on the client's timing."""
        p = await self._probe(rate, concurrency)
        n = 0
        steady = steady_error(p.client_timing, [q.client_timing for q in self.probes if q is not p])
        if p.verdict == "invalid" and steady:
            p.reasons.append(steady)
            self.progress(f"probe {len(self.probes)} was INVALID: {steady}")
        while (
            not steady
            and p.verdict == "invalid"
            and n < self.scfg.max_reruns
            and not self.interrupted
            and len(self.probes) < self.scfg.max_probes
        ):
            n += 1
            self.reruns.append(
                {
                    "offered_rps": rate if concurrency is None else None,
                    "concurrency": concurrency,
                    "invalid_probe": p.dir,
                    "rerun": n,
                    "validity_detail": list(p.validity_detail),
                }
            )
            self.progress(
                f"probe {len(self.probes)} was INVALID on the client's timing ({'; '.join(p.validity_detail)}): "
                f"re-run {n} of at most {self.scfg.max_reruns}"
            )
            p = await self._probe(rate, concurrency)
            p.reruns = n
        return p

    def _set_runner(self, r: Runner) -> None:
        self.current_runner = r
        if self.cancelled:
            self._cancel(r)
        elif self.interrupted:
            r.request_stop(True)

    def interrupt(self) -> None:
        """Stop the search (the first SIGINT/SIGTERM): the probe in progress drains and the sweep
        reports what it has. A second call cancels what is in flight at once (as ``loadgen run``)."""
        r: Runner | None = getattr(self, "current_runner", None)
        if self.interrupted:
            self.cancelled = True
            self.progress("interrupted again: cancelling the requests in flight")
            if r is not None:
                self._cancel(r)
            return
        self.interrupted = True
        self.progress(
            "interrupted: the requests in flight drain (up to --drain-grace), then the sweep reports what it "
            "decided; interrupt again to cancel them now"
        )
        if r is not None:
            r.request_stop(True)

    @staticmethod
    def _cancel(r: Runner) -> None:
        """Stop ``r`` and cancel its requests in flight now, recorded as ``cancelled`` with this reason."""
        r.request_stop(True, cancel_inflight=True)
        # set before the cancelled tasks run (they read it when they record themselves)
        r.cancel_reason = "in flight at a second interrupt"

    async def _verdict_at(self, rate: float) -> str:
        verdicts = []
        k = max(self.scfg.repeats, 1)
        for i in range(k):
            p = await self._probe_rerun(rate)
            verdicts.append(p.verdict)
            if p.verdict != "pass":
                break
            if self.interrupted and i + 1 < k:
                verdicts.append("interrupted")  # a PASS needs all K repeats: the rest were not run
                break
        if "interrupted" in verdicts:
            return "interrupted"
        if "invalid" in verdicts:
            return "invalid"
        if "rate_limited" in verdicts:
            return "rate_limited"
        return "pass" if all(v == "pass" for v in verdicts) else "fail"

    async def calibrate(self) -> float | None:
        """Closed-loop burst to estimate capacity (completed req/s)."""
        if self.scfg.calibration_s <= 0:
            return None
        done = self.replay.state.get("calibration") if self.replay is not None else None
        if done is not None:  # --resume: read, not run again
            self.calibration = {k: v for k, v in done.items() if k != "plan"}
            self.plan.e2e_p99_s, self.plan.e2e_p50_s, self.plan.cal_rps = done["plan"]
            return calibration_sps(self.base, done["request_rps"])
        self.progress(
            f"calibration: {self.scfg.calibration_concurrency} concurrent users for {self.scfg.calibration_s:g} s ..."
        )
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
        run = await measure_load(
            measure,
            self.ctx.endpoint,
            load,
            self.out_dir / "calibration",
            config_record={**self.ctx.config_record, "calibration": True},
            redactor=self.ctx.redactor,
            install_signal_handlers=False,
            runner_hook=self._set_runner,
        )
        window_rps = run.result.request_rps
        e2e = run.result.latency_ms.get("e2e") or {}
        little_rps = calibration_little_rps(self.scfg.calibration_concurrency, e2e.get("mean"))
        x = max((v for v in (window_rps, little_rps) if v), default=window_rps)
        if e2e.get("p99") is not None and x:
            self.plan.e2e_p99_s, self.plan.e2e_p50_s, self.plan.cal_rps = e2e["p99"] / 1e3, e2e["p50"] / 1e3, x
        self.calibration = {
            "concurrency": self.scfg.calibration_concurrency,
            "duration_s": run.result.duration_s,
            "request_rps": x,
            "window_request_rps": window_rps,
            "little_request_rps": little_rps,
            "dir": "calibration",
        }
        plan = [self.plan.e2e_p99_s, self.plan.e2e_p50_s, self.plan.cal_rps]
        self.record.state({"unloaded": self.unloaded, "calibration": {**self.calibration, "plan": plan}})
        self.progress(f"calibration: about {x or 0:.2f} req/s completed")
        return calibration_sps(self.base, x)  # sessions/s in a session sweep (loadgen.sweep.session_search)

    async def search(self) -> SweepOutcome:
        s = self.scfg
        if await self.check_unloaded() or self.interrupted:
            return self._outcome(None, None, None)
        cap = await self.calibrate()
        if s.start_rate_rps:
            r = s.start_rate_rps
        elif cap:
            r = cap / 2
        else:
            # the rate that reaches the minimum request count within the probe duration
            r = s.needed_requests() / session_turns(self.base)[0] / s.probe_duration_s
        if s.max_rate_rps:
            r = min(r, s.max_rate_rps)
        r_min = s.min_rate_rps or r / 64
        last_pass: float | None = None
        first_fail: float | None = None
        limited_by: str | None = None
        invalid_halvings = 0  # halvings on INVALID probes alone (never more than MAX_INVALID_HALVINGS)
        self.progress(self.plan.why_line())
        self.progress(self.plan.note(self.elapsed_s(), 0, self.plan.remaining(None, None, r), first=True))
        while len(self.probes) < s.max_probes and not self.interrupted:
            if self.probes:
                up = min((x for x in (first_fail, self.untested_above) if x is not None), default=None)
                self.progress(self.plan.note(self.elapsed_s(), len(self.probes), self.plan.remaining(last_pass, up, r)))
            v = await self._verdict_at(r)
            if v == "interrupted":
                break  # no verdict at r; a verdict decided before the interrupt counts (the loop's test ends it after)
            if v == "invalid":
                # the client could not test r: an upper bound on what it can test, not a FAIL
                self.untested_above = r if self.untested_above is None else min(self.untested_above, r)
                if last_pass is None:
                    if r <= r_min * 1.0001:
                        break  # even the lowest rate was client-limited: no answer
                    if invalid_halvings >= MAX_INVALID_HALVINGS:
                        self.progress(
                            f"stopped: {MAX_INVALID_HALVINGS + 1} rates down to {r:,.2f} req/s were INVALID on the "
                            "client's own timing alone, so lower ones would be too; give the client CPUs of its own "
                            "(--cpus), pin the server to other cores, or run the client on another machine"
                        )
                        break
                    invalid_halvings += 1
                    r = max(r / 2, r_min)
                    continue
            elif v == "rate_limited":
                limited_by = "rate_limit"
                self.rate_limited_at = r
                break
            elif v == "pass":
                last_pass = r if last_pass is None else max(last_pass, r)
                if first_fail is None and self.untested_above is None:
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
            upper = min((x for x in (first_fail, self.untested_above) if x is not None), default=None)
            if last_pass is not None and upper is not None:
                if (upper - last_pass) / last_pass <= s.precision:
                    break
                if interval_settled(self.probes, s.precision):
                    lo, hi = certified_interval(self.probes)
                    self.progress(
                        f"stopped: the certified interval {lo:,.2f}-{hi:,.2f} req/s is within "
                        f"{interval_width(s.precision):.0%} of its midpoint"
                    )
                    break
                last = self.probes[-1] if self.probes else None
                # within the interval width, where probes extend (docs/measurement.md "capped")
                near = (upper - last_pass) / last_pass <= interval_width(s.precision)
                extends = s.max_probe_s() > s.probe_duration_s
                if near and extends and last is not None and last.capped and last.offered_rps == r:
                    self.progress(
                        f"stopped: the probe at {r:,.2f} req/s reached --max-probe-duration undecided; rates "
                        "between it and its neighbours sit as close to the knee and would not be decided either"
                    )
                    break
                r = math.sqrt(last_pass * upper)
        last_pass, first_fail = await certify_answer(self, last_pass, first_fail)
        if (
            limited_by is None
            and self.untested_above is not None
            and first_fail is None  # a FAIL above the untested rates bounds the answer: not a lower bound
        ):
            limited_by = "client"  # the bracket's upper end is the client's limit: a lower bound
        return self._outcome(last_pass, first_fail, limited_by)

    async def concurrency_sweep(self) -> SweepOutcome:
        if await self.check_unloaded():
            out = self._outcome(None, None, None)
            out.result["interactivity"] = []
            return out
        levels = self.scfg.concurrency_levels or []
        self.progress(self.plan.why_line())
        self.progress(
            self.plan.note(
                self.elapsed_s(), 0, (len(levels), sum(map(self.plan.level_s, levels))), first=True, levels=True
            )
        )
        for i, c in enumerate(levels):
            if self.interrupted:
                break
            if i:
                left = levels[i:]
                self.progress(self.plan.note(self.elapsed_s(), i, (len(left), sum(map(self.plan.level_s, left)))))
            p = await self._probe_rerun(0.0, concurrency=c)
            if p.verdict == "invalid":
                self.untested_users = c  # this many users (and more) the client could not test
                break
            if p.verdict == "rate_limited":
                self.rate_limited_at = p.concurrency
                break
        passing = [p for p in self.probes if p.verdict == "pass"]
        best = max(passing, key=lambda p: p.concurrency or 0) if passing else None
        limited = "rate_limit" if self.rate_limited_at else ("client" if self.untested_users else None)
        out = self._outcome(None, None, limited, best_probe=best)
        out.result["interactivity"] = interactivity_rows(self.probes, self.scfg.accelerators)
        return out

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
        # per-token prices are paid on the measured requests' own tokens: their input and output
        # over the window (demanded_output_tps), the same counting set as input_tps and goodput
        demanded = at.demanded_output_tps if at and at.demanded_output_tps is not None else out_tps
        priced = answer_cost(
            prices=s.prices,
            cost_per_hour_usd=s.cost_per_hour_usd,
            input_tps=in_tps,
            output_tps=demanded,
            goodput_rps=at.goodput_rps if at else None,
        )
        token_per_m_out = priced["token_priced_cost_per_million_output_tokens_usd"]
        answer = {
            "max_rate_rps": last_pass,
            "bracket_rps": [last_pass, first_fail],
            "request_rps": at.request_rps if at else None,
            "output_tps": out_tps,
            "demanded_output_tps": demanded,
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
        answer["interval_rps"] = certified_interval(self.probes)
        # the answer probe's own verdict text: "PASS (point estimate)" marks an answer on thin evidence
        answer["verdict_text"] = at.verdict_text if at else None
        answer["point_estimate"] = bool(at.low_confidence) if at else None
        answer["untested_above_rps"] = self.untested_above
        answer["point_estimate_pass_above_rps"] = self.point_estimate_above  # loadgen.sweep.certify
        # stopped by the user: the answer is at most the bracket or lower bound the decided probes show
        answer["interrupted"] = self.interrupted
        answer["untested_concurrency"] = self.untested_users
        answer["slo_below_unloaded"] = (
            "; ".join(self.unloaded["over"]) if self.unloaded and self.unloaded["over"] else None
        )
        flags = non_monotonic(self.probes)
        result = {
            "schema_version": SWEEP_SCHEMA_VERSION,
            "slo": [
                {
                    "target": t.label,
                    "metric": t.metric,
                    "percentile": t.percentile,
                    "threshold_ms": t.threshold_ns / 1e6,
                }
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
                "max_probe_duration_s": s.max_probe_s(),
                "max_reruns": s.max_reruns,
                "unloaded_requests": s.unloaded_requests,
                "max_schedule_lag_ms": s.schedule_lag_bound_ms(self.base.bounds.max_schedule_lag_p99_ms)[0],
                "max_schedule_lag_rule": s.schedule_lag_bound_ms(self.base.bounds.max_schedule_lag_p99_ms)[1],
                "cost_per_hour_usd": s.cost_per_hour_usd,
                "prices": s.prices.describe() if s.prices is not None else None,
                "accelerators": s.accelerators,
            },
            "evidence_rule": evidence_rule(
                s.slos,
                s.confidence,
                s.needed_requests(),
                s.probe_duration_s,
                s.max_extensions,
                closed_loop=bool(s.concurrency_levels),
                max_probe_s=s.max_probe_s(),
            ),
            "unloaded": self.unloaded,
            "plan": {"estimates": self.plan.estimates, "elapsed_s": self.elapsed_s()},
            "calibration": self.calibration,
            "answer": answer,
            "non_monotonic": flags,
            "probe_time_s": sum(p.duration_s for p in self.probes),
            "reruns": self.reruns,
            "probes": [p.to_json() for p in self.probes],
            "interrupted": self.interrupted,
        }
        self.starved.apply(result)  # client_wakeup; a starved client is the answer (loadgen.sweep.starved)
        return SweepOutcome(result, self.probes)


def resets_prefix_cache(observer: Any) -> bool:
    """Whether a probe resets the server's prefix cache first: only a server loadgen started (``--serve``), never
    one it only reads (``--server-metrics URL``: someone else's server, issue 33)."""
    return observer is not None and getattr(observer, "server", None) is not None
