"""Where sessions come from: ``--sessions SOURCE[,key=value...]``, the readers of session files.

SOURCE is ``synthetic`` or a file; options follow after commas::

    --sessions synthetic,turns=10,input=64,output=32,delay=500ms,system=100
    --sessions traces/sessions.jsonl,time_scale=0.1,token_scale=0.01,max_turns=20,max_sessions=8

Synthetic options: ``turns`` (a length spec: ``10``, ``uniform:5,15``), ``input`` (new-message
tokens per turn, a length spec), ``output`` (reply tokens per turn, a length spec), ``delay``
(mean delay between a reply and the next turn, a duration), ``delay_dist`` (``constant`` |
``exp``), ``system`` (tokens of a system prompt shared by every session).
File options (every format): ``time_scale`` (delays and trace start times multiplied by it, at
most 1e6), ``token_scale`` (every length multiplied by it, at least 1), ``max_turns`` (turns kept
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

import datetime as dt
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from loadgen.core.errors import ConfigError, InputFileError
from loadgen.core.units import parse_duration_s
from loadgen.workload.lengths import parse_length_spec
from loadgen.workload.session_checks import (
    MAX_START_S,
    check_int,
    check_secs,
    idle_cap_s,
    json_row,
    max_delay_s,
    refuse_time_keys,
    span,
)
from loadgen.workload.session_model import Session, Turn, synthetic_sessions

__all__ = ["SessionSource", "load_sessions", "parse_session_source"]

_FILE_KEYS = {"idle_cap", "max_delay", "time_scale", "token_scale", "max_turns", "max_sessions", "format", "salt",
              "replies"}  # fmt: skip
_SYNTH_KEYS = {"idle_cap", "max_delay", "turns", "input", "output", "delay", "delay_dist", "system", "salt"}
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
    sessions = scale_sessions(
        sessions, time_scale=_float(o, "time_scale", 1.0), token_scale=_float(o, "token_scale", 1.0),
        max_turns=_count(o, "max_turns"),
    )  # fmt: skip
    facts["resets"] = sum(t.reset for s in sessions for t in s.turns)
    return sessions, facts


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


def detect_format(path: str) -> str:
    """The format of a session file from its first non-blank line."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(1 << 16)
    except OSError as exc:
        raise ConfigError(f"cannot read session file {path}: {exc.strerror or exc}") from None
    text = head.lstrip()
    if text.startswith(b"["):
        return "sharegpt"
    first = text.split(b"\n", 1)[0]
    if b'"round_index"' in first and b'"session_id"' in first:
        return "tracelab"
    if b'"requests"' in first or b'"hash_id_scope"' in first:
        return "weka"
    if b'"turns"' in first:
        return "loadgen"
    raise ConfigError(
        f"{path}: not a known session format (loadgen JSONL with 'turns', kv-cache-tester/weka with "
        "'requests', TraceLab rounds, ShareGPT list); name it with format=..."
    )


def _lines(path: str) -> list[tuple[int, dict[str, Any]]]:
    out = []
    try:
        with open(path, "rb") as fh:
            for i, raw in enumerate(fh, 1):
                if not raw.strip():
                    continue
                obj = json_row(raw, path, i)
                if not isinstance(obj, dict):
                    raise InputFileError(path, i, "row", "each line must be a JSON object")
                out.append((i, obj))
    except OSError as exc:
        raise ConfigError(f"cannot read session file {path}: {exc.strerror or exc}") from None
    if not out:
        raise ConfigError(f"{path}: no sessions")
    return out


def _unique(seen: dict[str, int], sid: str, path: str, line: int, fld: str) -> None:
    if sid in seen:
        raise InputFileError(path, line, fld, f"duplicate session id {sid!r} (first on line {seen[sid]})")
    seen[sid] = line


