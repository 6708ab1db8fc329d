"""Prompts of an exact token count, built from natural text shipped with loadgen.

The corpus (``loadgen/data/corpus.txt``) is original English prose written for
this project and licensed with it. A prompt is a list of *segments*; each is a
short tag (the per-run salt and a key, so prompts differ between runs and
between requests) followed by corpus words from a seeded position.

With a tokenizer, the corpus is split into units (one word with its leading
space) whose token ids come from tokenizing the corpus in context, so units
concatenate without merging at their boundaries. A segment of ``n`` tokens takes
whole units while they fit and fills the rest with single-token words. The
prompt is then re-tokenized as the server will count it (completions: special
tokens included, :meth:`Tokenizer.count_prompt`; chat: the templated count,
:meth:`Tokenizer.count_chat`) and, if a boundary merged after all, the last
segment is lengthened or shortened until the count is exact (at most 8 tries;
then the nearest count is kept, marked ``exact=False``, and its real count
recorded). The shortest prompt is one content token: a request for fewer tokens
than the special tokens or the chat template take plus one gets that shortest
prompt, marked not exact. With ``prompt_format="token-ids"`` the ids are sent and the count is
exact by construction (the post-processor's special tokens included).

Without a tokenizer one corpus word counts as one token (the simulated endpoint
counts words, and 4 tokens per chat message, so against it the counts are
exact; against a real server they are estimates, ``estimated=True``).

Cost: checking a text prompt re-tokenizes it once (a few microseconds per
prompt token); token-id prompts need no check, which matters for long Mooncake
rows (``--prompt-format token-ids``).

Shared prefixes: a segment is fixed by (tag, position, length) and cached, so
every request of a prefix group (or every Mooncake row naming a hash id) carries
identical text and identical tokens for it; segments begin at a word boundary.
"""

from __future__ import annotations

import random
import secrets
import zlib
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

import numpy as np

from loadgen.core.errors import ConfigError
from loadgen.workload.tokenizer import Tokenizer

__all__ = ["CHAT_WORD_OVERHEAD", "Prompt", "PromptBuilder", "corpus_words", "new_salt", "synthetic_prompt"]

CHAT_WORD_OVERHEAD = 4
"""Without a tokenizer: tokens counted per chat message for the template (as the sim counts)."""

_FIX_TRIES = 8
_CACHE_SEGMENTS = 20_000
"""Shared segments (prefixes, Mooncake blocks) kept built; older ones are rebuilt on demand."""


@lru_cache(maxsize=1)
def corpus_text() -> str:
    """The shipped corpus (original prose written for loadgen)."""
    return (resources.files("loadgen") / "data" / "corpus.txt").read_text(encoding="utf-8")


@lru_cache(maxsize=1)
def corpus_words() -> tuple[str, ...]:
    return tuple(corpus_text().split())


def new_salt() -> str:
    """A fresh per-run salt: 6 random hex digits."""
    return secrets.token_hex(3)


def synthetic_prompt(n_tokens: int, rng: random.Random, salt: str = "") -> str:
    """``n_tokens`` corpus words from a random position (the first word is ``salt`` when given)."""
    words = corpus_words()
    n = max(int(n_tokens), 1)
    pos = rng.randrange(len(words))
    out = [words[(pos + k) % len(words)] for k in range(n)]
    if salt:
        out[0] = salt
    return " ".join(out)


def _pos(seed: int, kind: str, key: object, n: int) -> int:
    return zlib.crc32(f"{seed}:{kind}:{key}".encode()) % n


@dataclass(frozen=True, slots=True)
class Prompt:
    """A built prompt. ``tokens`` is what the server counts (templated for chat, special
    tokens included); ``content_tokens`` the prompt text alone: ``tokens`` less the
    special tokens (completions) or less the template's count for one empty user
    message (chat). ``exact``: ``tokens`` is the requested count."""

    text: str
    messages: tuple[dict[str, Any], ...] | None
    token_ids: tuple[int, ...] | None
    tokens: int
    content_tokens: int
    exact: bool
    estimated: bool


@dataclass(frozen=True, slots=True)
class _Seg:
    tag: str
    pos: int
    ntok: int
    first: bool


