"""The session-rate search (library only, a first cut): the highest session arrival rate meeting SLOs.

Each probe is one measured session run (:func:`loadgen.session_run.measure_sessions`) at a session
rate (sessions/s, Poisson starts): ``sessions_per_probe`` measured sessions after
``warmup_sessions``, the same seed at every probe (the same sessions and the same arrival pattern,
scaled: the verdict is a smooth function of the rate, as in :mod:`loadgen.sim.session_reference`),
a fresh salt per probe (so no probe's prefixes are cached by an earlier one,
apart from what the server keeps of its own), the server's prefix cache reset before it where
the observer can (``server_observer.reset_prefix_cache``). A probe's verdict: ``invalid`` when
the client could not keep the turns' due times (the run's validity), else ``pass`` when every SLO
target is met over all its measured turns (the run's exact-percentile verdict,
:mod:`loadgen.slo`), else ``fail``.

The search brackets the answer by doubling (or halving) from ``start_sps``, then bisects
geometrically until the bracket is within ``precision``. An ``invalid`` probe bounds the bracket
from above like a failing one (the client could not test that rate); when the final bracket ends
at such a rate, the answer is a lower bound (``limited_by: client``).

Not yet here (the full sweep's machinery, :mod:`loadgen.sweep.search`): binomial probe verdicts
with early stop, probe extensions and the stability rule, closed-loop (concurrent sessions)
search, the report; nor the ``loadgen sweep --sessions`` command.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from loadgen.endpoints import Endpoint
from loadgen.runplan import LoadConfig
from loadgen.session_run import measure_sessions
from loadgen.slo import SLOTarget
from loadgen.workload.session_sources import SessionSource

__all__ = ["SessionProbe", "SessionSearch", "search_session_rate"]


@dataclass
class SessionProbe:
    """One probe: its session rate, verdict and the facts it was judged on."""

    rate_sps: float
    verdict: str  # pass | fail | invalid
    reasons: list[str] = field(default_factory=list)
    hit_rate: float | None = None
    out_dir: str = ""


@dataclass
class SessionSearch:
    """The search's answer: ``max_session_rps`` (None: no probed rate passed) and every probe."""

    max_session_rps: float | None
    limited_by: str | None  # "client" when an invalid probe bounded the search
    probes: list[SessionProbe]

    def to_json(self) -> dict[str, Any]:
        return {
            "answer": {"max_session_rps": self.max_session_rps, "limited_by": self.limited_by},
            "probes": [p.__dict__ for p in self.probes],
        }


async def _probe(
    endpoint: Endpoint, base: LoadConfig, src: SessionSource, slos: list[SLOTarget], rate: float, idx: int,
    out_dir: Path, sessions_per_probe: int, warmup_sessions: int, server_observer: Any,
) -> SessionProbe:  # fmt: skip
    if server_observer is not None and hasattr(server_observer, "reset_prefix_cache"):
        await server_observer.reset_prefix_cache()
    cfg = replace(
        base, rate_rps=rate, concurrency=None, requests=sessions_per_probe, duration_s=None,
        warmup_requests=warmup_sessions, warmup_s=0.0, slos=slos, salt=f"p{idx}-",
    )  # fmt: skip
    d = out_dir / f"probe-{idx:02d}-{rate:.3f}sps"
    run = await measure_sessions(endpoint, cfg, src, d, install_signal_handlers=False)
    res = run.result
    hit = res["sessions"]["prefix_cache_hit_rate"]
    if not res["validity"]["valid"]:
        bad = [c["detail"] for c in res["validity"]["checks"] if c["group"] == "generator" and not c["ok"]]
        return SessionProbe(rate, "invalid", bad, hit, str(d))
    slo = res.get("slo") or {}
    reasons = [f"{t.get('target')}: {'met' if t.get('met') else 'missed'}" for t in slo.get("targets", [])]
    return SessionProbe(rate, "pass" if slo.get("met") else "fail", reasons, hit, str(d))


async def search_session_rate(
    endpoint: Endpoint,
    base: LoadConfig,
    src: SessionSource,
    slos: list[SLOTarget],
    out_dir: Path,
    *,
    sessions_per_probe: int = 30,
    warmup_sessions: int = 3,
    start_sps: float = 1.0,
    precision: float = 0.1,
    max_probes: int = 12,
    min_sps: float = 0.01,
    server_observer: Any = None,
    progress: Callable[[str], None] | None = None,
) -> SessionSearch:
    """Search the highest session rate meeting ``slos`` (module doc). Raises ConfigError on a bad source."""
    say = progress or (lambda s: None)
    probes: list[SessionProbe] = []
    lo: float | None = None
    hi: float | None = None
    rate = start_sps

    async def probe(r: float) -> SessionProbe:
        p = await _probe(endpoint, base, src, slos, r, len(probes) + 1, out_dir, sessions_per_probe,
                         warmup_sessions, server_observer)  # fmt: skip
        probes.append(p)
        say(f"probe {len(probes)}: {r:.3f} sessions/s: {p.verdict} ({'; '.join(p.reasons)})")
        return p

    hi_invalid = False  # the bracket's upper end is a rate the client could not test
    while len(probes) < max_probes:
        if lo is not None and hi is not None:
            if hi / lo - 1 <= precision:
                break
            rate = (lo * hi) ** 0.5
        p = await probe(rate)
        if p.verdict == "invalid":  # untestable here: search below it; the answer may be a lower bound
            hi, hi_invalid = rate, True
            if lo is None:
                rate /= 2
                if rate < min_sps:
                    break
            continue
        if p.verdict == "fail":
            hi_invalid = False
        if p.verdict == "pass":
            lo = rate
            if hi is None:
                rate *= 2
        else:
            hi = rate
            if lo is None:
                rate /= 2
                if rate < min_sps:
                    break
    return SessionSearch(lo, "client" if hi_invalid else None, probes)
