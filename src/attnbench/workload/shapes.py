"""What a model's attention looks like (`ModelShape`, with MLA and windowed-layer features) and
its shard under tensor parallelism (`ShardedShape`); the presets are in `workload.models`.
"""

from __future__ import annotations

import math
from dataclasses import KW_ONLY, dataclass
from typing import Literal

TP_CANDIDATES = (1, 2, 4, 8, 16)
"""The tensor-parallel degrees attnbench offers (one node of 8 GPUs, or two)."""

LayerType = Literal["full_attention", "sliding_attention"]
"""One layer's attention, as HF `layer_types` names it."""


@dataclass(frozen=True)
class MLAShape:
    """Multi-head latent attention, under the HF `config.json` field names."""

    kv_lora_rank: int
    qk_rope_head_dim: int
    qk_nope_head_dim: int
    v_head_dim: int
    yarn_factor: float = 0.0
    """YaRN's `rope_factor` (HF `rope_scaling.factor`); 0: no YaRN."""
    yarn_mscale: float = 1.0
    """YaRN's `mscale` (HF `rope_scaling.mscale_all_dim`)."""

    @property
    def softmax_scale(self) -> float:
        """The model's attention softmax scale: qk_head_dim ** -0.5, times mscale**2 under YaRN,
        mscale = 0.1 * yarn_mscale * ln(yarn_factor) + 1 (DeepSeek-V3 `inference/model.py`
        `MLA.__init__`, applied when the context exceeds the original 4k, as served)."""
        scale = 1.0 / math.sqrt(self.qk_head_dim)
        if self.yarn_factor > 1.0:
            mscale = 0.1 * self.yarn_mscale * math.log(self.yarn_factor) + 1.0
            scale *= mscale * mscale
        return scale

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
    query_pre_attn_scalar: float = 0.0
    """The softmax scale is query_pre_attn_scalar ** -0.5 (HF `query_pre_attn_scalar`, Gemma);
    0: head_dim ** -0.5."""
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
        if self.query_pre_attn_scalar and self.query_pre_attn_scalar != self.head_dim:
            features.append(f"softmax scale {self.query_pre_attn_scalar:g}^-0.5")
        return tuple(features)

    def unsupported_reason(self) -> str | None:
        """Why `--model` cannot run this preset (None if it can): attnbench runs MLA, sliding
        windows with their layer pattern, sinks and logit soft-capping with the model's softmax
        scale (`models.layer_shapes`), so every preset runs today; a preset with a feature
        attnbench does not compute would say so here, since a workload without it would time
        different attention."""
        return None

    def mla_reason(self) -> str:
        """Why a GQA shard (KV heads per GPU) does not describe this MLA model."""
        m = self.mla
        assert m is not None
        return (
            f"{self.name} uses MLA: its cache holds one latent of kv_lora_rank {m.kv_lora_rank} "
            f"+ qk_rope_head_dim {m.qk_rope_head_dim} values per token and layer, shared by its "
            f"{self.num_qo_heads} query heads, which no GQA head count describes (attention "
            "cases: --model; KV capacity and the serving replay model GQA caches only)"
        )

    def shard(self, tp: int) -> ShardedShape:
        """The per-GPU shape at tensor-parallel degree `tp`, as vLLM and SGLang shard it.

        Query heads are split evenly (tp must divide them). KV heads are split when tp divides
        them; when tp exceeds them, each KV head is replicated on tp / num_kv_heads GPUs, so every
        GPU holds one KV head (vLLM `get_num_kv_heads`: max(1, num_kv_heads // tp)). An MLA model
        is refused: its latent cache has no KV heads to split.
        """
        if self.mla is not None:
            raise ValueError(self.mla_reason())
        why = self._shard_error(tp)
        if why:
            allowed = ", ".join(str(t) for t in self.sharding_tps())
            raise ValueError(f"{why}; allowed: {allowed} (as `attnbench models` lists)")
        return ShardedShape(
            model=self,
            tp=tp,
            num_qo_heads=self.num_qo_heads // tp,
            num_kv_heads=max(1, self.num_kv_heads // tp),
        )

    def _shard_error(self, tp: int) -> str | None:
        """Why `tp` does not shard this (GQA) model's heads, or None."""
        if tp <= 0:
            return f"tp={tp} must be positive"
        if self.num_qo_heads % tp:
            return f"tp={tp} must divide {self.name}'s {self.num_qo_heads} query heads"
        if self.num_kv_heads >= tp and self.num_kv_heads % tp:
            return (
                f"tp={tp} must divide {self.name}'s {self.num_kv_heads} KV heads "
                "(or be a multiple of it)"
            )
        if self.num_kv_heads < tp and tp % self.num_kv_heads:
            return f"tp={tp} must be a multiple of {self.name}'s {self.num_kv_heads} KV heads"
        return None

    def sharding_tps(self, candidates: tuple[int, ...] = TP_CANDIDATES) -> list[int]:
        """The degrees among `candidates` that shard the heads (MLA: divide the query heads)."""
        if self.mla is not None:
            return [t for t in candidates if self.num_qo_heads % t == 0]
        return [t for t in candidates if self._shard_error(t) is None]


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


def layer_cycle(num_layers: int, sliding: int, full: int) -> tuple[LayerType, ...]:
    """`sliding` windowed layers then `full` full ones, repeated from layer 0 and cut at
    `num_layers` (gpt-oss and Gemma-2: 1:1; Gemma-3: 5:1, layer i full iff (i + 1) % 6 == 0)."""
    windowed: LayerType = "sliding_attention"
    dense: LayerType = "full_attention"
    period = [windowed] * sliding + [dense] * full
    return tuple(period[i % len(period)] for i in range(num_layers))
