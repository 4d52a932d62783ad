"""The serving replay for every attention family: MLA capacity and weights, MoE GEMMs, one
attention call per layer kind (windowed and full), and the stated roofline."""

from __future__ import annotations

import numpy as np
import pytest

from attnbench.replay.deployment import GIB, Deployment
from attnbench.replay.gemm import GemmRoofline
from attnbench.replay.kinds import kind_key, main_kind, roofline_model, window_of
from attnbench.replay.live import step_spec, step_specs
from attnbench.replay.served import MLA_WEIGHTS
from attnbench.replay.simresult import SchedulerConfig
from attnbench.replay.simulator import simulate
from attnbench.replay.stepcost import KindCost, ReplayCost
from attnbench.replay.steps import StepShape
from attnbench.replay.traffic import ReplayRequest
from attnbench.workload.models import get_model

H200_GIB = 139.8


def test_deepseek_v3_tp8_capacity_on_h200_by_hand() -> None:
    dep = Deployment("deepseek-v3", 8, page_size=64, gpu_mem_gib=H200_GIB)
    m = get_model("deepseek-v3")
    assert m.mla is not None
    assert dep.weight_dtype == "fp8_e4m3"  # the checkpoint engines load
    # 671e9 parameters x 1 byte (fp8) / 8 GPUs
    assert dep.weight_bytes == int(671e9 * 1 / 8)
    # the latent (512 + 64 values) of 61 layers at bf16, whole on every GPU
    assert dep.kv_bytes_per_token == 61 * (512 + 64) * 2 == 70272
    usable = H200_GIB * GIB * 0.9 - 4 * GIB
    assert dep.kv_cache_bytes == int(usable - 671e9 / 8)
    assert dep.kv_pages == int(usable - 671e9 / 8) // (64 * 70272)
    assert dep.kv_pages == 10434  # 667,776 tokens


def test_deepseek_v3_bf16_weights_do_not_fit_an_h100() -> None:
    dep = Deployment("deepseek-v3", 8, weight_dtype="bfloat16", gpu_mem_gib=79.1)
    why = dep.no_room()
    gib = round(671e9 * 2 / 8 / GIB, 2)  # 156.23
    assert why is not None
    assert f"{gib:g} GiB of deepseek-v3 bfloat16 weights" in why
    assert "0.9 x 79.1 GiB" in why
    assert "\n" not in why


def test_dense_gqa_weights_unchanged() -> None:
    from attnbench.workload.capacity import weight_bytes_per_gpu

    dep = Deployment()
    assert dep.weight_dtype == "bfloat16"
    assert dep.weight_bytes == weight_bytes_per_gpu(get_model("llama-3.1-70b"), 8)
    assert [g.count for g in dep.layer_groups()] == [80]


def test_moe_weights_count_every_expert() -> None:
    # mixtral-8x7b: 46.7B parameters (Mistral's announcement); bf16 at tp 2
    dep = Deployment("mixtral-8x7b", 2)
    assert dep.weight_bytes * 2 / 2 == pytest.approx(46.7e9, rel=0.01)
    # gpt-oss-120b: MXFP4 experts (0.53125 B), the rest bf16: about 65 GB at tp 1
    oss = Deployment("gpt-oss-120b", 1)
    assert oss.weight_dtype == "mxfp4"
    experts = 36 * 128 * 3 * 2880 * 2880
    assert oss.weight_bytes == pytest.approx(experts * 0.53125 + 2.2e9 * 2, rel=0.02)


def test_mla_layer_groups_dense_then_moe() -> None:
    dep = Deployment("deepseek-v3", 8)
    w = MLA_WEIGHTS["deepseek-v3"]
    dense, moe = dep.layer_groups()
    assert (dense.count, moe.count) == (3, 58)
    names = {g.name: g for g in moe.gemms}
    assert names["q_b"].n == 16 * 192
    assert names["q_a+kv_a"].n == w.q_lora_rank + 576
    assert names["experts_gate_up"].experts == 256
    assert names["experts_gate_up"].top_k == 8
    assert all(g.bytes_per_param == 1.0 for g in moe.gemms)


def test_moe_step_reads_touched_experts_only() -> None:
    dep = Deployment("deepseek-v3", 8)
    roof = GemmRoofline(dep, copy_gbps=4000.0, matmul_tflops=700.0)
    one, many = roof.step_us(np.array([1, 4096]), np.array([1, 1]))
    assert one < many  # one token touches 8 of 256 experts; 4096 touch them all
    assert roof.step_us_scalar(1, 1) == pytest.approx(one)
    assert roof.step_us_scalar(4096, 1) == pytest.approx(many)


