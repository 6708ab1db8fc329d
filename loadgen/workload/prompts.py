"""Synthetic prompts of a requested length.

Without a tokenizer the length is approximate: one word of the built-in corpus is
counted as one token (the simulated endpoint counts prompt tokens the same way;
real servers will differ, so such input counts are marked estimated). A per-run
salt makes prompts differ between runs, so a warm prefix cache cannot flatter a
later run.
"""

from __future__ import annotations

import random

_WORDS = (
    "the quick brown fox jumps over a lazy dog while seven bright stars "
    "shine above quiet hills and rivers carry old stories toward distant seas "
    "people build machines that learn from text and answer questions about "
    "history science music cities weather markets gardens and time itself"
).split()


def synthetic_prompt(n_tokens: int, rng: random.Random, salt: str = "") -> str:
    """A prompt of ``n_tokens`` whitespace-separated words (first word carries the salt)."""
    n = max(int(n_tokens), 1)
    words = [rng.choice(_WORDS) for _ in range(n)]
    if salt:
        words[0] = f"{salt}"
    return " ".join(words)
