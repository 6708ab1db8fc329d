"""One measured run: schedule + endpoint -> engine -> records on disk -> result.json.

This is the library call behind ``loadgen run`` and each probe of a sweep; a session run
(:func:`loadgen.sessions.measured.measure_sessions`) writes its files through the same
:class:`RunFiles` and runs its engine through the same :func:`run_here`.
Files in ``out_dir``: ``requests.jsonl`` (written as requests finish),
``result.json`` (schema below, version 1) and ``histograms.hlog`` (HdrHistogram
interval log, one tagged histogram per metric, microsecond values).
"""

from __future__ import annotations

import datetime as dt
import gc
import resource
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Literal, Protocol

from loadgen.core.clock import now_ns
from loadgen.core.conditions import client_conditions
from loadgen.core.contract import RECORDS_SCHEMA_VERSION, RESULT_SCHEMA_VERSION
from loadgen.core.errors import ConfigError, OutputError
from loadgen.core.metrics import RequestMetrics, TokenCounter, compute
from loadgen.core.redact import Redactor
from loadgen.core.run_result import RunResult
from loadgen.core.types import RequestRecord
from loadgen.endpoints import Endpoint
from loadgen.engine.closed_loop import ramp_ns
from loadgen.engine.lifecycle import RunEngine
from loadgen.engine.models import ModelLog
from loadgen.engine.recordlog import RecordWriter, write_hlog, write_json
from loadgen.engine.results import Aggregator
from loadgen.engine.runner import LEAD_IN_NS, Runner, RunOutcome, warm_record_path
from loadgen.engine.runplan import LoadConfig, build_plan, build_workload
from loadgen.engine.stages import StageLog
from loadgen.engine.validity import latency_error_ms, needs_flip_test, timing_error_bound_ms, verdict_stands
from loadgen.engine.validity import validity as run_validity
from loadgen.spread.job import SpreadJob
from loadgen.spread.workers import run_workers
from loadgen.version import __version__
from loadgen.workload.prompts import new_salt

if TYPE_CHECKING:
    from loadgen.serve.observe import ObserverPair, ServerObserver
    from loadgen.spread.cluster import Cluster

SCHEMA_VERSION = RESULT_SCHEMA_VERSION  # loadgen.core.contract: the versions and their notes


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
    result: RunResult  # result.json's body, block by block (loadgen.core.run_result)
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
    server_observer: ServerObserver | ObserverPair | None = None,
    conditions_extra: dict[str, Any] | None = None,
    cluster: Cluster | None = None,
    blocks: dict[str, Any] | None = None,
) -> MeasuredRun:
    """Run ``cfg`` against an opened ``endpoint``; write files to ``out_dir``; return the result.

    With ``workers > 1`` the run is spread over worker processes (:mod:`loadgen.spread.workers`):
    ``on_record`` is then called with ``(None, None)`` per request (progress only) and
    ``on_summary`` with each request's :class:`~loadgen.engine.summary.RequestSummary`.
    With ``cluster`` (a connected :class:`loadgen.spread.cluster.Cluster`) the ``workers`` shards
    run as actors of that Ray cluster instead, with the same callbacks.

    ``config_record`` is the resolved configuration as it should appear in
    ``result.json`` (secrets already removed); ``blocks`` top-level blocks of the caller's (a callable
    value is given the result, the server's section in it, and returns the block: ``cache_hit_target``).
    Raises ConfigError on a bad plan.
    """
    redactor = redactor or Redactor()
    if cfg.salt is None:
        cfg = replace(cfg, salt=new_salt())  # one salt for this run, shared by worker processes
    workload = build_workload(cfg)
    plan = build_plan(cfg, workload)
    if tokenizer is None:
        tokenizer = workload.tokenizer
    files = RunFiles(out_dir, cfg, redactor, server_observer=server_observer)
    await files.open()
    if cfg.stages:
        if workers > 1 or cluster is not None:
            raise ConfigError("--stages runs in one process: not yet with --workers or --cluster")
        lead_s = cfg.warmup_s + (ramp_ns(plan.concurrency, plan.ramp_s) / 1e9 if plan.mode == "closed" else 0.0)
        files.stages = StageLog(cfg.stages, lead_s, cfg.slos, out_dir)
    mix = cfg.workload.model_mix if cfg.workload is not None else None
    if mix is not None:
        if workers > 1 or cluster is not None:
            raise ConfigError("--model with several models runs in one process: not yet with --workers or --cluster")
        files.models = ModelLog(mix, cfg.slos, out_dir)
    cluster_cond = None
    if workers > 1 or cluster is not None:
        # each worker builds its own endpoint from this picklable config (from_config)
        ep_cfg = endpoint.worker_config(workers)
        if ep_cfg is None:
            raise ConfigError("--workers needs an OpenAI-compatible endpoint")
        with files.requests_file() as fh:
            job = SpreadJob(workers, ep_cfg, cfg, plan, files.agg, fh, redactor, on_record, on_summary)
            if cluster is not None:
                outcome, cluster_cond = cluster.run(job)
            else:
                outcome = run_workers(job)
    else:

        def make(sink: Callable[..., None], t0: int | None) -> Runner:
            return Runner(endpoint, plan, sink, t0_ns=t0, install_signal_handlers=install_signal_handlers)

        outcome = await run_here(files, make, tokenizer, cfg.latency_origin, on_record, runner_hook)
    return await files.finish(
        outcome, cfg, endpoint, workload=workload.describe(), config_record=config_record, workers=workers,
        cluster=cluster_cond, conditions_extra=conditions_extra, blocks=blocks,
    )  # fmt: skip


