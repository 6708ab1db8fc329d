"""The sweep's plan, said before it starts: requests per probe and why, expected probes, total time.

A sweep given ``--probe-duration 20s`` can run for many minutes: each probe needs at least
:meth:`~loadgen.sweep.SweepConfig.needed_requests` requests (368 for p99 at the default 97.5 %, 299 at 95 %), so a low
rate stretches it; a long tail extends it; the bisection to ``--precision`` takes a known number
of steps. :class:`Plan` says so up front and updates its estimate as probes finish.

The model (an estimate, not a promise; checked against the demo, issue 23):

* probes: the first rate r0 (half the calibrated capacity) passes and 2 r0 fails, then
  bisection: a bracket [lo, hi] needs ceil(log2(ln(hi / lo) / ln(1 + precision))) more probes
  (:func:`bisection_steps`);
* one probe at rate r: warm-up + segments + 1 s of set-up; a segment lasts
  w = max(probe_duration_s, need / r) plus its drain (the E2E p99 at r); while that p99
  exceeds :data:`~loadgen.core.stability.TAIL_FRACTION` of w the probe is extended by a
  segment twice as long (within ``max_extensions``), as the probe does;
* the E2E p99 at r: once probes have finished, that of the finished probe nearest in rate,
  scaled by r / its rate (a lighter load, a shorter queue); before, the calibration's E2E p99
  scaled by min(1, r / calibrated rate), else the unloaded check's slowest request;
* a closed-loop level of c users judges about c / E2E requests a second (the unloaded
  median E2E, at most the calibrated rate) and is extended in time to ``need`` of them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from loadgen.core.slo import judged_per_request
from loadgen.core.stability import TAIL_FRACTION
from loadgen.sweep.config import SweepConfig

SETUP_S = 0.5  # per probe beyond warm-up and duration_s: start, lead-in, files (0.3-0.6 s on the demo and FAST)


def bisection_steps(lo: float, hi: float, precision: float) -> int:
    """Probes left to bisect [lo, hi] geometrically until (hi - lo) / lo <= precision."""
    if lo <= 0 or hi <= lo or (hi - lo) / lo <= precision:
        return 0
    return max(0, math.ceil(math.log2(math.log(hi / lo) / math.log(1 + precision))))


@dataclass
class Plan:
    """Time estimates of one sweep (seconds). ``e2e_p99_s`` / ``cal_rps`` from calibration, if any."""

    scfg: SweepConfig
    e2e_p99_s: float = 0.0
    e2e_p50_s: float = 0.0
    cal_rps: float | None = None
    estimates: list[dict[str, Any]] = field(default_factory=list)
    seen: list[tuple[float, float]] = field(default_factory=list)  # (rate, E2E p99 s) of finished probes

    def observe(self, rate: float, e2e_p99_s: float | None) -> None:
        """A finished probe's E2E p99 at its rate (not one stopped early: its tail was cut)."""
        if rate > 0 and e2e_p99_s is not None and e2e_p99_s > 0:
            self.seen.append((rate, e2e_p99_s))

    def e2e_at(self, rate: float) -> float:
        if self.seen:
            r0, e0 = min(self.seen, key=lambda x: abs(math.log(x[0] / rate)))
            return min(e0 * rate / r0, max(e0, self.e2e_p99_s))
        if self.cal_rps:
            return self.e2e_p99_s * min(1.0, rate / self.cal_rps)
        return self.e2e_p99_s

    def probe_s(self, rate: float) -> float:
        """Expected seconds of one open-loop probe at ``rate`` req/s (module docstring)."""
        s = self.scfg
        if rate <= 0:
            return SETUP_S + s.warmup_s() + s.probe_duration_s
        w = max(s.probe_duration_s, s.needed_requests() / rate)
        if s.probe_cap_given:
            w = min(w, s.max_probe_s())  # within a cap the user gave
        e2e = self.e2e_at(rate)
        total, segs = w + e2e, 1
        while e2e > TAIL_FRACTION * w and segs <= s.max_extensions:
            w *= 2
            total += w + e2e
            segs += 1
        return SETUP_S + s.warmup_s() + total

    def level_s(self, users: int) -> float:
        """Expected seconds of one closed-loop level (extended in time to the needed requests)."""
        s = self.scfg
        per_s = users / self.e2e_p50_s if self.e2e_p50_s > 0 else math.inf
        if self.cal_rps:
            per_s = min(per_s, self.cal_rps)
        need_s = s.needed_requests() / per_s if per_s > 0 else s.probe_duration_s
        dur = s.probe_duration_s if need_s <= s.probe_duration_s else s.probe_duration_s + 1.25 * need_s
        return SETUP_S + s.warmup_s() + dur + self.e2e_p99_s

    def remaining(self, last_pass: float | None, upper: float | None, start: float | None) -> tuple[int, float]:
        """(probes, seconds) still expected from the current bracket (``start``: no probe yet)."""
        p = self.scfg.precision
        if last_pass is not None and upper is not None:
            rates = [math.sqrt(last_pass * upper)] * bisection_steps(last_pass, upper, p)
        elif last_pass is not None:  # doubling: the next probe is taken to fail
            rates = [2 * last_pass] + [last_pass * math.sqrt(2)] * bisection_steps(1, 2, p)
        elif upper is not None:  # halving: the next probe is taken to pass
            rates = [upper / 2] + [upper / math.sqrt(2)] * bisection_steps(1, 2, p)
        elif start is not None:
            rates = [start, 2 * start] + [start * math.sqrt(2)] * bisection_steps(1, 2, p)
        else:
            rates = []
        rates = [min(r, self.scfg.max_rate_rps) if self.scfg.max_rate_rps else r for r in rates]
        return len(rates), sum(self.probe_s(r) for r in rates)

    def why_line(self) -> str:
        s = self.scfg
        judged = [t for t in s.slos if judged_per_request(t)]
        pct = max((t.percentile for t in judged), default=50.0)
        return (
            f"plan: each probe at least {s.probe_duration_s:g} s and {s.needed_requests()} requests "
            f"(p{pct:g} at {s.confidence * 100:g} % confidence cannot pass on fewer, even with no request over); "
            f"an undecided or long-tailed probe is extended up to {s.max_extensions} times, each extension sized "
            f"to decide it, within {s.max_probe_s():g} s a probe (--max-probe-duration); a probe after the first holds "
            "that many requests times the dependence between requests (tau) seen at or below its rate; an answer "
            "that passed on a point estimate is run longer at its rate by up to 3 certifying probes"
        )

    def note(
        self, elapsed_s: float, probes_done: int, left: tuple[int, float], *, first: bool = False, levels: bool = False
    ) -> str:
        """One plan line: probes expected and the estimated total; recorded in ``estimates``."""
        n, secs = left
        total = elapsed_s + secs
        self.estimates.append(
            {"elapsed_s": elapsed_s, "probes_done": probes_done, "probes_left": n, "estimated_total_s": total}
        )
        if first:
            what = (
                f"{n} user levels" if levels else f"about {n} probes to reach {self.scfg.precision * 100:g} % precision"
            )
            src = "the unloaded check" if self.cal_rps is None else "the calibration"
            return f"plan: {what}; estimated total {_dur(total)} (a guess from {src}; updated as probes finish)"
        return (
            f"plan: {probes_done} probe{'s' if probes_done != 1 else ''} in {_dur(elapsed_s)}; about {n} more "
            f"(~{_dur(secs)}); estimated total {_dur(total)}"
        )


def _dur(s: float) -> str:
    return f"{s:.0f} s" if s < 120 else f"{s / 60:.1f} min"


def calibration_little_rps(users: int, e2e_mean_ms: float | None) -> float | None:
    """The closed-loop calibration's throughput by Little's law: users / mean E2E (s), req/s.

    With no think time every user always has a request in flight, so X = N / R exactly. The
    calibration's completions over its window (``throughput.request_rps``) fall short of it when one
    request takes a sizeable part of the window: a vLLM on CPU at 32 users, E2E 6.6 s, completed
    1.15 req/s over a 10 s calibration, against 32 / 6.6 = 4.8 (the search then started at 0.58 req/s
    and spent its time where nothing was in doubt). The calibration takes the larger of the two."""
    if not e2e_mean_ms or e2e_mean_ms <= 0 or users <= 0:
        return None
    return users / (e2e_mean_ms / 1e3)
