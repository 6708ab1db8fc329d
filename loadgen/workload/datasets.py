"""Prompt data sets: ShareGPT JSON, and loadgen JSONL used as a list of prompts.

* ShareGPT: a JSON list of ``{"conversations": [{"from": "human"|"gpt", "value": str}, ...]}``
  (``user``/``assistant`` are accepted too). The first human turn is the prompt;
  the turn right after it, when it is a gpt turn, gives the output length (its
  token count with a tokenizer, else its word count). Entries without a human
  turn followed by a reply are skipped and counted (as vLLM ``bench`` filters them).
* JSONL: loadgen's trace format (``prompt`` or ``messages``, optional
  ``output_tokens``, ``input_tokens``); timestamps, if any, are ignored.

Malformed structure raises :class:`InputFileError` with the line where the
entry starts and the field.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loadgen.core.errors import ConfigError, InputFileError

__all__ = ["DatasetEntry", "read_dataset", "read_sharegpt"]

_HUMAN = ("human", "user")
_GPT = ("gpt", "assistant", "chatgpt", "bard", "model")


@dataclass(frozen=True, slots=True)
class DatasetEntry:
    """One prompt of a data set. ``output_text`` is the reference reply (ShareGPT) or None;
    ``output_tokens``/``input_tokens`` are lengths given by the file (-1 when not)."""

    prompt: str | None
    messages: tuple[dict[str, Any], ...] | None
    line: int
    output_text: str | None = None
    output_tokens: int = -1
    input_tokens: int = -1
    session_id: str | None = None


def _entries(text: str, path: str) -> list[tuple[int, Any]]:
    """(line, value) of each element of a top-level JSON list."""
    dec = json.JSONDecoder()
    n = len(text)
    i = 0
    while i < n and text[i] in " \t\r\n\ufeff":
        i += 1
    if i >= n or text[i] != "[":
        raise InputFileError(path, 1, "row", "a ShareGPT file must be a JSON list of entries")
    i += 1
    out: list[tuple[int, Any]] = []
    line = 1 + text.count("\n", 0, i)
    last = i
    expect_value = True
    while True:
        while i < n and text[i] in " \t\r\n":
            i += 1
        if i >= n:
            raise InputFileError(path, line + text.count("\n", last, i), "row", "unterminated JSON list")
        if text[i] == "]" and (expect_value is False or not out):
            return out
        if not expect_value:
            if text[i] != ",":
                raise InputFileError(path, line + text.count("\n", last, i), "row", "expected ',' between entries")
            i += 1
            expect_value = True
            continue
        line += text.count("\n", last, i)
        last = i
        try:
            value, end = dec.raw_decode(text, i)
        except json.JSONDecodeError as exc:
            raise InputFileError(path, exc.lineno, "row", f"not valid JSON: {exc.msg}") from None
        except RecursionError:
            raise InputFileError(path, line, "row", "nested too deeply (over the JSON parser's limit)") from None
        except ValueError as exc:  # an integer of over 4,300 digits
            raise InputFileError(path, line, "row", f"not valid JSON: {exc}") from None
        out.append((line, value))
        i = end
        expect_value = False


def read_sharegpt(path: str, *, max_entries: int | None = None) -> tuple[list[DatasetEntry], int]:
    """(entries, skipped) of a ShareGPT file. Raises InputFileError on a malformed entry."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read data set {path}: {exc}") from None
    out: list[DatasetEntry] = []
    skipped = 0
    for k, (line, e) in enumerate(_entries(text, path)):
        if not isinstance(e, dict):
            raise InputFileError(path, line, f"[{k}]", "each entry must be an object")
        conv = e.get("conversations")
        if not isinstance(conv, list):
            raise InputFileError(path, line, f"[{k}].conversations", "missing or not a list")
        turns: list[tuple[str, str]] = []
        for j, t in enumerate(conv):
            if not isinstance(t, dict) or not isinstance(t.get("from"), str) or not isinstance(t.get("value"), str):
                raise InputFileError(
                    path, line, f"[{k}].conversations[{j}]", 'each turn must be {"from": str, "value": str}'
                )
            turns.append((t["from"].lower(), t["value"]))
        h = next((j for j, (who, v) in enumerate(turns) if who in _HUMAN and v.strip()), None)
        if h is None or h + 1 >= len(turns) or turns[h + 1][0] not in _GPT:
            skipped += 1
            continue
        out.append(DatasetEntry(turns[h][1], None, line, output_text=turns[h + 1][1]))
        if max_entries is not None and len(out) >= max_entries:
            break
    if not out:
        raise ConfigError(f"{path}: no usable prompt (need a human turn followed by a reply)")
    return out, skipped


def read_dataset(path: str, *, max_entries: int | None = None) -> tuple[list[DatasetEntry], int, str]:
    """(entries, skipped, kind) of a data set: ShareGPT JSON (``[``) or loadgen JSONL."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"data set not found: {path}")
    with open(p, "rb") as fh:
        head = fh.read(4096).lstrip(b"\xef\xbb\xbf \t\r\n")
    if head.startswith(b"["):
        entries, skipped = read_sharegpt(path, max_entries=max_entries)
        return entries, skipped, "sharegpt"
    from loadgen.workload.traces import read_trace

    tr = read_trace(path, "loadgen", max_requests=max_entries)
    rows = []
    for i in range(len(tr)):
        rows.append(
            DatasetEntry(
                tr.prompts[i] if tr.prompts else None,
                tr.messages[i] if tr.messages else None,
                int(tr.line[i]),
                output_tokens=int(tr.output_tokens[i]),
                input_tokens=int(tr.input_tokens[i]),
                session_id=tr.session_ids[i] if tr.session_ids else None,
            )
        )
    return rows, tr.skipped_zero_output, "jsonl"
