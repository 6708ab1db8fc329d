"""``--sessions`` from the command line: the source parsed, and what it clashes with (run, sweep, locust).

One place for the session options' rules (issue 32): ``--session-header`` needs ``--sessions`` and no
``--header`` of its name; a request trace's options (``--trace-spread``, ``--trace-start``, ...) are an
error with ``--sessions``, never ignored; ``--trace-time-scale N`` is the session file's ``speedup=N``
(N times faster, one meaning for request traces and sessions).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from loadgen.cli.options import parse_headers

if TYPE_CHECKING:
    from loadgen.workload.session_sources import SessionSource

__all__ = ["session_source"]


def session_source(kw: dict[str, Any]) -> SessionSource | None:
    """``--sessions`` parsed (a :class:`~loadgen.workload.session_sources.SessionSource`), or None without
    it; usage errors for what it clashes with (``run`` and ``sweep`` alike, issue 17)."""
    if not kw.get("sessions"):
        if kw.get("session_header"):
            raise click.UsageError("--session-header goes with --sessions (it carries each turn's session id)")
        return None
    from loadgen.workload.session_sources import parse_session_source

    if kw.get("cluster"):
        raise click.UsageError("--sessions runs on this host (not yet with --cluster)")
    if kw.get("trace") or kw.get("dataset"):
        raise click.UsageError("--sessions clashes with --trace and --dataset: give the session file to --sessions")
    _session_header_clash(kw)
    ctx = click.get_current_context()
    given = [o for o in _TRACE_ONLY if o in kw and ctx.get_parameter_source(o) != click.core.ParameterSource.DEFAULT]
    if given:  # an option that does not apply to sessions is an error, never ignored (issue 32)
        raise click.UsageError(f"--{given[0].replace('_', '-')} is a request trace's option: it does not apply to "
                               "--sessions (their files take speedup=, max_turns=, ... after the path)")  # fmt: skip
    src = parse_session_source(kw["sessions"])  # a ConfigError naming the bad part
    if kw.get("time_scale") is not None:  # --trace-time-scale N: the session file's speedup (N times faster)
        if src.synthetic or {"speedup", "time_scale"} & set(src.options):
            raise click.UsageError("--trace-time-scale with --sessions sets a session file's speedup: give one of "
                                   "them (a synthetic source's delay= is its own time)")  # fmt: skip
        src = type(src)(src.source, {**src.options, "speedup": repr(kw["time_scale"])})
    return src


_TRACE_ONLY = ("trace_spread", "trace_start", "trace_duration", "trace_loop", "trace_keep_zero_output", "trace_format")


def _session_header_clash(kw: dict[str, Any]) -> None:
    name = kw.get("session_header")
    if not name:
        return
    given = {n.lower() for n in parse_headers(kw.get("headers") or ())}
    given |= {h.partition("=")[0].strip().lower() for h in kw.get("header_envs") or ()}
    if name.lower() in given:
        raise click.UsageError(f"--session-header {name} clashes with a --header of that name: each turn's "
                               "session id would replace its value; give one")  # fmt: skip
