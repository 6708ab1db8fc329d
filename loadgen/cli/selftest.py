"""``loadgen selftest``: this machine's certificate (:mod:`loadgen.sim.selftest`), printed and written."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich import box
from rich.console import Console
from rich.table import Table

from loadgen.cli.options import make_out_dir, positive_duration_s
from loadgen.engine.recordlog import default_out_dir

if TYPE_CHECKING:
    from loadgen.sim.selftest import Level

__all__ = ["print_certificate", "selftest_cmd", "selftest_exit_code", "selftest_figures"]


def _ints(text: str, what: str) -> tuple[int, ...]:
    try:
        vals = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise click.UsageError(f"{what}: whole numbers separated by commas, got {text!r}") from None
    if any(v < 1 for v in vals):
        raise click.UsageError(f"{what}: every value must be >= 1")
    return vals


def _k(v: float) -> str:
    return f"{v / 1000:.1f}k" if v >= 1000 else f"{v:.0f}"


def _level_row(x: dict[str, Any]) -> list[str]:
    lag = x.get("schedule_lag_p99_ms")
    est = x.get("estimated_moves_ms")
    return [
        f"C={x['level']}" if x["kind"] == "closed" else f"{x['level']}/s",
        _k(x["output_tps"]),
        f"{x['client_cores']:.2f}",
        _k(x["tps_per_core"]),
        f"{x['ttft_p50_err_ms']:+.2f}",
        f"{x['ttft_p99_err_ms']:+.2f}",
        f"{x['itl_p99_err_ms']:+.2f}",
        "-" if not est else f"{max(abs(v) for v in est.values()):.2f}",
        "-" if lag is None else f"{lag:.2f}",
        "-" if x.get("rss_mib") is None else f"{x['rss_mib']:.0f}",
        "honest" if x["honest"] else ("VALID" if x["valid"] else "INVALID"),
    ]


COLUMNS = ("level", "tok/s", "cores", "per core", "TTFT50", "TTFT99", "ITL99", "est", "lag99", "MiB", "verdict")


def print_certificate(cert: dict[str, Any], console: Console) -> None:
    """The certificate as a table (errors in ms, reported - true; C=N closed-loop users, R/s open-loop
    req/s) and a line with the highest honest levels."""
    table = Table(title=f"loadgen {cert['loadgen_version']} selftest", box=box.SIMPLE_HEAD, pad_edge=False,
                  collapse_padding=True)  # fmt: skip
    for col in COLUMNS:
        table.add_column(col, justify="left" if col in ("level", "verdict") else "right", no_wrap=True)
    for x in cert["levels"]:
        table.add_row(*_level_row(x))
    console.print(table)
    console.print("TTFT50, TTFT99, ITL99: errors in ms (reported - true); est: the run's own estimate of its largest "
                  "error (ms); lag99: the p99 schedule lag (ms); per core: output tok/s per client core; MiB: the "
                  "client's peak RSS", markup=False)  # fmt: skip
    console.print(selftest_figures(cert), markup=False)


def selftest_figures(cert: dict[str, Any]) -> str:
    """The certificate's answer in words: the highest honest closed-loop level and open-loop rate."""
    lim = cert["honest_within_ms"]
    parts = []
    c, o = cert.get("highest_honest_closed"), cert.get("highest_honest_open")
    if c:
        parts.append(f"closed loop: honest up to {c['level']} users ({c['output_tps']:,.0f} output tok/s, "
                     f"{c['tps_per_core']:,.0f} per client core)")  # fmt: skip
    else:
        parts.append("closed loop: no honest level")
    if o:
        parts.append(
            f"open loop: honest up to {o['level']} req/s (p99 schedule lag {o['schedule_lag_p99_ms'] or 0:.2f} ms)"
        )
    else:
        parts.append("open loop: no honest rate")
    return (f"this machine's client: {'; '.join(parts)}; honest = VALID with TTFT p50, TTFT p99 and ITL p99 within "
            f"{lim:g} ms of the truth ({cert['took_s']:.0f} s)")  # fmt: skip


def selftest_exit_code(cert: dict[str, Any] | None, err: Console) -> int:
    """0 when some level was honest, 1 when none was."""
    if cert is None:
        return 130
    return 0 if cert.get("highest_honest_closed") or cert.get("highest_honest_open") else 1


@click.command("selftest")
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False),
    help="Output directory (default results/<UTC time>-selftest/).",
)
@click.option("--users", default=",".join(map(str, (8, 16, 32, 64, 128))), show_default=True,
              help="Closed-loop levels (users), lowest first.")  # fmt: skip
@click.option("--rates", default=",".join(map(str, (100, 200, 400, 800))), show_default=True,
              help="Open-loop rates (req/s, constant arrivals), lowest first.")  # fmt: skip
@click.option("--duration", default="4s", show_default=True, help="Measured time of each level (after 1 s of warm-up).")
@click.option("--no-pin", is_flag=True, help="Do not put the simulator and the client on CPUs of their own.")
def selftest_cmd(**kw: Any) -> dict[str, Any] | None:
    """This machine's certificate: how far its client measures honestly (about a minute).

    Each level runs `loadgen run` against a fresh simulated endpoint that logs the truth (when it
    wrote every token) and compares: TTFT p50, TTFT p99 and ITL p99 errors, output tok/s per client
    core, memory. Printed as a table and written as selftest.json. Exit 0 when some level was honest.
    """
    from loadgen.sim.selftest import run_selftest

    users = _ints(kw["users"], "--users")
    rates = _ints(kw["rates"], "--rates")
    dur = positive_duration_s(kw["duration"], "--duration", 4.0)
    out_dir = Path(kw["out_dir"]) if kw["out_dir"] else default_out_dir("selftest")
    make_out_dir(out_dir)
    console = Console(soft_wrap=True)
    console.print(f"selftest: {len(users)} closed-loop levels and {len(rates)} open-loop rates, {dur:g} s each; "
                  f"levels' files under {out_dir}")  # fmt: skip

    def shown(x: Level) -> None:
        from dataclasses import asdict

        row = _level_row(asdict(x))
        console.print("  " + "  ".join(f"{c} {v}" for c, v in zip(COLUMNS, row, strict=True)), markup=False)

    try:
        cert = run_selftest(out_dir / "levels", closed=users, rates=rates, duration_s=dur, pin=not kw["no_pin"],
                            on_level=shown)  # fmt: skip
    except KeyboardInterrupt:
        console.print("interrupted: no certificate")
        return None
    except RuntimeError as exc:
        raise click.ClickException(str(exc)) from None
    (out_dir / "selftest.json").write_text(json.dumps(cert, indent=2) + "\n", encoding="utf-8")
    print_certificate(cert, console)
    console.print(f"written: {out_dir / 'selftest.json'}")
    return cert
