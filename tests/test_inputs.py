from __future__ import annotations

import pytest
import torch

from attnbench.workload.inputs import make_inputs, tree_ancestor_mask
from attnbench.workload.spec import WorkloadSpec


def _spec(**kw: object) -> WorkloadSpec:
    base: dict[str, object] = dict(
        kind="decode",
        num_qo_heads=4,
        num_kv_heads=2,
        head_dim=16,
        kv_lens=(33, 16, 5),
        qo_lens=(1, 1, 1),
        page_size=8,
    )
    base.update(kw)
    return WorkloadSpec.model_validate(base)


def test_page_table_is_scattered_and_complete() -> None:
    spec = _spec(kv_lens=(200, 150, 90), page_size=4)
    inp = make_inputs(spec)
    assert inp.kv_indptr.tolist() == [0, 50, 88, 111]
    ids = inp.kv_indices.tolist()
    assert sorted(ids) == list(range(spec.num_pages))
    assert ids != sorted(ids)  # shuffled, as a real allocator leaves it
    assert inp.kv_last_page_len.tolist() == [4, 2, 2]


@pytest.mark.parametrize("layout", ["NHD", "HND"])
def test_request_kv_gathers_the_right_tokens(layout: str) -> None:
    spec = _spec(kv_layout=layout)
    inp = make_inputs(spec)
    k, _v = inp.request_kv(0)
    assert k.shape == (33, 2, 16)
    # token 9 of request 0 lives in its second page at slot 1
    page = int(inp.kv_indices[1])
    expected = inp.kv_cache[page, 0, 1] if layout == "NHD" else inp.kv_cache[page, 0, :, 1]
    torch.testing.assert_close(k[9], expected)


def test_inputs_are_reproducible_from_the_seed() -> None:
    a, b = make_inputs(_spec(seed=3)), make_inputs(_spec(seed=3))
    c = make_inputs(_spec(seed=4))
    assert torch.equal(a.kv_cache, b.kv_cache)
    assert torch.equal(a.q, b.q)
    assert not torch.equal(a.q, c.q)


def test_fp8_cache_scales_dequantize_close_to_the_original() -> None:
    spec = _spec(kv_dtype="fp8_e4m3")
    inp = make_inputs(spec, keep_high_precision=True)
    assert inp.kv_cache.dtype == torch.float8_e4m3fn
    hp = inp.extras["kv_cache_hp"].float()
    deq = inp.kv_cache[:, 0].float() * inp.k_scale
    rel = (deq - hp[:, 0]).norm() / hp[:, 0].norm()
    assert 0 < rel < 0.05
    assert inp.k_scale == pytest.approx(float(hp[:, 0].abs().max()) / 448, rel=1e-3)


def test_shared_prefix_pages_are_shared() -> None:
    spec = _spec(kind="shared_prefix", kv_lens=(40, 50), qo_lens=(1, 1), shared_prefix_len=17)
    inp = make_inputs(spec)
    ids = inp.kv_indices.tolist()
    first, second = ids[: inp.kv_indptr[1]], ids[inp.kv_indptr[1] :]
    assert first[:2] == second[:2]  # 17 tokens -> 2 whole pages of 8 shared
    assert set(first[2:]).isdisjoint(second[2:])


def test_tree_ancestor_mask() -> None:
    m = tree_ancestor_mask((-1, 0, 0, 1))
    assert m.tolist() == [
        [True, False, False, False],
        [True, True, False, False],
        [True, False, True, False],
        [True, True, False, True],
    ]
