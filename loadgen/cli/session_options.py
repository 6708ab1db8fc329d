"""``--sessions`` from the command line: the source parsed, and what it clashes with (run, sweep, locust).

One place for the session options' rules (issue 32): ``--session-header`` needs ``--sessions`` and no
``--header`` of its name; a request trace's options (``--trace-spread``, ``--trace-start``, ...) are an
error with ``--sessions``, never ignored; ``--trace-time-scale N`` is the session file's ``speedup=N``
(N times faster, one meaning for request traces and sessions).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Self

import click

from loadgen.cli.load_options import picked
from loadgen.cli.options import parse_headers

if TYPE_CHECKING:
    from loadgen.workload.session_sources import SessionSource

__all__ = ["SessionOptions", "session_source"]

_TRACE_ONLY = ("trace_spread", "trace_start", "trace_duration", "trace_loop", "trace_keep_zero_output", "trace_format")


@dataclass(frozen=True, slots=True)
class SessionOptions:
    """The options ``--sessions`` is read with and checked against (``run``, ``sweep`` and ``locust`` alike),
    built once from click's values by :meth:`from_kw` (a command without an option gets its default)."""

    sessions: str | None = None
    session_header: str | None = None
    headers: tuple[str, ...] = field(default=(), repr=False)
    """``--header 'Name: value'`` as written (values may be secrets): only their names are read here."""
    header_envs: tuple[str, ...] = ()
    cluster: str | None = None
    trace: str | None = None
    dataset: str | None = None
    time_scale: float | None = None
    """``--trace-time-scale N``: with ``--sessions``, the session file's speedup."""
    trace_only_given: tuple[str, ...] = ()
    """A request trace's options given (command line or ``--config``), by name: an error with ``--sessions``."""

    @classmethod
    def from_kw(cls, kw: dict[str, Any]) -> Self:
        """The options of ``kw`` (click's values); which trace-only options were given, from the click context."""
        ctx = click.get_current_context(silent=True)
        given = tuple(
            o
            for o in _TRACE_ONLY
            if o in kw and ctx is not None and ctx.get_parameter_source(o) != click.core.ParameterSource.DEFAULT
        )
        return cls(**picked(cls, kw), trace_only_given=given)


def session_source(opts: SessionOptions) -> SessionSource | None:
    """``--sessions`` parsed (a :class:`~loadgen.workload.session_sources.SessionSource`), or None without
    it; usage errors for what it clashes with (``run`` and ``sweep`` alike, issue 17)."""
    if not opts.sessions:
        if opts.session_header:
            raise click.UsageError("--session-header goes with --sessions (it carries each turn's session id)")
        return None
    from loadgen.workload.session_sources import parse_session_source

    if opts.cluster:
        raise click.UsageError("--sessions runs on this host (not yet with --cluster)")
    if opts.trace or opts.dataset:
        raise click.UsageError("--sessions clashes with --trace and --dataset: give the session file to --sessions")
    _session_header_clash(opts)
    given = opts.trace_only_given
    if given:  # an option that does not apply to sessions is an error, never ignored (issue 32)
        raise click.UsageError(f"--{given[0].replace('_', '-')} is a request trace's option: it does not apply to "
                               "--sessions (their files take speedup=, max_turns=, ... after the path)")  # fmt: skip
    src = parse_session_source(opts.sessions)  # a ConfigError naming the bad part
    if opts.time_scale is not None:  # --trace-time-scale N: the session file's speedup (N times faster)
        if src.synthetic or {"speedup", "time_scale"} & set(src.options):
            raise click.UsageError("--trace-time-scale with --sessions sets a session file's speedup: give one of "
                                   "them (a synthetic source's delay= is its own time)")  # fmt: skip
        src = type(src)(src.source, {**src.options, "speedup": repr(opts.time_scale)})
    return src


def _session_header_clash(opts: SessionOptions) -> None:
    name = opts.session_header
    if not name:
        return
    given = {n.lower() for n in parse_headers(opts.headers or ())}
    given |= {h.partition("=")[0].strip().lower() for h in opts.header_envs or ()}
    if name.lower() in given:
        raise click.UsageError(f"--session-header {name} clashes with a --header of that name: each turn's "
                               "session id would replace its value; give one")  # fmt: skip