class _Units:
    """Corpus units (a word and its leading space) with their in-context token ids."""

    def __init__(self, tok: Tokenizer) -> None:
        words = corpus_words()
        texts = [" " + w for w in words]
        starts = np.cumsum([0] + [len(t) for t in texts])
        ids, offsets = tok.encode_offsets("".join(texts))
        st = np.array([o[0] for o in offsets], dtype=np.int64)
        en = np.array([max(o[1] - 1, o[0]) for o in offsets], dtype=np.int64)
        u_start = np.searchsorted(starts, st, side="right") - 1
        u_end = np.searchsorted(starts, en, side="right") - 1
        cut_ok = np.ones(len(texts) + 1, dtype=bool)  # cut_ok[k]: a unit may start at word k
        for a, b in zip(u_start[u_start != u_end], u_end[u_start != u_end]):
            cut_ok[a + 1 : b + 1] = False
        self.texts: list[str] = []
        self.ids: list[tuple[int, ...]] = []
        groups = np.flatnonzero(cut_ok[: len(texts)])  # merged units start at these words
        order = np.searchsorted(groups, u_start, side="right") - 1
        per: list[list[int]] = [[] for _ in groups]
        for tid, g in zip(ids, order):
            per[g].append(tid)
        bounds = list(groups) + [len(texts)]
        for k in range(len(groups)):
            self.texts.append("".join(texts[bounds[k] : bounds[k + 1]]))
            self.ids.append(tuple(per[k]))
        self.lens = np.array([len(x) for x in self.ids], dtype=np.int64)
        seen: set[str] = set()
        self.fillers: list[int] = []
        for k, (t, n) in enumerate(zip(self.texts, self.lens)):
            w = t.strip()
            if n == 1 and w.isalpha() and w.islower() and w not in seen:
                seen.add(w)
                self.fillers.append(k)
        # Doubled views for slicing across the corpus end without copying per prompt.
        self.joined: list[str] = self.texts + self.texts
        self.cum = np.concatenate([[0], np.cumsum(np.concatenate([self.lens, self.lens]))])
        self.flat: list[int] = [t for unit in self.ids for t in unit] * 2
        self.total = int(self.lens.sum())
        if not self.fillers or (self.lens == 0).any():
            raise ConfigError(f"tokenizer {tok.path}: cannot build exact-length prompts from the corpus")

    def __len__(self) -> int:
        return len(self.texts)