def read_loadgen(path: str, max_delay: float) -> list[Session]:
    """loadgen's own session JSONL (module doc); a stated delay over ``max_delay`` (s) is refused."""
    sessions: list[Session] = []
    seen: dict[str, int] = {}
    for line, obj in _lines(path):
        sid = obj.get("session_id")
        if not isinstance(sid, str) or not sid:
            raise InputFileError(path, line, "session_id", "missing or not a non-empty string")
        _unique(seen, sid, path, line, "session_id")
        refuse_time_keys(obj, path, line)
        turns_raw = obj.get("turns")
        if not isinstance(turns_raw, list) or not turns_raw:
            raise InputFileError(path, line, "turns", "missing or not a non-empty list")
        turns = []
        for k, t in enumerate(turns_raw):
            f = f"turns[{k}]"
            if not isinstance(t, dict):
                raise InputFileError(path, line, f, "each turn must be an object")
            refuse_time_keys(t, path, line, f)
            out = check_int(t.get("output_tokens"), path, line, f + ".output_tokens", 1)
            text = t.get("text")
            if text is not None and not isinstance(text, str):
                raise InputFileError(path, line, f + ".text", "not a string")
            new = None if text is not None else check_int(t.get("new_tokens"), path, line, f + ".new_tokens", 1)
            role = t.get("role", "user")
            if role not in ("user", "tool"):
                raise InputFileError(path, line, f + ".role", f"'user' or 'tool', got {role!r}")
            hids = t.get("hash_ids")
            if hids is not None and not (isinstance(hids, list) and all(isinstance(h, int) for h in hids)):
                raise InputFileError(path, line, f + ".hash_ids", "not a list of integers")
            delay = check_secs(t.get("delay_s"), path, line, f + ".delay_s", max_delay)  # checked on a first turn too
            reply = t.get("reply_text")
            if reply is not None and not isinstance(reply, str):
                raise InputFileError(path, line, f + ".reply_text", "not a string")
            turns.append(
                Turn(
                    output_tokens=out,
                    new_tokens=new,
                    text=text,
                    role=role,
                    reply_text=reply,
                    delay_s=delay if k else 0.0,
                    hash_ids=tuple(hids) if hids is not None else None,
                )  # fmt: skip
            )
        start = obj.get("start_s")
        sys_tokens = obj.get("system_tokens", 0)
        sessions.append(
            Session(
                sid,
                tuple(turns),
                start_s=None if start is None else check_secs(start, path, line, "start_s", MAX_START_S, ""),
                system_tokens=check_int(sys_tokens, path, line, "system_tokens", 0),
            )  # fmt: skip
        )
    return sessions


def _grow(prev_in: int | None, prev_out: int | None, cur_in: int, base: int) -> tuple[int, bool]:
    """(new tokens, reset) of a turn whose whole prompt is ``cur_in`` after ``prev_in`` + ``prev_out``."""
    if prev_in is None or prev_out is None:
        return max(cur_in - base, 1), False
    if cur_in >= prev_in:  # the history grew: by less than the reply when the client dropped part of
        return max(cur_in - prev_in - prev_out, 1), False  # it (thinking blocks); then a little longer here
    return max(cur_in - base, 1), True  # the prompt shrank (context compaction): history dropped


def read_weka(path: str, max_delay: float) -> tuple[list[Session], int]:
    """kv-cache-tester / AgentX traces (module doc); returns (sessions, skipped sub-agent entries)."""
    sessions: list[Session] = []
    skipped = 0
    seen: dict[str, int] = {}
    for line, obj in _lines(path):
        sid = obj.get("id")
        if not isinstance(sid, str):
            raise InputFileError(path, line, "id", "missing or not a string")
        _unique(seen, sid, path, line, "id")
        reqs = obj.get("requests")
        if not isinstance(reqs, list) or not reqs:
            raise InputFileError(path, line, "requests", "missing or not a non-empty list")
        base = check_int(obj.get("tool_tokens", 0), path, line, "tool_tokens", 0) + check_int(
            obj.get("system_tokens", 0), path, line, "system_tokens", 0
        )
        turns: list[Turn] = []
        prev_in = prev_out = None
        for j, r in enumerate(reqs):
            f = f"requests[{j}]"
            if not isinstance(r, dict):
                raise InputFileError(path, line, f, "not an object")
            if r.get("type") == "subagent":
                skipped += 1
                continue
            cur_in = check_int(r.get("in"), path, line, f + ".in", 1)
            out = check_int(r.get("out"), path, line, f + ".out", 0)
            delay = check_secs(r.get("think_time"), path, line, f + ".think_time", max_delay)
            new, reset = _grow(prev_in, prev_out, cur_in, base if cur_in > base else 0)
            types = r.get("input_types") or []
            hids = r.get("hash_ids")
            turns.append(
                Turn(
                    output_tokens=max(out, 1),
                    new_tokens=new,
                    delay_s=delay if turns else 0.0,
                    role="tool" if "tool_result" in types else "user",
                    reset=reset,
                    hash_ids=tuple(hids) if isinstance(hids, list) else None,
                    input_tokens=cur_in,
                )  # fmt: skip
            )
            prev_in, prev_out = cur_in, out
        if not turns:
            raise InputFileError(path, line, "requests", "no main-agent request")
        sessions.append(Session(sid, tuple(turns), system_tokens=base))
    return sessions, skipped


