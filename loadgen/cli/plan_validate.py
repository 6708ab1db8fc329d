"""``loadgen plan --validate``: replay a compressed slice of the demand against N replicas behind the
client's balancer and say whether the SLO held (rules in :mod:`loadgen.capacity.validate`).

The replicas are the capacity sweep's simulated endpoint profile, started here on 127.0.0.1 (one
``loadgen sim`` process each, stopped at the end), or real servers given with ``--validate-endpoint``
once per replica (a non-loopback one needs ``--yes``, as ``run`` does). The replay's own files
(``result.json``, ``requests.jsonl`` with each request's ``replica``, ``replay.jsonl``) are written
under ``OUT/validate/``.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

import click
from rich.console import Console

from loadgen.cli.load_options import picked
from loadgen.cli.options import F, duration_s
from loadgen.cli.url_options import URL

if TYPE_CHECKING:
    from loadgen.capacity.source import SweepCapacity
    from loadgen.cli.target_options import EndpointOptions
    from loadgen.measurement import MeasuredRun

__all__ = ["ValidateOptions", "run_validation", "validate_options"]


@dataclass(frozen=True, slots=True)
class ValidateOptions:
    """``loadgen plan``'s ``--validate*`` options (:func:`validate_options`), built once from click's values."""

    validate: bool = False
    validate_seconds: str | None = "15s"
    """The replay's wall time, as written (15s)."""
    validate_time_scale: float | None = None
    validate_start: float | None = None
    """Trace time (s) where the slice starts (None: the peak interval's)."""
    validate_replicas: int | None = None
    validate_endpoints: tuple[str, ...] = field(default=(), repr=False)
    """``--validate-endpoint`` URLs, once per replica (may hold credentials)."""
    balance: str = "round-robin"
    yes: bool = False

    @classmethod
    def from_kw(cls, kw: dict[str, Any]) -> Self:
        """The options of ``kw`` (click's values)."""
        return cls(**picked(cls, kw))


def validate_options(f: F) -> F:
    """The ``--validate*`` options of ``loadgen plan``."""
    opts = [
        click.option("--validate", is_flag=True,
                     help="Replay a compressed slice of the demand against the planned replicas (the sweep's "
                     "simulated endpoint, or --validate-endpoint) and report whether the SLO held."),
        click.option("--validate-seconds", default="15s", show_default=True,
                     help="Wall time of the replay, e.g. 15s."),
        click.option("--validate-time-scale", type=float,
                     help="Trace seconds replayed per second (default: the slice's first interval in --validate-seconds)."),
        click.option("--validate-start", type=float, metavar="SECONDS",
                     help="Trace time where the slice starts (default: the peak interval's start)."),
        click.option("--validate-replicas", type=click.IntRange(min=1),
                     help="Replicas to validate (default: the plan's for the slice; one fewer shows it is not oversized)."),
        click.option("--validate-endpoint", "validate_endpoints", type=URL, multiple=True,
                     help="A real replica (give it once per replica); default: the capacity sweep's simulated endpoint."),
        click.option("--balance", type=click.Choice(["round-robin", "least-outstanding"]), default="round-robin",
                     show_default=True, help="How the replay's requests are spread over the replicas."),
        click.option("--yes", is_flag=True, help="Do not ask before sending to a non-loopback --validate-endpoint."),
    ]  # fmt: skip
    for o in reversed(opts):
        f = o(f)
    return f


class _Estimate:
    """What the replay will send, shown before a non-loopback replica is loaded."""

    def __init__(self, requests: float, seconds: float, replicas: int) -> None:
        self.requests, self.seconds, self.replicas = requests, seconds, replicas

    def text(self) -> str:
        return f"about {self.requests:,.0f} requests over {self.seconds:g} s spread over {self.replicas} replicas"


def _endpoint_options(cap: SweepCapacity, vo: ValidateOptions) -> EndpointOptions:
    """The options each replica's endpoint is built from: the capacity sweep's API and model."""
    from loadgen.cli.target_options import EndpointOptions

    cfg = cap.doc.get("config") or {}
    return EndpointOptions(api=str(cfg.get("api") or "completions"), model=cfg.get("model"), timeout="600s",
                           connect_timeout="10s", idle_timeout="120s", balance=vo.balance, workers="1",
                           yes=vo.yes)  # fmt: skip


