"""One measured run: schedule + endpoint -> runner -> records on disk -> result.json.

This is the library call behind ``loadgen run`` and each probe of a sweep.
Files in ``out_dir``: ``requests.jsonl`` (written as requests finish),
``result.json`` (schema below, version 1) and ``histograms.hlog`` (HdrHistogram
interval log, one tagged histogram per metric, microsecond values).
"""

from __future__ import annotations

import datetime as dt
import os
import resource
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Literal

import orjson

from loadgen import __version__
from loadgen.conditions import client_conditions
from loadgen.endpoints.base import Endpoint
from loadgen.errors import ConfigError
from loadgen.metrics import RequestMetrics, TokenCounter, compute
from loadgen.recordlog import RecordWriter
from loadgen.redact import Redactor
from loadgen.results import Aggregator, ValidityBounds
from loadgen.clock import now_ns
from loadgen.runner import LEAD_IN_NS, RunOutcome, RunPlan, Runner
from loadgen.slo import SLOTarget
from loadgen.types import RequestRecord
from loadgen.workload.prompts import new_salt
from loadgen.workload.spec import Workload, WorkloadOptions

SCHEMA_VERSION = 1


@dataclass
class LoadConfig:
    """The workload and engine settings of one run (configuration only).

    Open loop when ``rate_rps`` is set, closed loop when ``concurrency`` is.
    Exactly one of ``requests`` / ``duration_s`` bounds the measured part;
    ``warmup_requests`` or ``warmup_s`` precede it and are excluded from statistics.
    """

    rate_rps: float | None = None
    arrival: str = "poisson"
    burstiness: float = 1.0
    concurrency: int | None = None
    requests: int | None = None
    duration_s: float | None = None
    warmup_requests: int = 0
    warmup_s: float = 0.0
    max_concurrency: int | None = None
    input_tokens: int | str = 128  # a length spec: 128, uniform:A,B, normal:M,SD, lognormal:M,SD, empirical:FILE
    output_tokens: int | str | None = 64
    seed: int = 0
    salt: str | None = None  # None: a fresh salt per run (resolved once, shared by worker processes)
    workload: WorkloadOptions | None = None  # traces, data sets, tokenizer, shared prefixes
    slos: list[SLOTarget] = field(default_factory=list)
    save_text: bool = False
    token_lists: bool = True
    origin: Literal["scheduled", "sent"] = "scheduled"
    drain_grace_s: float = 30.0
    bounds: ValidityBounds = field(default_factory=ValidityBounds)
    prices: Any = None  # loadgen.pricing.TokenPrices: the result gets a "cost" block

    @property
    def has_trace(self) -> bool:
        return bool(self.workload and self.workload.trace)

    def validate(self) -> None:
        if self.rate_rps is not None and self.concurrency is not None:
            raise ConfigError("give exactly one of --rate (open loop) or --concurrency (closed loop)")
        if self.rate_rps is None and self.concurrency is None and not self.has_trace:
            raise ConfigError("give exactly one of --rate (open loop) or --concurrency (closed loop)")
        if self.requests is not None and self.duration_s is not None:
            raise ConfigError("--requests and --duration clash: give one of them")
        if self.requests is None and self.duration_s is None and not (self.has_trace and self.concurrency is None):
            raise ConfigError("give --requests N or --duration D")
        if self.concurrency is not None and self.max_concurrency is not None:
            raise ConfigError("--max-concurrency caps an open-loop run; with --concurrency it clashes")
        if self.concurrency is not None and self.concurrency < 1:
            raise ConfigError("--concurrency must be at least 1")
        if self.requests is not None and self.requests < 1:
            raise ConfigError("--requests must be at least 1")


def workload_options(cfg: LoadConfig) -> WorkloadOptions:
    """The workload options of ``cfg``: its lengths, seed and salt applied over ``cfg.workload``."""
    base = cfg.workload or WorkloadOptions()
    return replace(
        base,
        input_tokens=cfg.input_tokens,
        output_tokens=cfg.output_tokens,
        seed=cfg.seed,
        salt=cfg.salt if cfg.salt is not None else base.salt,
    )


def build_workload(cfg: LoadConfig) -> Workload:
    """Load the workload (trace or data set read, tokenizer loaded). Raises ConfigError / InputFileError."""
    return Workload(workload_options(cfg))


def build_plan(cfg: LoadConfig, workload: Workload | None = None) -> RunPlan:
    """The schedule (open loop) or the user plan (closed loop) for ``cfg``."""
    cfg.validate()
    wl = workload or build_workload(cfg)
    if cfg.concurrency is None:
        schedule = wl.lazy_schedule(  # send times in arrays; each prompt built just before its send
            rate_rps=cfg.rate_rps,
            arrival=cfg.arrival,
            burstiness=cfg.burstiness,
            requests=cfg.requests,
            duration_s=cfg.duration_s,
            warmup_requests=cfg.warmup_requests,
            warmup_s=cfg.warmup_s,
        )
        return RunPlan(
            mode="open",
            schedule=schedule,
            max_concurrency=cfg.max_concurrency,
            drain_grace_s=cfg.drain_grace_s,
        )
    return RunPlan(
        mode="closed",
        concurrency=cfg.concurrency or 1,
        make_spec=wl.spec_factory(),
        max_requests=(cfg.requests + cfg.warmup_requests) if cfg.requests is not None else None,
        duration_s=cfg.duration_s,
        warmup_requests=cfg.warmup_requests,
        warmup_s=cfg.warmup_s,
        drain_grace_s=cfg.drain_grace_s,
    )


