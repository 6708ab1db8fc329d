"""Command line: parse -> config -> one library call -> render -> exit code.

The click group :func:`main` (the ``loadgen`` console script) and the only place that maps
errors and verdicts to exit codes:
0 done (and SLO met if given), 1 SLO missed or run INVALID, 2 usage error,
3 endpoint unreachable, 4 a launched server failed to start (--serve), 5 a sweep's answer
is only a lower bound (client limited), 6 every measured request of a run failed,
130 interrupted.

Each command (``run.py``, ``sweep.py``, ``compare.py``, ``check.py``, ``locust.py``,
``loadgen serve`` in :mod:`loadgen.serve.command`) returns what happened or raises;
:func:`_mapped` wraps its callback so that the outcome goes through its ``*_exit_code``
function here and a raised :class:`~loadgen.core.errors.LoadgenError` through :func:`_error_exit`.
"""

from __future__ import annotations

import errno
import functools
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click
from rich.console import Console

from loadgen.cli.check import check_command
from loadgen.cli.compare import compare_cmd, export_cmd
from loadgen.cli.helpfmt import SectionedCommand, fill_missing_help
from loadgen.cli.locust import LocustOutcome, locust_command
from loadgen.cli.plan import capacity_group, plan_cmd
from loadgen.cli.run import run_cmd
from loadgen.cli.selftest import selftest_cmd, selftest_exit_code
from loadgen.cli.sweep import sweep_cmd
from loadgen.core.errors import ConfigError, EndpointUnreachable, LoadgenError, OutputError
from loadgen.serve import ServerStartError
from loadgen.serve.command import ServeOutcome, report_start_error, serve_group
from loadgen.sim.command import sim_command
from loadgen.version import __version__
from loadgen.workload.command import trace_group

if TYPE_CHECKING:
    from loadgen.measurement import MeasuredRun
    from loadgen.sweep import SweepOutcome

__all__ = [
    "EXIT_ALL_FAILED",
    "EXIT_FAIL",
    "EXIT_INTERRUPTED",
    "EXIT_LOWER_BOUND",
    "EXIT_OK",
    "EXIT_OUTPUT",
    "EXIT_SERVER_START",
    "EXIT_UNREACHABLE",
    "EXIT_USAGE",
    "check_exit_code",
    "locust_exit_code",
    "main",
    "run_exit_code",
    "serve_exit_code",
    "sweep_exit_code",
]

EXIT_OK, EXIT_FAIL, EXIT_USAGE, EXIT_UNREACHABLE, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
EXIT_SERVER_START = 4  # --serve / loadgen serve: the server did not come up
EXIT_LOWER_BOUND = 5  # a sweep's answer is only a lower bound: the client was the limit
EXIT_ALL_FAILED = 6  # a run whose measured requests all failed: nothing was measured
EXIT_OUTPUT = 7  # results could not be written (a full disk): sending stopped, whole lines kept


class _Loadgen(click.Group):
    """The command group; a path the command cannot use, wherever it meets it (an input named on the command
    line, a file in a directory it names such as ``--tokenizer DIR``, ``--out``): a file the user may not
    read, a directory not traversable, a name too long, is one line naming it, never a traceback (issue 29:
    ``stat()`` and ``open()`` raise an ``OSError`` with the path; exit 2 as bad input)."""

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except OSError as exc:
            if exc.filename is None:  # not a path's error (a socket, a full disk: their own handling)
                raise
            paths = " -> ".join(str(p) for p in (exc.filename, exc.filename2) if p is not None)
            why = (exc.strerror or type(exc).__name__).lower() + (
                " (as this user)" if exc.errno == errno.EACCES else ""
            )
            raise _BadPath(f"{paths}: {why}") from None


class _BadPath(click.ClickException):
    exit_code = EXIT_USAGE


@click.group(cls=_Loadgen, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 120})
@click.version_option(__version__, prog_name="loadgen")
def main() -> None:
    """Realistic load on LLM inference endpoints, with numbers you can trust."""


# ---------------------------------------------------------------- verdicts -> exit codes


def run_exit_code(run: MeasuredRun | None, err: Console) -> int:
    """``loadgen run``: 130 interrupted, 6 every measured request failed, 1 INVALID, an SLO missed or over
    half the measured requests failed, else 0.

    ``None`` is a ``--dry-run`` (nothing sent): 0.
    """
    if run is None:
        return EXIT_OK
    result = run.result
    if result.interrupted:
        return EXIT_INTERRUPTED
    counts = result.counts
    if counts["requests"] and not counts["completed"]:
        kinds = ", ".join(f"{k} {v}" for k, v in counts["errors_by_kind"].items())
        err.print(f"[red]error:[/] all {counts['requests']} measured requests failed ({kinds}): nothing was measured")
        return EXIT_ALL_FAILED
    if not result.valid:
        return EXIT_FAIL
    if result.validity.get("server_failed"):  # over half failed: the server's errors (validity.MOSTLY_FAILED)
        return EXIT_FAIL
    slo = result.block("slo")
    if slo and not slo["met"]:
        return EXIT_FAIL
    return EXIT_OK


def sweep_exit_code(outcome: SweepOutcome, err: Console) -> int:
    """``loadgen sweep``, from the answer's facts: 130 interrupted, 5 client limited (a lower bound),
    1 no rate (or user count) met the SLO, else 0. One sweep per size (:mod:`loadgen.cli.scale`): the
    first of 130, 5, 1 that any size gives, else 0."""
    sizes = getattr(outcome, "sizes", None)
    if sizes is not None:
        codes = [sweep_exit_code(o, err) for o in sizes]
        return next((c for c in (EXIT_INTERRUPTED, EXIT_LOWER_BOUND, EXIT_FAIL) if c in codes), EXIT_OK)
    result = outcome.result
    answer = result["answer"]
    if result["interrupted"]:
        return EXIT_INTERRUPTED
    if answer["limited_by"] == "client":
        return EXIT_LOWER_BOUND
    if answer["max_rate_rps"] is None and answer["concurrency"] is None:
        return EXIT_FAIL
    return EXIT_OK


