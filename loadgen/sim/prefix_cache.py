"""The simulated endpoint's prefix cache: KV blocks keyed by the hash of the token prefix, LRU.

Modelled on vLLM's automatic prefix caching (``--enable-prefix-caching``):

* a prompt is cut into full blocks of ``block_tokens`` units (a trailing partial block is
  never cached); block ``i``'s key is the chained hash ``hash((key[i-1], units of block i))``,
  so a block matches only when the whole prefix before it matches too;
* a lookup walks the blocks from the start and stops at the first miss. As in vLLM, the last
  prompt token is always computed, so at most the full blocks of the first ``n - 1`` tokens
  can hit: ``cached_tokens = matched_blocks * block_tokens``;
* the prompt's full blocks are inserted at once (vLLM inserts them once computed: requests
  arriving while a shared prefix is still being prefilled count as hits here, a small
  flattery of concurrent identical prefixes, none for a session's next turn), and after
  an ok reply the blocks of prompt + reply are inserted too (vLLM caches decoded blocks;
  the next turn's history starts with them);
* capacity is ``capacity_blocks``; the least recently used block is evicted first
  (a hit or an insert makes a block the most recent; a prompt's blocks are touched from its
  tail to its head, so a tail is evicted before the prefix it extends, as vLLM frees blocks
  in reverse). Blocks in use are not pinned.

A *unit* is a token: a token id with ``--tokenizer``, else the simulator's notional token
(a whitespace-separated word, plus four template units per chat message:
:func:`loadgen.sim.protocol.prompt_units`), so ``len(units) == prompt_tokens`` always.
Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Sequence

__all__ = ["DEFAULT_BLOCK_TOKENS", "PrefixCache"]

DEFAULT_BLOCK_TOKENS = 16
"""vLLM's default KV block size (tokens)."""


class PrefixCache:
    """An LRU cache of KV blocks keyed by chained prefix hashes.

    ``hits_tokens`` / ``queried_tokens`` count cached and prompt tokens over every
    :meth:`lookup` (the server's own hit rate, as vLLM's ``prefix_cache_hits`` /
    ``prefix_cache_queries`` counters).
    """

    def __init__(self, capacity_blocks: int, block_tokens: int = DEFAULT_BLOCK_TOKENS) -> None:
        if capacity_blocks < 1:
            raise ValueError(f"capacity_blocks must be >= 1, got {capacity_blocks}")
        if block_tokens < 1:
            raise ValueError(f"block_tokens must be >= 1, got {block_tokens}")
        self.capacity_blocks = capacity_blocks
        self.block_tokens = block_tokens
        self._blocks: OrderedDict[int, None] = OrderedDict()
        self.hits_tokens = 0
        self.queried_tokens = 0
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._blocks)

    def block_keys(self, units: Sequence[Hashable], n_tokens: int | None = None) -> list[int]:
        """Chained keys of the full blocks among the first ``n_tokens`` units (default: all)."""
        b = self.block_tokens
        n = len(units) if n_tokens is None else min(n_tokens, len(units))
        keys: list[int] = []
        prev = 0
        for start in range(0, n - n % b, b):
            prev = hash((prev, tuple(units[start : start + b])))
            keys.append(prev)
        return keys

    def lookup(self, units: Sequence[Hashable]) -> int:
        """Cached tokens of a prompt of ``units`` (a leading run of cached blocks), counted in the totals."""
        n = len(units)
        blocks = self._blocks
        hit: list[int] = []
        for key in self.block_keys(units, n - 1):
            if key not in blocks:
                break
            hit.append(key)
        for key in reversed(hit):  # the prefix's first block ends most recent: evicted last
            blocks.move_to_end(key)
        cached = len(hit) * self.block_tokens
        self.hits_tokens += cached
        self.queried_tokens += n
        return cached

    def insert(self, units: Sequence[Hashable]) -> None:
        """Insert the full blocks of ``units`` (most recent), evicting the least recent past capacity."""
        blocks = self._blocks
        for key in reversed(self.block_keys(units)):  # tail blocks are evicted before the prefix's head
            if key in blocks:
                blocks.move_to_end(key)
            else:
                blocks[key] = None
        while len(blocks) > self.capacity_blocks:
            blocks.popitem(last=False)
            self.evictions += 1

    def reset(self) -> None:
        """Drop every block (vLLM's ``/reset_prefix_cache``)."""
        self._blocks.clear()

    @property
    def hit_rate(self) -> float | None:
        """Cached / prompt tokens over every lookup so far (None before the first)."""
        return self.hits_tokens / self.queried_tokens if self.queried_tokens else None
