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
import zlib
from dataclasses import dataclass
from typing import Any

from loadgen.core.types import RequestSpec
from loadgen.workload.prompts import corpus_words

__all__ = ["Session", "SessionHistory", "SessionPrompter", "Turn"]


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
    history before this turn.
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


class SessionPrompter:
    """Builds the text of new messages and the shared system prompt, and counts prompts exactly.

    ``api``: ``chat`` (messages) or ``completions`` (one text); ``tokenizer``: a
    :class:`loadgen.workload.tokenizer.Tokenizer` for exact counts (None: no count);
    ``salt``: the run's salt; ``salt_sessions``: prefix each session's first message with its
    own salt; ``seed``: where in the corpus each message's words come from.
    """

    def __init__(
        self,
        *,
        api: str = "chat",
        tokenizer: Any = None,
        salt: str = "",
        salt_sessions: bool = True,
        seed: int = 0,
        use_recorded_replies: bool = False,
    ) -> None:
        self.api = api
        self.tokenizer = tokenizer
        self.salt = salt
        self.salt_sessions = salt_sessions
        self.seed = seed
        self.use_recorded_replies = use_recorded_replies
        self._system: dict[int, str] = {}

    def words(self, n: int, key: str) -> str:
        """``n`` corpus words from a position fixed by (seed, ``key``)."""
        words = corpus_words()
        pos = zlib.crc32(f"{self.seed}:{key}".encode()) % len(words)
        return " ".join(words[(pos + k) % len(words)] for k in range(max(n, 1)))

    def system_text(self, n_tokens: int) -> str:
        """The run's shared system prompt of ``n_tokens`` words (the run's salt first)."""
        text = self._system.get(n_tokens)
        if text is None:
            body = self.words(n_tokens, "system")
            if self.salt:
                body = self.salt + " " + body.split(" ", 1)[-1] if n_tokens > 1 else self.salt
            text = self._system[n_tokens] = body
        return text

    def message_text(self, session: Session, k: int) -> str:
        """Turn ``k``'s new message (its text, or ``new_tokens`` words; the session salt first on turn 0)."""
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
    """The completions prompt of a history: the message contents joined by blank lines."""
    return "\n\n".join(str(m["content"]) for m in messages)


class SessionHistory:
    """One running session's history: builds each turn's request and takes each reply."""

    def __init__(self, session: Session, prompter: SessionPrompter) -> None:
        self.session = session
        self.prompter = prompter
        self.messages: list[dict[str, Any]] = []
        self._base: list[dict[str, Any]] = []
        if session.system_tokens > 0:
            self._base = [{"role": "system", "content": prompter.system_text(session.system_tokens)}]
        self.messages = list(self._base)
        self.resets = 0

    def spec(self, k: int, index: int) -> RequestSpec:
        """Turn ``k``'s request (``index``: the run's request index): history + its new message."""
        turn = self.session.turns[k]
        if turn.reset and k > 0:
            self.messages = list(self._base)
            self.resets += 1
        role = "user" if turn.role in ("user", "tool") else turn.role
        self.messages.append({"role": role, "content": self.prompter.message_text(self.session, k)})
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

    def reply(self, k: int, text: str) -> None:
        """Add turn ``k``'s reply to the history: the actual ``text`` (or the recorded reply when asked)."""
        turn = self.session.turns[k]
        if self.prompter.use_recorded_replies and turn.reply_text is not None:
            text = turn.reply_text
        self.messages.append({"role": "assistant", "content": text})


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
) -> list[Session]:
    """``n`` synthetic sessions (ids ``s<first + i>``): turns per session, per-turn lengths and delays.

    ``turns`` / ``new_tokens`` / ``output_tokens``: :class:`loadgen.workload.lengths.LengthSpec` s
    (session ``i``'s turn count is its ``i``-th draw; turn lengths are drawn per turn);
    ``delay_s``: the mean delay, constant or exponential (``delay_dist``: ``constant`` | ``exp``);
    ``system_tokens``: the shared system prompt every session opens with. Seeded: session ``i`` is
    the same for one seed whatever ``n``.
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
            ts.append(
                Turn(
                    output_tokens=output_tokens.at(j, seed, "session-output"),
                    new_tokens=new_tokens.at(j, seed, "session-input"),
                    delay_s=d,
                )
            )
        out.append(Session(f"s{i}", tuple(ts), system_tokens=system_tokens))
    return out
