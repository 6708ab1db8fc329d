"""The shell commands a user is shown: README.md's fenced code blocks and ``--help`` epilog examples.

:func:`readme_commands` reads every fenced ``bash``/``sh``/``shell``/``console`` block of a
Markdown text and returns one :class:`ShellCommand` per command: full-line comments are
skipped, ``\\`` continuations are joined, a trailing ``# comment`` is kept apart (it may
carry a CI mark), and the words are split as the shell would (``shlex``).
:func:`help_examples` does the same for the lines of a click command's epilog that start
with ``loadgen `` or ``$ loadgen `` (the examples a ``--help`` page shows).

Two marks in a command's trailing comment say why ``tests/integration/test_readme_commands.py``
does not run it itself: ``not run in CI: REASON`` (a GPU, a remote host, a person) and
``CI runs this itself`` (a command ``.ci/run`` runs as one of its own stages).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from typing import Any

SHELL_LANGS = ("bash", "sh", "shell", "console")
NOT_IN_CI = re.compile(r"not run in CI:\s*(\S.*)$")
CI_ITSELF = "CI runs this itself"
_FENCE = re.compile(r"^\s*(```+|~~~+)\s*([\w+-]*)")


@dataclass
class ShellCommand:
    """One command as written: where, its text (continuations joined), its words and its trailing comment."""

    source: str
    line: int
    text: str
    argv: list[str]
    comment: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def not_in_ci(self) -> str | None:
        """The reason given by a ``# not run in CI: REASON`` mark, or None."""
        m = NOT_IN_CI.search(self.comment)
        return m.group(1).strip() if m else None

    @property
    def ci_itself(self) -> bool:
        """True when the comment says ``CI runs this itself``."""
        return CI_ITSELF in self.comment

    @property
    def ident(self) -> str:
        """A short test id: the line and the program (and subcommand), e.g. ``L57-loadgen-run``."""
        words = [self.argv[0].rsplit("/", 1)[-1]] if self.argv else ["empty"]
        if self.argv and self.argv[0] == "loadgen" and len(self.argv) > 1:
            words += [w for w in self.argv[1:3] if re.fullmatch(r"[a-z][a-z-]*", w)]
        return f"L{self.line}-" + "-".join(words)


def split_comment(line: str) -> tuple[str, str]:
    """``(code, comment)``: a ``#`` starting a word outside quotes begins the comment, as in bash."""
    quote = ""
    escaped = False
    for i, ch in enumerate(line):
        if escaped:
            escaped = False
            continue
        if ch == "\\" and quote != "'":
            escaped = True
            continue
        if quote:
            if ch == quote:
                quote = ""
            continue
        if ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip(), line[i + 1 :].strip()
    return line.rstrip(), ""


def code_blocks(markdown: str, langs: tuple[str, ...] = SHELL_LANGS) -> list[tuple[int, list[str]]]:
    """``(line number of the block's first line, lines)`` of each fenced block in one of ``langs``."""
    blocks: list[tuple[int, list[str]]] = []
    lines = markdown.splitlines()
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, lang = m.group(1), m.group(2).lower()
        body: list[str] = []
        j = i + 1
        while j < len(lines) and not lines[j].strip().startswith(fence[:3]):
            body.append(lines[j])
            j += 1
        if lang in langs:
            blocks.append((i + 2, body))
        i = j + 1
    return blocks


def commands_of(lines: list[str], first_line: int, source: str) -> list[ShellCommand]:
    """The commands of a block of shell lines (``first_line``: the 1-based number of ``lines[0]``)."""
    out: list[ShellCommand] = []
    parts: list[str] = []
    comments: list[str] = []
    start = 0
    for k, raw in enumerate(lines):
        stripped = raw.strip()
        if not parts and (not stripped or stripped.startswith("#")):
            continue
        if stripped.startswith("$ "):
            stripped = stripped[2:]
        code, comment = split_comment(stripped)
        if not parts:
            start = first_line + k
        if comment:
            comments.append(comment)
        cont = code.endswith("\\")
        parts.append(code[:-1].rstrip() if cont else code)
        if cont and not comment:
            continue
        text = " ".join(p for p in parts if p)
        out.append(ShellCommand(source, start, text, shlex.split(text), " ".join(comments)))
        parts, comments = [], []
    return out


def readme_commands(markdown: str, source: str = "README.md") -> list[ShellCommand]:
    """Every command of the Markdown text's shell code blocks, in order."""
    out: list[ShellCommand] = []
    for first, lines in code_blocks(markdown):
        out.extend(commands_of(lines, first, source))
    return out


def help_examples(group: Any) -> list[ShellCommand]:
    """Example commands in the epilogs of a click group's commands (recursively), in order.

    A line of an epilog is an example when, stripped, it starts with ``loadgen `` or
    ``$ loadgen ``; ``line`` is its 1-based line within that epilog.
    """
    out: list[ShellCommand] = []

    def walk(cmd: Any, path: str) -> None:
        lines = (getattr(cmd, "epilog", None) or "").splitlines()
        picked = [(k, ln) for k, ln in enumerate(lines) if ln.strip().removeprefix("$ ").startswith("loadgen ")]
        for k, ln in picked:
            out.extend(commands_of([ln], k + 1, f"{path} --help"))
        for name, sub in sorted((getattr(cmd, "commands", None) or {}).items()):
            walk(sub, f"{path} {name}")

    walk(group, "loadgen")
    return out
