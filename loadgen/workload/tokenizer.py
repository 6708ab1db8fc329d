"""Tokenizer adapter: Hugging Face ``tokenizer.json`` (+ ``tokenizer_config.json``) via ``tokenizers``.

``tokenizers`` is an optional extra (``pip install 'loadgen[tokenizers]'``),
imported only when a tokenizer is loaded. Counts, as a vLLM-style server counts
``usage.prompt_tokens``:

* :meth:`Tokenizer.count`: content tokens of a text, no special tokens.
* :meth:`Tokenizer.count_prompt`: a completions prompt, with the special tokens
  the tokenizer's post-processor adds (e.g. BOS).
* :meth:`Tokenizer.count_chat`: chat messages rendered with the chat template
  (``add_generation_prompt`` on), tokenized *without* the post-processor's
  special tokens, as vLLM does for chat (the template writes its own).

Chat templates are rendered with ``jinja2`` when it is installed (as
transformers does: trim_blocks, lstrip_blocks, a sandbox). Without ``jinja2``
a ChatML template (one that uses ``<|im_start|>``) is rendered by a built-in
renderer; any other template then needs ``jinja2``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from loadgen.core.errors import ConfigError

__all__ = ["Tokenizer", "load_tokenizer", "render_chatml"]


def render_chatml(messages: Sequence[dict[str, Any]], add_generation_prompt: bool = True) -> str:
    """ChatML: ``<|im_start|>{role}\\n{content}<|im_end|>\\n`` per message, then the assistant header."""
    parts = [f"<|im_start|>{m['role']}\n{_content_text(m.get('content'))}<|im_end|>\n" for m in messages]
    if add_generation_prompt:
        parts.append("<|im_start|>assistant\n")
    return "".join(parts)


def _content_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    raise ValueError("message content must be a string, a list of parts or null")


def _token_text(value: object) -> str | None:
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


class Tokenizer:
    """A loaded tokenizer; see the module docstring for what each count means."""

    def __init__(self, tok: Any, *, path: str, config: dict[str, Any] | None = None) -> None:
        self._tok = tok
        self.path = path
        config = config or {}
        template = config.get("chat_template")
        if isinstance(template, list):  # [{"name": ..., "template": ...}]
            named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
            template = named.get("default") or next(iter(named.values()), None)
        self.chat_template: str | None = template if isinstance(template, str) else None
        self.bos_token = _token_text(config.get("bos_token"))
        self.eos_token = _token_text(config.get("eos_token"))
        self._jinja: Any = None
        self.chat_renderer = self._pick_renderer()
        with_sp = tok.encode("a", add_special_tokens=True).ids
        without = tok.encode("a", add_special_tokens=False).ids
        k = _find(with_sp, without)
        self.special_prefix: tuple[int, ...] = tuple(with_sp[:k]) if k >= 0 else ()
        self.special_suffix: tuple[int, ...] = tuple(with_sp[k + len(without) :]) if k >= 0 else ()

    def _pick_renderer(self) -> str | None:
        if self.chat_template is None:
            return None
        try:
            import jinja2.sandbox  # noqa: F401
        except ImportError:
            if "<|im_start|>" in self.chat_template:
                return "builtin-chatml"
            return None
        return "jinja2"

    # -- counts -----------------------------------------------------------------------

    def encode(self, text: str, *, add_special_tokens: bool = False) -> list[int]:
        """Token ids of ``text`` (no special tokens unless asked)."""
        return list(self._tok.encode(text, add_special_tokens=add_special_tokens).ids)

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [list(e.ids) for e in self._tok.encode_batch(texts, add_special_tokens=False)]

    def encode_offsets(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        """Ids and character offsets of ``text`` (no special tokens)."""
        enc = self._tok.encode(text, add_special_tokens=False)
        return list(enc.ids), list(enc.offsets)

    def decode(self, ids: Sequence[int]) -> str:
        return str(self._tok.decode(list(ids), skip_special_tokens=False))

    def count(self, text: str) -> int:
        """Content tokens of ``text``: no special tokens."""
        return len(self._tok.encode(text, add_special_tokens=False).ids)

    def count_prompt(self, text: str) -> int:
        """Tokens a server counts for a completions prompt: special tokens included."""
        return len(self._tok.encode(text, add_special_tokens=True).ids)

    def render_chat(self, messages: Sequence[dict[str, Any]], add_generation_prompt: bool = True) -> str:
        """The chat template applied to ``messages``. Raises ConfigError without a usable template."""
        if self.chat_renderer is None:
            if self.chat_template is None:
                raise ConfigError(f"tokenizer {self.path}: no chat_template in tokenizer_config.json")
            raise ConfigError(f"tokenizer {self.path}: rendering this chat template needs jinja2 (pip install jinja2)")
        if self.chat_renderer == "builtin-chatml":
            return render_chatml(messages, add_generation_prompt)
        if self._jinja is None:
            import jinja2.sandbox

            def raise_exception(message: str) -> None:
                raise ConfigError(f"chat template: {message}")

            env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
            env.globals["raise_exception"] = raise_exception
            self._jinja = env.from_string(self.chat_template or "")
        return str(
            self._jinja.render(
                messages=list(messages),
                add_generation_prompt=add_generation_prompt,
                bos_token=self.bos_token or "",
                eos_token=self.eos_token or "",
            )
        )

    def count_chat(self, messages: Sequence[dict[str, Any]]) -> int:
        """Templated prompt tokens of chat ``messages`` (generation prompt included)."""
        return len(self._tok.encode(self.render_chat(messages), add_special_tokens=False).ids)

    def describe(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "special_prefix_tokens": len(self.special_prefix),
            "special_suffix_tokens": len(self.special_suffix),
            "chat_template": self.chat_renderer,
        }


def _find(hay: list[int], needle: list[int]) -> int:
    n = len(needle)
    for i in range(len(hay) - n + 1):
        if hay[i : i + n] == needle:
            return i
    return -1


def load_tokenizer(path: str | Path) -> Tokenizer:
    """Load a tokenizer directory (``tokenizer.json`` + optional ``tokenizer_config.json``) or file.

    Raises ConfigError when ``tokenizers`` is missing or the files are unusable.
    """
    p = Path(path)
    file = p / "tokenizer.json" if p.is_dir() else p
    if not file.is_file():
        raise ConfigError(f"tokenizer not found: {file}")
    try:
        from tokenizers import Tokenizer as HFTokenizer
    except ImportError:
        raise ConfigError("--tokenizer needs the 'tokenizers' package: pip install 'loadgen[tokenizers]'") from None
    try:
        tok = HFTokenizer.from_file(str(file))
    except Exception as exc:  # tokenizers raises plain Exception subclasses
        raise ConfigError(f"cannot load tokenizer {file}: {exc}") from None
    config: dict[str, Any] = {}
    cfg_file = file.parent / "tokenizer_config.json"
    if cfg_file.is_file():
        try:
            config = json.loads(cfg_file.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ConfigError(f"cannot read {cfg_file}: {exc}") from None
        if not isinstance(config, dict):
            raise ConfigError(f"{cfg_file}: expected a JSON object")
    return Tokenizer(tok, path=str(p), config=config)