class PromptBuilder:
    """Builds :class:`Prompt` values for one run (one seed, one salt, one API).

    ``api`` is ``completions`` or ``chat``; ``prompt_format`` ``text`` or
    ``token-ids`` (completions with a tokenizer only). Deterministic for a given
    (tokenizer, api, prompt_format, seed, salt): request keys pick corpus
    positions and tags.
    """

    def __init__(
        self,
        tokenizer: Tokenizer | None = None,
        *,
        api: str = "completions",
        prompt_format: str = "text",
        seed: int = 0,
        salt: str = "",
    ) -> None:
        if api not in ("completions", "chat"):
            raise ConfigError(f"unknown api {api!r}")
        if prompt_format not in ("text", "token-ids"):
            raise ConfigError(f"unknown prompt format {prompt_format!r}; choose text or token-ids")
        if prompt_format == "token-ids" and (tokenizer is None or api != "completions"):
            raise ConfigError("--prompt-format token-ids needs --tokenizer and the completions API")
        self.tok = tokenizer
        self.api = api
        self.prompt_format = prompt_format
        self.seed = seed
        self.salt = salt
        self._units = _Units(tokenizer) if tokenizer is not None else None
        self._cache: dict[_Seg, tuple[str, tuple[int, ...]]] = {}
        self.built = 0
        self.not_exact = 0
        if tokenizer is None:
            self.overhead = CHAT_WORD_OVERHEAD if api == "chat" else 0
        elif api == "chat":
            self.overhead = tokenizer.count_chat([{"role": "user", "content": ""}])
        else:
            self.overhead = len(tokenizer.special_prefix) + len(tokenizer.special_suffix)

    # -- public builders ----------------------------------------------------------------

    def content_budget(self, n_tokens: int) -> int:
        """Content tokens for a prompt the server should count as ``n_tokens`` (>= 1)."""
        return max(int(n_tokens) - self.overhead, 1)

    def synthetic(
        self, n_tokens: int, key: object, *, prefix_group: int | None = None, prefix_tokens: int = 0
    ) -> Prompt:
        """A unique prompt of ``n_tokens`` (as the server counts), after a shared prefix if asked.

        The prefix of group ``g`` is ``prefix_tokens`` content tokens, identical in
        every request of the group; the rest is unique to ``key`` (at least 1 token,
        so a request shorter than the prefix grows to prefix + 1).
        """
        c = self.content_budget(n_tokens)
        n = self._n_units()
        segs: list[_Seg] = []
        if prefix_tokens > 0 and prefix_group is not None:
            segs.append(
                _Seg(self._tag(f"p{prefix_group}"), _pos(self.seed, "prefix", prefix_group, n), prefix_tokens, True)
            )
            c = max(c - prefix_tokens, 1)
        segs.append(_Seg(self._tag(key), _pos(self.seed, "req", key, n), c, not segs))
        return self._finish(segs, int(n_tokens), cache_upto=len(segs) - 1)

    def from_blocks(self, n_tokens: int, hash_ids: Any, *, block_tokens: int = 512, generation: int = 0) -> Prompt:
        """A Mooncake row: block ``h`` is a fixed ``block_tokens`` segment per hash id.

        Blocks are laid out until the content budget is spent, so the last one is
        truncated to the row's length (and, when the template/special tokens take
        room, trailing blocks are shortened first). ``generation`` (the loop
        repetition) gives a looped window fresh blocks.
        """
        c = self.content_budget(n_tokens)
        n = self._n_units()
        segs: list[_Seg] = []
        left = c
        for j, h in enumerate(hash_ids):
            if left <= 0:
                break
            take = min(block_tokens, left)
            key = f"{generation}.{int(h)}"
            segs.append(_Seg(self._tag(f"b{key}"), _pos(self.seed, "block", key, n), take, j == 0))
            left -= take
        if left > 0:  # more tokens than blocks (not a valid Mooncake row, but be total)
            segs.append(_Seg(self._tag(f"r{generation}"), _pos(self.seed, "rest", generation, n), left, not segs))
        full = sum(1 for s in segs if s.ntok == block_tokens)
        return self._finish(segs, int(n_tokens), cache_upto=full)

    def literal(self, text: str | None = None, messages: tuple[dict[str, Any], ...] | None = None) -> Prompt:
        """A prompt given verbatim (data sets, loadgen JSONL); counted, never salted."""
        if messages is not None and text is None:
            text = "\n".join(str(m.get("content") or "") for m in messages)
        assert text is not None
        if self.api == "chat":
            msgs = messages if messages is not None else ({"role": "user", "content": text},)
            if self.tok is None:
                tokens = len(" ".join(str(m.get("content") or "") for m in msgs).split()) + CHAT_WORD_OVERHEAD * len(
                    msgs
                )
                return Prompt(text, msgs, None, tokens, len(text.split()), True, True)
            return Prompt(text, msgs, None, self.tok.count_chat(msgs), self.tok.count(text), True, False)
        if self.tok is None:
            n = len(text.split())
            return Prompt(text, None, None, n, n, True, True)
        ids = None
        if self.prompt_format == "token-ids":
            ids = tuple(self.tok.encode(text, add_special_tokens=True))
        return Prompt(text, None, ids, self.tok.count_prompt(text), self.tok.count(text), True, False)

    # -- internals ------------------------------------------------------------------------

    def _tag(self, key: object) -> str:
        return f"{self.salt}-{key}" if self.salt else ""

    def _n_units(self) -> int:
        return len(self._units) if self._units is not None else len(corpus_words())

    def _segment(self, seg: _Seg, cache: bool) -> tuple[str, tuple[int, ...]]:
        """A segment's text (and ids, for token-id prompts): a pure function of ``seg``."""
        if cache:
            hit = self._cache.get(seg)
            if hit is not None:
                return hit
        out = self._render_words(seg) if self._units is None else self._render_units(seg)
        if cache:
            if len(self._cache) >= _CACHE_SEGMENTS:
                del self._cache[next(iter(self._cache))]
            self._cache[seg] = out
        return out

    def _render_words(self, seg: _Seg) -> tuple[str, tuple[int, ...]]:
        words = corpus_words()
        n = seg.ntok
        out: list[str] = []
        if seg.tag and n >= 1:
            out.append(seg.tag)
        k = seg.pos % len(words)
        need = n - len(out)
        while need > 0:  # whole slices of the corpus, wrapping round (a 4k-word prompt: ~30 µs)
            piece = words[k : k + need]
            out.extend(piece)
            need -= len(piece)
            k = 0
        text = " ".join(out)
        return (text if seg.first else " " + text), ()

    def _render_units(self, seg: _Seg) -> tuple[str, tuple[int, ...]]:
        u = self._units
        assert u is not None and self.tok is not None
        want_ids = self.prompt_format == "token-ids"
        pieces: list[Any] = []
        ids: list[int] = []
        left = seg.ntok
        if seg.tag:
            tag = seg.tag if seg.first else " " + seg.tag
            tag_ids = self.tok.encode(tag)
            if len(tag_ids) < left:
                pieces.append(tag)
                ids.extend(tag_ids)
                left -= len(tag_ids)
        pos = seg.pos % len(u)
        while left >= u.total:  # whole passes over the corpus
            pieces.append(u.joined[pos : pos + len(u)])
            if want_ids:
                ids.extend(u.flat[u.cum[pos] : u.cum[pos + len(u)]])
            left -= u.total
        m = int(np.searchsorted(u.cum, u.cum[pos] + left, side="right")) - 1 - pos
        if m > 0:
            pieces.append(u.joined[pos : pos + m])
            if want_ids:
                ids.extend(u.flat[u.cum[pos] : u.cum[pos + m]])
            left -= int(u.cum[pos + m] - u.cum[pos])
        for j in range(left):
            f = u.fillers[(pos + m + j) % len(u.fillers)]
            pieces.append(u.texts[f])
            ids.extend(u.ids[f])
        return "".join(p if isinstance(p, str) else "".join(p) for p in pieces), tuple(ids)

    def _count(self, content: str) -> int:
        assert self.tok is not None
        if self.api == "chat":
            return self.tok.count_chat([{"role": "user", "content": content}])
        return self.tok.count_prompt(content)

    def _assemble(self, segs: list[_Seg], cache_upto: int) -> tuple[str, list[int]]:
        texts: list[str] = []
        ids: list[int] = []
        for k, s in enumerate(segs):
            t, i = self._segment(s, cache=k < cache_upto)
            texts.append(t)
            ids.extend(i)
        return "".join(texts), ids

    def _finish(self, segs: list[_Seg], target: int, cache_upto: int) -> Prompt:
        self.built += 1
        if self.tok is None:
            text, _ = self._assemble(segs, cache_upto)
            # corpus words hold no white space, and a segment of n words renders n (its tag, one
            # word, in place of the first): counted by construction, not by splitting ~6 bytes a word
            # (1 ms at 32k words); a tag with white space in it (a salt given so) is counted by splitting
            if all(len(sg.tag.split()) == 1 for sg in segs if sg.tag):
                content = sum(sg.ntok for sg in segs if sg.ntok > 0)
            else:
                content = len(text.split())
            tokens = content + self.overhead
            return self._make(text, None, tokens, content, tokens == target, True)
        if self.prompt_format == "token-ids":
            text, ids = self._assemble(segs, cache_upto)
            full = (*self.tok.special_prefix, *ids, *self.tok.special_suffix)
            return self._make(text, full, len(full), len(ids), len(full) == target, False)
        best: tuple[int, str] | None = None
        last = segs[-1]
        for _ in range(_FIX_TRIES):
            text, _ids = self._assemble(segs, cache_upto)
            got = self._count(text)
            if best is None or abs(got - target) < abs(best[0] - target):
                best = (got, text)
            if got == target:
                break
            ntok = segs[-1].ntok + (target - got)
            if ntok < 1:
                break
            segs[-1] = _Seg(last.tag, last.pos, ntok, last.first)
        assert best is not None
        got, text = best
        content = got - self.overhead  # chat: templated count less the empty-message overhead
        return self._make(text, None, got, content, got == target, False)

    def _make(
        self, text: str, ids: tuple[int, ...] | None, tokens: int, content: int, exact: bool, est: bool
    ) -> Prompt:
        if not exact:
            self.not_exact += 1
        msgs = ({"role": "user", "content": text},) if self.api == "chat" else None
        return Prompt(text, msgs, ids, tokens, content, exact, est)