def run_validation(
    vo: ValidateOptions, cap: SweepCapacity, plan: dict[str, Any], out_dir: Path, err: Console
) -> dict[str, Any]:
    """Replay the slice of ``plan`` (one system's ``plan.json`` entry, measured as ``cap``) and judge it:
    the ``validation`` block of ``plan.json``. Raises ConfigError / click.UsageError for bad options,
    EndpointUnreachable when a replica cannot be reached."""
    from loadgen.capacity.validate import judge_replay, replay_load, replay_slice, sim_profile
    from loadgen.cli.target import balanced_endpoint, confirm_remote, endpoint_from_options
    from loadgen.core.redact import Redactor, redact_url
    from loadgen.measurement import measure
    from loadgen.sim.launch import SimProcess

    seconds = duration_s(vo.validate_seconds, "--validate-seconds") or 0.0
    sl = replay_slice(plan, seconds=seconds, time_scale=vo.validate_time_scale, start_s=vo.validate_start)
    n = vo.validate_replicas or sl.planned_replicas
    if n < 1:
        raise click.UsageError("the slice has no demand (0 replicas planned): choose another --validate-start")
    profile = sim_profile(cap)
    urls = list(vo.validate_endpoints)
    if urls and len(urls) < n:
        raise click.UsageError(f"--validate-endpoint given {len(urls)} times: the validation needs {n} replicas")
    if not urls and profile is None:
        raise click.UsageError(f"{cap.path} measured a real endpoint, not loadgen's simulated one: give "
                               f"--validate-endpoint URL once per replica ({n})")  # fmt: skip
    run_dir = out_dir / "validate"
    load = replay_load(cap, sl, run_dir / "replay.jsonl")
    source = f"--validate-endpoint x {n}" if urls else f"loadgen sim {' '.join(profile or [])} x {n}"
    err.print(f"validate: replaying {sl.text()} against {n} replicas ({source}; planned {sl.planned_replicas})")
    eopts = _endpoint_options(cap, vo)
    redactor = Redactor()
    sims: list[Any] = []
    try:
        if urls:
            urls = urls[:n]
            for u in urls:
                confirm_remote(eopts.yes, u, False, _Estimate(sl.expected_requests, sl.replay_s, n), err)
        else:
            for _ in range(n):
                sims.append(SimProcess(profile or []))
            urls = [str(s.url) for s in sims]
        embedded = not vo.validate_endpoints
        endpoint = (balanced_endpoint(eopts, urls, redactor) if n > 1
                    else endpoint_from_options(eopts, urls[0], embedded, redactor))  # fmt: skip

        async def go() -> MeasuredRun:
            try:
                await endpoint.open()
                rec = {"validate": True, "replicas": [redact_url(u) for u in urls], "balance": vo.balance,
                       "slice": sl.to_json(), "capacity": cap.path}  # fmt: skip
                return await measure(endpoint, load, run_dir, config_record=rec, redactor=redactor)
            finally:
                await endpoint.close()

        run = asyncio.run(go())
    finally:
        for s in sims:
            s.stop()
    res = run.result.to_dict()
    verdict = judge_replay(res, run_dir, cap)
    thr = res.get("throughput") or {}
    bal = ((res.get("conditions") or {}).get("endpoint") or {}).get("balance") or {}
    return {
        **verdict,
        "slice": sl.to_json(),
        "slice_text": sl.text(),
        "replicas": n,
        "planned_replicas": sl.planned_replicas,
        "replicas_source": source,
        "balance": vo.balance if n > 1 else None,
        "per_replica": [
            {k: r.get(k) for k in ("replica", "url", "requests", "ok", "failed")} for r in bal.get("replicas") or []
        ],
        "offered_rps": thr.get("offered_rps"),
        "completion_rps": thr.get("completion_rps"),
        "requests": (res.get("counts") or {}).get("measured"),
        "run_dir": str(run_dir),
        "rule": "loadgen.capacity.validate: held = every target met in a VALID run; not held = missed in a VALID run, "
        "or still missed with each request's schedule lag taken off; else invalid (no claim)",
    }
