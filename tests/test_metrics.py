from __future__ import annotations

import pytest
import torch

from attnbench.measure import metrics
from attnbench.measure.accuracy import check_accuracy, round_to
from attnbench.workload.spec import TreeSpec, WorkloadSpec


def _decode(**kw: object) -> WorkloadSpec:
    base: dict[str, object] = dict(
        kind="decode",
        num_qo_heads=32,
        num_kv_heads=8,
        head_dim=128,
        kv_lens=(4096,) * 64,
        qo_lens=(1,) * 64,
    )
    base.update(kw)
    return WorkloadSpec.model_validate(base)


def test_decode_kv_bytes_match_the_hand_count() -> None:
    # performance-anchors.md: 64 x 4096 tokens, 8 KV heads, d128, bf16 -> 1.07 GB per layer
    b = metrics.bytes_moved(_decode())
    assert b.kv == 64 * 4096 * 8 * 128 * 2 * 2
    assert b.q == b.o == 64 * 32 * 128 * 2
    assert b.page_table == (64 * 256 + 2 * 64 + 1) * 4
    assert metrics.bytes_moved(_decode(kv_dtype="fp8_e4m3")).kv == b.kv // 2


def test_flops_causal_and_tree_counts() -> None:
    prefill = WorkloadSpec(
        kind="prefill", num_qo_heads=2, num_kv_heads=1, head_dim=4, kv_lens=(4,), qo_lens=(4,)
    )
    assert metrics.attended_pairs(prefill) == 10  # 1+2+3+4
    assert metrics.flops(prefill) == 4 * 4 * 2 * 10
    append = WorkloadSpec(
        kind="append", num_qo_heads=1, num_kv_heads=1, head_dim=4, kv_lens=(10,), qo_lens=(3,)
    )
    assert metrics.attended_pairs(append) == 8 + 9 + 10
    tree = WorkloadSpec(
        kind="tree",
        num_qo_heads=1,
        num_kv_heads=1,
        head_dim=4,
        kv_lens=(13,),
        qo_lens=(3,),
        causal=False,
        tree=TreeSpec(name="t", parents=(-1, 0, 0)),
    )
    assert metrics.attended_pairs(tree) == 3 * 10 + (1 + 2 + 2)
    assert metrics.flops(_decode()) == 4 * 128 * 32 * 64 * 4096


def test_shared_prefix_counts_the_prefix_once() -> None:
    s = WorkloadSpec(
        kind="shared_prefix",
        num_qo_heads=8,
        num_kv_heads=8,
        head_dim=64,
        kv_lens=(1000, 1100),
        qo_lens=(1, 1),
        shared_prefix_len=800,
    )
    assert metrics.unique_kv_tokens(s) == 800 + 200 + 300


def test_rates_and_fractions() -> None:
    assert metrics.bandwidth_gbps(4.8e9, 1e6) == pytest.approx(4.8)
    assert metrics.tflops_per_s(1e12, 1e6) == pytest.approx(1.0)
    assert metrics.fraction(2.0, 4.0) == 0.5
    assert metrics.fraction(2.0, None) is None
    assert metrics.per_token_ms(100.0, 50.0, 80) == pytest.approx(8.05)
    assert metrics.kv_cache_bytes(_decode(page_size=16)) == 64 * 4096 * 8 * 128 * 2 * 2


def test_accuracy_gate_passes_rounding_and_fails_wrong_answers() -> None:
    ref = torch.randn(64, 8, 32, dtype=torch.float64)
    ok = check_accuracy(ref.to(torch.bfloat16), ref, "bfloat16")
    assert ok.passed
    assert 0 < ok.rel_l2_err <= ok.budget
    wrong = ref.clone()
    wrong[0] += 1.0
    bad = check_accuracy(wrong.to(torch.bfloat16), ref, "bfloat16")
    assert not bad.passed
    assert "exceeds budget" in bad.reason
    nan = ref.clone()
    nan[3, 3, 3] = float("nan")
    res = check_accuracy(nan, ref, "bfloat16")
    assert not res.passed
    assert res.nonfinite == 1
    assert "NaN" in res.reason


def test_fp8_rounding_budget_is_scale_invariant() -> None:
    ref = torch.randn(1000, dtype=torch.float64)
    a = (round_to(ref, "fp8_e4m3") - ref).norm() / ref.norm()
    b = (round_to(ref * 1e-4, "fp8_e4m3") - ref * 1e-4).norm() / (ref * 1e-4).norm()
    assert float(a) == pytest.approx(float(b), rel=0.2)
