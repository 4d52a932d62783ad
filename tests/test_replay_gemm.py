"""Non-attention roofline, the deployment's memory budget and the assembled step cost."""

from __future__ import annotations

import numpy as np
import pytest

import replay_rows as rr
from attnbench.replay.costmodel import ShapeKey, fit_models, padded_from_ragged
from attnbench.replay.deployment import GIB, Deployment
from attnbench.replay.gemm import GemmRoofline
from attnbench.replay.stepcost import ReplayCost
from attnbench.replay.steps import StepFeatures
from attnbench.workload.capacity import kv_bytes_per_token, weight_bytes_per_gpu
from attnbench.workload.models import get_model

DEP = Deployment("llama-3.1-70b", tp=8)


def test_layer_gemm_shapes_at_tp8() -> None:
    shapes = {g.name: (g.k, g.n) for g in DEP.layer_gemms()}
    assert shapes == {
        "qkv": (8192, (8 + 2 * 1) * 128),
        "o": (8 * 128, 8192),
        "gate_up": (8192, 2 * 28672 // 8),
        "down": (28672 // 8, 8192),
    }
    assert (DEP.lm_head().k, DEP.lm_head().n) == (8192, 128256 // 8)


def _by_hand(tokens: float, sampled: float, bw_gbps: float, tflops: float) -> float:
    def one(k: int, n: int, t: float) -> float:
        mem = (k * n * 2 + t * (k + n) * 2) / (bw_gbps * 1e3)
        return max(mem, 2 * t * k * n / (tflops * 1e6))

    layer = sum(
        one(k, n, tokens) for k, n in ((8192, 1280), (1024, 8192), (8192, 7168), (3584, 8192))
    )
    return 80 * layer + one(8192, 16032, sampled)


@pytest.mark.parametrize(("tokens", "sampled"), [(1, 1), (64, 64), (8192, 3), (65536, 1)])
def test_roofline_arithmetic(tokens: int, sampled: int) -> None:
    g = GemmRoofline(DEP, copy_gbps=4000.0, matmul_tflops=700.0)
    want = _by_hand(tokens, sampled, 4000.0, 700.0)
    got = g.step_us(np.array([tokens]), np.array([sampled]))[0]
    assert got == pytest.approx(want, rel=1e-12)
    assert g.step_us_scalar(tokens, sampled) == pytest.approx(want, rel=1e-12)


def test_decode_is_a_weight_stream_and_prefill_is_compute_bound() -> None:
    g = GemmRoofline(DEP, copy_gbps=4000.0, matmul_tflops=700.0)
    weights = sum(x.params for x in DEP.layer_gemms()) * 80 * 2
    one = g.step_us(np.array([1]), np.array([0]))[0]
    assert one == pytest.approx(weights / 4e6, rel=0.01)  # ~4.3 ms: the weights at 4 TB/s
    big = g.step_us(np.array([16384]), np.array([0]))[0]
    flops = 2 * 16384 * weights / 2
    assert big == pytest.approx(flops / 700e6, rel=0.01)


def test_allreduce_is_off_by_default_and_simple_when_on() -> None:
    off = GemmRoofline(DEP, 4000.0, 700.0)
    on = GemmRoofline(DEP, 4000.0, 700.0, allreduce_us=10.0, allreduce_gbps=400.0)
    assert off.describe()["allreduce"] == "not modelled"
    t = 256
    extra = (
        on.step_us(np.array([t]), np.array([0]))[0] - off.step_us(np.array([t]), np.array([0]))[0]
    )
    per_call = 10.0 + 2 * 7 / 8 * t * 8192 * 2 / (400.0 * 1e3)
    assert extra == pytest.approx(2 * 80 * per_call)
    assert on.step_us_scalar(t, 0) - off.step_us_scalar(t, 0) == pytest.approx(extra)


def test_kv_budget_arithmetic() -> None:
    model = get_model("llama-3.1-70b")
    assert DEP.kv_bytes_per_token == 80 * 1 * 128 * 2 * 2 == kv_bytes_per_token(80, 1, 128, "bf16")
    assert DEP.weight_bytes == weight_bytes_per_gpu(model, 8)
    usable = 139.8 * GIB * 0.9 - 4 * GIB - DEP.weight_bytes
    assert DEP.kv_pages == int(usable) // (16 * 40960)
    fp8 = Deployment("llama-3.1-70b", tp=8, kv_dtype="fp8_e4m3")
    assert fp8.kv_pages == pytest.approx(2 * DEP.kv_pages, abs=1)
    with pytest.raises(ValueError, match="tp=3"):
        _ = Deployment("llama-3.1-70b", tp=3).shard


def _features(seed: int = 0, n: int = 200) -> StepFeatures:
    rng = np.random.default_rng(seed)
    n_dec = rng.integers(0, 300, size=n)
    kv_max = np.where(n_dec > 0, rng.integers(100, 70000, size=n), 0)
    kv_total = n_dec * (kv_max // 3 + 1)
    n_pre = rng.integers(0, 3, size=n)
    q = np.where(n_pre > 0, rng.integers(1, 8192, size=n), 0)
    kv_pre = q + rng.integers(0, 50000, size=n) * (n_pre > 0)
    pairs = q * (kv_pre - q) + q * (q + 1) // 2
    return StepFeatures(n_dec, kv_total, kv_max, n_pre, q, kv_pre, pairs, n_dec + n_pre)


@pytest.mark.parametrize("padded", [False, True])
def test_step_cost_scalar_and_vector_paths_agree(padded: bool) -> None:
    models, _ = fit_models(rr.rows(), ShapeKey(8, 1, 128, "bfloat16", "bfloat16", 16))
    dec = models["flashinfer:fa2"]
    cost = ReplayCost(
        "x",
        padded_from_ragged(dec) if padded else dec,
        models["flash-attn:fa3"],
        GemmRoofline(DEP, 4000.0, 700.0),
        80,
    )
    f = _features()
    vec = cost.durations_s(f)
    for i in range(len(f)):
        one = cost.step_s(f.shape(i))
        assert one == pytest.approx(vec[i], rel=1e-12)
    parts = cost.parts_us(f)
    np.testing.assert_allclose(sum(parts.values()) / 1e6, vec, rtol=1e-12)
    # attention per layer x 80 layers; the hybrid takes prefill from the other variant
    expect = 80 * models["flash-attn:fa3"].prefill_us(f.n_prefill, f.q_prefill, f.pairs_prefill)
    np.testing.assert_allclose(parts["attention_prefill"], expect)
