"""The checks a session file passes before any load, and the cap on the waits a run holds (issue 32).

Every session source is read and checked whole before the first request: a run, a sweep and a
Locust test refuse a bad file at once, with one line naming the file, the 1-based line and the
field (:class:`~loadgen.core.errors.InputFileError`, a usage error at the command line: exit 2), and
never fail on it after load started. The rules:

* **Numbers.** A time (``delay_s``, ``start_s``, ``think_time``) that is not a number, is NaN or
  infinite, or is negative is refused; so is a token count that is not an integer, or over
  :data:`~loadgen.workload.lengths.MAX_LENGTH_TOKENS` (10 M, as a length spec's bound).
* **Stated delays are bounded.** A delay a file states (loadgen ``delay_s``, kv-cache-tester
  ``think_time``, the synthetic ``delay``) over :data:`MAX_DELAY_S` (one day) is refused: a value
  like ``1e308`` or milliseconds written as seconds is a broken file, not a think time. The source
  key ``max_delay=DURATION`` moves the bound (to at most :data:`LONGEST_OPTION_S`). A ``start_s``
  is an offset, not a delay: at most :data:`MAX_START_S`.
* **No time key is dropped.** A loadgen turn's wait is ``delay_s``, seconds from the end of the
  previous reply (turns are causal). A ``timestamp`` (a send time, e.g. seconds since the session
  started, as traces record it) has no place in that rule: taken as a delay it would count the
  previous reply's time twice, so a turn or session that carries one, or another time key that
  would be ignored (:data:`TURN_TIME_KEYS`, :data:`SESSION_TIME_KEYS`), is refused, naming it.
  (TraceLab rounds keep their ISO ``timing_events[].timestamp``: that format's delay is derived
  from them, :mod:`loadgen.workload.session_sources`.)
* **No duplicate index.** A repeated session id or TraceLab ``round_index`` (within a session) is
  refused, naming the line where it first appeared.
* **Nesting depth is bounded.** A line nested deeper than the JSON parser's recursion limit
  (about 1,000 levels; the session formats need 4) is refused as a bad row instead of raising
  ``RecursionError``.

**Waits are capped, with a warning.** No wait of a run is longer than the idle cap, :data:`IDLE_CAP_S`
(one hour; the longest think time in the shared kv-cache-tester excerpt is 57 minutes, so it replays
unchanged): a delay between turns (after ``time_scale``, including a gap derived from TraceLab
timestamps) and, where the source's own session starts are used, a gap between session starts (the
first start's offset too) is shortened to the cap, and the run says so in one warning line per kind
(the count and the longest gap) before it starts; the lines are kept in ``result.json``
(``config.workload.warnings``). The source key ``idle_cap=DURATION`` moves the cap (at most
:data:`LONGEST_OPTION_S`; ``idle_cap=0s``: no wait at all).
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from typing import Any

from loadgen.core.errors import ConfigError, InputFileError
from loadgen.core.units import parse_duration_s
from loadgen.workload.lengths import MAX_LENGTH_TOKENS
from loadgen.workload.session_model import Session

__all__ = [
    "IDLE_CAP_S",
    "LONGEST_OPTION_S",
    "MAX_DELAY_S",
    "MAX_START_S",
    "SESSION_TIME_KEYS",
    "TURN_TIME_KEYS",
    "cap_waits",
    "check_int",
    "check_secs",
    "idle_cap_s",
    "json_row",
    "max_delay_s",
    "refuse_time_keys",
    "span",
]

MAX_DELAY_S = 86_400.0
"""The longest delay a session file may state (one day); ``max_delay=DURATION`` moves it."""
IDLE_CAP_S = 3_600.0
"""The longest wait a session run holds (one hour): longer gaps are shortened to it, with a warning."""
LONGEST_OPTION_S = 365 * 86_400.0
"""The most ``max_delay`` and ``idle_cap`` may be set to (365 days)."""
MAX_START_S = 1e10
"""The largest ``start_s`` (about 317 years: past any recording; it keeps start times exact in ns)."""
TURN_TIME_KEYS = ("timestamp", "t", "time", "delay", "delay_ms", "think_time", "start_s")
"""Keys of a loadgen turn refused because they would hold a time that is not used (a turn's wait is ``delay_s``)."""
SESSION_TIME_KEYS = ("timestamp", "start", "start_time", "delay_s")
"""Keys of a loadgen session refused for the same reason (a session's own start is ``start_s``)."""


def _option_s(opts: dict[str, str], key: str, default: float, minimum: float) -> float:
    if key not in opts:
        return default
    v = parse_duration_s(opts[key], f"--sessions {key}") or 0.0
    if not minimum <= v <= LONGEST_OPTION_S:
        raise ConfigError(f"--sessions {key}={opts[key]}: must be from {span(minimum)} to {span(LONGEST_OPTION_S)}")
    return v


def max_delay_s(opts: dict[str, str]) -> float:
    """The source's bound on a stated delay (s): ``max_delay`` or :data:`MAX_DELAY_S`. Raises ConfigError."""
    return _option_s(opts, "max_delay", MAX_DELAY_S, 1e-3)


def idle_cap_s(opts: dict[str, str]) -> float:
    """The source's cap on a run's waits (s): ``idle_cap`` or :data:`IDLE_CAP_S`. Raises ConfigError."""
    return _option_s(opts, "idle_cap", IDLE_CAP_S, 0.0)


def json_row(raw: bytes, path: str, line: int) -> Any:
    """One JSON line of a session file; InputFileError (field ``row``) when it is not JSON or nested too deeply."""
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:  # ValueError: JSONDecodeError, an integer of over 4,300 digits
        raise InputFileError(path, line, "row", f"not valid JSON: {exc}") from None
    except RecursionError:
        limit = sys.getrecursionlimit()
        raise InputFileError(
            path, line, "row", f"nested too deeply (over the JSON parser's ~{limit:,} levels)"
        ) from None


def check_int(v: object, path: str, line: int, fld: str, minimum: int, maximum: int = MAX_LENGTH_TOKENS) -> int:
    """An integer count from minimum to maximum (an integral float is taken); else InputFileError."""
    if v is None:
        raise InputFileError(path, line, fld, "missing value")
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (isinstance(v, float) and not v.is_integer()):
        raise InputFileError(path, line, fld, f"not an integer: {v!r}")
    if v < minimum:
        raise InputFileError(path, line, fld, f"must be >= {minimum}, got {v}")
    if v > maximum:
        raise InputFileError(path, line, fld, f"{_num(v)} is over the limit of {maximum:,}")
    return int(v)


def check_secs(v: object, path: str, line: int, fld: str, maximum: float, key: str = "max_delay") -> float:
    """A time in seconds (None: 0): a finite number from 0 to ``maximum``; else InputFileError.

    ``key``: the source key that moves ``maximum`` (named in the message; empty: none)."""
    if v is None:
        return 0.0
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v:
        raise InputFileError(path, line, fld, f"not a number: {v!r}")
    if v < 0:
        raise InputFileError(path, line, fld, f"negative delay {v}")
    if v > maximum:  # infinity and integers past a float's range included
        how = f" (--sessions FILE,{key}=DURATION moves it)" if key else ""
        raise InputFileError(path, line, fld, f"{_num(v)} s is over the maximum of {span(maximum)}{how}")
    return float(v)


def refuse_time_keys(obj: dict[str, Any], path: str, line: int, turn: str | None = None) -> None:
    """InputFileError for the first time key of a loadgen session (``turn``: None) or of its turn ``turn``
    (e.g. ``'turns[2]'``) that would be ignored (module doc: no time key is dropped)."""
    for k in SESSION_TIME_KEYS if turn is None else TURN_TIME_KEYS:
        if k in obj:
            what = (
                "a session's own start is start_s (s from the first session)" if turn is None else "a turn's wait "
                "is delay_s, s from the end of the previous reply (turns are causal: a send time would count that "
                "reply twice)"
            )  # fmt: skip
            raise InputFileError(path, line, k if turn is None else f"{turn}.{k}", f"not a loadgen key: {what}")


def _num(v: float) -> str:
    try:
        return f"{float(v):.4g}"
    except OverflowError:
        return "a number past 1e308"


def span(s: float) -> str:
    """A duration in words: ``3600.0`` -> ``'1 h'``, ``86400.0`` -> ``'1 day'``."""
    for unit, size in (("years", 365 * 86_400.0), ("days", 86_400.0), ("h", 3_600.0), ("min", 60.0)):
        if s >= 2 * size or (s >= size and (s / size).is_integer()):
            n = s / size
            text = f"{n:.3g}" if n >= 1e6 else f"{n:.0f}" if n.is_integer() else f"{n:.1f}"
            return f"{text} {unit[:-1] if unit in ('years', 'days') and text == '1' else unit}"
    return f"{s:g} s"


def cap_waits(
    sessions: list[Session], cap_s: float, where: str, *, own_starts: bool, counted: bool = True
) -> tuple[list[Session], list[str]]:
    """``sessions`` with every delay between turns, and (``own_starts``) every gap between session starts
    in start order (the first start's offset too), at most ``cap_s``; and the warning lines (one per kind
    of gap capped: how many, the longest and where; ``counted=False``: none, the caller said it). ``where``
    names the source in the lines."""
    out: list[Session] = []
    turn_n, turn_max, turn_at = 0, 0.0, ""
    for s in sessions:
        if any(t.delay_s > cap_s for t in s.turns[1:]):
            turns = list(s.turns)
            for k in range(1, len(turns)):
                d = turns[k].delay_s
                if d > cap_s:
                    turn_n += 1
                    if d > turn_max:
                        turn_max, turn_at = d, f"session {s.session_id!r} turn {k}"
                    turns[k] = replace(turns[k], delay_s=cap_s)
            s = replace(s, turns=tuple(turns))
        out.append(s)
    lines = []
    how = "(--sessions FILE,idle_cap=DURATION moves the cap)"
    if turn_n and counted:
        lines.append(
            f"{where}: {turn_n} delay(s) between turns longer than the idle cap of {span(cap_s)} shortened to it "
            f"(the longest {span(turn_max)}, {turn_at}) {how}"
        )
    if own_starts and all(s.start_s is not None for s in out):
        order = sorted(range(len(out)), key=lambda i: out[i].start_s or 0.0)
        raw_prev = new_prev = 0.0
        gap_n, gap_max, gap_at = 0, 0.0, ""
        for i in order:
            raw = out[i].start_s or 0.0
            gap = raw - raw_prev
            if gap > cap_s:
                gap_n += 1
                if gap > gap_max:
                    gap_max, gap_at = gap, f"before session {out[i].session_id!r}"
                gap = cap_s
            raw_prev, new_prev = raw, new_prev + gap
            out[i] = replace(out[i], start_s=new_prev)
        if gap_n and counted:
            lines.append(
                f"{where}: {gap_n} gap(s) between session starts longer than the idle cap of {span(cap_s)} shortened "
                f"to it (the longest {span(gap_max)}, {gap_at}) {how}"
            )
    return out, lines
