"""The weights a served model keeps on one GPU, and the weight GEMMs one step runs through them.

Dense GQA models keep `capacity.model_params` at the weights' dtype, split tp ways, and run the
four GEMMs of `replay.deployment` per layer (unchanged).

MoE models (`num_experts` > 0): every routed expert is a gated MLP of width
`intermediate_size`, held 1/tp per GPU. A step of T tokens routes T x top_k (token, expert)
pairs; its weight GEMMs read the experts it touches, expected E x (1 - (1 - k / E) ** T) of the
E experts under uniform routing, and compute 2 x T x top_k x params of one expert (FLOPs).

MLA models (DeepSeek-V3/R1, Kimi-K2): the preset lacks what their weights need (q_lora_rank,
the dense layers, the shared expert, the total count), so `MLA_WEIGHTS` holds them with their
sources until `workload.models` carries them. Per layer and GPU (DeepSeek-V3 inference/model.py
`MLA`): the fused q_a + kv_a projection `hidden x (q_lora_rank + kv_lora_rank + rope)`
(replicated, as vLLM's ReplicatedLinear), q_b `q_lora_rank x heads/tp x qk_head_dim`, kv_b
`kv_lora_rank x heads/tp x (qk_nope + v)` (the same parameters absorbed or not: absorbed, they
are the per-head W_UK and W_UV products), o `heads/tp x v_head_dim x hidden`; then a dense MLP
on the first `dense_layers` layers, else the routed experts and `shared_experts` always-on
experts. Totals come from the table (the model card's count, MTP module excluded).

Weight dtypes (`WEIGHT_BYTES`): 16-bit, fp8 (one byte; block scales not counted) and mxfp4
(gpt-oss: the MoE experts in MXFP4, 4 bits and one 8-bit scale per 32 values = 0.53125 bytes,
everything else at the model dtype).
"""

from __future__ import annotations

from dataclasses import dataclass

from attnbench.workload.shapes import ModelShape

WEIGHT_BYTES: dict[str, float] = {
    "bfloat16": 2.0,
    "float16": 2.0,
    "fp8_e4m3": 1.0,
    "mxfp4": 0.53125,
}
"""Bytes per weight of each weight dtype (mxfp4: the MoE experts only)."""


@dataclass(frozen=True)
class Gemm:
    """One weight GEMM of a layer on one GPU: [tokens, k] x [k, n]; for routed experts
    (`experts` > 0) one expert's, of which each token uses `top_k`."""

    name: str
    k: int
    n: int
    experts: int = 0
    top_k: int = 0
    bytes_per_param: float = 0.0
    """Bytes of one weight; 0: the deployment's dtype."""

    @property
    def params(self) -> int:
        return self.k * self.n


@dataclass(frozen=True)
class LayerGroup:
    """`count` layers that run the same weight GEMMs."""

    count: int
    gemms: tuple[Gemm, ...]


@dataclass(frozen=True)
class MlaWeights:
    """What an MLA preset's weights need beyond `workload.models` (see the module docstring)."""

    total_params: float
    q_lora_rank: int
    dense_layers: int
    dense_intermediate: int
    shared_experts: int
    weight_dtype: str
    source: str


_V3 = MlaWeights(
    total_params=671e9,
    q_lora_rank=1536,
    dense_layers=3,
    dense_intermediate=18432,
    shared_experts=1,
    weight_dtype="fp8_e4m3",
    source=(
        "deepseek-ai/DeepSeek-V3 README_WEIGHTS.md: main model 671B total parameters (the MTP "
        "module's 11.5B apart), config.json quantization_config fp8 (e4m3, 128x128 blocks): "
        "the checkpoint engines load; inference/configs/config_671B.json @9b4e978: q_lora_rank "
        "1536, n_dense_layers 3, inter_dim 18432, n_shared_experts 1"
    ),
)

MLA_WEIGHTS: dict[str, MlaWeights] = {
    "deepseek-v3": _V3,
    "deepseek-r1": _V3,
    "kimi-k2": MlaWeights(
        total_params=1.0e12,
        q_lora_rank=1536,
        dense_layers=1,
        dense_intermediate=18432,
        shared_experts=1,
        weight_dtype="fp8_e4m3",
        source=(
            "MoonshotAI/Kimi-K2 README.md @c6157be: 1T total parameters, 32B activated, 1 dense "
            "layer, 1 shared expert; q_lora_rank 1536, intermediate_size 18432 and the block-fp8 "
            "checkpoint as quoted in public code (DeepseekV3 config fields), not read from the hub"
        ),
    ),
}
"""MLA presets' weight facts, keyed by preset name (to move into `workload.models`)."""


