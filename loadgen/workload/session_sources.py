"""Where sessions come from: ``--sessions SOURCE[,key=value...]``, the readers of session files.

SOURCE is ``synthetic`` or a file; options follow after commas::

    --sessions synthetic,turns=10,input=64,output=32,delay=500ms,system=100
    --sessions traces/sessions.jsonl,time_scale=0.1,token_scale=0.01,max_turns=20,max_sessions=8

Synthetic options: ``turns`` (a length spec: ``10``, ``uniform:5,15``), ``input`` (new-message
tokens per turn, a length spec), ``output`` (reply tokens per turn, a length spec), ``delay``
(mean delay between a reply and the next turn, a duration), ``delay_dist`` (``constant`` |
``exp``), ``system`` (tokens of a system prompt shared by every session), ``tools`` (the share of
turns after the first that are tool results, 0..1: the reply before each should call a tool, and the
turn answers the call with a ``tool`` message, :class:`~loadgen.workload.session_model.SessionHistory`).
File options (every format): ``speedup`` (N: delays and trace start times divided by N, replayed N
times faster, as ``--trace-time-scale N``, which sets it), ``time_scale`` (deprecated: the multiplier,
1/N; at most 1e6), ``token_scale`` (every length multiplied by it, at least 1), ``max_turns`` (turns kept
per session), ``max_sessions`` (sessions kept, in file order), ``format`` (skip detection).
Both: ``idle_cap`` (a duration, default 1 h: no wait of the run, between turns or between the
source's own session starts, is longer; longer ones are shortened to it with a warning line, as
the AgentX runs cap idle gaps); ``max_delay`` (a duration, default 1 day: a longer delay stated
in the file, or a longer synthetic ``delay``, is refused); ``salt`` (``on``: sessions share no
prefix past the shared system prompt, the default; ``off``: sessions with equal messages share them).

File formats (detected from the first line). A file is read and checked whole before any load
(the rules, bounds and caps: :mod:`loadgen.workload.session_checks`); errors name the file, the
1-based line and the field, as the trace readers do, and nothing is sent from a file that failed:

* ``loadgen`` (loadgen's own JSONL, one session per line)::

    {"session_id": "a", "start_s": 0.0, "system_tokens": 0,
     "turns": [{"new_tokens": 50, "output_tokens": 20},
               {"text": "and then?", "output_tokens": 20, "delay_s": 1.5, "role": "tool",
                "reply_text": "...", "hash_ids": [1, 2]}]}

  A turn's ``calls`` (optional) records its reply's tool calls, ``[{"name": "get_weather", "arguments":
  "{\"city\": \"Oslo\"}", "id": "call_1", "result_tokens": 20}]``: the next ``tool`` turn answers each.
  ``session_id`` (a string, unique), ``turns`` (a non-empty list) and, per turn,
  ``output_tokens`` (>= 1) and one of ``new_tokens`` (>= 1) or ``text`` are required;
  ``delay_s`` (seconds from the end of the previous reply: >= 0, at most ``max_delay``, default 0,
  ignored on a first turn), ``start_s`` (>= 0: the session's start from the first session, used
  with the trace's own arrivals), ``system_tokens``, ``role`` (``user`` | ``tool``), ``reply_text``
  and ``hash_ids`` are optional. A turn's ``timestamp`` (or another time key such as ``delay``,
  ``delay_ms``, ``think_time``) is refused, never dropped: turns are causal, a send time is no delay.
* ``weka`` (callanjfox/kv-cache-tester, the AgentX traces: one session per line with
  ``requests[]`` of ``in``/``out``/``think_time``/``hash_ids``): the session opens with a shared
  system prompt of ``tool_tokens + system_tokens``; turn ``k``'s new message is
  ``in[k] - in[k-1] - out[k-1]`` tokens (the history grows by the last reply and the new input;
  at least 1: where the client kept less than the whole reply, e.g. dropped thinking blocks, the
  replayed prompt is longer than the trace's by at most that reply); a turn whose ``in`` is
  smaller than ``in[k-1]`` (the agent compacted its context) resets the history and sends
  ``in[k]`` fresh (counted as resets); ``think_time`` is the delay (at most ``max_delay``; the
  request's ``t``, its time since the session started, is not used: it includes the replies).
  Sub-agent entries are skipped and counted (their concurrency is not modelled yet).
* ``tracelab`` (uw-syfi/TraceLab rounds, one round per line): rounds grouped by ``session_id`` in
  ``round_index`` order (a repeated ``round_index`` is refused); new tokens as for ``weka`` from
  ``input_tokens_total`` / ``output_tokens``; the delay is the gap from a round's last ``timing_events`` timestamp to the
  next round's first (ISO-8601 ``timestamp``s; a recorded gap, so over ``max_delay`` it is capped,
  not refused); the session starts at its first event (so ``start_s`` holds the trace's own
  session starts).
* ``sharegpt`` (a JSON list of ``{"conversations": [{"from", "value"}, ...]}``): every
  human/gpt pair is a turn (text replay: the recorded reply is the output length in words and,
  with ``replies=recorded``, the history).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from loadgen.core.errors import ConfigError
from loadgen.core.units import parse_duration_s
from loadgen.workload.lengths import parse_length_spec
from loadgen.workload.session_checks import (
    idle_cap_s,
    max_delay_s,
    span,
)
from loadgen.workload.session_formats import (
    detect_format,
    read_loadgen,
    read_sharegpt_sessions,
    read_tracelab,
    read_weka,
)
from loadgen.workload.session_model import Session, synthetic_sessions

__all__ = ["SessionSource", "load_sessions", "parse_session_source"]

_FILE_KEYS = {"idle_cap", "max_delay", "time_scale", "speedup", "token_scale", "max_turns", "max_sessions", "format", "salt",
              "replies"}  # fmt: skip
_SYNTH_KEYS = {"idle_cap", "max_delay", "turns", "input", "output", "delay", "delay_dist", "system", "salt", "tools"}
FORMATS = ("loadgen", "weka", "tracelab", "sharegpt")


@dataclass(frozen=True)
class SessionSource:
    """A parsed ``--sessions`` value (configuration only: picklable, no file read yet)."""

    source: str  # "synthetic" or a path
    options: dict[str, str] = field(default_factory=dict)

    @property
    def synthetic(self) -> bool:
        return self.source == "synthetic"

    @property
    def salt_sessions(self) -> bool:
        return self.options.get("salt", "on") != "off"

    @property
    def recorded_replies(self) -> bool:
        return self.options.get("replies", "actual") == "recorded"

    def describe(self) -> dict[str, Any]:
        return {"source": self.source, **self.options}


def parse_session_source(text: str) -> SessionSource:
    """Parse ``SOURCE[,key=value...]``; raises ConfigError naming the bad part."""
    parts = [p.strip() for p in text.split(",")]
    source = parts[0]
    opts: dict[str, str] = {}
    if not source:
        raise ConfigError(f"--sessions {text!r}: give 'synthetic' or a session file")
    # a length spec such as uniform:5,15 holds a comma: glue bare numbers back to the key before
    for p in parts[1:]:
        if "=" not in p:
            if opts and p.replace(".", "", 1).isdigit():
                last = list(opts)[-1]
                opts[last] += "," + p
                continue
            raise ConfigError(f"--sessions {text!r}: expected key=value, got {p!r}")
        k, v = (s.strip() for s in p.split("=", 1))
        opts[k] = v
    allowed = _SYNTH_KEYS if source == "synthetic" else _FILE_KEYS
    for k in opts:
        if k not in allowed:
            raise ConfigError(f"--sessions {text!r}: unknown option {k!r} (known: {', '.join(sorted(allowed))})")
    if source != "synthetic":
        try:
            is_file = Path(source).is_file()
            exists = is_file or Path(source).exists()
        except OSError as exc:  # a name too long, a directory not traversable
            raise ConfigError(f"--sessions {source}: cannot read it: {exc.strerror or exc}") from None
        if not is_file:
            raise ConfigError(f"--sessions {source}: {'not a regular file' if exists else 'no such file'}")
    if opts.get("salt", "on") not in ("on", "off"):
        raise ConfigError(f"--sessions {text!r}: salt is 'on' or 'off'")
    if opts.get("replies", "actual") not in ("actual", "recorded"):
        raise ConfigError(f"--sessions {text!r}: replies is 'actual' or 'recorded'")
    if "format" in opts and opts["format"] not in FORMATS:
        raise ConfigError(f"--sessions {text!r}: format is one of {', '.join(FORMATS)}")
    if "speedup" in opts and "time_scale" in opts:
        raise ConfigError(f"--sessions {text!r}: time_scale= and speedup= clash: give speedup=N (N times faster)")
    idle_cap_s(opts)  # a bad cap or bound is a ConfigError now, not when the file is read
    max_delay_s(opts)
    return SessionSource(source, opts)


def _float(opts: dict[str, str], key: str, default: float) -> float:
    try:
        v = float(opts.get(key, default))
    except ValueError:
        raise ConfigError(f"--sessions: {key}={opts[key]!r} is not a number") from None
    if not 0 < v <= 1e6:
        raise ConfigError(f"--sessions: {key} must be > 0 and at most 1e6")
    return v


def _count(opts: dict[str, str], key: str) -> int | None:
    if key not in opts:
        return None
    try:
        v = int(opts[key])
    except ValueError:
        raise ConfigError(f"--sessions: {key}={opts[key]!r} is not an integer") from None
    if v < 1:
        raise ConfigError(f"--sessions: {key} must be >= 1")
    return v


def load_sessions(src: SessionSource, n: int | None = None, *, seed: int = 0) -> tuple[list[Session], dict[str, Any]]:
    """The sessions of ``src`` (``n``: how many a synthetic source makes; None: 1,000) and facts about
    the read (``format``, ``skipped_subagents``, ``resets``, ``max_delay_s``, ``warnings``: lines to
    show before the run). The whole file is read and checked (:mod:`loadgen.workload.session_checks`);
    delays are as the file states them (time-scaled): the idle cap is the plan's
    (:func:`loadgen.sessions.planning.plan_sessions`). Raises ConfigError / InputFileError."""
    o = src.options
    most = max_delay_s(o)
    if src.synthetic:
        delay = parse_duration_s(o.get("delay", "0s"), "--sessions delay") or 0.0
        if delay > most:
            raise ConfigError(f"--sessions delay={o['delay']}: over the maximum delay of {span(most)} (max_delay=...)")
        if o.get("delay_dist", "constant") not in ("constant", "exp"):
            raise ConfigError("--sessions: delay_dist is 'constant' or 'exp'")
        sessions = synthetic_sessions(
            n if n is not None else 1000,
            turns=parse_length_spec(o.get("turns", "4")),
            new_tokens=parse_length_spec(o.get("input", "64")),
            output_tokens=parse_length_spec(o.get("output", "32"), column="output"),
            delay_s=delay,
            delay_dist=o.get("delay_dist", "constant"),
            system_tokens=int(o.get("system", "0")),
            seed=seed,
            tool_share=_share(o.get("tools", "0"), "tools"),
        )
        return sessions, {"format": "synthetic", "max_delay_s": most, "warnings": _synthetic_capped(o, delay)}
    path = src.source
    fmt = o.get("format") or detect_format(path)
    facts: dict[str, Any] = {"format": fmt, "max_delay_s": most, "warnings": []}
    if fmt == "loadgen":
        sessions = read_loadgen(path, most)
    elif fmt == "weka":
        sessions, facts["skipped_subagents"] = read_weka(path, most)
    elif fmt == "tracelab":
        sessions = read_tracelab(path)
    else:
        sessions = read_sharegpt_sessions(path)
    limit = _count(o, "max_sessions")
    if limit is not None:
        sessions = sessions[:limit]
    # one time-scale meaning (issue 32): speedup=N (or --trace-time-scale N) replays N times faster, as a
    # request trace; time_scale= keeps its meaning, a multiplier on delays, with a deprecation line
    scale = _float(o, "time_scale", 1.0) / _float(o, "speedup", 1.0)
    if "time_scale" in o:
        facts["warnings"].append(
            f"--sessions time_scale={o['time_scale']} multiplies the delays (deprecated): write "
            f"speedup={1 / _float(o, 'time_scale', 1.0):g}, N times faster, as --trace-time-scale N"
        )
    sessions = scale_sessions(
        sessions, time_scale=scale, token_scale=_float(o, "token_scale", 1.0), max_turns=_count(o, "max_turns"),
    )  # fmt: skip
    facts["resets"] = sum(t.reset for s in sessions for t in s.turns)
    return sessions, facts


def _share(text: str, key: str) -> float:
    try:
        v = float(text)
    except ValueError:
        v = -1.0
    if not 0.0 <= v <= 1.0:
        raise ConfigError(f"--sessions {key}={text}: expected a share from 0 to 1")
    return v


def _synthetic_capped(o: dict[str, str], delay: float) -> list[str]:
    """The warning for synthetic delays over the idle cap (the share of them: every one when constant)."""
    cap = idle_cap_s(o)
    exp = o.get("delay_dist", "constant") == "exp"
    share = 0.0 if delay <= 0 else math.exp(-cap / delay) if exp else float(delay > cap)
    if share < 1e-6:
        return []
    which = f"about {share:.2g} of the delays (exp, mean {span(delay)})" if exp and share < 1 else "every delay"
    return [f"--sessions synthetic: {which} longer than the idle cap of {span(cap)} shortened to it "
            "(--sessions synthetic,idle_cap=DURATION moves the cap)"]  # fmt: skip


def scale_sessions(
    sessions: list[Session], *, time_scale: float = 1.0, token_scale: float = 1.0, max_turns: int | None = None
) -> list[Session]:
    """Delays and starts times ``time_scale``, lengths times ``token_scale`` (>= 1), at most ``max_turns``."""

    def tok(n: int | None) -> int | None:
        return None if n is None else max(1, round(n * token_scale))

    out = []
    for s in sessions:
        turns = s.turns[:max_turns] if max_turns else s.turns
        if time_scale != 1.0 or token_scale != 1.0:
            turns = tuple(
                replace(
                    t,
                    delay_s=t.delay_s * time_scale,
                    new_tokens=tok(t.new_tokens),
                    output_tokens=tok(t.output_tokens) or 1,
                    input_tokens=tok(t.input_tokens),
                    calls=tuple(
                        replace(c, arguments_tokens=tok(c.arguments_tokens) or 1, result_tokens=tok(c.result_tokens))
                        for c in t.calls
                    ),
                )  # fmt: skip
                for t in turns
            )
        out.append(
            replace(
                s,
                turns=tuple(turns),
                start_s=None if s.start_s is None else s.start_s * time_scale,
                system_tokens=(tok(s.system_tokens) or 0) if s.system_tokens else 0,
            )  # fmt: skip
        )
    return out