class RunFiles:
    """One measured run's output directory, for every kind of run (plain or sessions; here, over
    worker processes or on a cluster): ``requests.jsonl`` written as requests end, then ``result.json``
    (:func:`build_result` and the blocks below) and ``histograms.hlog``.

    :meth:`open` before the first request (the directory, the open-file limit, the aggregator, the
    server observer's first scrape); :meth:`requests_file` and :meth:`writer` while it runs;
    :meth:`finish` once: ``result.json`` with the server's deltas and energy, the time series, the
    causes of SLO misses, the batch scorecard (``--rate inf``), any block of the run's own (``sessions``),
    secrets scrubbed, then the HDR log.
    """

    def __init__(
        self,
        out_dir: Path,
        cfg: LoadConfig,
        redactor: Redactor,
        *,
        server_observer: ServerObserver | ObserverPair | None = None,
    ) -> None:
        self.out_dir = out_dir
        self.cfg = cfg
        self.redactor = redactor
        self.server_observer = server_observer
        self.agg: Aggregator  # made by open(), with the start time and the open-file limit
        self.stages: StageLog | None = None  # --stages: each stage's own aggregator (loadgen.engine.stages)
        self.models: ModelLog | None = None  # --model a=0.7,b=0.3: each model's own aggregator (loadgen.engine.models)
        self.started_at: dt.datetime
        self.fd_limit: tuple[int, int]

    async def open(self) -> None:
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.fd_limit = raise_fd_limit()
        self.agg = Aggregator(self.cfg.slos, spill_dir=self.out_dir)  # exact samples spill to an unnamed file there
        self.started_at = dt.datetime.now(dt.UTC)
        if self.server_observer is not None:
            await self.server_observer.begin()  # /metrics scrape, energy window, power samples

    def requests_file(self) -> IO[bytes]:
        """``requests.jsonl``, unbuffered (:class:`~loadgen.engine.recordlog.RecordWriter`: whole lines only)."""
        return open(self.out_dir / "requests.jsonl", "wb", buffering=0)

    def writer(self, fh: IO[bytes], t0_ns: int, on_error: Callable[[str], None]) -> RecordWriter:
        cfg = self.cfg
        return RecordWriter(
            fh, t0_ns, save_text=cfg.save_text, token_lists=cfg.token_lists, redactor=self.redactor, on_error=on_error
        )

    async def finish(
        self,
        outcome: RunOutcome,
        cfg: LoadConfig,
        endpoint: Described,
        *,
        workload: dict[str, Any],
        config_record: dict[str, Any] | None,
        workers: int = 1,
        cluster: dict[str, Any] | None = None,
        conditions_extra: dict[str, Any] | None = None,
        blocks: dict[str, Any] | None = None,
        merge: bool = True,
    ) -> MeasuredRun:
        """Write ``result.json`` and ``histograms.hlog``; ``cfg`` is the one the records' metrics used
        (its ``latency_origin``), ``blocks`` the run's own top-level blocks (``sessions``; a callable value is
        given the result so far and returns its block)."""
        agg, out_dir = self.agg, self.out_dir
        agg.unsent = outcome.unsent
        agg.lost_with_client = outcome.lost_with_client
        result = build_result(
            agg, outcome, cfg, endpoint, started_at=self.started_at,
            config_record={**(config_record or {}), "workload": workload}, fd_limit=self.fd_limit,
        )  # fmt: skip
        if cluster is not None:
            result["conditions"]["cluster"] = cluster
        if workers > 1 or cluster is not None:
            result["conditions"]["workers"] = workers
            if merge:
                result["conditions"]["merge"] = {
                    "per_request_metrics": "exact: every request's summary is shipped to the parent",
                    "per_token_metrics": "HDR histograms merged from the workers: 3 significant digits (±0.1 %)",
                }
        if conditions_extra:
            result["conditions"].update(conditions_extra)
        if self.server_observer is not None:
            await self.server_observer.end(result)  # result["server"]: /metrics deltas and energy
            energy = (result.get("server") or {}).get("energy") or {}
            if energy.get("energy_j"):
                result["energy"] = {"joules": energy["energy_j"], **energy}
        result.update({k: v(result) if callable(v) else v for k, v in (blocks or {}).items()})
        if self.models is not None:  # --model mix: each model's figures and SLO verdict; met only if every model met
            result["by_model"] = self.models.results(agg.window(), outcome.client.open_loop)
            if result.get("slo") is not None and result["by_model"]["slo_every_model"] is False:
                result["slo"]["met"] = False
                result["slo"]["note"] += "; with a model mix, met only when every model met every target (by_model)"
            self.models.close()
        if self.stages is not None:  # --stages: each stage's window, figures and verdict
            result["stages"] = self.stages.results(outcome.client, cfg.validity_bounds())
            self.stages.close()
        from loadgen.engine.timeseries import series  # per-interval throughput and latency (sustained behaviour)

        result["timeseries"] = series(
            out_dir / "requests.jsonl", cfg.latency_origin, window=result["window"], server=result.get("server")
        )
        from loadgen.engine.why import why_of_dirs  # the cause of each SLO miss, from the same records

        result["why"] = why_of_dirs([out_dir], cfg.slos, origin=cfg.latency_origin)
        if cfg.max_throughput:  # --rate inf: the batch scorecard (loadgen.engine.throughput)
            from loadgen.engine.throughput import scorecard as batch_scorecard

            result["max_throughput"] = batch_scorecard(result, agg.win.tokens, cfg, out_dir / "requests.jsonl")
        result = self.redactor.scrub(result)  # server-supplied text (/version, messages), by value
        write_json(out_dir / "result.json", result)
        write_hlog(out_dir / "histograms.hlog", agg, outcome, out_dir / "requests.jsonl", cfg.latency_origin,
                   result.get("timeseries"))  # fmt: skip
        return MeasuredRun(RunResult.from_dict(result), outcome, agg, out_dir)