def default_weight_dtype(model: ModelShape, dtype: str) -> str:
    """The weights' dtype engines load for `model`: the MLA checkpoints' fp8, gpt-oss's MXFP4
    experts (openai/gpt-oss README: the MoE weights are MXFP4, so 120b fits one 80 GB GPU),
    else the model dtype."""
    if model.name in MLA_WEIGHTS:
        return MLA_WEIGHTS[model.name].weight_dtype
    if model.name.startswith("gpt-oss"):
        return "mxfp4"
    return dtype


def check_weight_dtype(weight_dtype: str) -> str:
    if weight_dtype not in WEIGHT_BYTES:
        allowed = ", ".join(WEIGHT_BYTES)
        raise ValueError(f"weight_dtype={weight_dtype!r} is not known; allowed: {allowed}")
    return weight_dtype


def expert_params(model: ModelShape) -> int:
    """Parameters of one routed expert (gated MLP: gate, up, down)."""
    return 3 * model.hidden_size * model.intermediate_size


def moe_params(model: ModelShape) -> int:
    """Parameters of a GQA MoE model: `capacity.model_params` with every routed expert."""
    from attnbench.workload.capacity import model_params

    extra = model.num_layers * (model.num_experts - 1) * expert_params(model)
    return model_params(model) + extra


def weight_bytes_per_gpu(model: ModelShape, tp: int, dtype: str, weight_dtype: str) -> int:
    """Weights one GPU holds (every tensor split tp ways; see the module docstring)."""
    from attnbench.workload.capacity import weight_bytes_per_gpu as dense_bytes

    per = WEIGHT_BYTES[weight_dtype]
    if model.name in MLA_WEIGHTS:
        return int(MLA_WEIGHTS[model.name].total_params * per / tp)
    if model.num_experts == 0:
        return dense_bytes(model, tp, per)
    experts = model.num_layers * model.num_experts * expert_params(model)
    rest = moe_params(model) - experts
    if weight_dtype == "mxfp4":
        return int((experts * per + rest * WEIGHT_BYTES[dtype]) / tp)
    return int(moe_params(model) * per / tp)


def moe_gemms(model: ModelShape, tp: int, item: float) -> tuple[Gemm, ...]:
    """The routed experts' GEMMs of one MoE layer on one GPU (each expert split tp ways)."""
    h, inter = model.hidden_size, model.intermediate_size // tp
    e, k = model.num_experts, model.num_experts_per_tok
    return (
        Gemm("experts_gate_up", h, 2 * inter, e, k, item),
        Gemm("experts_down", inter, h, e, k, item),
    )


def mla_groups(model: ModelShape, tp: int, item: float, expert_item: float) -> list[LayerGroup]:
    """The dense and the MoE layers of an MLA model, with their GEMMs on one GPU."""
    m, w = model.mla, MLA_WEIGHTS[model.name]
    assert m is not None
    h, heads = model.hidden_size, model.num_qo_heads // tp
    attn = (
        Gemm("q_a+kv_a", h, w.q_lora_rank + m.latent_dim, bytes_per_param=item),
        Gemm("q_b", w.q_lora_rank, heads * m.qk_head_dim, bytes_per_param=item),
        Gemm("kv_b", m.kv_lora_rank, heads * (m.qk_nope_head_dim + m.v_head_dim), 0, 0, item),
        Gemm("o", heads * m.v_head_dim, h, bytes_per_param=item),
    )
    dense = w.dense_intermediate // tp
    shared = w.shared_experts * model.intermediate_size // tp
    mlp = (Gemm("gate_up", h, 2 * dense, 0, 0, item), Gemm("down", dense, h, 0, 0, item))
    shared_mlp = (
        Gemm("shared_gate_up", h, 2 * shared, 0, 0, item),
        Gemm("shared_down", shared, h, 0, 0, item),
    )
    moe = attn + shared_mlp + moe_gemms(model, tp, expert_item)
    return [
        LayerGroup(w.dense_layers, attn + mlp),
        LayerGroup(model.num_layers - w.dense_layers, moe),
    ]
