"""Attention shapes of current open models, and how tensor parallelism shards them.

Every preset comes from the model's published configuration and says where in `source`: the
Hugging Face `config.json` field names and values (num_attention_heads, num_key_value_heads,
head_dim or hidden_size / num_attention_heads, num_hidden_layers, sliding_window, layer_types,
kv_lora_rank...) and the file they were read from. A value that could not be read from a
first-hand file says so there.

Beyond plain GQA a preset may carry the attention features the serving kernels must handle:

    sliding_window + layer_types   windowed ("sliding_attention") and full layers, HF's names
    sinks                          a learned per-head logit in the softmax denominator (gpt-oss)
    logits_soft_cap                tanh soft-capping of the logits (Gemma-2)
    mla                            multi-head latent attention (DeepSeek-V3, Kimi-K2): the cache
                                   holds one latent per token shared by every query head

`layer_shapes` turns a preset into the attention cases a model runs on one GPU, one per layer
kind: MLA in its absorbed form (`WorkloadSpec.mla`, query heads split by tp, the latent
replicated), windowed and full layers apart (`window_left` = sliding_window - 1, HF's
`kv_idx > q_idx - sliding_window`; `num_layers` counts that kind, so the model-level
ms/token adds the kinds), sinks on every layer that has them, the logit soft-cap on every layer
of a soft-capped model (`logits_soft_cap`) and the model's softmax scale where it is not
head_dim ** -0.5 (`query_pre_attn_scalar`). `shard` (KV heads per GPU, for capacity and the
replay) refuses MLA. The shape classes are in `workload.shapes`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from attnbench.workload.shapes import (
    TP_CANDIDATES,
    LayerType,
    MLAShape,
    ModelShape,
    layer_cycle,
)
from attnbench.workload.spec import MlaSpec

_LLAMA = (
    "meta-llama/llama-models models/sku_list.py @364ed4e, llama3_1 arch_args "
    "(HF config.json: hidden_size=dim, num_hidden_layers=n_layers, num_attention_heads=n_heads, "
    "num_key_value_heads=n_kv_heads, vocab_size 128256; intermediate_size from "
    "ffn_dim_multiplier/multiple_of); "
)
_COPIES = "; read from verbatim copies of that config.json in public repositories, not from the hub"
_DEEPSEEK_V3 = (
    "deepseek-ai/DeepSeek-V3 inference/configs/config_671B.json @9b4e978: n_heads 128, "
    "n_layers 61, dim 7168, q_lora_rank 1536, kv_lora_rank 512, qk_nope_head_dim 128, "
    "qk_rope_head_dim 64, v_head_dim 128, n_routed_experts 256, n_activated_experts 8, "
    "moe_inter_dim 2048 (inter_dim 18432 on the 3 dense layers), vocab_size 129280; HF "
    "config.json names them num_attention_heads, num_hidden_layers, hidden_size, "
    "num_key_value_heads 128; num_kv_heads/head_dim = the decompressed form (128 heads, qk 192)"
)

_V3_MLA = MLAShape(
    kv_lora_rank=512,
    qk_rope_head_dim=64,
    qk_nope_head_dim=128,
    v_head_dim=128,
    yarn_factor=40.0,
    yarn_mscale=1.0,
)
"""DeepSeek-V3's softmax scale carries YaRN's mscale: deepseek-ai/DeepSeek-V3 inference/model.py
@1ea5a1a7 `MLA.__init__`: softmax_scale = qk_head_dim ** -0.5, and when max_seq_len exceeds
original_seq_len (4096) `mscale = 0.1 * args.mscale * math.log(args.rope_factor) + 1.0;
softmax_scale *= mscale * mscale`, with ModelArgs rope_factor 40, mscale 1.0 (HF config.json
`rope_scaling`: type yarn, factor 40, mscale_all_dim 1.0): 192 ** -0.5 x 1.3689 ** 2 = 0.1352,
not 0.0722. The kernels' speed does not depend on it; their numerics (peakier softmax) do."""

