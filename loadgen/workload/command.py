"""The ``trace`` command group: ``loadgen trace inspect FILE``.

The main CLI mounts it with ``main.add_command(trace_group)``. A bad option or
file (:class:`loadgen.core.errors.ConfigError`, ``InputFileError``) becomes a click
usage error (exit 2), as ``loadgen run`` maps it.
"""

from __future__ import annotations

from typing import Any

import click
import orjson

from loadgen.core.errors import ConfigError, InputFileError
from loadgen.workload.replay import trace_stats
from loadgen.workload.trace_formats import FORMATS
from loadgen.workload.traces import read_trace

__all__ = ["format_stats", "trace_group"]


def _num(v: object, unit: str = "", digits: int = 3) -> str:
    if v is None:
        return "n/a"
    if isinstance(v, float):
        return f"{v:.{digits}f}{unit}"
    return f"{v}{unit}"


def _resolution(ns: int | None) -> str:
    if not ns:
        return "n/a"
    for unit, size in (("s", 10**9), ("ms", 10**6), ("us", 10**3)):
        if ns % size == 0:
            return f"{ns // size} {unit}"
    return f"{ns} ns"


def format_stats(st: dict[str, Any], notes: list[str]) -> str:
    """The human-readable report of :func:`loadgen.workload.replay.trace_stats`."""
    lines = [f"trace      {st['path']}", f"format     {st['format']}"]
    lines += [f"note       {n}" for n in notes]
    lines.append(f"rows       {st['rows']}  (skipped with 0 output tokens: {st['skipped_zero_output_rows']})")
    if "duration_s" in st:
        lines += [
            f"duration   {_num(st['duration_s'], ' s')}",
            f"mean rate  {_num(st['mean_rate_rps'], ' req/s')}",
            f"resolution {_resolution(st['timestamp_resolution_ns'])}"
            f"  (rows sharing the previous row's timestamp: {100 * st['same_instant_fraction']:.1f} %)",
            f"burstiness interarrival CV {_num(st['interarrival_cv'])}; "
            f"equivalent gamma shape 1/CV^2 = {_num(st['gamma_burstiness'])} (1.0 = Poisson)",
        ]
    elif not st.get("has_timestamps", True):
        lines.append("timestamps none (a data set: sent on an arrival process)")
    lines.append(f"{'tokens':<7}{'mean':>10}{'p50':>10}{'p90':>10}{'p99':>10}{'max':>10}")
    for key, label in (("input_tokens", "input"), ("output_tokens", "output")):
        d = st[key]
        lines.append(
            f"{label:<7}" + "".join(f"{_num(d[k], digits=1) if k == 'mean' else _num(d[k], digits=0):>10}"
                                    for k in ("mean", "p50", "p90", "p99", "max"))
        )  # fmt: skip
    pb = st.get("prefix_blocks")
    if pb:
        lines.append(
            f"prefix     {pb['blocks']} blocks of {pb['block_tokens']} tokens, {pb['unique_blocks']} unique "
            f"({100 * pb['reused_block_fraction']:.1f} % reused)"
        )
    return "\n".join(lines)


@click.group("trace")
def trace_group() -> None:
    """Inspect recorded request traces (Azure, BurstGPT, Mooncake, loadgen JSONL)."""


@trace_group.command("inspect")
@click.argument("file")
@click.option(
    "--trace-format",
    type=click.Choice(["auto", *FORMATS]),
    default="auto",
    show_default=True,
    help="Trace format; auto detects it from the header or the JSON keys.",
)
@click.option(
    "--start", "start_s", type=float, default=0.0, show_default=True, help="Window start, seconds from the first row."
)
@click.option("--duration", "duration_s", type=float, default=None, help="Window length in seconds.")
@click.option("--max-requests", type=click.IntRange(min=1), default=None, help="At most this many rows.")
@click.option("--keep-zero-output", is_flag=True, help="Keep rows with 0 output tokens (failures).")
@click.option("--json", "as_json", is_flag=True, help="Print the statistics as JSON.")
def inspect_cmd(file: str, trace_format: str, start_s: float, duration_s: float | None,
                max_requests: int | None, keep_zero_output: bool, as_json: bool) -> None:  # fmt: skip
    """Rows, duration, rate, timestamp resolution, burstiness and length distributions of FILE.

    FILE is a path or builtin:NAME (a shipped excerpt). A session file (``--sessions``: loadgen session
    JSONL, kv-cache-tester/AgentX, TraceLab) is described as sessions (:mod:`loadgen.workload.session_inspect`).
    """
    if trace_format == "auto" and _inspect_sessions(file, as_json):
        return
    try:
        tr = read_trace(file, trace_format, start_s=start_s, duration_s=duration_s,
                        max_requests=max_requests, keep_zero_output=keep_zero_output)  # fmt: skip
    except ConfigError as exc:  # InputFileError included: exit 2, as `run` maps it
        raise click.UsageError(str(exc)) from None
    st = trace_stats(tr)
    if as_json:
        st["notes"] = tr.notes
        click.echo(orjson.dumps(st, option=orjson.OPT_INDENT_2).decode())
    else:
        click.echo(format_stats(st, tr.notes))


def _inspect_sessions(file: str, as_json: bool) -> bool:
    """Describe FILE as sessions when it is a session file; False when it is not one."""
    from loadgen.workload.session_inspect import format_session_stats, session_stats
    from loadgen.workload.session_sources import detect_format, load_sessions, parse_session_source

    try:
        if file.startswith("builtin:") or detect_format(file) == "sharegpt":
            return False
        sessions, facts = load_sessions(parse_session_source(file))
    except InputFileError as exc:
        raise click.UsageError(str(exc)) from None
    except ConfigError:
        return False  # not a session file: read it as a trace
    st = session_stats(sessions, facts)
    click.echo(orjson.dumps(st, option=orjson.OPT_INDENT_2).decode() if as_json else format_session_stats(st, file))
    return True
