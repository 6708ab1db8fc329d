"""``loadgen run``: one sustained run, open loop (``--rate``) or closed loop (``--concurrency``).

The command returns the :class:`~loadgen.measurement.MeasuredRun` (or None for ``--dry-run``);
:func:`loadgen.cli.run_exit_code` turns its verdict into the exit code.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.console import Console

from loadgen.cli.compare import export_option, write_exports
from loadgen.cli.config import build_load_config, config_record, prices, run_estimate
from loadgen.cli.live import (
    LiveView,
    ViewOptions,
    live_enabled,
    live_options,
    server_observer,
    telemetry_from_options,
    with_dcgm,
)
from loadgen.cli.load_options import LoadOptions, OutputOptions, RunOptions
from loadgen.cli.options import (
    common_endpoint_options,
    cpus_option,
    make_out_dir,
    parse_workers,
    pin_client,
    run_only_options,
    use_uvloop,
    workload_options,
)
from loadgen.cli.session_options import SessionOptions, session_source
from loadgen.cli.target import ClusterOption, Target, confirm_remote, endpoints_from_options
from loadgen.cli.target_options import EndpointOptions, ServerOptions
from loadgen.cli.url_options import url_secrets
from loadgen.core.redact import Redactor
from loadgen.engine.recordlog import default_out_dir

if TYPE_CHECKING:
    from loadgen.engine.runner import Runner
    from loadgen.engine.runplan import LoadConfig
    from loadgen.measurement import MeasuredRun
    from loadgen.sessions.turns import SessionRunner

__all__ = ["run_cmd"]


@click.command("run")
@common_endpoint_options
@run_only_options
@workload_options
@live_options
@export_option
def run_cmd(**kw: Any) -> MeasuredRun | None:
    """One sustained run (open loop with --rate, closed loop with --concurrency)."""
    from loadgen.report.console import output_console

    return _run(kw, output_console(), Console(stderr=True, soft_wrap=True))


def _run(kw: dict[str, Any], console: Console, err: Console) -> MeasuredRun | None:
    """The run (its verdict goes to :func:`loadgen.cli.run_exit_code`); None for --dry-run."""
    from loadgen.cli.scale import refuse_brace_list
    from loadgen.measurement import measure
    from loadgen.report.console import render_run

    refuse_brace_list(kw, "run")  # a brace list in --sim-args/--serve-args is a scaling sweep (loadgen sweep)
    # the options typed once (issue 29: frozen groups built from click's values, --config merged into them)
    lopts, ropts, oopts = LoadOptions.from_kw(kw), RunOptions.from_kw(kw), OutputOptions.from_kw(kw)
    view = ViewOptions.from_kw(kw)
    # built once, frozen and validated: sessions (issue 17, loadgen.sessions.measured) and prices in it
    load = build_load_config(
        ropts, lopts, oopts, kw, sessions=session_source(SessionOptions.from_kw(kw)), prices=prices(lopts)
    )
    # the target's, after build_load_config took the API from an --endpoint pasted with its path
    eopts, sopts = EndpointOptions.from_kw(kw), ServerOptions.from_kw(kw)
    if load.sessions is not None:  # issue 32: the whole source checked, its capped waits said, before anything
        from rich.markup import escape

        from loadgen.sessions.planning import check_sessions

        own = load.rate_rps is None and load.concurrency is None  # the source's own session starts
        for line in check_sessions(load.sessions, seed=load.seed, own_starts=own):
            err.print(f"[yellow]warning:[/] {escape(line)}")
    cpus = cpus_option(lopts.cpus)
    out_dir = Path(oopts.out_dir) if oopts.out_dir else default_out_dir()
    if ropts.dry_run and load.sessions is not None:
        from loadgen.sessions.measured import write_session_schedule

        make_out_dir(out_dir)
        n, turns = write_session_schedule(load, load.sessions, out_dir / "schedule.jsonl")
        console.print(f"dry run: {n} sessions, {turns} turns written to {out_dir / 'schedule.jsonl'}; nothing sent")
        return None
    if ropts.dry_run:
        _dry_run(load, out_dir, console)
        return None
    redactor = Redactor(url_secrets(kw))  # the credentials of every URL option (loadgen.cli.url_options)
    with ClusterOption(lopts.cluster, err) as cluster, Target(eopts, sopts, kw, out_dir, err) as target:
        pin_client(cpus)  # after the target started: an embedded or launched server keeps every CPU
        if not target.embedded:
            confirm_remote(eopts.yes, target.url, target.embedded, run_estimate(lopts, load), err)
        endpoint = endpoints_from_options(eopts, target, redactor, run_estimate(lopts, load), err)
        use_uvloop()

        async def go() -> MeasuredRun:
            observer = with_dcgm(
                view, target.observer() or server_observer(view, target.url, target.model)
            )  # --serve, or --server-metrics URL
            try:
                await endpoint.open()
                extra = {"server": await observer.conditions()} if observer is not None else None
                nonlocal load
                blocks = None
                if ropts.cache_hit_target:  # issue 32: shared prefixes sized for it, the cache primed
                    from loadgen.cli.cache_opt import plan_cache_target

                    load, blocks = await plan_cache_target(ropts, lopts, load, endpoint, observer, err)
                make_out_dir(out_dir)
                exact = load.exact_requests()  # --rate R --duration D: round(R x D) requests, known now
                total = sum(exact) if exact else None if load.requests is None else load.requests + load.warmup_requests
                live = LiveView(  # loadgen.cli.live: a thread tailing requests.jsonl, off the send path
                    err, enabled=live_enabled(view, err), run_file=out_dir / "requests.jsonl",
                    total=total, rate_rps=None if load.max_throughput else load.rate_rps,
                )  # fmt: skip
                if load.sessions is not None:
                    from loadgen.sessions.measured import measure_sessions

                    cfg_rec = config_record(kw, eopts, target.url, target.embedded)
                    return await measure_sessions(
                        endpoint,
                        load,
                        load.sessions,
                        out_dir,
                        config_record=cfg_rec,
                        redactor=redactor,
                        server_observer=observer,
                        conditions_extra=extra,
                        workers=parse_workers(lopts.workers),  # whole sessions per process (loadgen.sessions.spread)
                    )
                with live, telemetry_from_options(view, out_dir / "requests.jsonl", err, redactor) as tele:

                    def hook(
                        runner: Runner | SessionRunner,
                    ) -> None:  # read-only references for the view and the exporter
                        live.attach(runner)
                        tele.attach(runner)
                        runner.on_preparing = live.print  # a long preparation says so (loadgen.engine.prepare)

                    return await measure(
                        endpoint,
                        load,
                        out_dir,
                        config_record=config_record(kw, eopts, target.url, target.embedded),
                        redactor=redactor,
                        runner_hook=hook,
                        workers=parse_workers(lopts.workers, cluster),
                        server_observer=observer,
                        conditions_extra=extra,
                        cluster=cluster,
                        blocks=blocks,
                    )
            finally:
                await endpoint.close()
                if observer is not None:
                    await observer.close()

        run = asyncio.run(go())
    from loadgen.engine.recordlog import write_requests_csv

    write_requests_csv(out_dir / "requests.jsonl", out_dir / "requests.csv")
    result = run.result.to_dict()  # the renderers read result.json's body
    render_run(result, console, str(out_dir))
    if ((result.get("server") or {}).get("series") or {}).get("t_s"):  # server gauges read: one time axis
        from loadgen.report.run_html import write_run_report

        if write_run_report(result, out_dir) is not None:
            console.print(f"report.html (client and server on one time axis) in {out_dir}", markup=False)
    if result.get("sessions"):
        from loadgen.report.session_summary import render_sessions

        render_sessions(result["sessions"], console)
    if result.get("max_throughput"):  # --rate inf: the batch scorecard
        from loadgen.report.batch import render_batch

        render_batch(result["max_throughput"], console)
    write_exports(oopts.exports, out_dir, lambda line: console.print(line, markup=False))
    return run


def _dry_run(load: LoadConfig, out_dir: Path, console: Console) -> None:
    from dataclasses import replace as _replace

    from loadgen.engine.runplan import build_plan, build_workload
    from loadgen.workload.prompts import new_salt
    from loadgen.workload.spec import write_schedule

    if load.concurrency is not None:
        raise click.UsageError("--dry-run writes an open-loop schedule; it clashes with --concurrency")
    if load.max_throughput:
        raise click.UsageError("--dry-run writes an open-loop schedule; --rate inf has none (every request at once)")
    if load.salt is None:
        load = _replace(load, salt=new_salt())
    wl = build_workload(load)
    plan = build_plan(load, wl)
    make_out_dir(out_dir)
    try:
        write_schedule(out_dir / "schedule.jsonl", plan.schedule, wl)
    except OSError as exc:
        raise click.UsageError(f"--out {str(out_dir)!r}: cannot write schedule.jsonl: {exc.strerror or exc}") from None
    n = len(plan.schedule)
    span = (plan.schedule[-1].offset_ns / 1e9) if n else 0.0
    console.print(f"dry run: {n} requests over {span:.3f} s written to {out_dir / 'schedule.jsonl'}; nothing sent")
