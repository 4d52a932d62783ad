"""Split-KV plans of the decode kernels, and the bounded fit on rows from a known model."""

from __future__ import annotations

import numpy as np
import pytest

from attnbench.replay.fit import fit_linear
from attnbench.replay.kernelplan import KernelPlan, fa3_num_splits, family_of

BYTES = 1 * 128 * 2 * 2  # one KV head, d128, bf16: K and V of one token


def plan(backend: str) -> KernelPlan:
    return KernelPlan(family_of(backend), 1, 16, 128, BYTES)


def test_families_follow_the_libraries() -> None:
    assert family_of("flash-attn:fa3") == "fa3"
    assert family_of("flashinfer:fa2") == "flashinfer-decode"
    assert family_of("flashinfer:tc") == "flashinfer-prefill"
    assert family_of("sdpa:cudnn") == "padded"
    assert family_of("flashinfer:xqa") == "ideal"
    with pytest.raises(ValueError, match="allowed"):
        KernelPlan("bogus", 1, 16, 128, BYTES)


def test_fa3_heuristic_matches_the_source() -> None:
    # enough work to fill 80% of the SMs, or at most 4 KV blocks: no split
    assert fa3_num_splits(106, 132, 1000) == 1
    assert fa3_num_splits(1, 132, 4) == 1
    # one request: the fewest splits within 85% of the best wave efficiency
    # at most 128 splits: best 128/132 = 0.970; 109/132 = 0.826 is the first >= 0.85 x 0.970
    assert fa3_num_splits(1, 132, 1000) == 109
    assert fa3_num_splits(48, 108, 1000) == 2  # the source's own example


def test_prefill_plan_does_not_split_a_large_batch_and_leaves_the_skew_tail() -> None:
    tc = plan("flashinfer:tc")
    skewed = tc.features(512, 6_918_345, 65536)
    uniform = tc.features(512, 512 * 13_512, 13_512)  # same total, no long request
    assert skewed[2] == 0.0  # 512 requests > 264 CTA slots: no split
    assert skewed[1] == pytest.approx(65536 * BYTES / 1e6)  # the longest request is one CTA
    assert uniform[1] < skewed[1] / 2  # a balanced share per slot
    one = tc.features(1, 65536, 65536)  # one request: split to fill the grid
    assert one[2] > 100
    assert one[1] < 65536 * BYTES / 1e6 / 100


def test_padded_kernel_reads_the_padded_shape() -> None:
    cudnn, fa3 = plan("sdpa:cudnn"), plan("flash-attn:fa3")
    kv, ragged = cudnn.features(32, 496_884, 65536)[0], fa3.features(32, 496_884, 65536)[0]
    assert kv == pytest.approx(32 * 65536 * BYTES / 1e6)
    assert ragged == pytest.approx(496_884 * BYTES / 1e6)


def test_bounded_fit_recovers_a_known_model_and_never_exceeds_the_ceiling() -> None:
    p = plan("flashinfer:tc")
    rng = np.random.default_rng(0)
    calls = []
    for n in (1, 4, 16, 64, 256, 512):
        for hi in (1024, 16384, 131072):
            kv = rng.integers(256, hi + 1, size=n)
            calls.append((n, int(kv.sum()), int(kv.max())))
            calls.append((n, n * hi, hi))
    feats = p.feature_matrix(*(np.array(c) for c in zip(*calls, strict=True)))
    x = np.column_stack([np.ones(len(calls)), [c[0] for c in calls], feats])
    names = ("const", "seqs", "kv_mb", "crit_mb", "splits")
    true = np.array([12.0, 0.03, 1e3 / 4000.0, 15.0, 0.02])
    y = x @ true
    fit = fit_linear(names, x, y, lower={"kv_mb": 1e3 / 4200.0})
    np.testing.assert_allclose(fit.coef, true, rtol=1e-6, atol=1e-9)
    assert fit.cv_rel_rmse < 1e-6
    # a ceiling below the true bandwidth binds: the fit cannot imply more than it
    tight = fit_linear(names, x, y, lower={"kv_mb": 1e3 / 3000.0})
    assert 1e3 / tight.coef[2] <= 3000.0 + 1e-6
    assert tight.coef[2] >= 1e3 / 3000.0
