"""Shared prefixes in real traces: requests whose leading KV blocks are the same (a prefix-cache
hit), found from Mooncake's `hash_ids` (one id per 512-token block; equal leading ids mean an
equal prefix).

`trace-prefix:NAME[,K]` (see `workload.lengths`) turns the groups into shared-prefix decode
batches; `prefix:P+DIST` is the synthetic counterpart.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attnbench.workload.cases import LengthCase
from attnbench.workload.traces import Request, TraceError, first_requests, trace_tag

BLOCK_TOKENS = 512
"""Tokens per Mooncake `hash_ids` block."""


@dataclass(frozen=True)
class PrefixGroup:
    """Requests that share their leading `prefix_len` tokens (a prefix-cache hit)."""

    prefix_len: int
    """Shared tokens, a multiple of the 512-token block."""
    requests: tuple[int, ...]
    """Indices of the member requests in the trace."""
    suffix_lens: tuple[int, ...]
    """Prompt tokens of each member after the shared prefix (input_len - prefix_len)."""

    @property
    def num_requests(self) -> int:
        return len(self.requests)


def prefix_groups(
    requests: tuple[Request, ...] | list[Request],
    min_requests: int = 2,
    *,
    block_tokens: int = BLOCK_TOKENS,
) -> list[PrefixGroup]:
    """Maximal groups of at least `min_requests` requests sharing leading `hash_ids` blocks.

    Builds the prefix trie of the requests' block ids and keeps every node shared by at least
    `min_requests` requests none of whose children is: the longest prefix such a group shares.
    The groups are disjoint in their prefixes (no group's prefix extends another's). The shared
    length is `block_tokens * min(depth, min(input_len) // block_tokens)`, whole blocks that every
    member holds in full (so the prefix is page-aligned for any page size dividing the block).

    Returns:
        Groups sorted by prefix_len, then num_requests, both descending.
    """
    if min_requests < 1:
        raise ValueError(f"min_requests={min_requests} must be positive")
    node_of: dict[tuple[int, int], int] = {}
    parent, depth, count = [-1], [0], [len(requests)]
    paths: list[list[int]] = []
    for r in requests:
        node, path = 0, []
        for h in r.hash_ids:
            nxt = node_of.get((node, h))
            if nxt is None:
                nxt = node_of[(node, h)] = len(parent)
                parent.append(node)
                depth.append(depth[node] + 1)
                count.append(0)
            count[nxt] += 1
            node = nxt
            path.append(nxt)
        paths.append(path)
    big_child = [False] * len(parent)
    for v in range(1, len(parent)):
        if count[v] >= min_requests:
            big_child[parent[v]] = True
    chosen = {v for v in range(1, len(parent)) if count[v] >= min_requests and not big_child[v]}
    members: dict[int, list[int]] = {v: [] for v in chosen}
    for i, path in enumerate(paths):
        for v in path:
            if v in chosen:
                members[v].append(i)
    groups = []
    for v, idx in members.items():
        shortest = min(requests[i].input_len for i in idx)
        prefix = block_tokens * min(depth[v], shortest // block_tokens)
        if prefix <= 0:
            continue
        suffix = tuple(requests[i].input_len - prefix for i in idx)
        groups.append(PrefixGroup(prefix, tuple(idx), suffix))
    groups.sort(key=lambda g: (-g.prefix_len, -g.num_requests, g.requests[0]))
    return groups


def sample_prefix_cases(
    name: str, batch_size: int, seed: int, num_cases: int = 1, limit: int | None = None
) -> list[LengthCase]:
    """Decode batches of `batch_size` requests that share a prefix, from a trace's hash_ids.

    Takes the `num_cases` groups with the longest prefix shared by at least `batch_size`
    requests, draws `batch_size` members of each (seeded), and catches each member at a uniform
    output position as `sample_decode_lengths` does: kv_len = input_len + p, p in [1, output_len].
    Each case carries `shared_prefix_len`.
    """
    reqs = first_requests(name, limit)
    if not any(r.hash_ids for r in reqs):
        raise TraceError(f"trace {name}: has no hash_ids, so no prefix information")
    groups = prefix_groups(reqs, batch_size)
    if not groups:
        raise TraceError(f"trace {name}: no prefix is shared by {batch_size} requests")
    rng = np.random.default_rng(seed)
    cases = []
    for g in groups[:num_cases]:
        picked = rng.choice(g.num_requests, size=batch_size, replace=False)
        lens = []
        for j in sorted(picked.tolist()):
            r = reqs[g.requests[j]]
            lens.append(r.input_len + int(rng.integers(1, max(1, r.output_len) + 1)))
        label = f"trace-prefix({trace_tag(name, limit)},{g.prefix_len})"
        cases.append(LengthCase(label, tuple(lens), shared_prefix_len=g.prefix_len))
    return cases