_K2_MLA = MLAShape(kv_lora_rank=512, qk_rope_head_dim=64, qk_nope_head_dim=128, v_head_dim=128)
"""Kimi-K2's YaRN settings were not read from its config: its softmax scale stays 192 ** -0.5."""

# fmt: off
MODELS: dict[str, ModelShape] = {
    m.name: m
    for m in (
        ModelShape(
            "llama-3.1-8b", 32, 8, 128, 32, 4096, 14336, 128256,
            source=_LLAMA + "8B: dim 4096, n_layers 32, n_heads 32, n_kv_heads 8",
        ),
        ModelShape(
            "llama-3.1-70b", 64, 8, 128, 80, 8192, 28672, 128256,
            source=_LLAMA + "70B: dim 8192, n_layers 80, n_heads 64, n_kv_heads 8",
        ),
        ModelShape(
            "llama-3.1-405b", 128, 8, 128, 126, 16384, 53248, 128256,
            source=_LLAMA + "405B: dim 16384, n_layers 126, n_heads 128, n_kv_heads 8",
        ),
        ModelShape(
            "qwen2.5-7b", 28, 4, 128, 28, 3584, 18944, 152064,
            source=(
                "huggingface.co/Qwen/Qwen2.5-7B-Instruct config.json: num_attention_heads 28, "
                "num_key_value_heads 4, hidden_size 3584 (head_dim 3584/28 = 128), "
                "num_hidden_layers 28, intermediate_size 18944, vocab_size 152064, "
                "use_sliding_window false" + _COPIES
            ),
        ),
        ModelShape(
            "qwen2.5-72b", 64, 8, 128, 80, 8192, 29568, 152064,
            source=(
                "huggingface.co/Qwen/Qwen2.5-72B-Instruct config.json: num_attention_heads 64, "
                "num_key_value_heads 8, hidden_size 8192 (head_dim 128), num_hidden_layers 80, "
                "intermediate_size 29568, vocab_size 152064, use_sliding_window false" + _COPIES
            ),
        ),
        ModelShape(
            "qwen3-32b", 64, 8, 128, 64, 5120, 25600, 151936,
            source=(
                "huggingface.co/Qwen/Qwen3-32B config.json: num_attention_heads 64, "
                "num_key_value_heads 8, head_dim 128, num_hidden_layers 64, hidden_size 5120, "
                "intermediate_size 25600, vocab_size 151936" + _COPIES
            ),
        ),
        ModelShape(
            "qwen3-235b-a22b", 64, 4, 128, 94, 4096, 1536, 151936,
            num_experts=128,
            num_experts_per_tok=8,
            source=(
                "huggingface.co/Qwen/Qwen3-235B-A22B config.json: num_attention_heads 64, "
                "num_key_value_heads 4, head_dim 128, num_hidden_layers 94, hidden_size 4096, "
                "moe_intermediate_size 1536, num_experts 128, num_experts_per_tok 8, "
                "vocab_size 151936, use_sliding_window false" + _COPIES + " (the model card "
                "states 94 layers, 64 Q / 4 KV heads, 128 experts, 8 activated)"
            ),
        ),
        ModelShape(
            "mistral-7b", 32, 8, 128, 32, 4096, 14336, 32768,
            source=(
                "huggingface.co/mistralai/Mistral-7B-Instruct-v0.3 config.json: "
                "num_attention_heads 32, num_key_value_heads 8, hidden_size 4096 (head_dim 128), "
                "num_hidden_layers 32, intermediate_size 14336, vocab_size 32768, "
                "sliding_window null (v0.1 had 4096)" + _COPIES
            ),
        ),
        ModelShape(
            "mixtral-8x7b", 32, 8, 128, 32, 4096, 14336, 32000,
            num_experts=8,
            num_experts_per_tok=2,
            source=(
                "huggingface.co/mistralai/Mixtral-8x7B-v0.1 config.json: num_attention_heads 32, "
                "num_key_value_heads 8, hidden_size 4096 (head_dim 128), num_hidden_layers 32, "
                "intermediate_size 14336 per expert, num_local_experts 8, num_experts_per_tok 2, "
                "vocab_size 32000, sliding_window null" + _COPIES
            ),
        ),
        ModelShape(
            "gemma-2-27b", 32, 16, 128, 46, 4608, 36864, 256000,
            sliding_window=4096,
            layer_types=layer_cycle(46, 1, 1),
            logits_soft_cap=50.0,
            query_pre_attn_scalar=144.0,
            source=(
                "google/gemma_pytorch gemma/config.py @014acb7 get_config_for_27b: "
                "num_attention_heads 32, num_key_value_heads 16, head_dim 128, "
                "num_hidden_layers 46, hidden_size 4608, intermediate_size 36864, vocab 256000, "
                "attn_types [LOCAL_SLIDING, GLOBAL] x 23, sliding_window_size 4096, "
                "attn_logit_softcapping 50.0, query_pre_attn_scalar=144 (`# hidden_size / "
                "num_attention_heads`; @03e6575 the same); GemmaConfig: 'the query vector is "
                "normalized using the inverse square root of this value instead of head_dim'. "
                "HF config.json (google/gemma-2-27b, as quoted in public code, not read from the "
                "hub): query_pre_attn_scalar 144, head_dim 128, sliding_window_size 4096"
            ),
        ),
        ModelShape(
            "gemma-2-9b", 16, 8, 256, 42, 3584, 14336, 256000,
            sliding_window=4096,
            layer_types=layer_cycle(42, 1, 1),
            logits_soft_cap=50.0,
            query_pre_attn_scalar=256.0,
            source=(
                "google/gemma_pytorch gemma/config.py @014acb7 get_config_for_9b: "
                "num_attention_heads 16, num_key_value_heads 8, head_dim 256, "
                "num_hidden_layers 42, hidden_size 3584, intermediate_size 14336, vocab 256000, "
                "attn_types [LOCAL_SLIDING, GLOBAL] x 21, sliding_window_size 4096, "
                "attn_logit_softcapping 50.0, no query_pre_attn_scalar (so head_dim); HF "
                "Gemma2Config of google/gemma-2-9b (printed in public code, transformers 4.45.2, "
                "not read from the hub): query_pre_attn_scalar 256, head_dim 256, "
                "attn_logit_softcapping 50.0, sliding_window 4096: the scale is 256 ** -0.5 "
                "either way"
            ),
        ),
        ModelShape(
            "phi-3-mini-4k", 32, 32, 96, 32, 3072, 8192, 32064,
            sliding_window=2047,
            layer_types=layer_cycle(32, 1, 0),
            source=(
                "microsoft/Phi-3-mini-4k-instruct config.json (Phi3ForCausalLM, transformers "
                "4.40.2) as copied verbatim in NVIDIA/TensorRT-LLM tests/unittest/_torch/"
                "modeling/test_modeling_phi3.py @cb4c622 PHI3_MINI_4K_CONFIG: "
                "num_attention_heads 32, num_key_value_heads 32 (MHA), hidden_size 3072 (head_dim "
                "3072/32 = 96), num_hidden_layers 32, intermediate_size 8192, vocab_size 32064, "
                "max_position_embeddings 4096, sliding_window 2047 on every layer "
                "(huggingface/transformers models/phi3/modeling_phi3.py @00d4b3d: Phi3Model builds "
                "create_sliding_window_causal_mask whenever config.sliding_window is set, and "
                "Phi3Attention passes it to every layer)" + _COPIES
            ),
        ),
        ModelShape(
            "phi-3-medium-4k", 40, 10, 128, 40, 5120, 17920, 32064,
            sliding_window=2047,
            layer_types=layer_cycle(40, 1, 0),
            source=(
                "microsoft/Phi-3-medium-4k-instruct config.json (Phi3ForCausalLM, transformers "
                "4.39.3) as copied verbatim in ThanatosShinji/onnx-tool onnx_tool/"
                "model_configs.py @00f5f0a Phi_3_medium_4k_instruct: num_attention_heads 40, "
                "num_key_value_heads 10, hidden_size 5120 (head_dim 5120/40 = 128), "
                "num_hidden_layers 40, intermediate_size 17920, vocab_size 32064, "
                "max_position_embeddings 4096, sliding_window 2047 (every layer)" + _COPIES
            ),
        ),
        ModelShape(
            "gemma-3-27b", 32, 16, 128, 62, 5376, 21504, 262144,
            sliding_window=1024,
            layer_types=layer_cycle(62, 5, 1),
            source=(
                "google/gemma_pytorch gemma/config.py @014acb7 get_config_for_27b_v3: "
                "num_attention_heads 32, num_key_value_heads 16, head_dim 128, "
                "num_hidden_layers 62, hidden_size 5376, intermediate_size 5376*8//2, "
                "vocab_size 262144, attn_types 5 x LOCAL_SLIDING + GLOBAL cycled over the layers "
                "(model.py: attn_types[i % 6]), sliding_window_size 1024, no logit soft-cap "
                "(HF gemma3_text config.json: sliding_window 1024, sliding_window_pattern 6; "
                "its vocab_size 262208 adds image tokens); query_pre_attn_scalar 168 not modelled"
            ),
        ),
        ModelShape(
            "gpt-oss-20b", 64, 8, 64, 24, 2880, 2880, 201088,
            sliding_window=128,
            layer_types=layer_cycle(24, 1, 1),
            sinks=True,
            num_experts=32,
            num_experts_per_tok=4,
            source=(
                "huggingface.co/openai/gpt-oss-20b config.json: num_attention_heads 64, "
                "num_key_value_heads 8, head_dim 64, num_hidden_layers 24, sliding_window 128, "
                "layer_types sliding_attention/full_attention alternating from layer 0, "
                "hidden_size 2880, intermediate_size 2880, num_local_experts 32, "
                "experts_per_token 4, vocab_size 201088; sinks: a self_attn.sinks tensor in every "
                "layer (model.safetensors.index.json)" + _COPIES
            ),
        ),
        ModelShape(
            "gpt-oss-120b", 64, 8, 64, 36, 2880, 2880, 201088,
            sliding_window=128,
            layer_types=layer_cycle(36, 1, 1),
            sinks=True,
            num_experts=128,
            num_experts_per_tok=4,
            source=(
                "openai/gpt-oss gpt_oss/torch/model.py @0568dfc ModelConfig (the 120b "
                "defaults, loaded from its config.json): num_hidden_layers 36, "
                "num_attention_heads 64, num_key_value_heads 8, head_dim 64, sliding_window 128 "
                "on layer_idx % 2 == 0, AttentionBlock.sinks one per query head, hidden_size "
                "2880, intermediate_size 2880, num_experts 128, experts_per_token 4, vocab_size "
                "201088; huggingface.co/openai/gpt-oss-120b config.json itself not read"
            ),
        ),
        ModelShape(
            "deepseek-v3", 128, 128, 192, 61, 7168, 2048, 129280,
            mla=_V3_MLA,
            num_experts=256,
            num_experts_per_tok=8,
            source=_DEEPSEEK_V3,
        ),
        ModelShape(
            "deepseek-r1", 128, 128, 192, 61, 7168, 2048, 129280,
            mla=_V3_MLA,
            num_experts=256,
            num_experts_per_tok=8,
            source=(
                "deepseek-ai/DeepSeek-R1 README.md @0cf7856: trained from DeepSeek-V3-Base, "
                "architecture as DeepSeek-V3 (671B total, 37B active); values from " + _DEEPSEEK_V3
            ),
        ),
        ModelShape(
            "kimi-k2", 64, 64, 192, 61, 7168, 2048, 163840,
            mla=_K2_MLA,
            num_experts=384,
            num_experts_per_tok=8,
            source=(
                "MoonshotAI/Kimi-K2 README.md @c6157be: 61 layers (1 dense), 64 attention heads, "
                "MLA, attention hidden 7168, 384 experts, 8 per token, expert width 2048; "
                "huggingface.co/moonshotai/Kimi-K2-Instruct config.json (model_type kimi_k2, "
                "DeepseekV3ForCausalLM): num_key_value_heads 64, kv_lora_rank 512, "
                "qk_rope_head_dim 64, qk_nope_head_dim 128, v_head_dim 128, vocab_size 163840 "
                "as quoted in public code and posts, not read from the hub: unverified there"
            ),
        ),
    )
}
# fmt: on


