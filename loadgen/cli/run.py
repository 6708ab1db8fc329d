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

from loadgen.cli.config import build_load_config, config_record, prices, run_estimate
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
from loadgen.cli.target import ClusterOption, Target, confirm_remote, endpoint_from_options
from loadgen.recordlog import default_out_dir
from loadgen.redact import Redactor

if TYPE_CHECKING:
    from loadgen.measurement import MeasuredRun
    from loadgen.runplan import LoadConfig

__all__ = ["run_cmd"]


@click.command("run")
@common_endpoint_options
@run_only_options
@workload_options
def run_cmd(**kw: Any) -> MeasuredRun | None:
    """One sustained run (open loop with --rate, closed loop with --concurrency)."""
    return _run(kw, Console(), Console(stderr=True, soft_wrap=True))


def _run(kw: dict[str, Any], console: Console, err: Console) -> MeasuredRun | None:
    """The run (its verdict goes to :func:`loadgen.cli.run_exit_code`); None for --dry-run."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from loadgen.measurement import measure
    from loadgen.report.console import render_run

    load = build_load_config(kw)
    load.validate()
    cpus = cpus_option(kw)
    out_dir = Path(kw["out_dir"]) if kw["out_dir"] else default_out_dir()
    if kw["dry_run"]:
        _dry_run(load, out_dir, console)
        return None
    load.prices = prices(kw)
    redactor = Redactor()
    with ClusterOption(kw["cluster"], err) as cluster, Target(kw, out_dir, err) as target:
        pin_client(cpus)  # after the target started: an embedded or launched server keeps every CPU
        if not target.embedded:
            confirm_remote(kw, target.url, target.embedded, run_estimate(kw, load), err)
        endpoint = endpoint_from_options(kw, target.url, target.embedded, redactor)
        use_uvloop()

        async def go() -> MeasuredRun:
            observer = target.observer()
            try:
                await endpoint.open()
                extra = {"server": await observer.conditions()} if observer is not None else None
                total = load.requests if load.requests is not None else None
                with Progress(
                    TextColumn("[progress.description]{task.description}"),
                    BarColumn(),
                    MofNCompleteColumn(),
                    TimeElapsedColumn(),
                    console=err,
                    transient=True,
                    disable=not err.is_terminal,
                ) as progress:
                    task = progress.add_task("requests", total=total)
                    make_out_dir(out_dir)
                    return await measure(
                        endpoint,
                        load,
                        out_dir,
                        config_record=config_record(kw, target.url, target.embedded),
                        redactor=redactor,
                        on_record=lambda rec, m: progress.advance(task),
                        workers=parse_workers(kw["workers"], cluster),
                        server_observer=observer,
                        conditions_extra=extra,
                        cluster=cluster,
                    )
            finally:
                await endpoint.close()
                if observer is not None:
                    await observer.close()

        run = asyncio.run(go())
    from loadgen.recordlog import write_requests_csv

    write_requests_csv(out_dir / "requests.jsonl", out_dir / "requests.csv")
    render_run(run.result, console, str(out_dir))
    return run


def _dry_run(load: LoadConfig, out_dir: Path, console: Console) -> None:
    from dataclasses import replace as _replace

    from loadgen.runplan import build_plan, build_workload
    from loadgen.workload.prompts import new_salt
    from loadgen.workload.spec import write_schedule

    if load.concurrency is not None:
        raise click.UsageError("--dry-run writes an open-loop schedule; it clashes with --concurrency")
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