async def run_here(
    files: RunFiles,
    make_engine: Callable[[Callable[..., None], int | None], RunEngine],
    tokenizer: TokenCounter | None,
    origin: Literal["scheduled", "sent"],
    on_record: Callable[[RequestRecord, RequestMetrics], None] | None,
    runner_hook: Callable[[Any], None] | None,
    on_turn: Callable[[RequestRecord, RequestMetrics, int], None] | None = None,
) -> RunOutcome:
    """One process: the engine ``make_engine(sink, t0_ns)`` builds runs in this event loop; each record
    is aggregated and written at once (a session's with its ``turn``, also given to ``on_turn``).

    A failed write of ``requests.jsonl`` stops sending at once (nothing more could be recorded) and
    raises OutputError after the run, naming how many whole lines were kept."""
    # The engine collects and freezes the heap before its first send; t0 is fixed here, before it, so
    # do the long part now: a full collection over a large heap (a test session, a notebook) took
    # longer than the lead-in and made the first sends late. The engine's own pass then sees only
    # what is not frozen, and it unfreezes everything at its end.
    engine: RunEngine | None = None

    def write_failed(reason: str) -> None:
        if engine is not None:  # stop sending at once: nothing more could be recorded
            engine.cancel_reason = f"cancelled: {reason}"
            engine.request_stop(interrupted=False, cancel_inflight=True)

    agg = files.agg
    with files.requests_file() as fh:
        writer: RecordWriter | None = None

        def sink(rec: RequestRecord, turn: int | None = None) -> None:
            m = compute(rec, tokenizer, origin)
            agg.add(rec, m)
            if files.stages is not None:
                files.stages.add(rec, m)
            if files.models is not None:
                files.models.add(rec, m)
            if turn is not None and on_turn is not None:
                on_turn(rec, m, turn)
            assert writer is not None  # (set before the run starts)
            writer.write(rec, m, turn)
            if on_record is not None:
                on_record(rec, m)

        engine = make_engine(sink, None)
        if runner_hook is not None:
            runner_hook(engine)
        await engine.prepare()  # requests built before t0 is fixed (loadgen.engine.prepare)
        gc.collect()
        warm_record_path()
        t0 = now_ns() + LEAD_IN_NS
        engine.start_at(t0)
        if files.stages is not None:
            files.stages.t0_ns = t0
        writer = files.writer(fh, t0, write_failed)
        gc.freeze()
        try:
            outcome = await engine.run()
        finally:
            gc.unfreeze()  # (the engine's end unfroze it already, unless it never ran)
    if writer.error is not None:
        raise OutputError(
            f"{writer.error}: sending stopped at once; the {writer.lines} whole lines written before are kept, "
            f"{writer.lost} records could not be written (no result.json)"
        )
    return outcome


class Described(Protocol):
    """What ``build_result`` needs of the endpoint: its description for ``conditions.endpoint``."""

    def describe(self) -> dict[str, Any]: ...