def get_model(name: str) -> ModelShape:
    key = name.strip().lower()
    if key not in MODELS:
        raise ValueError(f"model={name!r} is not known; allowed: {', '.join(MODELS)}")
    return MODELS[key]


@dataclass(frozen=True)
class LayerShape:
    """One layer kind of a model on one GPU, as its attention cases need it."""

    num_qo_heads: int
    num_kv_heads: int
    head_dim: int
    num_layers: int
    """Layers of this kind (all of them when the model has one kind)."""
    spec_fields: dict[str, Any] = field(default_factory=dict)
    """Further `WorkloadSpec` fields: mla, window_left, sinks, layer_type."""


def layer_shapes(model: ModelShape, tp: int = 1) -> list[LayerShape]:
    """The attention cases of `model` at tensor-parallel degree `tp`, one per layer kind.

    Raises ValueError naming the allowed values when tp cannot shard the model (and with
    `unsupported_reason` for a preset attnbench does not run).
    """
    if (why := model.unsupported_reason()) is not None:
        raise ValueError(why)
    if model.mla is not None:
        m = model.mla
        mla = MlaSpec(
            kv_lora_rank=m.kv_lora_rank,
            qk_rope_head_dim=m.qk_rope_head_dim,
            qk_nope_head_dim=m.qk_nope_head_dim,
            v_head_dim=m.v_head_dim,
            sm_scale=m.softmax_scale,
        )
        heads = mla_heads(model, tp)
        return [LayerShape(heads, 1, m.latent_dim, model.num_layers, {"mla": mla})]
    shard = model.shard(tp)
    every = _every_layer_fields(model)
    kinds: list[LayerType] = sorted(set(model.layer_types), reverse=True)
    if model.sliding_window is None or not kinds:
        return [
            LayerShape(
                shard.num_qo_heads, shard.num_kv_heads, shard.head_dim, model.num_layers, every
            )
        ]
    out = []
    for kind in kinds:  # sliding_attention first
        fields: dict[str, Any] = {"layer_type": kind, **every}
        if kind == "sliding_attention":
            fields["window_left"] = model.sliding_window - 1
        count = model.layer_types.count(kind)
        out.append(
            LayerShape(shard.num_qo_heads, shard.num_kv_heads, shard.head_dim, count, fields)
        )
    return out


