"""The session file readers behind ``--sessions FILE`` (formats and fields: :mod:`loadgen.workload.session_sources`).

Each reader turns one file into :class:`~loadgen.workload.session_model.Session` s, checked whole as it
reads (every problem an :class:`~loadgen.core.errors.InputFileError` naming file, line and field):
``loadgen`` (loadgen's own JSONL), ``weka`` (kv-cache-tester / AgentX), ``tracelab`` (TraceLab rounds) and
``sharegpt`` (conversations). :func:`detect_format` tells them apart from the first line. Recorded tool
calls come with the turn whose reply made them (kv-cache-tester ``stop: tool_use``, TraceLab ``tools[]``).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import replace
from pathlib import Path
from typing import Any

from loadgen.core.errors import ConfigError, InputFileError
from loadgen.workload.session_checks import (
    MAX_START_S,
    check_int,
    check_secs,
    json_row,
    refuse_time_keys,
)
from loadgen.workload.session_model import RecordedCall, Session, Turn

__all__ = ["detect_format", "read_loadgen", "read_sharegpt_sessions", "read_tracelab", "read_weka"]


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
                    calls=_loadgen_calls(t.get("calls"), path, line, f + ".calls"),
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


def _loadgen_calls(raw: Any, path: str, line: int, f: str) -> tuple[RecordedCall, ...]:
    """A turn's recorded tool calls (its reply's): ``[{"name", "arguments" (JSON text), "id", "result_tokens"}]``."""
    if raw is None:
        return ()
    if not isinstance(raw, list) or not all(isinstance(c, dict) for c in raw):
        raise InputFileError(path, line, f, "not a list of objects")
    out = []
    for j, c in enumerate(raw[:64]):
        name, args, cid = c.get("name"), c.get("arguments"), c.get("id")
        if not isinstance(name, str) or not name:
            raise InputFileError(path, line, f"{f}[{j}].name", "missing or not a string")
        for key, v in (("arguments", args), ("id", cid)):
            if v is not None and not isinstance(v, str):
                raise InputFileError(path, line, f"{f}[{j}].{key}", "not a string")
        res = c.get("result_tokens")
        out.append(RecordedCall(name=name, arguments=args, call_id=cid,
                                result_tokens=None if res is None else check_int(res, path, line, f"{f}[{j}].result_tokens", 1)))  # fmt: skip
    return tuple(out)


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
            out_types = r.get("output_types")
            # a count and names are not recorded
            called = r.get("stop") == "tool_use" or (isinstance(out_types, list) and "tool_use" in out_types)
            turns.append(
                Turn(
                    output_tokens=max(out, 1),
                    new_tokens=new,
                    delay_s=delay if turns else 0.0,
                    role="tool" if "tool_result" in types else "user",
                    reset=reset,
                    hash_ids=tuple(hids) if isinstance(hids, list) else None,
                    input_tokens=cur_in,
                    calls=(RecordedCall(),) if called else (),
                )  # fmt: skip
            )
            prev_in, prev_out = cur_in, out
        if not turns:
            raise InputFileError(path, line, "requests", "no main-agent request")
        sessions.append(Session(sid, tuple(turns), system_tokens=base))
    return sessions, skipped


def _ts_s(v: object, path: str, line: int, fld: str) -> float:
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
                    calls=_tracelab_calls(obj.get("tools"), path, line),
                )  # fmt: skip
            )
            prev_in, prev_out, prev_last = cur_in, out, last
        firsts.append(start)
        built.append((sid, _results_sized(turns), start))
    t0 = min(firsts)
    return [Session(sid, turns, start_s=start - t0) for sid, turns, start in built]


CHARS_PER_TOKEN = 4
"""Recorded tool-call arguments in characters (TraceLab keeps no text) are sized at this many a token."""


def _tracelab_calls(tools: Any, path: str, line: int) -> tuple[RecordedCall, ...]:
    """A TraceLab round's ``tools[]`` as recorded calls: name, arguments' length, result's size (characters
    for now; :func:`_results_sized` turns them into shares of the next round's new tokens)."""
    if tools is None:
        return ()
    if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
        raise InputFileError(path, line, "tools", "not a list of objects")
    out = []
    for j, t in enumerate(tools[:64]):
        name = t.get("tool_name")
        args = check_int(t.get("input_chars", 0) or 0, path, line, f"tools[{j}].input_chars", 0)
        res = check_int(t.get("result_chars", 0) or 0, path, line, f"tools[{j}].result_chars", 0)
        out.append(RecordedCall(name=name if isinstance(name, str) and name else "tool",
                                arguments_tokens=max(1, args // CHARS_PER_TOKEN), result_tokens=res))  # fmt: skip
    return tuple(out)


def _results_sized(turns: list[Turn]) -> tuple[Turn, ...]:
    """Each recorded call's result as its share (by recorded characters) of the next round's new tokens,
    when that round is a tool result; None (split evenly) when the sizes say nothing."""
    out = list(turns)
    for k, t in enumerate(turns):
        if not t.calls:
            continue
        nxt = turns[k + 1] if k + 1 < len(turns) else None
        chars = [c.result_tokens or 0 for c in t.calls]
        if nxt is None or nxt.role != "tool" or not sum(chars) or not nxt.new_tokens:
            out[k] = replace(t, calls=tuple(replace(c, result_tokens=None) for c in t.calls))
            continue
        total, n = nxt.new_tokens, sum(chars)
        out[k] = replace(t, calls=tuple(replace(c, result_tokens=max(1, round(total * ch / n)))
                                        for c, ch in zip(t.calls, chars, strict=True)))  # fmt: skip
    return tuple(out)


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
