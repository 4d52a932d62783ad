"""Split-KV plans of the decode kernels, and the bounded fit on rows from a known model."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from attnbench.replay.fit import fit_linear
from attnbench.replay.kernelplan import (
    PLAN_FEATURES_OF_DECODE,
    KernelPlan,
    family_of,
    in_flight_tokens,
    num_splits_heuristic,
    xqa_sm90_sub_seqs,
    xqa_sub_seqs,
    xqa_unit_tokens,
)

BYTES = 1 * 128 * 2 * 2  # one KV head, d128, bf16: K and V of one token


def plan(backend: str) -> KernelPlan:
    return KernelPlan(family_of(backend), 1, 16, 128, BYTES)


def test_families_follow_the_libraries() -> None:
    assert family_of("flash-attn:fa3") == "fa3"
    assert family_of("flashinfer:fa2") == "flashinfer-decode"
    assert family_of("flashinfer:tc") == "flashinfer-prefill"
    assert family_of("sdpa:cudnn") == "padded"
    assert family_of("flashinfer:xqa") == "xqa"
    assert family_of("some:kernel") == "ideal"
    with pytest.raises(ValueError, match="allowed"):
        KernelPlan("bogus", 1, 16, 128, BYTES)


def test_fa3_heuristic_matches_the_source() -> None:
    # enough work to fill 80% of the SMs, or at most 4 KV blocks: no split
    assert num_splits_heuristic(106, 132, 1000) == 1
    assert num_splits_heuristic(1, 132, 4) == 1
    # one request: the fewest splits within 85% of the best wave efficiency
    # at most 128 splits: best 128/132 = 0.970; 109/132 = 0.826 is the first >= 0.85 x 0.970
    assert num_splits_heuristic(1, 132, 1000) == 109
    assert num_splits_heuristic(48, 108, 1000) == 2  # the source's own example


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
    names = ("const", "seqs", *PLAN_FEATURES_OF_DECODE)
    true = np.array([12.0, 0.03, 1e3 / 4000.0, 15.0, 0.02, 0.1, 0.0, 0.0, 0.0, 0.0, 0.0])
    y = x @ true
    fit = fit_linear(names, x, y, lower={"kv_mb": 1e3 / 4200.0})
    np.testing.assert_allclose(fit.coef, true, rtol=1e-6, atol=1e-9)
    assert fit.cv_rel_rmse < 1e-6
    # a ceiling below the true bandwidth binds: the fit cannot imply more than it
    tight = fit_linear(names, x, y, lower={"kv_mb": 1e3 / 3000.0})
    assert 1e3 / tight.coef[2] <= 3000.0 + 1e-6
    assert tight.coef[2] >= 1e3 / 3000.0


def test_xqa_cuts_every_request_alike_and_not_a_full_batch() -> None:
    xqa = plan("flashinfer:xqa")
    assert xqa_sub_seqs(1, 132, 7007, 256) == 28  # one request: ceil(7007 / 256) sub-sequences
    assert xqa_sub_seqs(16, 132, 65536, 256) == 8  # 132 // 16
    assert xqa_sub_seqs(128, 132, 65536, 256) == 1  # a full batch: no split, the skew tail
    skewed = xqa.split(128, 1_914_667, 65536)
    assert skewed.unit_tokens == 65536
    assert skewed.chain == 1
    one = xqa.split(1, 131072, 131072)
    assert one.chain == 132
    assert one.units == 132
    fp8 = KernelPlan("xqa", 1, 16, 128, BYTES // 2, kv_dtype="fp8_e4m3")
    # the SM90 fp8 kernel: round((3 x 132 // requests) x 0.25) sub-sequences of 64-token tiles
    assert fp8.split(1, 7007, 7007).chain == 99
    assert xqa_sm90_sub_seqs(1, 132, 3000, 64) == 47  # ceil(3000 / 64) caps it
    assert [xqa_sm90_sub_seqs(n, 132, 65536, 64) for n in (16, 64, 128, 256)] == [6, 2, 1, 1]


def test_tc_chunk_search_runs_on_known_lengths() -> None:
    # 256 requests on a 264-CTA grid: 8 CTAs to spare, so the chunk is set by the longest few
    # requests; the summary (n, total, longest) cannot see that and guesses a far smaller chunk
    tc = plan("flashinfer:tc")
    kv = [65536] * 8 + [40000] * 8 + [1000] * 240
    exact = tc.split(len(kv), sum(kv), max(kv), kv)
    summary = tc.split(len(kv), sum(kv), max(kv))
    assert exact.unit_tokens == 40000  # 16 requests of > 40000 tokens would need 16 more CTAs
    assert exact.units == 264
    assert summary.unit_tokens < exact.unit_tokens / 2
    uniform = [16384] * 128  # 128 requests, 136 CTAs to spare: every request in two halves
    assert tc.split(128, 128 * 16384, 16384, uniform).unit_tokens == 8192
    # the decode plan's grid is an occupancy estimate: it keeps the summary
    fa2 = plan("flashinfer:fa2")
    assert fa2.split(len(kv), sum(kv), max(kv), kv) == fa2.split(len(kv), sum(kv), max(kv))


def test_fa3_splits_a_full_batch_dynamically() -> None:
    # a paged batch pretends batch 1 for the static split, then splits per request: 128
    # requests with one 112k request are not left with a 112k-token CTA
    s = plan("flash-attn:fa3").split(128, 1_534_315, 112_008)
    assert s.unit_tokens < 112_008 / 4
    assert s.chain > 4


def test_tail_term_and_ragged_mask() -> None:
    tc = plan("flashinfer:tc")
    tail = replace(tc, streams=128.0)
    skewed = (256, 3_723_989, 65536)
    kv, crit = tc.features(*skewed)[:2]
    assert tail.features(*skewed)[0] == pytest.approx(max(kv, 128 * crit))
    assert tail.features(256, 256 * 2048, 2048)[0] == tc.features(256, 256 * 2048, 2048)[0]
    cudnn = plan("sdpa:cudnn")
    assert cudnn.features(8, 8 * 4096, 4096)[4] == 0.0  # uniform: the maskless kernel
    assert cudnn.features(8, 8 * 4096 - 1, 4096)[4] == 1.0  # ragged: padded with a mask
    assert tc.features(8, 8 * 4096 - 1, 4096)[4] == 0.0


def test_odd_length_mask() -> None:
    cudnn, tc = plan("sdpa:cudnn"), plan("flashinfer:tc")
    # (ragged, odd, odd_row_mb, odd_pad_mb): the mask's padded key length is the longest request
    assert cudnn.features(8, 8 * 4095 - 1, 4095)[4:8] == (1.0, 1.0, 0.0, 0.0)
    assert cudnn.features(8, 8 * 4096 - 1, 4096)[4:8] == (1.0, 0.0, 0.0, 0.0)
    assert cudnn.features(8, 8 * 4095, 4095)[4:8] == (0.0, 0.0, 0.0, 0.0)  # uniform: no mask
    lens = [4095, 100, 3000]
    assert cudnn.features(3, sum(lens), 4095, lens)[5:8] == (1.0, 0.0, 0.0)
    assert tc.features(80, 80 * 4095 - 1, 4095)[4:8] == (0.0, 0.0, 0.0, 0.0)  # not padded
    # more than half the SMs' requests x KV heads: unsplit, costed by its own two terms only
    row_mb = 4095 * BYTES / 1e6
    assert cudnn.features(64, 64 * 4095 - 1, 4095)[6:8] == (0.0, 0.0)  # 64 of 132: split
    assert cudnn.features(72, 72 * 4095 - 1, 4095) == pytest.approx(
        (0.0, 0.0, 0.0, 0.0, 1.0, 1.0, row_mb, 72 * row_mb, 0.0)
    )
    assert cudnn.features(72, 72 * 4096 - 1, 4096)[6:8] == (0.0, 0.0)  # even: the usual path
    h4 = KernelPlan("padded", 4, 16, 128, 4 * BYTES)
    assert h4.features(16, 16 * 4095 - 1, 4095)[6] == 0.0  # 64 requests x KV heads
    assert h4.features(20, 20 * 4095 - 1, 4095)[6:8] == pytest.approx((row_mb, 20 * 4 * row_mb))


def test_in_flight_tokens_integrates_the_tail() -> None:
    # equal units: the total where they saturate the memory, streams x one unit where not
    assert in_flight_tokens(np.full(256, 100.0), 264, 64.0) == 256 * 100
    assert in_flight_tokens(np.full(8, 100.0), 264, 64.0) == 64 * 100
    # a skewed batch costs more than max(total, streams x longest): the tail between
    skewed = np.array([1000.0] * 4 + [100.0] * 200)
    assert in_flight_tokens(skewed, 264, 64.0) > max(skewed.sum(), 64 * 1000.0)
    # more units than slots: later units start as slots free (here two waves of 2)
    assert in_flight_tokens(np.full(4, 10.0), 2, 1.0) == 40.0
    assert in_flight_tokens(np.full(4, 10.0), 2, 4.0) == 80.0


def test_xqa_plan_on_the_requests_lengths() -> None:
    # sub-sequence j takes tiles j, j + sub, ...: 1000 tokens = 4 tiles of 256 over 3 CTAs,
    # the first holding tiles 0 and 3 (the last, 232 tokens)
    assert xqa_unit_tokens(1000, 3, 256) == [488, 256, 256]
    assert xqa_unit_tokens(100, 3, 256) == [100, 0, 0]
    xqa = plan("flashinfer:xqa")
    s = xqa.split(2, 1100, 1000, [1000, 100])  # 132 // 2 = 66, capped at ceil(1000 / 256) = 4
    assert (s.units, s.chain, s.unit_tokens) == (8, 4, 256)
    assert s.unit_lens == (256, 256, 256, 232, 100, 0, 0, 0)
    fp8 = KernelPlan("xqa", 1, 16, 128, BYTES // 2, kv_dtype="fp8_e4m3")
    # the SM90 kernel: 99 sub-sequences at most, a request of one tile is not split
    f = fp8.split(2, 1064, 1000, [1000, 64])
    assert (f.units, f.chain) == (16 + 1, 16)