def _every_layer_fields(model: ModelShape) -> dict[str, Any]:
    """Spec fields every layer of `model` carries: sinks, the logit soft-cap and the softmax
    scale where it differs from head_dim ** -0.5 (Gemma-2-9b's query_pre_attn_scalar equals its
    head_dim, so its cases keep the default scale and the plain serialisation)."""
    fields: dict[str, Any] = {"sinks": True} if model.sinks else {}
    if model.logits_soft_cap:
        fields["logits_soft_cap"] = model.logits_soft_cap
    scalar = model.query_pre_attn_scalar
    if scalar and scalar != model.head_dim:
        fields["query_pre_attn_scalar"] = scalar
    return fields


def mla_heads(model: ModelShape, tp: int) -> int:
    """Query heads per GPU of an MLA model: tp splits the heads, every GPU keeps the latent."""
    if tp <= 0 or model.num_qo_heads % tp:
        allowed = ", ".join(str(t) for t in model.sharding_tps())
        raise ValueError(
            f"tp={tp} must divide {model.name}'s {model.num_qo_heads} query heads "
            f"(the latent is replicated); allowed: {allowed}"
        )
    return model.num_qo_heads // tp


def valid_tps(model: ModelShape, candidates: tuple[int, ...] = TP_CANDIDATES) -> list[int]:
    """The tensor-parallel degrees among `candidates` that shard the model's heads."""
    ok = []
    for tp in candidates:
        try:
            mla_heads(model, tp) if model.mla is not None else model.shard(tp)
        except ValueError:
            continue
        ok.append(tp)
    return ok
