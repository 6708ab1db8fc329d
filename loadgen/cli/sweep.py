"""``loadgen sweep``: the highest offered load (or user count) that still meets the SLO.

The command returns the :class:`~loadgen.sweep.SweepOutcome` after writing ``sweep.json`` and
the report; :func:`loadgen.cli.sweep_exit_code` turns its answer into the exit code.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from types import FrameType, TracebackType
from typing import TYPE_CHECKING, Any

import click
from rich.console import Console

from loadgen.cli.compare import export_option, write_exports
from loadgen.cli.config import base_load_config, build_sweep_config, config_record, sweep_estimate
from loadgen.cli.live import (
    LiveView,
    ViewOptions,
    live_enabled,
    server_metrics_options,
    server_observer,
    view_options,
    with_dcgm,
)
from loadgen.cli.load_options import LoadOptions, OutputOptions, SweepOptions
from loadgen.cli.options import (
    common_endpoint_options,
    cpus_option,
    make_out_dir,
    pin_client,
    use_uvloop,
    workload_options,
)
from loadgen.cli.runfile import load_resume, resume_clashes, write_used_config
from loadgen.cli.session_options import SessionOptions, session_source
from loadgen.cli.target import ClusterOption, Target, confirm_remote, endpoints_from_options
from loadgen.cli.target_options import EndpointOptions, ServerOptions
from loadgen.cli.url_options import URL, url_secrets
from loadgen.core.redact import Redactor
from loadgen.engine.recordlog import default_out_dir

if TYPE_CHECKING:
    from loadgen.cli.scale import ScaledOutcome
    from loadgen.sweep import SweepOutcome
    from loadgen.sweep.resume import Replay

__all__ = ["sweep_cmd"]


@click.command("sweep")
@common_endpoint_options
@workload_options
@click.option("--slo-p99", help="Shorthand: p99 of --slo-metric (TTFT by default) at most this, e.g. 300ms.")
@click.option(
    "--slo-metric",
    type=click.Choice(["ttft", "e2e", "tpot", "itl", "time_to_first_answer_token", "tbt_deadline"]),
    default="ttft",
    show_default=True,
)
@click.option("--slo", "slos", multiple=True, help="SLO target METRIC:pNN<=VALUE (repeatable; all must hold).")
@click.option("--probe-duration", default="60s", show_default=True, help="Minimum measured time of each probe.")
@click.option("--probe-warmup", help="Warm-up before each probe (default 10 % of the probe, at most 5 s).")
@click.option(
    "--confidence",
    default="97.5%",
    show_default=True,
    help="Confidence of each probe verdict; the answer's interval, whose two ends are each tested at it, "
    "covers 1 - 2 x (1 - this): 95 % at the default.",
)
@click.option("--precision", default="5%", show_default=True, help="Stop when (fail - pass) / pass is at most this.")
@click.option("--repeats", type=int, default=1, show_default=True, help="A rate passes only if all K probes pass.")
@click.option("--max-rate", type=float, help="Never offer more than this (req/s).")
@click.option(
    "--min-rate", type=float, help="Lowest rate to try (default: the rate that reaches the minimum request count)."
)
@click.option("--start-rate", type=float, help="First probe's rate (default: half the calibrated capacity).")
@click.option("--calibration", default="10s", show_default=True, help="Closed-loop calibration time (0 to skip).")
@click.option("--calibration-concurrency", type=int, default=32, show_default=True)
@click.option(
    "--max-extensions", type=int, default=3, show_default=True,
    help="Extra segments for an undecided probe, each sized to decide it.",
)  # fmt: skip
@click.option(
    "--max-probe-duration",
    help="One probe's time cap, extensions included (default 4x --probe-duration); past it an undecided "
    "probe is a point estimate, with the time that would have certified it.",
)
@click.option("--cost-per-hour", type=float, help="USD per hour of the system under test (cost per million tokens).")
@click.option("--accelerators", type=int, help="Accelerators serving the endpoint (throughput per accelerator).")
@click.option("--concurrency-levels", help="Closed-loop sweep over these user counts, e.g. 1,2,4,8,16.")
@click.option(
    "--workers",
    default="1",
    show_default=True,
    help="Client processes per probe (N or auto); no early stop with N > 1.",
)
@click.option("--cluster", type=URL, help="Ray cluster address: each probe's --workers shards run as its actors.")
@click.option("--cpus", help="Run the client on these CPUs only (e.g. 0 or 0-3): keeps it off a local server's cores.")
@click.option(
    "--selftest", is_flag=True,
    help="First certify this machine's client (loadgen selftest, about a minute): recorded as client_selftest.",
)  # fmt: skip
@click.option(
    "--out", "out_dir", type=click.Path(file_okay=False), help="Output directory (default results/<UTC time>-sweep/)."
)
@view_options
@server_metrics_options
@export_option
@click.option(
    "--resume", "resume", type=click.Path(file_okay=False, exists=True), is_eager=True, callback=load_resume,
    help="Go on with the interrupted sweep in this directory: its options (config.used.toml), its finished "
    "probes read, not run again, the rest run and written there.",
)  # fmt: skip
def sweep_cmd(**kw: Any) -> SweepOutcome | ScaledOutcome:
    """Find the highest offered load that still meets the SLO."""
    from loadgen.cli.scale import scaled_sweep, sizes_of
    from loadgen.report.console import output_console

    sizes = sizes_of(kw)  # a brace list in --serve-args / --sim-args: one sweep per size (loadgen.cli.scale)
    if sizes and kw.get("resume"):
        raise click.UsageError("--resume goes on with one sweep: give the directory of one size's sweep")
    with TailSignals() as tail:
        console, err = output_console(), Console(stderr=True, soft_wrap=True)
        if sizes:
            return scaled_sweep(
                kw, sizes, lambda one: _sweep(one, console, err, tail), lambda: tail.count > 0, console, err
            )
        return _sweep(kw, console, err, tail)


class TailSignals:
    """SIGINT/SIGTERM after the search, while its results are written (server stop, sweep.json,
    the report): the first is noted and the files are finished, then the command exits 130
    (:func:`loadgen.cli._mapped`); a second leaves at once. During the search the signals are
    :meth:`loadgen.sweep.Sweep.interrupt`'s (drain, then cancel); without this, a signal in
    the seconds after it killed the process (SIGTERM) or raised (SIGINT) before sweep.json."""

    def __init__(self) -> None:
        self.count = 0
        self._old: dict[int, Any] = {}

    def install(self) -> None:
        import signal

        for sig in (signal.SIGINT, signal.SIGTERM):
            self._old.setdefault(sig, signal.getsignal(sig))
            signal.signal(sig, self._on_signal)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.count += 1
        if self.count > 1:
            raise KeyboardInterrupt
        os.write(2, b"interrupted: writing what the sweep measured first (interrupt again to leave now)\n")

    def __enter__(self) -> TailSignals:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        import signal

        for sig, handler in self._old.items():
            signal.signal(sig, handler)
        self._old.clear()
        if self.count and exc_type is None:
            raise KeyboardInterrupt  # everything is written: exit 130 as for any interrupt


def _sweep(kw: dict[str, Any], console: Console, err: Console, tail: TailSignals | None = None) -> SweepOutcome:
    """The sweep, written and shown (its answer goes to :func:`loadgen.cli.sweep_exit_code`)."""
    import signal

    from loadgen.engine.recordlog import write_json
    from loadgen.report.sweep_report import render_sweep, write_report
    from loadgen.sweep import Sweep

    # the options typed once (issue 29: frozen groups built from click's values, --config merged into them)
    lopts, oopts, view = LoadOptions.from_kw(kw), OutputOptions.from_kw(kw), ViewOptions.from_kw(kw)
    sw = SweepOptions.from_kw(kw)
    replay = _replay(sw.resume, kw)  # --resume DIR: read before this sweep writes its progress there again
    scfg = build_sweep_config(sw, lopts)
    # issue 17: the session-capacity search (loadgen.sweep.session_search); the probes' prices
    base = base_load_config(lopts, oopts, kw, sessions=session_source(SessionOptions.from_kw(kw)), prices=scfg.prices)
    # the target's, after base_load_config took the API from an --endpoint pasted with its path
    eopts, sopts = EndpointOptions.from_kw(kw), ServerOptions.from_kw(kw)
    if base.sessions is not None:  # issue 32: the whole source checked, its capped waits said, before any probe
        from rich.markup import escape

        from loadgen.sessions.planning import check_sessions

        for line in check_sessions(base.sessions, seed=base.seed):
            err.print(f"[yellow]warning:[/] {escape(line)}")
    cpus = cpus_option(lopts.cpus)
    out_dir = Path(oopts.out_dir) if oopts.out_dir else default_out_dir("sweep")
    try:  # (a default one is new) Target removes one this command made when it fails before any result
        existed = out_dir.exists() if oopts.out_dir else False
    except OSError:  # a name too long, a directory not traversable: make_out_dir says so in one line
        existed = True
    make_out_dir(out_dir)
    cert = client_selftest(out_dir, err) if sw.selftest else None
    redactor = Redactor(url_secrets(kw))  # the credentials of every URL option (loadgen.cli.url_options)
    with (
        ClusterOption(lopts.cluster, err) as cluster,
        Target(eopts, sopts, kw, out_dir, err, out_existed=existed) as target,
    ):
        pin_client(cpus)  # after the target started: an embedded or launched server keeps every CPU
        if cluster is not None and lopts.workers == "auto":
            scfg.workers = cluster.auto_workers()
        if not target.embedded:
            confirm_remote(eopts.yes, target.url, target.embedded, sweep_estimate(lopts, scfg), err)
        endpoint = endpoints_from_options(eopts, target, redactor, sweep_estimate(lopts, scfg), err)
        use_uvloop()
        live = LiveView(  # loadgen.cli.live: off the send path
            err, enabled=live_enabled(view, err), sweep_dir=out_dir, targets=scfg.slos, origin=base.latency_origin
        )

        async def go() -> SweepOutcome:
            loop = asyncio.get_running_loop()
            observer = with_dcgm(
                view, target.observer() or server_observer(view, target.url, target.model)
            )  # --serve, or --server-metrics URL
            sweep = None

            def progress(msg: str) -> None:
                if sweep is not None:  # a finished probe is in sweep.probes before its line: the view's row
                    live.probes_done(sweep.probes)
                if not view.quiet:
                    live.print(redactor(msg))

            try:
                await endpoint.open()
                # the pre-flight passed: the options now, not only at the end, so a killed sweep can be resumed
                # (--resume); a sweep stopped before any load still writes nothing
                write_used_config(kw, out_dir)
                sweep = Sweep(
                    endpoint,
                    base,
                    scfg,
                    out_dir,
                    config_record=config_record(kw, eopts, target.url, target.embedded),
                    redactor=redactor,
                    progress=progress,
                    server_observer=observer,
                    cluster=cluster,
                    replay=replay,
                )
                for sig in (signal.SIGINT, signal.SIGTERM):
                    loop.add_signal_handler(sig, sweep.interrupt)
                if scfg.concurrency_levels:
                    out = await sweep.concurrency_sweep()
                else:
                    out = await sweep.search()
                from loadgen.core.conditions import client_conditions

                cond = client_conditions()
                cond["endpoint"] = endpoint.describe()
                if observer is not None:
                    cond["server"] = await observer.conditions()
                if cluster is not None:
                    cond["workers"] = scfg.workers
                    cond["cluster"] = cluster.last_conditions  # the last probe's; each probe's result.json has its own
                out.result["conditions"] = cond
                out.result["config"] = config_record(kw, eopts, target.url, target.embedded)
                if replay is not None:  # where the resumed sweep's probes came from (loadgen.sweep.resume)
                    out.result["resumed"] = replay.describe()
                return out
            finally:
                for sig in (signal.SIGINT, signal.SIGTERM):
                    loop.remove_signal_handler(sig)
                if tail is not None:
                    tail.install()  # from here to the written files, a signal loses nothing
                await endpoint.close()
                if observer is not None:
                    await observer.close()

        with live:
            out = asyncio.run(go())
    from loadgen.engine.why import sweep_why  # each probe's SLO misses by cause

    sweep_why(out.result, out_dir, scfg.slos, base.latency_origin)
    if base.sessions is not None:
        from loadgen.sweep.session_search import sessions_block

        out.result["sessions"] = sessions_block(out.result, base)
    if cert is not None:
        out.result["client_selftest"] = selftest_block(cert, out.result)
    out.result = redactor.scrub(out.result)  # server-supplied text, by value
    write_json(out_dir / "sweep.json", out.result)
    write_report(out.result, out_dir)
    render_sweep(out.result, console, str(out_dir))
    if out.result.get("sessions"):
        from loadgen.report.session_summary import render_session_sweep

        render_session_sweep(out.result, console)
    from loadgen.report.why import render_sweep_why

    render_sweep_why(out.result, console)
    write_exports(oopts.exports, out_dir, lambda line: console.print(line, markup=False))
    return out


def _replay(resume: str | None, kw: dict[str, Any]) -> Replay | None:
    """``--resume DIR``: what the interrupted sweep there finished, after the options ``kw`` (click's values)
    are checked against the recorded ones (a resumed sweep keeps its configuration; a clash is one usage line)."""
    if not resume:
        return None
    from loadgen.sweep.resume import Replay

    if kw.get("config_file"):
        raise click.UsageError("--resume reads the interrupted sweep's own config.used.toml: give no --config")
    clash = resume_clashes(click.get_current_context(), kw)
    if clash:
        raise click.UsageError(
            f"--resume {resume}: a resumed sweep keeps the options it was started with; these differ: "
            + "; ".join(clash)
        )
    return Replay(Path(resume))


def client_selftest(out_dir: Path, err: Console) -> dict[str, Any]:
    """``--selftest``: this machine's certificate (:mod:`loadgen.sim.selftest`) before any load, its
    figures printed in one line; its levels' files under ``out_dir/selftest``."""
    import json

    from loadgen.cli.selftest import selftest_figures
    from loadgen.sim.selftest import run_selftest

    err.print("selftest: certifying this machine's client first (about a minute)")
    try:
        cert = run_selftest(out_dir / "selftest" / "levels")
    except RuntimeError as exc:
        raise click.ClickException(f"--selftest: {exc}") from None
    (out_dir / "selftest" / "selftest.json").write_text(json.dumps(cert, indent=2) + "\n", encoding="utf-8")
    err.print(selftest_figures(cert), markup=False)
    return cert


def selftest_block(cert: dict[str, Any], result: dict[str, Any]) -> dict[str, Any]:
    """``sweep.json``'s ``client_selftest``: the certificate's two answers, and whether the sweep's
    answer lies above the highest open-loop rate this machine's client measured honestly there."""
    o, c = cert.get("highest_honest_open"), cert.get("highest_honest_closed")
    rate = (result.get("answer") or {}).get("max_rate_rps")
    above = None
    if rate is not None:
        above = o is None or rate > o["level"]
    return {
        "file": "selftest/selftest.json",
        "highest_honest_open_rps": o["level"] if o else None,
        "highest_honest_closed_users": c["level"] if c else None,
        "tps_per_client_core": c["tps_per_core"] if c else None,
        "answer_above_certified_rate": above,
        "took_s": cert.get("took_s"),
    }
