"""``loadgen compare``: a scorecard of several sweeps or runs (:mod:`loadgen.report.compare`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import click

from loadgen.cli.options import make_out_dir
from loadgen.engine.recordlog import default_out_dir

__all__ = ["compare_cmd", "export_cmd", "export_option", "write_exports"]

EXPORT_FORMATS = ("llmd-br",)

export_option = click.option(
    "--export", "exports", multiple=True, type=click.Choice(EXPORT_FORMATS),
    help="Also write the results in this standard format (repeatable); llmd-br: the llm-d Benchmark Report v0.2.1, "
    "one per run or probe, beside its result.json (loadgen export writes it later).",
)  # fmt: skip


def write_exports(formats: tuple[str, ...] | list[str], out_dir: Path, say: Callable[[str], None]) -> None:
    """Write each ``--export`` format of the run or sweep in ``out_dir`` (after its result files)."""
    if "llmd-br" in formats:
        from loadgen.report.llmd import export_dir

        paths = export_dir(out_dir)
        say(f"llm-d Benchmark Report v0.2.1: {len(paths)} file(s), {paths[0].name} in {out_dir}" if paths else
            "llm-d Benchmark Report: no result.json to export")  # fmt: skip


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
    from loadgen.report.compare import fmt_cell, scorecard, write_outputs
    from loadgen.report.peers import load_any

    if labels and len(labels) != len(results):
        raise click.UsageError(f"--label given {len(labels)} times for {len(results)} results")
    if checks and len(checks) != len(results):
        raise click.UsageError(f"--check given {len(checks)} times for {len(results)} results")
    # a LoadgenError of a result file is a usage error (loadgen.cli maps it)
    # a peer's result file (vllm bench serve, GuideLLM, AIPerf: loadgen.report.peers) or loadgen's own
    systems = [s for i, r in enumerate(results)
               for s in load_any(r, labels[i] if labels else None, checks[i] if checks and checks[i] != "-" else None)]  # fmt: skip
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
        console.print(f"[yellow]note:[/] {w}")
    console.print(f"scorecard.json, scorecard.csv, scorecard.html in {out}")


@click.command("export")
@click.argument("results", nargs=-1, required=True)
@click.option(
    "--format", "fmt", type=click.Choice(["llmd-br"]), default="llmd-br", show_default=True,
    help="llmd-br: the llm-d Benchmark Report v0.2.1, one per run (a sweep: one per probe), beside its result.json.",
)  # fmt: skip
def export_cmd(results: tuple[str, ...], fmt: str) -> None:
    """Write a run's or a sweep's results in a standard report format (loadgen.report.llmd)."""
    from loadgen.report.llmd import export_dir

    for r in results:
        for path in export_dir(Path(r)):
            click.echo(f"wrote {path}")