def raise_fd_limit() -> tuple[int, int]:
    """Raise the soft open-file limit to the hard limit; returns the (soft, hard) now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):
            pass
    return soft, hard


@dataclass
class MeasuredRun:
    result: dict[str, Any]
    outcome: RunOutcome
    aggregator: Aggregator
    out_dir: Path


async def measure(
    endpoint: Endpoint,
    cfg: LoadConfig,
    out_dir: Path,
    *,
    config_record: dict[str, Any] | None = None,
    redactor: Redactor | None = None,
    tokenizer: TokenCounter | None = None,
    on_record: Callable[[RequestRecord, RequestMetrics], None] | None = None,
    install_signal_handlers: bool = True,
    runner_hook: Callable[[Runner], None] | None = None,
    workers: int = 1,
    on_summary: Callable[[Any], None] | None = None,
    server_observer: Any = None,
    conditions_extra: dict[str, Any] | None = None,
    cluster: Any = None,
) -> MeasuredRun:
    """Run ``cfg`` against an opened ``endpoint``; write files to ``out_dir``; return the result.

    With ``workers > 1`` the run is spread over worker processes (:mod:`loadgen.workers`):
    ``on_record`` is then called with ``(None, None)`` per request (progress only) and
    ``on_summary`` with each request's :class:`~loadgen.results.RequestSummary`.
    With ``cluster`` (a connected :class:`loadgen.cluster.Cluster`) the ``workers`` shards
    run as actors of that Ray cluster instead, with the same callbacks.

    ``config_record`` is the resolved configuration as it should appear in
    ``result.json`` (secrets already removed). Raises ConfigError on a bad plan.
    """
    redactor = redactor or Redactor()
    if cfg.salt is None:
        cfg = replace(cfg, salt=new_salt())  # one salt for this run, shared by worker processes
    workload = build_workload(cfg)
    plan = build_plan(cfg, workload)
    if tokenizer is None:
        tokenizer = workload.tokenizer
    out_dir.mkdir(parents=True, exist_ok=True)
    fd_soft, fd_hard = raise_fd_limit()
    agg = Aggregator(cfg.slos, spill_dir=out_dir)  # exact samples spill to an unnamed file there
    started_at = dt.datetime.now(dt.timezone.utc)
    if server_observer is not None:
        await server_observer.begin()  # /metrics scrape, energy window, power samples
    with open(out_dir / "requests.jsonl", "wb") as fh:
        cluster_cond = None
        if workers > 1 or cluster is not None:
            from dataclasses import replace as _replace

            from loadgen.endpoints.openai import OpenAIEndpoint
            from loadgen.workers import run_workers

            if not isinstance(endpoint, OpenAIEndpoint):
                raise ConfigError("--workers needs an OpenAI-compatible endpoint")
            ep_cfg = _replace(
                endpoint.config, preflight=False, discover=False, accepted=dict(endpoint.accepted), network_baseline=False,
                # the client's cap is shared: each worker process enforces its part
                max_rpm=endpoint.config.max_rpm / workers if endpoint.config.max_rpm else None,
                max_tpm=endpoint.config.max_tpm / workers if endpoint.config.max_tpm else None,
            )
            if cluster is not None:
                outcome, cluster_cond = cluster.run(
                    workers, ep_cfg, cfg, plan, agg, fh, redactor, on_record=on_record, on_summary=on_summary
                )
            else:
                outcome = run_workers(
                    workers, ep_cfg, cfg, plan, agg, fh, redactor, on_record=on_record, on_summary=on_summary
                )
        else:
            outcome = await _run_here(
                endpoint, plan, cfg, fh, agg, redactor, tokenizer, on_record, install_signal_handlers, runner_hook
            )
    agg.unsent = outcome.unsent
    result = build_result(
        agg,
        outcome,
        cfg,
        endpoint,
        started_at=started_at,
        config_record={**(config_record or {}), "workload": workload.describe()},
        fd_limit=(fd_soft, fd_hard),
    )
    if cluster_cond is not None:
        result["conditions"]["cluster"] = cluster_cond
    if workers > 1 or cluster_cond is not None:
        result["conditions"]["workers"] = workers
        result["conditions"]["merge"] = {
            "per_request_metrics": "exact: every request's summary is shipped to the parent",
            "per_token_metrics": "HDR histograms merged from the workers: 3 significant digits (±0.1 %)",
        }
    if conditions_extra:
        result["conditions"].update(conditions_extra)
    if server_observer is not None:
        await server_observer.end(result)  # result["server"]: /metrics deltas and energy
        energy = (result.get("server") or {}).get("energy") or {}
        if energy.get("energy_j"):
            result["energy"] = {"joules": energy["energy_j"], **energy}
    from loadgen.timeseries import series  # per-interval throughput and latency (sustained behaviour)

    result["timeseries"] = series(out_dir / "requests.jsonl", cfg.origin)
    write_json(out_dir / "result.json", result)
    write_hlog(out_dir / "histograms.hlog", agg, outcome)
    return MeasuredRun(result, outcome, agg, out_dir)


async def _run_here(
    endpoint: Endpoint,
    plan: RunPlan,
    cfg: LoadConfig,
    fh: Any,
    agg: Aggregator,
    redactor: Redactor,
    tokenizer: TokenCounter | None,
    on_record: Callable[[RequestRecord, RequestMetrics], None] | None,
    install_signal_handlers: bool,
    runner_hook: Callable[[Runner], None] | None,
) -> RunOutcome:
    """One process: the runner in this event loop; each record is aggregated and written at once."""
    t0 = now_ns() + LEAD_IN_NS
    writer = RecordWriter(fh, t0, save_text=cfg.save_text, token_lists=cfg.token_lists, redactor=redactor)

    def sink(rec: RequestRecord) -> None:
        m = compute(rec, tokenizer, cfg.origin)
        agg.add(rec, m)
        writer.write(rec, m)
        if on_record is not None:
            on_record(rec, m)

    runner = Runner(endpoint, plan, sink, t0_ns=t0, install_signal_handlers=install_signal_handlers)
    if runner_hook is not None:
        runner_hook(runner)
    return await runner.run()


def build_result(
    agg: Aggregator,
    outcome: RunOutcome,
    cfg: LoadConfig,
    endpoint: Endpoint,
    *,
    started_at: dt.datetime,
    config_record: dict[str, Any],
    fd_limit: tuple[int, int],
) -> dict[str, Any]:
    """The ``result.json`` body (schema_version 1)."""
    validity = agg.validity(outcome.client, cfg.bounds)
    cond = client_conditions()
    cond["endpoint"] = endpoint.describe()
    cond["open_file_limit"] = {"soft": fd_limit[0], "hard": fd_limit[1]}
    cond["latency_origin"] = cfg.origin
    cond["t0_monotonic_ns"] = outcome.t0_ns
    cond["t0_wall"] = dt.datetime.fromtimestamp(outcome.t0_wall_ns / 1e9, dt.timezone.utc).isoformat()
    result: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "loadgen_version": __version__,
        "started_at": started_at.isoformat(),
        "interrupted": outcome.interrupted,
        "config": config_record,
        "conditions": cond,
        "duration_s": agg.duration_s,
        "counts": agg.counts(),
        "tokens": agg.tokens(),
        "throughput": agg.throughput(),
        "latency_ms": agg.latency_ms(),
        "validity": validity,
    }
    if outcome.unsent_warmup:
        result["counts"]["unsent_warmup"] = outcome.unsent_warmup
    slo = agg.slo_result()
    if slo is not None:
        result["slo"] = slo
    result.update(agg.provider_result(outcome.t0_ns))  # rate_limit, client_rate_cap, network_ms (when observed)
    if cfg.prices is not None:
        from loadgen.pricing import run_cost

        result["cost"] = run_cost(
            cfg.prices, result["tokens"], completed=agg.completed, conforming=agg.conforming if agg.slos else None
        )
    result["client"] = {
        "cpu_s": outcome.client.cpu_s,
        "wall_s": outcome.client.wall_s,
        "cpu_fraction": validity["client_cpu_fraction"],
        "loop_lag_p99_ms": validity["loop_lag_p99_ms"],
        "schedule_realized_rps": outcome.client.schedule_realized_rps,
    }
    return result


def write_json(path: Path, obj: Any) -> None:
    """Write JSON atomically (temp file + rename), so a reader never sees half a file."""
    tmp = path.with_suffix(path.suffix + f".tmp{os.getpid()}")
    tmp.write_bytes(orjson.dumps(obj, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY))
    os.replace(tmp, path)


def write_hlog(path: Path, agg: Aggregator, outcome: RunOutcome) -> None:
    """HdrHistogram log (V1.3 text format): one tagged interval per metric, values in µs."""
    start_s = outcome.t0_wall_ns / 1e9
    end_s = start_s + max(outcome.end_ns - outcome.t0_ns, 0) / 1e9
    lines = [
        "#[Histogram log format version 1.3]",
        f"#[StartTime: {start_s:.3f} (seconds since epoch)]",
        f"#[BaseTime: {start_s:.3f} (seconds since epoch)]",
        "#[loadgen: values in microseconds; one tagged histogram per metric]",
        '"StartTimestamp","Interval_Length","Interval_Max","Interval_Compressed_Histogram"',
    ]
    for name, h in agg.hist.items():
        if h.hist.get_total_count() == 0:
            continue
        lines.append(
            f"Tag={name},{0.0:.3f},{end_s - start_s:.3f},{h.hist.get_max_value() / 1e6:.3f},{h.encode()}"
        )
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def new_run_id() -> str:
    return uuid.uuid4().hex[:12]
