"""The session model: conversations and agent trajectories as ordered turns, and their prompts.

A :class:`Session` is an ordered list of :class:`Turn` s. A turn has a new message (a length in
tokens, or its text), an output length, a delay after the previous reply ends (think time or
tool time; a first turn's time is the session's start) and, from traces that have them, the
KV-block hash ids of its prompt (kept for inspection; the prompt itself is the history).

Turn ``k``'s prompt is the session's history (every earlier new message and the *actual*
reply the server gave, in order) followed by turn ``k``'s new message, after an optional
system prompt shared by every session of the run (:class:`SessionPrompter`): chat messages
for the chat API, the same contents joined by blank lines for the completions API. So the
prompt of turn ``k + 1`` extends the prompt of turn ``k`` and its reply, as a real client's
does, and a server's prefix cache can reuse it. A turn marked ``reset`` (a trace whose
prompt shrank: the client compacted its context) drops the history first.

Exact counts: with a tokenizer, each turn's ``requested_input_tokens`` is the exact prompt
token count the server will see (``Tokenizer.count_chat`` of the messages with the
generation prompt, or ``count_prompt`` of the completions text); without one it is None.
New-message lengths are in corpus words (about one token each: a tokenizer's count may
differ slightly; the whole prompt's count is exact).

Salting (cache realism, MLCommons style): the shared system prompt begins with the run's
salt (reused across the run's sessions, new per run); each session's first new message begins
with ``<run salt>-<session id>``, so two sessions share no prefix past the system prompt
unless ``salt_sessions`` is off (then sessions with equal messages share them, as a trace
that says so; generated messages are then drawn by turn index alone, the same in every session:
the most cross-session prefix reuse a workload can have).
"""

from __future__ import annotations

import random
import time
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import orjson

from loadgen.core.clock import now_ns
from loadgen.core.types import RequestSpec
from loadgen.workload.prompts import corpus_words

if TYPE_CHECKING:
    from loadgen.workload.tokenizer import Tokenizer

__all__ = ["RecordedCall", "Session", "SessionHistory", "SessionPrompter", "Turn"]


@dataclass(frozen=True, slots=True)
class RecordedCall:
    """A tool call a trace recorded in a turn's reply: the tool's ``name``, the length of its arguments and
    of its result (corpus words; None: not recorded, the next turn's new message is split evenly)."""

    name: str = "tool"
    arguments_tokens: int = 8
    result_tokens: int | None = None
    arguments: str | None = None  # the recorded arguments (JSON text), sent as they are (loadgen's own files)
    call_id: str | None = None  # the recorded id


@dataclass(frozen=True, slots=True)
class Turn:
    """One turn of a session.

    ``new_tokens``: the new message's length (corpus words), or ``text``: the new message itself;
    ``output_tokens``: the reply's length (``max_tokens``); ``delay_s``: wait after the previous
    reply ends before this turn is due (ignored on a session's first turn); ``role``: who sends
    the new message (``user``, or ``tool`` for a tool result, sent as a user message);
    ``reply_text``: the recorded reply (text replays) used as history instead of the actual one
    when ``use_recorded_replies``; ``hash_ids``: the trace's block hash ids of this prompt;
    ``input_tokens``: the trace's whole prompt length (for inspection); ``reset``: drop the
    history before this turn; ``calls``: the tool calls the trace recorded in this turn's reply (a
    ``tool`` turn after it answers each, :class:`SessionHistory`).
    """

    output_tokens: int
    new_tokens: int | None = None
    text: str | None = None
    delay_s: float = 0.0
    role: str = "user"
    reply_text: str | None = None
    hash_ids: tuple[int, ...] | None = None
    input_tokens: int | None = None
    reset: bool = False
    calls: tuple[RecordedCall, ...] = ()


@dataclass(frozen=True, slots=True)
class Session:
    """One session: ``turns`` in order; ``start_s`` the trace's own start (s from its first session),
    None when the arrival process sets it; ``system_tokens`` the length of the run's shared system
    prompt this session opens with (0: none)."""

    session_id: str
    turns: tuple[Turn, ...]
    start_s: float | None = None
    system_tokens: int = 0

    @property
    def total_delay_s(self) -> float:
        """Sum of the delays between turns (think and tool time)."""
        return sum(t.delay_s for t in self.turns[1:])