def check_exit_code(doc: dict[str, Any], err: Console) -> int:
    """``loadgen check``: 1 when a prompt failed, else 0."""
    return EXIT_FAIL if doc["summary"]["errors"] else EXIT_OK


def locust_exit_code(outcome: LocustOutcome, err: Console) -> int:
    """``loadgen locust`` as ``loadgen run``: 0 VALID, 1 INVALID (failed requests alone are data, not
    Locust's exit 1); Locust's own code when it wrote no result or crashed (not 0 or 1); a
    ``--worker`` exits with its Locust process."""
    code = outcome.locust_code
    if outcome.worker:
        return code
    if outcome.valid is None:
        return code or EXIT_FAIL
    if code not in (0, 1):
        return code
    return EXIT_OK if outcome.valid else EXIT_FAIL


def serve_exit_code(outcome: ServeOutcome, err: Console) -> int:
    """``loadgen serve``: 1 when the server died after it was ready, 0 when stopped on request."""
    return EXIT_FAIL if outcome.server_exit is not None else EXIT_OK


def _no_verdict(outcome: None, err: Console) -> int:
    return EXIT_OK


def plan_exit_code(doc: dict[str, Any], err: Console) -> int:
    """``loadgen plan``: with --validate, 1 when the replay did not hold the SLO, 5 when the client could not
    keep the replay's schedule (no claim either way), else 0."""
    v = (doc.get("plans") or [{}])[0].get("validation") or {}
    return {"not held": EXIT_FAIL, "invalid": EXIT_LOWER_BOUND}.get(v.get("verdict", ""), EXIT_OK)


def gate_exit_code(outcome: dict[str, Any], err: Console) -> int:
    """``loadgen capacity gate``: 1 only when the candidate regressed significantly, else 0."""
    return EXIT_FAIL if outcome["regressed"] else EXIT_OK


# ---------------------------------------------------------------- errors -> exit codes


def _error_exit(exc: LoadgenError, err: Console, *, input_errors_are_usage: bool) -> int:
    """A LoadgenError that ended a command: its exit code after a one-line message (usage errors raise).

    ``input_errors_are_usage``: for commands whose inputs are files named on the command line
    (``compare``, ``check``), any LoadgenError but an unreachable endpoint (3) is a usage error.
    """
    if isinstance(exc, ConfigError) or (input_errors_are_usage and not isinstance(exc, EndpointUnreachable)):
        raise click.UsageError(str(exc)) from None
    if isinstance(exc, ServerStartError):
        report_start_error(exc)
        return EXIT_SERVER_START
    err.print(f"[red]error:[/] {exc}")
    if isinstance(exc, OutputError):
        return EXIT_OUTPUT
    return EXIT_UNREACHABLE if isinstance(exc, EndpointUnreachable) else EXIT_FAIL


def _mapped(
    cmd: click.Command, verdict: Callable[[Any, Console], int], *, input_errors_are_usage: bool = False
) -> click.Command:
    """``cmd`` with its callback's outcome (or LoadgenError) turned into the process's exit code.

    The wrapped callback runs inside the command's context, so a usage error shows that
    command's usage line. Click's own exceptions (usage, abort) pass through unchanged.
    """
    body = cmd.callback
    assert body is not None

    @functools.wraps(body)
    def callback(*args: object, **kwargs: object) -> None:
        err = Console(stderr=True, soft_wrap=True)
        try:
            code = verdict(body(*args, **kwargs), err)
        except LoadgenError as exc:
            code = _error_exit(exc, err, input_errors_are_usage=input_errors_are_usage)
        except KeyboardInterrupt:  # Ctrl-C outside a run's own handling (pre-flight, discovery, launch)
            err.print("interrupted")
            code = EXIT_INTERRUPTED
        sys.exit(code)

    cmd.callback = callback
    return cmd


main.add_command(_mapped(run_cmd, run_exit_code))
main.add_command(_mapped(sweep_cmd, sweep_exit_code))
main.add_command(_mapped(compare_cmd, _no_verdict, input_errors_are_usage=True))
main.add_command(_mapped(export_cmd, _no_verdict, input_errors_are_usage=True))
main.add_command(_mapped(check_command, check_exit_code, input_errors_are_usage=True))
main.add_command(_mapped(locust_command, locust_exit_code))
for _serve_cmd in serve_group.commands.values():
    _mapped(_serve_cmd, serve_exit_code)
main.add_command(serve_group)
main.add_command(sim_command)
main.add_command(_mapped(selftest_cmd, selftest_exit_code))
main.add_command(trace_group)
main.add_command(_mapped(plan_cmd, plan_exit_code, input_errors_are_usage=True))
for _cap_name, _cap_cmd in capacity_group.commands.items():
    _mapped(_cap_cmd, gate_exit_code if _cap_name == "gate" else _no_verdict, input_errors_are_usage=True)
main.add_command(capacity_group)
# help a person can read (loadgen.cli.helpfmt): run and sweep print their options in sections
# (the class swap keeps sweep.py's decorators as they are), shared option names get one help text
for _cmd in (run_cmd, sweep_cmd):
    _cmd.__class__ = SectionedCommand
fill_missing_help(main)
