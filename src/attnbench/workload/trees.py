"""Speculative-decoding draft trees, as parent arrays (node i's parent is parents[i], -1 = root).

Every tree includes its root (the last verified token, whose KV is written in the same step), so
`num_nodes` is the number of query tokens a verification step runs per request.

    chain-N          plain multi-token speculation: N tokens, each following the previous one
                     (vLLM EAGLE/MTP with num_speculative_tokens = N - 1)
    medusa-64        Medusa's default sparse tree `mc_sim_7b_63`: 63 nodes + root
    eagle1-26        EAGLE-1's default static tree: 25 nodes + root, depth up to 5
    eagle2-60        EAGLE-2-style dynamic tree: depth 6, top-k 10, 60 tokens with the root
    sglang-8         SGLang's EAGLE defaults: 5 steps, top-k 4, 8 draft tokens with the root
    dynamic-D-K-T    any EAGLE-2-style dynamic tree: depth D, top-k K, T tokens with the root

Static trees are given as "choices" (each node is the path of child ranks from the root, as in
Medusa and EAGLE) and converted with `from_choices`. Dynamic trees depend on the draft model's
probabilities; `dynamic_tree` builds one deterministically from a seeded score model (see there).
"""

from __future__ import annotations

import numpy as np

from attnbench.workload.spec import TreeSpec

# Medusa's default tree, verbatim from FasterDecoding/Medusa
# medusa/model/medusa_choices.py (`mc_sim_7b_63`, commit 5e98053), 63 nodes.
MEDUSA_MC_SIM_7B_63: tuple[tuple[int, ...], ...] = (
    (0,), (0, 0), (1,), (0, 1), (2,), (0, 0, 0), (1, 0), (0, 2), (3,), (0, 3), (4,), (0, 4),
    (2, 0), (0, 5), (0, 0, 1), (5,), (0, 6), (6,), (0, 7), (0, 1, 0), (1, 1), (7,), (0, 8),
    (0, 0, 2), (3, 0), (0, 9), (8,), (9,), (1, 0, 0), (0, 2, 0), (1, 2), (0, 0, 3), (4, 0),
    (2, 1), (0, 0, 4), (0, 0, 5), (0, 0, 0, 0), (0, 1, 1), (0, 0, 6), (0, 3, 0), (5, 0), (1, 3),
    (0, 0, 7), (0, 0, 8), (0, 0, 9), (6, 0), (0, 4, 0), (1, 4), (7, 0), (0, 1, 2), (2, 0, 0),
    (3, 1), (2, 2), (8, 0), (0, 5, 0), (1, 5), (1, 0, 1), (0, 2, 1), (9, 0), (0, 6, 0),
    (0, 0, 0, 1), (1, 6), (0, 7, 0),
)  # fmt: skip