@dataclass(eq=False, kw_only=True)
class SessionPrompter:
    """Builds the text of new messages and the shared system prompt, and counts prompts exactly.

    ``api``: ``chat`` (messages) or ``completions`` (one text); ``tokenizer``: a
    :class:`loadgen.workload.tokenizer.Tokenizer` for exact counts (None: no count);
    ``salt``: the run's salt; ``salt_sessions``: prefix each session's first message with its
    own salt; ``seed``: where in the corpus each message's words come from.
    """

    api: str = "chat"
    tokenizer: Tokenizer | None = None
    salt: str = ""
    salt_sessions: bool = True
    seed: int = 0
    use_recorded_replies: bool = False
    _system: dict[int, str] = field(default_factory=dict, init=False, repr=False)
    # (session id, turn) -> its new message, built before the run
    _ready: dict[tuple[str, int], str] = field(default_factory=dict, init=False, repr=False)
    built_late: int = field(default=0, init=False)  # new messages built during the run (not prepared)...
    built_late_cpu_s: float = field(default=0.0, init=False)  # ...and the CPU they took

    def words(self, n: int, key: str) -> str:
        """``n`` corpus words from a position fixed by (seed, ``key``), wrapping round the corpus (whole
        slices: a 32k-word message ~0.3 ms, not a Python step a word)."""
        words = corpus_words()
        k = zlib.crc32(f"{self.seed}:{key}".encode()) % len(words)
        out: list[str] = []
        need = max(n, 1)
        while need > 0:
            piece = words[k : k + need]
            out.extend(piece)
            need -= len(piece)
            k = 0
        return " ".join(out)

    def prepare(self, sessions: Sequence[Session], *, budget_bytes: int, deadline_ns: int) -> tuple[int, int, int]:
        """Build the new messages of ``sessions``' turns before the run (they depend on no reply), in order,
        until ``budget_bytes`` of text are held or ``deadline_ns`` (monotonic) passes; each is taken once by
        :meth:`message_text`. Returns (turns prepared, of turns, bytes held)."""
        held = done = 0
        total = sum(len(s.turns) for s in sessions)
        for s in sessions:
            for k in range(len(s.turns)):
                if held >= budget_bytes or now_ns() >= deadline_ns:
                    return done, total, held
                text = self._build_text(s, k)
                self._ready[(s.session_id, k)] = text
                held += len(text)
                done += 1
        return done, total, held

    def message_text(self, session: Session, k: int) -> str:
        """Turn ``k``'s new message (its text, or ``new_tokens`` words; the session salt first on turn 0): the
        one built before the run (:meth:`prepare`) when there is one, else built now (counted in ``built_late``)."""
        text = self._ready.pop((session.session_id, k), None)
        if text is not None:
            return text
        c0 = time.thread_time_ns()
        text = self._build_text(session, k)
        self.built_late += 1
        self.built_late_cpu_s += (time.thread_time_ns() - c0) / 1e9
        return text

    def system_text(self, n_tokens: int) -> str:
        """The run's shared system prompt of ``n_tokens`` words (the run's salt first)."""
        text = self._system.get(n_tokens)
        if text is None:
            body = self.words(n_tokens, "system")
            if self.salt:
                body = self.salt + " " + body.split(" ", 1)[-1] if n_tokens > 1 else self.salt
            text = self._system[n_tokens] = body
        return text

    def _build_text(self, session: Session, k: int) -> str:
        turn = session.turns[k]
        if turn.text is not None:
            text = turn.text
        else:
            key = f"{session.session_id}:{k}" if self.salt_sessions else f"shared:{k}"  # unsalted: equal messages
            text = self.words(turn.new_tokens or 1, key)
        if k == 0 and self.salt_sessions:
            tag = f"{self.salt}-{session.session_id}" if self.salt else session.session_id
            if turn.text is None:
                rest = text.split(" ", 1)
                text = tag + (" " + rest[1] if len(rest) > 1 else "")
            else:
                text = tag + " " + text
        return text

    def count(self, messages: list[dict[str, Any]]) -> int | None:
        """The exact prompt tokens of ``messages`` as sent for this API (None without a tokenizer)."""
        tok = self.tokenizer
        if tok is None:
            return None
        if self.api == "chat":
            return int(tok.count_chat(messages))
        return int(tok.count_prompt(completions_text(messages)))