@pytest.mark.parametrize(
    ("model", "tp", "heads"), [("gpt-oss-120b", 8, (8, 1, 64)), ("gemma-2-9b", 1, (16, 8, 256))]
)
def test_step_specs_one_call_per_layer_kind(model: str, tp: int, heads: tuple[int, ...]) -> None:
    sim = _sim()
    dep = Deployment(model, tp)
    step = int(np.flatnonzero(sim.features.n_decode > 0)[0])
    specs = step_specs(sim, step, dep)
    m = get_model(model)
    counts = {s.layer_type: n for s, n in specs}
    assert counts == {"sliding_attention": m.num_layers // 2, "full_attention": m.num_layers // 2}
    for spec, n in specs:
        assert (spec.num_qo_heads, spec.num_kv_heads, spec.head_dim) == heads
        assert spec.num_layers == n
        windowed = spec.layer_type == "sliding_attention"
        assert spec.window_left == (m.sliding_window - 1 if windowed else -1)
        assert spec.sinks == m.sinks
        assert spec.logits_soft_cap == m.logits_soft_cap
    with pytest.raises(ValueError, match="2 layer kinds"):
        step_spec(sim, step, dep)


def test_gpt_oss_120b_has_18_and_18_layers() -> None:
    kinds = Deployment("gpt-oss-120b", 8).kinds
    assert [k.num_layers for k in kinds] == [18, 18]
    assert [window_of(k) for k in kinds] == [128, 0]
    assert main_kind(kinds) == 1  # full attention on a tie


def test_deepseek_decode_spec_is_the_absorbed_latent_call() -> None:
    sim = _sim()
    dep = Deployment("deepseek-v3", 8, page_size=64)
    step = int(np.flatnonzero(sim.features.n_decode > 0)[0])
    spec = step_spec(sim, step, dep)
    assert spec.mla is not None
    assert (spec.num_qo_heads, spec.num_kv_heads, spec.head_dim) == (16, 1, 576)
    assert spec.mla.kv_lora_rank == 512
    assert spec.page_size == 64
    assert spec.num_layers == 61
    assert spec.kv_lens == tuple(int(v) for v in sim.batch(step).decode_kv_lens)
    key = kind_key(dep, dep.kinds[0])
    assert key.features == ("mla",)
    assert key.kv_bytes_per_token == 576 * 2
    assert key.matches(spec)


def test_plain_gqa_key_is_unchanged() -> None:
    key = kind_key(Deployment(), Deployment().kinds[0])
    assert key.features is None
    assert key.describe() == "q8/kv1/d128 bfloat16 kv=bfloat16 p16"


def test_windowed_kind_reads_at_most_its_window() -> None:
    from attnbench.replay.steps import StepFeatures

    dep = Deployment("gpt-oss-120b", 8)
    win, full = (roofline_model(kind_key(dep, k), 4000.0, 700.0) for k in dep.kinds)
    kinds = (KindCost(18, 128, win, win), KindCost(18, 0, full, full))
    cost = ReplayCost("r", full, full, GemmRoofline(dep, 4000.0, 700.0), 36, kinds)
    long_, longer = StepShape.decode(8, 80_000, 10_000), StepShape.decode(8, 160_000, 20_000)
    # the full layers read twice the KV; the windowed layers 128 tokens per request either way
    full_growth = full.decode_call_us(8, 160_000, 20_000) - full.decode_call_us(8, 80_000, 10_000)
    assert cost.step_s(longer) - cost.step_s(long_) == pytest.approx(18 * full_growth / 1e6)
    assert win.decode_call_us(8, 8 * 128, 128) < full.decode_call_us(8, 80_000, 10_000)
    f = StepFeatures.decode_run(np.array([10_000] * 8), 3)
    assert cost.durations_s(f)[0] == pytest.approx(cost.step_s(long_))


def _sim():  # type: ignore[no-untyped-def]
    reqs = [ReplayRequest(0.01 * i, 200 + 10 * i, 5) for i in range(6)]

    class Flat:
        def durations_s(self, f):  # type: ignore[no-untyped-def]
            return np.full(len(f), 1e-3)

        def step_s(self, s):  # type: ignore[no-untyped-def]
            return 1e-3

    return simulate(reqs, SchedulerConfig(kv_pages=10_000, token_budget=256), Flat())
