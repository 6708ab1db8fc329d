"""``loadgen compare``: a scorecard of several sweeps or runs (:mod:`loadgen.report.compare`)."""

from __future__ import annotations

from pathlib import Path

import click

from loadgen.cli.options import make_out_dir
from loadgen.engine.recordlog import default_out_dir

__all__ = ["compare_cmd"]


@click.command("compare")
@click.argument("results", nargs=-1, required=True)
@click.option("--label", "labels", multiple=True, help="Column label for each result, in order.")
@click.option("--force", is_flag=True, help="Rank even when the conditions differ (the scorecard says so).")
@click.option("--check", "checks", multiple=True,
              help="check.json for each result, in order ('-' for none); default: a check.json next to the result.")  # fmt: skip
@click.option(
    "--out", "out_dir", type=click.Path(file_okay=False), help="Output directory (default results/<UTC time>-compare/)."
)
def compare_cmd(
    results: tuple[str, ...], labels: tuple[str, ...], force: bool, checks: tuple[str, ...], out_dir: str | None
) -> None:
    """Scorecard of several sweeps or runs, ranked only where the comparison is fair."""
    from loadgen.report.compare import fmt_cell, load_system, scorecard, write_outputs

    if labels and len(labels) != len(results):
        raise click.UsageError(f"--label given {len(labels)} times for {len(results)} results")
    if checks and len(checks) != len(results):
        raise click.UsageError(f"--check given {len(checks)} times for {len(results)} results")
    # a LoadgenError of a result file is a usage error (loadgen.cli maps it)
    systems = [load_system(r, labels[i] if labels else None, checks[i] if checks and checks[i] != "-" else None)
               for i, r in enumerate(results)]  # fmt: skip
    card = scorecard(systems, force=force)
    out = Path(out_dir) if out_dir else default_out_dir("compare")
    make_out_dir(out)  # one usage line for an --out that cannot be made or written
    write_outputs(card, systems, out)
    from rich.table import Table

    from loadgen.report.console import output_console

    console = output_console()  # to a pipe or a file: whole numbers, never "…"

    t = Table(title="scorecard")
    t.add_column("metric")
    for s in systems:
        t.add_column(s.label, justify="right")
    for r in card["description_rows"]:
        t.add_row(r["label"], *[str(r["values"][s.label]) for s in systems])
    t.add_section()
    for r in card["rows"]:
        t.add_row(
            r["label"],
            *[("* " if r["best"] == s.label else "") + fmt_cell(r["values"][s.label], r["key"]) for s in systems],
        )
    console.print(t)
    if not card["comparable"]:
        console.print("[yellow]not comparable:[/] " + "; ".join(card["reasons"]))
        console.print(f"ranking {card['ranking']}")
    for w in card["warnings"]:
        console.print(f"[yellow]drift:[/] {w}")
    console.print(f"scorecard.json, scorecard.csv, scorecard.html in {out}")