def completions_text(messages: list[dict[str, Any]]) -> str:
    """The completions prompt of a history: the message contents joined by blank lines (a reply's tool calls
    as ``name(arguments)`` after its text: the completions API has no structure for them)."""
    parts = []
    for m in messages:
        text = str(m.get("content") or "")
        for c in m.get("tool_calls") or ():
            fn = c.get("function") or {}
            text += f"{fn.get('name', '')}({fn.get('arguments', '')})"
        parts.append(text)
    return "\n\n".join(parts)


class SessionHistory:
    """One running session's history: builds each turn's request and takes each reply.

    Tool calls round-trip as the chat API carries them (issue 32): a reply's calls stay in its assistant
    message (``tool_calls``; content null when it had no text), and a ``tool`` turn after it sends one
    ``tool`` message per call with that call's ``tool_call_id`` (its result: the turn's new message, split
    by the recorded result lengths or evenly). A reply that should carry a call (the next turn is a
    tool result, or the trace recorded calls) and does not is counted (``tool_calls_missing``) and the
    recorded calls stand in for it, so the next prompt keeps the agent's structure; a reply that called a
    tool where the trace goes on with a user message keeps its text only (``tool_calls_unexpected``).
    """

    def __init__(self, session: Session, prompter: SessionPrompter) -> None:
        self.session = session
        self.prompter = prompter
        self.messages: list[dict[str, Any]] = []
        self._base: list[dict[str, Any]] = []
        if session.system_tokens > 0:
            self._base = [{"role": "system", "content": prompter.system_text(session.system_tokens)}]
        self.messages = list(self._base)
        self.resets = 0
        self.tool_replies = 0  # replies whose actual tool calls went back into the history
        self.tool_calls_missing = 0  # replies that should have called a tool and did not
        self.tool_calls_unexpected = 0  # replies that called a tool where the session goes on with a user turn
        self._pending: list[tuple[str, int | None]] = []  # (tool_call_id, result length) of the last reply's calls

    def spec(self, k: int, index: int) -> RequestSpec:
        """Turn ``k``'s request (``index``: the run's request index): history + its new message."""
        turn = self.session.turns[k]
        if turn.reset and k > 0:
            self.messages = list(self._base)
            self.resets += 1
            self._pending = []
        if turn.role == "tool" and self._pending and k > 0:
            self.messages.extend(self._results(k))
        else:
            role = "user" if turn.role in ("user", "tool") else turn.role
            self.messages.append({"role": role, "content": self.prompter.message_text(self.session, k)})
        self._pending = []
        msgs = tuple(dict(m) for m in self.messages)
        chat = self.prompter.api == "chat"
        return RequestSpec(
            index=index,
            prompt="" if chat else completions_text(self.messages),
            requested_input_tokens=self.prompter.count(self.messages),
            requested_output_tokens=turn.output_tokens,
            messages=msgs if chat else None,
            session_id=self.session.session_id,
        )

    def _results(self, k: int) -> list[dict[str, Any]]:
        """Turn ``k``'s tool results: one ``tool`` message per call of the reply before it."""
        turn = self.session.turns[k]
        total = max(turn.new_tokens or 1, 1)
        known = sum(n for _, n in self._pending if n is not None)
        unknown = [i for i, (_, n) in enumerate(self._pending) if n is None]
        share = max((total - known) // len(unknown), 1) if unknown else 0
        given = turn.text.split() if turn.text is not None else None  # a text replay: its words, shared out
        out = []
        for j, (call_id, n) in enumerate(self._pending):
            if given is not None:
                m = len(self._pending)
                text = " ".join(given[j * len(given) // m : (j + 1) * len(given) // m]) or turn.text or ""
            else:
                words = n if n is not None else share
                text = self.prompter.words(max(words, 1), f"{self.session.session_id}:{k}:result:{j}")
            out.append({"role": "tool", "tool_call_id": call_id, "content": text})
        return out

    def reply(self, k: int, text: str, tool_calls: list[dict[str, Any]] | None = None) -> None:
        """Add turn ``k``'s reply to the history: the actual ``text`` and ``tool_calls`` (or the recorded reply
        when asked), tool calls as the class docstring says."""
        turn = self.session.turns[k]
        turns = self.session.turns
        tool_next = k + 1 < len(turns) and turns[k + 1].role == "tool" and not turns[k + 1].reset
        recorded = self.prompter.use_recorded_replies and turn.reply_text is not None
        if recorded:
            text, tool_calls = turn.reply_text or "", None
        calls: list[dict[str, Any]] = []
        if tool_calls and (tool_next or turn.calls):
            self.tool_replies += 1
            for j, c in enumerate(tool_calls):
                fn = c.get("function") or {}
                call_id = c.get("id") or self._call_id(k, j)
                calls.append({"id": call_id, "type": "function",
                              "function": {"name": fn.get("name") or "", "arguments": fn.get("arguments") or ""}})  # fmt: skip
        elif tool_calls:
            self.tool_calls_unexpected += 1  # the session goes on with a user message: the text only
        elif tool_next or turn.calls:
            if not recorded:
                self.tool_calls_missing += 1
            for j, rc in enumerate(turn.calls or (RecordedCall(),)):
                args = rc.arguments
                if args is None:
                    words = self.prompter.words(rc.arguments_tokens, f"{self.session.session_id}:{k}:args:{j}")
                    args = orjson.dumps({"input": words}).decode()
                calls.append({"id": rc.call_id or self._call_id(k, j), "type": "function",
                              "function": {"name": rc.name, "arguments": args}})  # fmt: skip
        if calls:
            self.messages.append({"role": "assistant", "content": text or None, "tool_calls": calls})
            sizes = [rc.result_tokens for rc in turn.calls]
            self._pending = [(c["id"], sizes[j] if j < len(sizes) else None) for j, c in enumerate(calls)]
        else:
            self.messages.append({"role": "assistant", "content": text})

    def _call_id(self, k: int, j: int) -> str:
        return f"call_{zlib.crc32(self.session.session_id.encode()):08x}_{k}_{j}"


def synthetic_sessions(
    n: int,
    *,
    turns: Any,
    new_tokens: Any,
    output_tokens: Any,
    delay_s: float,
    delay_dist: str = "constant",
    system_tokens: int = 0,
    seed: int = 0,
    first: int = 0,
    tool_share: float = 0.0,
) -> list[Session]:
    """``n`` synthetic sessions (ids ``s<first + i>``): turns per session, per-turn lengths and delays.

    ``turns`` / ``new_tokens`` / ``output_tokens``: :class:`loadgen.workload.lengths.LengthSpec` s
    (session ``i``'s turn count is its ``i``-th draw; turn lengths are drawn per turn);
    ``delay_s``: the mean delay, constant or exponential (``delay_dist``: ``constant`` | ``exp``);
    ``system_tokens``: the shared system prompt every session opens with. Seeded: session ``i`` is
    the same for one seed whatever ``n``; ``tool_share``: each turn after the first is a tool result with
    this probability (the reply before it then carries one recorded call).
    """
    out: list[Session] = []
    for i in range(first, first + n):
        rng = random.Random(f"{seed}:session:{i}")
        n_turns = turns.at(i, seed, "session-turns")
        ts: list[Turn] = []
        for k in range(n_turns):
            j = i * 1009 + k
            d = (
                0.0
                if k == 0 or delay_s <= 0
                else (delay_s if delay_dist == "constant" else rng.expovariate(1.0 / delay_s))
            )
            tool = k > 0 and tool_share > 0 and rng.random() < tool_share
            if tool:  # the reply before a tool result calls the tool
                ts[-1] = replace(ts[-1], calls=(RecordedCall(),))
            ts.append(
                Turn(
                    output_tokens=output_tokens.at(j, seed, "session-output"),
                    new_tokens=new_tokens.at(j, seed, "session-input"),
                    delay_s=d,
                    role="tool" if tool else "user",
                )
            )
        out.append(Session(f"s{i}", tuple(ts), system_tokens=system_tokens))
    return out