# EAGLE-1's default tree, from SafeAILab/EAGLE model/choices.py (`mc_sim_7b_63`, commit e98fc7c;
# the same list is in xformers' tree-attention tests), 25 nodes.
EAGLE1_CHOICES: tuple[tuple[int, ...], ...] = (
    (0,), (1,), (2,), (3,), (0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (2, 0), (2, 1), (3, 0),
    (0, 0, 0), (0, 0, 1), (0, 0, 2), (0, 1, 0), (0, 1, 1), (0, 2, 0), (0, 2, 1), (1, 0, 0),
    (0, 0, 0, 0), (0, 0, 0, 1), (0, 0, 0, 2), (0, 0, 0, 0, 0), (0, 0, 0, 0, 1),
)  # fmt: skip

TREE_NAMES = ("chain-N", "medusa-64", "eagle1-26", "eagle2-60", "sglang-8", "dynamic-D-K-T")
_ALIASES = {
    "medusa": "medusa-64",
    "mc_sim_7b_63": "medusa-64",
    "eagle": "eagle1-26",
    "eagle1": "eagle1-26",
    "eagle2": "eagle2-60",
    "sglang": "sglang-8",
}


def chain(n: int) -> TreeSpec:
    """`n` tokens in a line (the root and n - 1 speculated tokens)."""
    return TreeSpec(name=f"chain-{n}", parents=tuple(range(-1, n - 1)))


def from_choices(name: str, choices: tuple[tuple[int, ...], ...] | list[list[int]]) -> TreeSpec:
    """Medusa/EAGLE choices (paths of child ranks) -> parent array with the root as node 0.

    Nodes are ordered as Medusa orders them (`sorted(choices, key=lambda x: (len(x), x))`), so
    every parent comes before its children.
    """
    paths = sorted((tuple(c) for c in choices), key=lambda x: (len(x), x))
    index: dict[tuple[int, ...], int] = {(): 0}
    parents = [-1]
    for path in paths:
        if not path or path in index:
            raise ValueError(f"tree {name}: empty or repeated choice {list(path)}")
        if path[:-1] not in index:
            raise ValueError(f"tree {name}: choice {list(path)} has no parent {list(path[:-1])}")
        parents.append(index[path[:-1]])
        index[path] = len(index)
    return TreeSpec(name=name, parents=tuple(parents))


def dynamic_tree(depth: int, topk: int, total: int, seed: int = 0) -> TreeSpec:
    """An EAGLE-2-style dynamic draft tree, deterministic for a seed.

    EAGLE-2 (and SGLang's EAGLE worker) grow the tree in `depth` steps: the root's top-k children
    first, then at each step every one of the k frontier nodes proposes its top-k children and
    the k candidates with the best cumulative log-probability become the next frontier. Finally
    the `total - 1` best candidates of all steps (by cumulative log-probability) are kept under
    the root; since a child never scores above its parent, the kept set is closed under
    ancestors (ties go to the earlier candidate, which is never a descendant).

    The draft model is replaced by a seeded score model: each expanded node's top-k child
    probabilities are the k largest of a Dirichlet(0.5) draw over k + 1 outcomes (the extra
    outcome is the rest of the vocabulary), which gives the peaked, confident-then-fading
    distributions of a real draft head. The tree's shape (how deep the best paths go, how bushy
    the top is) follows from the algorithm; only the exact branching depends on the seed.
    """
    if depth < 1 or topk < 1 or total < 1:
        raise ValueError(
            f"dynamic tree needs depth, topk, total >= 1; got {depth}, {topk}, {total}"
        )
    capacity = 1 + topk + (depth - 1) * topk * topk
    if total > capacity:
        raise ValueError(
            f"dynamic tree depth={depth} topk={topk} has {capacity} candidates; total={total}"
        )
    rng = np.random.default_rng(seed)
    # candidates: (score, parent candidate index or -1 for the root)
    scores: list[float] = []
    cand_parent: list[int] = []

    def expand(node: int, base: float) -> list[int]:
        probs = np.sort(rng.dirichlet(np.full(topk + 1, 0.5)))[::-1][:topk]
        new = []
        for p in probs:
            scores.append(base + float(np.log(max(p, 1e-30))))
            cand_parent.append(node)
            new.append(len(scores) - 1)
        return new

    frontier = expand(-1, 0.0)
    for _ in range(depth - 1):
        children = [c for f in frontier for c in expand(f, scores[f])]
        frontier = sorted(children, key=lambda c: (-scores[c], c))[:topk]
    kept = sorted(range(len(scores)), key=lambda c: (-scores[c], c))[: total - 1]
    kept.sort()  # creation order: a parent is created before its children
    index = {-1: 0}
    parents = [-1]
    for c in kept:
        parents.append(index[cand_parent[c]])
        index[c] = len(parents) - 1
    name = {(6, 10, 60): "eagle2-60", (5, 4, 8): "sglang-8"}.get(
        (depth, topk, total), f"dynamic-{depth}-{topk}-{total}"
    )
    return TreeSpec(name=name, parents=tuple(parents))


def tree_depth(tree: TreeSpec) -> int:
    """Tokens on the longest root-to-leaf path (the root counts: chain-N has depth N)."""
    depth: list[int] = []
    for p in tree.parents:
        depth.append(1 if p < 0 else depth[p] + 1)
    return max(depth)


def get_tree(name: str) -> TreeSpec:
    """A tree by name (see the module docstring); ValueError listing the names otherwise."""
    key = _ALIASES.get(name.strip().lower(), name.strip().lower())
    kind, _, size = key.partition("-")
    if kind == "chain" and size.isdigit() and int(size) > 0:
        return chain(int(size))
    if key == "medusa-64":
        return from_choices("medusa-64", MEDUSA_MC_SIM_7B_63)
    if key == "eagle1-26":
        return from_choices("eagle1-26", EAGLE1_CHOICES)
    if key == "eagle2-60":
        return dynamic_tree(6, 10, 60)
    if key == "sglang-8":
        return dynamic_tree(5, 4, 8)
    parts = size.split("-")
    if kind == "dynamic" and len(parts) == 3 and all(p.isdigit() for p in parts):
        d, k, t = (int(p) for p in parts)
        return dynamic_tree(d, k, t)
    raise ValueError(f"tree={name!r} is not known; allowed: {', '.join(TREE_NAMES)}")
