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

attnbench does not run these features yet: `unsupported_reason` says why a preset cannot become
a plain GQA workload (config.py refuses such a `--model`), and `shard` refuses MLA, whose cache
no GQA head count describes.
"""

from __future__ import annotations

from dataclasses import KW_ONLY, dataclass
from typing import Literal

LayerType = Literal["full_attention", "sliding_attention"]
"""One layer's attention, as HF `layer_types` names it."""


@dataclass(frozen=True)
class MLAShape:
    """Multi-head latent attention, under the HF `config.json` field names."""

    kv_lora_rank: int
    qk_rope_head_dim: int
    qk_nope_head_dim: int
    v_head_dim: int

    @property
    def latent_dim(self) -> int:
        """Values one token caches per layer in the absorbed form (compressed KV + RoPE key),
        shared by every query head: kv_lora_rank + qk_rope_head_dim."""
        return self.kv_lora_rank + self.qk_rope_head_dim

    @property
    def qk_head_dim(self) -> int:
        """Query/key width per head in the decompressed form: qk_nope + qk_rope."""
        return self.qk_nope_head_dim + self.qk_rope_head_dim


@dataclass(frozen=True)
class ModelShape:
    """Attention-relevant shape of a decoder-only model.

    For an MLA model `num_kv_heads` and `head_dim` are the decompressed (prefill) form, HF's
    num_key_value_heads and qk_nope + qk_rope; `mla` describes the latent the cache holds.
    """

    name: str
    num_qo_heads: int
    num_kv_heads: int
    head_dim: int
    num_layers: int
    hidden_size: int
    intermediate_size: int
    """MLP width, for the non-attention GEMM roofline of the serving replay; for an MoE model
    (num_experts > 0) one expert's width."""
    vocab_size: int
    _: KW_ONLY
    sliding_window: int | None = None
    """Tokens a windowed layer attends to (HF `sliding_window`); None: no windowed layer."""
    layer_types: tuple[LayerType, ...] = ()
    """Per layer, HF `layer_types`; empty: every layer full attention."""
    sinks: bool = False
    """A learned per-query-head sink logit joins the softmax denominator (gpt-oss)."""
    logits_soft_cap: float = 0.0
    """cap * tanh(logits / cap) before the softmax (HF `attn_logit_softcapping`); 0: none."""
    mla: MLAShape | None = None
    num_experts: int = 0
    """Routed experts per MoE layer (0: dense MLP)."""
    num_experts_per_tok: int = 0
    source: str = ""
    """Where every value comes from: config field names and values, and the file read."""

    def __post_init__(self) -> None:
        if self.num_qo_heads % self.num_kv_heads:
            raise ValueError(f"{self.name}: num_kv_heads must divide num_qo_heads")
        if self.layer_types and len(self.layer_types) != self.num_layers:
            raise ValueError(f"{self.name}: layer_types needs one entry per layer")
        if ("sliding_attention" in self.layer_types) != (self.sliding_window is not None):
            raise ValueError(f"{self.name}: a sliding_window needs sliding layers and vice versa")
        if self.mla is not None and self.head_dim != self.mla.qk_head_dim:
            raise ValueError(f"{self.name}: head_dim must be the MLA qk_nope + qk_rope width")
        if self.num_experts_per_tok > self.num_experts:
            raise ValueError(f"{self.name}: num_experts_per_tok exceeds num_experts")

    @property
    def num_sliding_layers(self) -> int:
        return self.layer_types.count("sliding_attention")

    def window_pattern(self) -> str:
        """`<window> on <n>/<layers> layers (<sliding>:<full>)` over the shortest repeating
        period of `layer_types`, or "" without windowed layers."""
        if self.sliding_window is None:
            return ""
        types = self.layer_types
        period = next(
            p
            for p in range(1, len(types) + 1)
            if all(t == types[i % p] for i, t in enumerate(types))
        )
        sliding = types[:period].count("sliding_attention")
        return (
            f"window {self.sliding_window} on {self.num_sliding_layers}/{self.num_layers} "
            f"layers ({sliding}:{period - sliding})"
        )

    def attention_features(self) -> tuple[str, ...]:
        """What this model's attention adds to plain GQA, shortest first."""
        features = []
        if self.mla is not None:
            m = self.mla
            features.append(
                f"MLA latent {m.kv_lora_rank}+{m.qk_rope_head_dim} (nope {m.qk_nope_head_dim}, "
                f"v {m.v_head_dim})"
            )
        if self.sliding_window is not None:
            features.append(self.window_pattern())
        if self.sinks:
            features.append("attention sinks")
        if self.logits_soft_cap:
            features.append(f"logit soft-cap {self.logits_soft_cap:g}")
        return tuple(features)

    def unsupported_reason(self) -> str | None:
        """Why this preset cannot be run as a plain GQA workload yet (None if it can)."""
        if self.mla is not None:
            m = self.mla
            return (
                f"MLA workloads are not supported yet: {self.name} caches one latent of "
                f"kv_lora_rank {m.kv_lora_rank} + qk_rope_head_dim {m.qk_rope_head_dim} values "
                f"per token and layer, shared by its {self.num_qo_heads} query heads, which no "
                "GQA head count describes"
            )
        features = self.attention_features()
        if not features:
            return None
        return (
            f"{self.name} uses {', '.join(features)}, which attnbench does not run yet: a GQA "
            "workload would time every layer as plain full attention; for that shape anyway "
            f"use --num-heads {self.num_qo_heads} --num-kv-heads {self.num_kv_heads} "
            f"--head-dim {self.head_dim} without --model"
        )

    def shard(self, tp: int) -> ShardedShape:
        """The per-GPU shape at tensor-parallel degree `tp`, as vLLM and SGLang shard it.

        Query heads are split evenly (tp must divide them). KV heads are split when tp divides
        them; when tp exceeds them, each KV head is replicated on tp / num_kv_heads GPUs, so every
        GPU holds one KV head (vLLM `get_num_kv_heads`: max(1, num_kv_heads // tp)). An MLA model
        is refused: its latent cache has no KV heads to split.
        """
        if self.mla is not None:
            raise ValueError(self.unsupported_reason())
        if tp <= 0:
            raise ValueError(f"tp={tp} must be positive")
        if self.num_qo_heads % tp:
            raise ValueError(
                f"tp={tp} must divide {self.name}'s {self.num_qo_heads} query heads; "
                f"allowed: {', '.join(str(d) for d in divisors(self.num_qo_heads))}"
            )
        if self.num_kv_heads >= tp and self.num_kv_heads % tp:
            raise ValueError(
                f"tp={tp} must divide {self.name}'s {self.num_kv_heads} KV heads "
                "(or be a multiple of it)"
            )
        if self.num_kv_heads < tp and tp % self.num_kv_heads:
            raise ValueError(
                f"tp={tp} must be a multiple of {self.name}'s {self.num_kv_heads} KV heads"
            )
        return ShardedShape(
            model=self,
            tp=tp,
            num_qo_heads=self.num_qo_heads // tp,
            num_kv_heads=max(1, self.num_kv_heads // tp),
        )


@dataclass(frozen=True)
class ShardedShape:
    model: ModelShape
    tp: int
    num_qo_heads: int
    num_kv_heads: int

    @property
    def head_dim(self) -> int:
        return self.model.head_dim

    @property
    def num_layers(self) -> int:
        return self.model.num_layers


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def layer_cycle(num_layers: int, sliding: int, full: int) -> tuple[LayerType, ...]:
    """`sliding` windowed layers then `full` full ones, repeated from layer 0 and cut at
    `num_layers` (gpt-oss and Gemma-2: 1:1; Gemma-3: 5:1, layer i full iff (i + 1) % 6 == 0)."""
    windowed: LayerType = "sliding_attention"
    dense: LayerType = "full_attention"
    period = [windowed] * sliding + [dense] * full
    return tuple(period[i % len(period)] for i in range(num_layers))


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

_V3_MLA = MLAShape(kv_lora_rank=512, qk_rope_head_dim=64, qk_nope_head_dim=128, v_head_dim=128)

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
            source=(
                "google/gemma_pytorch gemma/config.py @014acb7 get_config_for_27b: "
                "num_attention_heads 32, num_key_value_heads 16, head_dim 128, "
                "num_hidden_layers 46, hidden_size 4608, intermediate_size 36864, vocab 256000, "
                "attn_types [LOCAL_SLIDING, GLOBAL] x 23, sliding_window_size 4096, "
                "attn_logit_softcapping 50.0; query_pre_attn_scalar 144 (sm_scale, not modelled)"
            ),
        ),
        ModelShape(
            "gemma-2-9b", 16, 8, 256, 42, 3584, 14336, 256000,
            sliding_window=4096,
            layer_types=layer_cycle(42, 1, 1),
            logits_soft_cap=50.0,
            source=(
                "google/gemma_pytorch gemma/config.py @014acb7 get_config_for_9b: "
                "num_attention_heads 16, num_key_value_heads 8, head_dim 256, "
                "num_hidden_layers 42, hidden_size 3584, intermediate_size 14336, vocab 256000, "
                "attn_types [LOCAL_SLIDING, GLOBAL] x 21, sliding_window_size 4096, "
                "attn_logit_softcapping 50.0"
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
            mla=_V3_MLA,
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