def _ts_s(v: Any, path: str, line: int, fld: str) -> float:
    if not isinstance(v, str):
        raise InputFileError(path, line, fld, "missing or not a timestamp string")
    try:
        return dt.datetime.fromisoformat(v.replace("Z", "+00:00")).timestamp()
    except (ValueError, OverflowError, OSError):  # the last two: a naive time past the platform's range
        raise InputFileError(path, line, fld, f"not an ISO-8601 timestamp: {v!r}") from None


def read_tracelab(path: str) -> list[Session]:
    """TraceLab per-round JSONL (module doc)."""
    rounds: dict[str, list[tuple[int, int, dict[str, Any]]]] = {}
    lines: dict[tuple[str, int], int] = {}
    for line, obj in _lines(path):
        sid = obj.get("session_id")
        if not isinstance(sid, str):
            raise InputFileError(path, line, "session_id", "missing or not a string")
        idx = check_int(obj.get("round_index"), path, line, "round_index", 0)
        if (sid, idx) in lines:
            raise InputFileError(path, line, "round_index", f"round {idx} of session {sid!r} repeated "
                                 f"(first on line {lines[sid, idx]})")  # fmt: skip
        lines[sid, idx] = line
        rounds.setdefault(sid, []).append((idx, line, obj))
    firsts: list[float] = []
    built: list[tuple[str, tuple[Turn, ...], float]] = []
    for sid, rows in rounds.items():
        rows.sort(key=lambda r: r[0])
        turns: list[Turn] = []
        prev_in = prev_out = None
        prev_last: float | None = None
        start = 0.0
        for idx, line, obj in rows:
            ev = obj.get("timing_events")
            if not isinstance(ev, list) or not ev or not all(isinstance(e, dict) for e in ev):
                raise InputFileError(path, line, "timing_events", "missing or not a non-empty list of events")
            first = _ts_s(ev[0].get("timestamp"), path, line, "timing_events[0].timestamp")
            last = _ts_s(ev[-1].get("timestamp"), path, line, f"timing_events[{len(ev) - 1}].timestamp")
            cur_in = check_int(obj.get("input_tokens_total"), path, line, "input_tokens_total", 1)
            out = check_int(obj.get("output_tokens"), path, line, "output_tokens", 0)
            if prev_last is None:
                start, delay = first, 0.0
            else:
                delay = first - prev_last
                if delay < 0:
                    raise InputFileError(
                        path, line, "timing_events[0].timestamp",
                        f"negative delay {delay:.3f} s: this round starts before round {idx - 1} ended",
                    )  # fmt: skip
            new, reset = _grow(prev_in, prev_out, cur_in, 0)
            kind = obj.get("first_input_event_type")
            turns.append(
                Turn(
                    output_tokens=max(out, 1),
                    new_tokens=new,
                    delay_s=delay,
                    reset=reset,
                    role="tool" if kind == "tool_result" else "user",
                    input_tokens=cur_in,
                )  # fmt: skip
            )
            prev_in, prev_out, prev_last = cur_in, out, last
        firsts.append(start)
        built.append((sid, tuple(turns), start))
    t0 = min(firsts)
    return [Session(sid, turns, start_s=start - t0) for sid, turns, start in built]


def read_sharegpt_sessions(path: str) -> list[Session]:
    """ShareGPT: every human/gpt pair of a conversation is a turn (text replay)."""
    from loadgen.workload.datasets import _GPT, _HUMAN, _entries

    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read data set {path}: {exc}") from None
    sessions = []
    for k, (line, e) in enumerate(_entries(text, path)):
        conv = e.get("conversations") if isinstance(e, dict) else None
        if not isinstance(conv, list):
            raise InputFileError(path, line, f"[{k}].conversations", "missing or not a list")
        turns = []
        j = 0
        while j + 1 < len(conv):
            a, b = conv[j], conv[j + 1]
            if not all(isinstance(x, dict) and isinstance(x.get("value"), str) for x in (a, b)):
                raise InputFileError(path, line, f"[{k}].conversations[{j}]", 'each turn must be {"from", "value"}')
            if str(a.get("from")).lower() in _HUMAN and str(b.get("from")).lower() in _GPT and a["value"].strip():
                out = max(len(b["value"].split()), 1)
                turns.append(Turn(output_tokens=out, text=a["value"], reply_text=b["value"]))
                j += 2
            else:
                j += 1
        if turns:
            sid = e.get("id") if isinstance(e.get("id"), str) else f"c{k}"
            sessions.append(Session(str(sid), tuple(turns)))
    if not sessions:
        raise ConfigError(f"{path}: no conversation with a human turn followed by a reply")
    return sessions
