"""Help a person can read: a help line for every flag, ``-h`` everywhere, sections, one spelling per idea."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from loadgen.cli import main
from loadgen.cli.helpfmt import section_of
from loadgen.workload.traces import BUILTIN_TRACES


def _commands(cmd: click.Command, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], click.Command]]:
    yield path, cmd
    if isinstance(cmd, click.Group):
        for name, sub in cmd.commands.items():
            yield from _commands(sub, (*path, name))


ALL = list(_commands(main))


def test_every_flag_of_every_command_has_a_help_line() -> None:
    missing = [
        f"loadgen {' '.join(path)} {p.opts[0]}"
        for path, cmd in ALL
        for p in cmd.params
        if isinstance(p, click.Option) and not p.hidden and not (p.help or "").strip()
    ]
    assert not missing, missing


# `loadgen locust` passes unknown options through to Locust and keeps -h for it (loadgen/cli/locust.py,
# another room's: its context_settings would need "-h" in help_option_names)
@pytest.mark.parametrize("path", [p for p, _ in ALL if p != ("locust",)], ids=lambda p: " ".join(p) or "loadgen")
def test_dash_h_everywhere(path: tuple[str, ...]) -> None:
    r = CliRunner().invoke(main, [*path, "-h"])
    assert r.exit_code == 0 and "Usage:" in r.output and "Show this message and exit" in r.output, r.output


@pytest.mark.parametrize("name", ["run", "sweep"])
def test_run_and_sweep_options_are_in_named_sections(name: str) -> None:
    cmd = main.commands[name]
    others = [p.name for p in cmd.params if not getattr(p, "hidden", False) and section_of(p.name) == "Other"]
    assert not others, f"add these to loadgen/cli/helpfmt.py SECTIONS: {others}"
    out = CliRunner().invoke(main, [name, "-h"], terminal_width=120).output
    heads = [ln.rstrip(":") for ln in out.splitlines() if ln.endswith(":") and not ln.startswith(" ")]
    assert heads[:4] == ["Load", "Workload", "Endpoint", "Server launch"] and "SLO and validity" in heads
    assert heads[-1] == "Output" and "Other" not in heads and "Options" not in heads
    for trace in BUILTIN_TRACES:
        assert f"builtin:{trace}" in "".join(out.split())


def test_one_spelling_shown_old_spelling_still_works(tmp_path: Path) -> None:
    """--trace-time-scale is shown, --time-scale (the old spelling) is hidden but gives the same
    schedule; the peers' --request-rate / --num-prompts are the same as --rate / --requests."""
    out = CliRunner().invoke(main, ["run", "-h"], terminal_width=120).output
    assert "--trace-time-scale" in out and "--time-scale" not in out.replace("--trace-time-scale", "")
    assert "--rate, --request-rate" in out and "--requests, --num-prompts" in out
    assert "--serve-timeout" in out and "--ready-timeout" not in out
    trace = ["--dry-run", "--trace", "builtin:azure-code-2023", "--requests", "5", "--salt", "s"]
    a = CliRunner().invoke(main, ["run", *trace, "--time-scale", "10", "--out", str(tmp_path / "a")])
    b = CliRunner().invoke(main, ["run", *trace, "--trace-time-scale", "10", "--out", str(tmp_path / "b")])
    c = CliRunner().invoke(main, ["run", *trace, "--trace-time-scale", "2", "--out", str(tmp_path / "c")])
    assert a.exit_code == b.exit_code == c.exit_code == 0, a.output + b.output + c.output
    sched = [(tmp_path / d / "schedule.jsonl").read_text() for d in "abc"]
    assert sched[0] == sched[1] != sched[2]
    peers = ["run", "--dry-run", "--salt", "s", "--seed", "3"]
    a = CliRunner().invoke(main, [*peers, "--request-rate", "5", "--num-prompts", "7", "--out", str(tmp_path / "d")])
    b = CliRunner().invoke(main, [*peers, "--rate", "5", "--requests", "7", "--out", str(tmp_path / "e")])
    assert a.exit_code == b.exit_code == 0, a.output + b.output
    assert (tmp_path / "d" / "schedule.jsonl").read_text() == (tmp_path / "e" / "schedule.jsonl").read_text()
    serve = CliRunner().invoke(main, ["serve", "vllm", "-h"], terminal_width=120).output
    assert "--serve-timeout" in serve and "--ready-timeout" not in serve


def test_check_timeout_takes_units() -> None:
    r = CliRunner().invoke(main, ["check", "--endpoint", "http://127.0.0.1:9", "--timeout", "0s"])
    assert r.exit_code == 2 and "--timeout must be > 0" in r.output, r.output
    r = CliRunner().invoke(main, ["check", "--endpoint", "http://127.0.0.1:9", "--timeout", "2 parsecs"])
    assert r.exit_code == 2 and "unit must be one of" in r.output, r.output
