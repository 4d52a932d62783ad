"""Speculative-decoding draft trees, as parent arrays (node i's parent is parents[i], -1 = root).

`chain-N` is plain multi-token speculation (each draft token follows the previous one).
"""

from __future__ import annotations

from attnbench.workload.spec import TreeSpec


def chain(n: int) -> TreeSpec:
    return TreeSpec(name=f"chain-{n}", parents=tuple(range(-1, n - 1)))


def get_tree(name: str) -> TreeSpec:
    kind, _, size = name.strip().lower().partition("-")
    if kind == "chain" and size.isdigit() and int(size) > 0:
        return chain(int(size))
    raise ValueError(f"tree={name!r} is not known; allowed: chain-N")
