"""A batch of context lengths (`LengthCase`) and the bounds on it: what `workload.lengths` and
the distributions it delegates to (`traces`, `ragged`, `prefixes`) all produce."""

from __future__ import annotations

from dataclasses import dataclass

MIN_LEN = 1
MAX_LEN = 1 << 22
MAX_BATCH = 1 << 16


@dataclass(frozen=True)
class LengthCase:
    label: str
    """Readable description kept in the case id, e.g. `ctx4096` or `mixed(256..65536)`."""
    kv_lens: tuple[int, ...]
    shared_prefix_len: int = 0
    """Tokens at the start of every request that all requests share (0: none); used by
    kind=shared_prefix when the suite sets no shared_prefix_len."""
