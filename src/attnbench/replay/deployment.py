"""The served deployment: model shape at its TP degree, weights, KV bytes and the KV page budget.

Memory model (vLLM's, simplified): of the GPU's memory, `mem_utilization` is usable; the
model's weights on this GPU and a fixed activation/workspace reserve come off the top, and what
is left is the paged KV cache. One page holds `page_size` tokens of every layer's K and V for
this GPU's KV heads (MLA: one latent of kv_lora_rank + qk_rope_head_dim values per token and
layer, replicated on every GPU: `models.mla_heads`).

Weights and KV bytes per token come from `attnbench.workload.capacity` (the same budget as
`attnbench fp8 --capacity`) for dense GQA models, and from `replay.served` for MoE and MLA
models (every expert, the weights' own dtype: `weight_dtype`). The GEMM shapes of one layer on
one GPU (for `replay.gemm`): QKV `hidden x (q_heads + 2 kv_heads) x head_dim` (per-GPU heads;
KV heads replicated when tp exceeds them), O `q_heads x head_dim x hidden`, MLP gate+up
`hidden x 2 x intermediate / tp`, down `intermediate / tp x hidden`; the LM head
`hidden x vocab / tp`. MoE and MLA layers: `replay.served`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from attnbench.replay.served import (
    MLA_WEIGHTS,
    WEIGHT_BYTES,
    Gemm,
    LayerGroup,
    check_weight_dtype,
    default_weight_dtype,
    weight_bytes_per_gpu,
)
from attnbench.workload.models import LayerShape, get_model, layer_shapes, mla_heads
from attnbench.workload.shapes import ModelShape, ShardedShape
from attnbench.workload.spec import ITEMSIZE, normalize_dtype

GIB = 1 << 30


@dataclass(frozen=True)
class Deployment:
    model: str = "llama-3.1-70b"
    tp: int = 8
    dtype: str = "bfloat16"
    """Activations and the attention query/output dtype (and the weights' by default)."""
    kv_dtype: str = "bfloat16"
    page_size: int = 16
    gpu_mem_gib: float = 139.8
    """Memory of one GPU (H200: ~139.8 GiB visible to CUDA)."""
    mem_utilization: float = 0.9
    """Fraction of GPU memory the engine may use (vLLM's gpu_memory_utilization)."""
    reserve_gib: float = 4.0
    """Activations, workspaces, CUDA graphs: kept out of the KV cache."""
    weight_dtype: str = ""
    """The weights' dtype (`served.WEIGHT_BYTES`); "": what engines load for the model
    (`served.default_weight_dtype`: fp8 for the MLA presets, MXFP4 experts for gpt-oss, else
    `dtype`)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "dtype", normalize_dtype(self.dtype, allow_fp8=False))
        object.__setattr__(self, "kv_dtype", normalize_dtype(self.kv_dtype, field="kv_dtype"))
        wd = self.weight_dtype or default_weight_dtype(get_model(self.model), self.dtype)
        object.__setattr__(self, "weight_dtype", check_weight_dtype(wd))
        if self.page_size <= 0 or self.page_size & (self.page_size - 1):
            raise ValueError(f"page_size={self.page_size} must be a power of two")
        if not 0 < self.mem_utilization <= 1:
            raise ValueError(f"mem_utilization={self.mem_utilization} must be in (0, 1]")
        if self.is_mla:
            mla_heads(self.model_shape, self.tp)  # ValueError for a tp that does not shard it

    @cached_property
    def model_shape(self) -> ModelShape:
        return get_model(self.model)

    @property
    def is_mla(self) -> bool:
        return self.model_shape.mla is not None

    @cached_property
    def shard(self) -> ShardedShape:
        """The GQA shard (ValueError for an MLA model: `kinds` describes every model)."""
        return self.model_shape.shard(self.tp)

    @cached_property
    def kinds(self) -> list[LayerShape]:
        """The attention of one GPU, one entry per layer kind (`models.layer_shapes`)."""
        return layer_shapes(self.model_shape, self.tp)

    @property
    def num_layers(self) -> int:
        return self.model_shape.num_layers

    @property
    def hidden_size(self) -> int:
        return self.model_shape.hidden_size

    def layer_gemms(self) -> list[Gemm]:
        """The weight GEMMs of one dense GQA layer on one GPU (see the module docstring)."""
        s, m = self.shard, self.model_shape
        d = s.head_dim
        inter = m.intermediate_size // self.tp
        return [
            Gemm("qkv", m.hidden_size, (s.num_qo_heads + 2 * s.num_kv_heads) * d),
            Gemm("o", s.num_qo_heads * d, m.hidden_size),
            Gemm("gate_up", m.hidden_size, 2 * inter),
            Gemm("down", inter, m.hidden_size),
        ]

    def layer_groups(self) -> list[LayerGroup]:
        """Every layer's weight GEMMs, grouped by layers that run the same ones."""
        from attnbench.replay.served import mla_groups, moe_gemms

        m = self.model_shape
        if self.is_mla:
            return mla_groups(m, self.tp, self._weight_item(False), self._weight_item(True))
        if not m.num_experts:
            return [LayerGroup(self.num_layers, tuple(self.layer_gemms()))]
        attn = tuple(replace_item(g, self._weight_item(False)) for g in self.layer_gemms()[:2])
        experts = moe_gemms(m, self.tp, self._weight_item(True))
        return [LayerGroup(self.num_layers, attn + experts)]

    def _weight_item(self, expert: bool) -> float:
        """Bytes per weight of an expert's GEMMs or of the others (MXFP4 is experts only)."""
        if self.weight_dtype == "mxfp4" and not expert:
            return WEIGHT_BYTES[self.dtype]
        return WEIGHT_BYTES[self.weight_dtype]

    def lm_head(self) -> Gemm:
        m = self.model_shape
        return Gemm("lm_head", m.hidden_size, -(-m.vocab_size // self.tp))

    @property
    def weight_bytes(self) -> int:
        """Weights on one GPU (dense GQA: `capacity.weight_bytes_per_gpu`, as `attnbench fp8
        --capacity`; MoE and MLA: `served.weight_bytes_per_gpu`)."""
        from attnbench.workload.capacity import weight_bytes_per_gpu as dense_bytes

        m = self.model_shape
        if m.mla is None and not m.num_experts and self.weight_dtype == self.dtype:
            return dense_bytes(m, self.tp, ITEMSIZE[self.dtype])
        return weight_bytes_per_gpu(m, self.tp, self.dtype, self.weight_dtype)

    @property
    def kv_bytes_per_token(self) -> int:
        """K and V of one token, every layer, this GPU's KV heads (`capacity`); MLA: the
        latent of every layer, which each GPU keeps whole."""
        from attnbench.workload.capacity import kv_bytes_per_token

        m = self.model_shape
        if m.mla is not None:
            return self.num_layers * m.mla.latent_dim * ITEMSIZE[self.kv_dtype]
        s = self.shard
        return kv_bytes_per_token(self.num_layers, s.num_kv_heads, s.head_dim, self.kv_dtype)

    @property
    def kv_cache_bytes(self) -> int:
        return max(0, int(self.usable_bytes - self.weight_bytes))

    @property
    def usable_bytes(self) -> float:
        """GPU memory the engine may use, less the reserve."""
        return self.gpu_mem_gib * GIB * self.mem_utilization - self.reserve_gib * GIB

    @property
    def kv_pages(self) -> int:
        """Pages of the paged KV cache (the simulator's memory budget)."""
        return self.kv_cache_bytes // (self.page_size * self.kv_bytes_per_token)

    def no_room(self) -> str | None:
        """One line saying why no KV cache fits (the weights' GiB against the GPU's), or None."""
        if self.kv_pages > 0:
            return None
        plain = self.weight_dtype == self.dtype and not self.model_shape.num_experts
        wd = "" if plain and not self.is_mla else f" {self.weight_dtype}"
        return (
            f"no memory left for the KV cache: {self.mem_utilization:g} x {self.gpu_mem_gib:g} "
            f"GiB leaves nothing after {round(self.weight_bytes / GIB, 2):g} GiB of "
            f"{self.model}{wd} weights at tp {self.tp} and {self.reserve_gib:g} GiB reserved; "
            "raise --gpu-mem-gib or --tp"
        )


def replace_item(g: Gemm, item: float) -> Gemm:
    """`g` with weights of `item` bytes (unchanged at 0 or the dense default)."""
    from dataclasses import replace

    return replace(g, bytes_per_param=item)


__all__ = ["GIB", "MLA_WEIGHTS", "Deployment", "Gemm", "LayerGroup"]
