"""The oracle against an independent, naive formula (numpy loops, explicit page walk)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from attnbench.backends.reference import reference_attention
from attnbench.workload.inputs import make_inputs, tree_ancestor_mask
from attnbench.workload.spec import TreeSpec, WorkloadSpec


def naive(spec: WorkloadSpec, inputs) -> np.ndarray:  # type: ignore[no-untyped-def]
    cache = inputs.kv_cache.float().numpy().astype(np.float64)
    if spec.kv_layout == "HND":
        cache = cache.transpose(0, 1, 3, 2, 4)  # -> [pages, 2, page, H, D]
    indptr, indices = inputs.kv_indptr.tolist(), inputs.kv_indices.tolist()
    q = inputs.q.float().numpy().astype(np.float64)
    out = np.zeros_like(q)
    group = spec.num_qo_heads // spec.num_kv_heads
    tree = tree_ancestor_mask(spec.tree.parents).numpy() if spec.tree else None
    row = 0
    for b, (kv_len, qo_len) in enumerate(zip(spec.kv_lens, spec.qo_lens, strict=True)):
        pages = indices[indptr[b] : indptr[b + 1]]
        keys = [cache[pages[t // spec.page_size], 0, t % spec.page_size] for t in range(kv_len)]
        vals = [cache[pages[t // spec.page_size], 1, t % spec.page_size] for t in range(kv_len)]
        for i in range(qo_len):
            pos = kv_len - qo_len + i
            for h in range(spec.num_qo_heads):
                kvh = h // group
                allowed = []
                for t in range(kv_len):
                    if tree is not None:
                        ok = t < kv_len - qo_len or tree[i, t - (kv_len - qo_len)]
                    else:
                        ok = not spec.causal or t <= pos
                    if ok:
                        allowed.append(t)
                s = [
                    float(np.dot(q[row + i, h], keys[t][kvh]))
                    * inputs.k_scale
                    / math.sqrt(spec.head_dim)
                    for t in allowed
                ]
                m = max(s)
                w = [math.exp(x - m) for x in s]
                z = sum(w)
                out[row + i, h] = sum(
                    wi / z * vals[t][kvh] * inputs.v_scale for wi, t in zip(w, allowed, strict=True)
                )
        row += qo_len
    return out


CASES = {
    "decode-gqa": dict(kind="decode", kv_lens=(37, 5, 16), qo_lens=(1, 1, 1)),
    "prefill-causal": dict(kind="prefill", kv_lens=(9, 20), qo_lens=(9, 20)),
    "append": dict(kind="append", kv_lens=(30, 12), qo_lens=(4, 3)),
    "hnd-page4": dict(
        kind="append", kv_lens=(30, 12), qo_lens=(4, 3), kv_layout="HND", page_size=4
    ),
    "fp8": dict(kind="decode", kv_lens=(33, 18), qo_lens=(1, 1), kv_dtype="fp8_e4m3"),
    "tree": dict(
        kind="tree",
        kv_lens=(20, 9),
        qo_lens=(4, 4),
        causal=False,
        tree=TreeSpec(name="t4", parents=(-1, 0, 0, 1)),
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_reference_matches_naive_formula(name: str) -> None:
    kw: dict[str, object] = dict(num_qo_heads=4, num_kv_heads=2, head_dim=8, page_size=8, seed=1)
    kw.update(CASES[name])
    spec = WorkloadSpec.model_validate(kw)
    inputs = make_inputs(spec)
    got = reference_attention(inputs).numpy()
    np.testing.assert_allclose(got, naive(spec, inputs), rtol=1e-9, atol=1e-12)


def test_reference_fp32_close_to_fp64() -> None:
    spec = WorkloadSpec(
        kind="decode",
        num_qo_heads=8,
        num_kv_heads=2,
        head_dim=64,
        kv_lens=(300, 77),
        qo_lens=(1, 1),
    )
    inputs = make_inputs(spec)
    a = reference_attention(inputs)
    b = reference_attention(inputs, accum_dtype=torch.float32)
    assert float((a - b.double()).abs().max()) < 1e-5
