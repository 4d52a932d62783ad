from __future__ import annotations

from collections import Counter

import pytest

from attnbench.workload.inputs import tree_ancestor_mask
from attnbench.workload.spec import TreeSpec
from attnbench.workload.trees import (
    EAGLE1_CHOICES,
    MEDUSA_MC_SIM_7B_63,
    dynamic_tree,
    from_choices,
    get_tree,
    tree_depth,
)


def _children(tree: TreeSpec) -> Counter[int]:
    return Counter(p for p in tree.parents if p >= 0)


@pytest.mark.parametrize(
    ("name", "nodes", "depth"),
    [
        ("chain-4", 4, 4),
        ("chain-1", 1, 1),
        ("medusa-64", 64, 5),
        ("eagle1-26", 26, 6),
        ("sglang-8", 8, None),
        ("eagle2-60", 60, None),
    ],
)
def test_tree_shapes_have_the_published_sizes(name: str, nodes: int, depth: int | None) -> None:
    tree = get_tree(name)
    assert tree.name == name
    assert tree.num_nodes == nodes
    assert tree.parents[0] == -1
    assert tree.parents.count(-1) == 1
    assert all(0 <= p < i for i, p in enumerate(tree.parents) if i)
    if depth is not None:
        assert tree_depth(tree) == depth


def test_static_trees_reproduce_the_choice_lists() -> None:
    medusa = get_tree("medusa")
    assert len(MEDUSA_MC_SIM_7B_63) == 63
    assert len(set(MEDUSA_MC_SIM_7B_63)) == 63
    assert _children(medusa)[0] == 10  # top-10 candidates of the first head
    eagle = get_tree("eagle1")
    assert len(EAGLE1_CHOICES) == 25
    assert _children(eagle)[0] == 4
    # every node's ancestors are exactly the prefixes of its choice path
    mask = tree_ancestor_mask(medusa.parents)
    paths = sorted(MEDUSA_MC_SIM_7B_63, key=lambda x: (len(x), x))
    assert [int(mask[i + 1].sum()) for i in range(63)] == [len(p) + 1 for p in paths]


def test_dynamic_trees_follow_the_eagle2_budget_and_are_deterministic() -> None:
    tree = get_tree("eagle2-60")
    assert tree == get_tree("eagle2") == dynamic_tree(6, 10, 60, seed=0)
    assert tree.parents != dynamic_tree(6, 10, 60, seed=1).parents
    assert 2 <= tree_depth(tree) <= 7  # root + at most 6 draft steps
    assert max(_children(tree).values()) <= 10  # top-k per expanded node
    small = get_tree("sglang-8")
    assert tree_depth(small) <= 6
    assert max(_children(small).values()) <= 4
    custom = get_tree("dynamic-3-2-7")
    assert custom.name == "dynamic-3-2-7"
    assert custom.num_nodes == 7
    assert get_tree("dynamic-6-10-60") == tree


def test_dynamic_tree_keeps_the_best_candidates_ancestor_closed() -> None:
    # depth 1: the tree is the root and its top-k children
    assert dynamic_tree(1, 5, 6).parents == (-1, 0, 0, 0, 0, 0)
    # the full budget keeps every candidate: k children of the root, k*k per later step
    full = dynamic_tree(3, 2, 1 + 2 + 2 * 4)
    assert full.num_nodes == 11
    assert _children(full)[0] == 2
    with pytest.raises(ValueError, match="candidates"):
        dynamic_tree(2, 2, 8)


def test_bad_tree_names_and_choices() -> None:
    with pytest.raises(ValueError, match="allowed: chain-N, medusa-64, eagle1-26"):
        get_tree("medusa-65")
    with pytest.raises(ValueError, match="allowed"):
        get_tree("chain-0")
    with pytest.raises(ValueError, match="has no parent"):
        from_choices("bad", [[0], [1, 0]])
    with pytest.raises(ValueError, match="repeated"):
        from_choices("bad", [[0], [0]])
