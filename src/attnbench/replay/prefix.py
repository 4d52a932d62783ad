"""Prefix cache of the replay: shared KV blocks keyed by a trace's `hash_ids`.

Model (vLLM's automatic prefix caching / SGLang's radix cache, at Mooncake's 512-token block
granularity):
- A request's prompt is a chain of blocks (`hash_ids[i]` covers tokens 512*i .. 512*(i+1)-1, the
  last block possibly partial). Its *hit* is the longest run of leading blocks already in the
  cache; those tokens' KV pages are shared, not reserved again, and not recomputed (at least one
  prompt token is always computed, to produce the first output token's logits).
- When a request's prefill completes, its prompt blocks that are not yet cached are inserted:
  their pages move from the request's private reservation to the cache.
- A block referenced by a running request is pinned; unreferenced blocks stay cached and are
  evicted least-recently-used first when an admission needs their pages.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass
class _Block:
    pages: int
    tokens: int
    refs: int = 0


class PrefixCache:
    """Refcounted, LRU-evicted KV blocks; page counts kept incrementally."""

    def __init__(self, block_tokens: int, page_size: int) -> None:
        if block_tokens <= 0 or page_size <= 0:
            raise ValueError("block_tokens and page_size must be positive")
        self.block_tokens = block_tokens
        self.page_size = page_size
        self._blocks: dict[int, _Block] = {}
        self._idle: OrderedDict[int, None] = OrderedDict()
        """Unreferenced blocks, least recently released first: the eviction order."""
        self.pages = 0
        """Pages held by cached blocks (referenced or not)."""
        self.free_pages = 0
        """Pages of unreferenced blocks: what eviction can give back."""
        self.evicted_blocks = 0

    def __len__(self) -> int:
        return len(self._blocks)

    def block_tokens_of(self, index: int, input_len: int) -> int:
        """Tokens of prompt block `index` of a prompt of `input_len` tokens."""
        return max(0, min(self.block_tokens, input_len - index * self.block_tokens))

    def match(self, hash_ids: Sequence[int]) -> int:
        """Number of leading blocks of `hash_ids` present in the cache."""
        n = 0
        for h in hash_ids:
            if h not in self._blocks:
                break
            n += 1
        return n

    def acquire(self, hash_ids: Sequence[int]) -> int:
        """Pin every block in `hash_ids` (all must be cached); returns their total tokens."""
        tokens = 0
        for h in hash_ids:
            b = self._blocks[h]
            if b.refs == 0:
                self.free_pages -= b.pages
                del self._idle[h]
            b.refs += 1
            tokens += b.tokens
        return tokens

    def release(self, hash_ids: Sequence[int]) -> None:
        for h in hash_ids:
            b = self._blocks[h]
            b.refs -= 1
            if b.refs == 0:
                self.free_pages += b.pages
                self._idle[h] = None

    def insert(self, hash_id: int, tokens: int) -> int:
        """Cache a block just computed by a request and pin it for that request.

        Returns the block's pages (to move out of the request's reservation), or 0 when the id
        was already cached (another request computed it first: the copy stays private).
        """
        if hash_id in self._blocks:
            return 0
        pages = -(-tokens // self.page_size)
        self._blocks[hash_id] = _Block(pages=pages, tokens=tokens, refs=1)
        self.pages += pages
        return pages

    def evict(self, pages_needed: int) -> int:
        """Evict unreferenced blocks, least recently used first, until `pages_needed` pages are
        freed or none is left; returns the pages freed."""
        if pages_needed <= 0 or self.free_pages <= 0:
            return 0
        freed = victims = 0
        while self._idle and freed < pages_needed:
            h, _ = self._idle.popitem(last=False)
            b = self._blocks.pop(h)
            self.pages -= b.pages
            self.free_pages -= b.pages
            freed += b.pages
            victims += 1
        self.evicted_blocks += victims
        return freed