def build_result(
    agg: Aggregator,
    outcome: RunOutcome,
    cfg: LoadConfig,
    endpoint: Described,
    *,
    started_at: dt.datetime,
    config_record: dict[str, Any],
    fd_limit: tuple[int, int],
) -> dict[str, Any]:
    """The ``result.json`` body (its schema: :mod:`loadgen.core.contract`, docs/schemas/result.schema.json).

    ``window`` is the measurement window (:mod:`loadgen.core.window`; times in seconds from t0)
    and every rate in ``throughput`` is over it, except the ``*_incl_drain`` figures;
    ``duration_s`` is the run's whole span (first measured scheduled send to last
    completion, drain included). A run with SLO targets whose only failed generator checks are the
    client's timing is judged by the verdict they could change (:func:`~loadgen.engine.validity.verdict_stands`,
    ``validity.verdict_stands``); every run carries ``latency_error_ms``."""
    agg.open_loop = outcome.client.open_loop
    window = agg.window()
    validity = run_validity(agg, outcome.client, cfg.validity_bounds())
    cond = client_conditions()
    cond["endpoint"] = endpoint.describe()
    cond["open_file_limit"] = {"soft": fd_limit[0], "hard": fd_limit[1]}
    cond["latency_origin"] = cfg.latency_origin
    cond["t0_monotonic_ns"] = outcome.t0_ns
    cond["t0_wall"] = dt.datetime.fromtimestamp(outcome.t0_wall_ns / 1e9, dt.UTC).isoformat()
    result: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "records_schema_version": RECORDS_SCHEMA_VERSION,  # requests.jsonl beside it (loadgen.core.contract)
        "loadgen_version": __version__,
        "started_at": started_at.isoformat(),
        "interrupted": outcome.interrupted,
        "config": config_record,
        "conditions": cond,
        "duration_s": agg.duration_s,
        "window": window.to_json(outcome.t0_ns) if window is not None else None,
        "counts": agg.counts(),
        "tokens": agg.tokens(),
        "throughput": agg.throughput(window),
        "latency_ms": agg.latency_ms(),
        "validity": validity,
        # did the server keep up with an open-loop run? (loadgen.engine.keepup; None: not judged)
        "server_kept_up": agg.kept_up() if cfg.sessions is None else None,
    }
    if outcome.unsent_warmup:
        result["counts"]["unsent_warmup"] = outcome.unsent_warmup
    if cfg.abandon is not None:  # --abandon: users who walked away mid-reply (loadgen.engine.abandon)
        result["abandon"] = {**cfg.abandon.to_json(), "abandoned": agg.abandoned}
    slo = agg.slo_result()
    if slo is not None:
        result["slo"] = slo
        if cfg.slo_flip_test and needs_flip_test(validity):  # only timing checks failed: VALID if no verdict flips
            flip = agg.slo_flip(timing_error_bound_ms(outcome.client), cfg.latency_origin == "scheduled")
            result["validity"] = verdict_stands(validity, flip, agg)
    # how far the client's timing can have moved each latency percentile (printed beside them without SLO)
    result["latency_error_ms"] = latency_error_ms(outcome.client, cfg.validity_bounds())
    result.update(agg.provider_result(outcome.t0_ns))  # rate_limit, client_rate_cap, network_ms (when observed)
    if cfg.prices is not None:
        from loadgen.core.pricing import run_cost

        result["cost"] = run_cost(
            cfg.prices, result["tokens"], completed=agg.completed, conforming=agg.conforming if agg.slos else None
        )
    result["client"] = {
        "cpu_s": outcome.client.cpu_s,
        "wall_s": outcome.client.wall_s,
        "cpu_fraction": validity["client_cpu_fraction"],
        # less the idle loop passes while senders spun to their deadlines (spin_idle_s): what client_cpu judges
        "busy_cpu_fraction": validity.get("client_busy_cpu_fraction"),
        "spin_idle_s": outcome.client.spin_idle_s,
        "cpu_wait_s": outcome.client.cpu_wait_s,
        "loop_lag_p99_ms": validity["loop_lag_p99_ms"],
        "stamp_lateness_p99_ms": outcome.client.stamp_lateness_p99_ms,
        "stamp_lateness_max_ms": m if (m := outcome.client.stamp_lateness_max_ms) is None or m < 1e9 else None,
        "timing_error_bound_ms": timing_error_bound_ms(outcome.client),
        "schedule_realized_rps": outcome.client.schedule_realized_rps,
        # requests built before t0 and what building the rest took inside the run (loadgen.engine.prepare)
        "preparation": outcome.client.preparation,
    }
    if outcome.client.worker_failures:  # worker processes or actors that failed (issue 34: promised, not written)
        result["client"]["worker_failures"] = list(outcome.client.worker_failures)
    return result
