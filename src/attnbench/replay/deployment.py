"""The served deployment: model shape at its TP degree, weights, KV bytes and the KV page budget.

Memory model (vLLM's, simplified): of the GPU's memory, `mem_utilization` is usable; the
model's weights on this GPU and a fixed activation/workspace reserve come off the top, and what
is left is the paged KV cache. One page holds `page_size` tokens of every layer's K and V for
this GPU's KV heads.

Weights and KV bytes per token come from `attnbench.workload.capacity` (the same budget as
`attnbench fp8 --capacity`). The GEMM shapes of one layer on one GPU (for `replay.gemm`):
QKV `hidden x (q_heads + 2 kv_heads) x head_dim` (per-GPU heads; KV heads replicated when tp
exceeds them), O `q_heads x head_dim x hidden`, MLP gate+up `hidden x 2 x intermediate / tp`,
down `intermediate / tp x hidden`; the LM head `hidden x vocab / tp`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from attnbench.workload.models import get_model
from attnbench.workload.shapes import ShardedShape
from attnbench.workload.spec import ITEMSIZE, normalize_dtype

GIB = 1 << 30


@dataclass(frozen=True)
class Gemm:
    """One weight GEMM of a layer on one GPU: [tokens, k] x [k, n]."""

    name: str
    k: int
    n: int

    @property
    def params(self) -> int:
        return self.k * self.n


@dataclass(frozen=True)
class Deployment:
    model: str = "llama-3.1-70b"
    tp: int = 8
    dtype: str = "bfloat16"
    """Weights, activations and the attention query/output dtype."""
    kv_dtype: str = "bfloat16"
    page_size: int = 16
    gpu_mem_gib: float = 139.8
    """Memory of one GPU (H200: ~139.8 GiB visible to CUDA)."""
    mem_utilization: float = 0.9
    """Fraction of GPU memory the engine may use (vLLM's gpu_memory_utilization)."""
    reserve_gib: float = 4.0
    """Activations, workspaces, CUDA graphs: kept out of the KV cache."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "dtype", normalize_dtype(self.dtype, allow_fp8=False))
        object.__setattr__(self, "kv_dtype", normalize_dtype(self.kv_dtype, field="kv_dtype"))
        if self.page_size <= 0 or self.page_size & (self.page_size - 1):
            raise ValueError(f"page_size={self.page_size} must be a power of two")
        if not 0 < self.mem_utilization <= 1:
            raise ValueError(f"mem_utilization={self.mem_utilization} must be in (0, 1]")

    @cached_property
    def shard(self) -> ShardedShape:
        return get_model(self.model).shard(self.tp)

    @property
    def num_layers(self) -> int:
        return self.shard.num_layers

    @property
    def hidden_size(self) -> int:
        return self.shard.model.hidden_size

    def layer_gemms(self) -> list[Gemm]:
        """The weight GEMMs of one layer on one GPU (see the module docstring)."""
        s, m = self.shard, self.shard.model
        d = s.head_dim
        inter = m.intermediate_size // self.tp
        return [
            Gemm("qkv", m.hidden_size, (s.num_qo_heads + 2 * s.num_kv_heads) * d),
            Gemm("o", s.num_qo_heads * d, m.hidden_size),
            Gemm("gate_up", m.hidden_size, 2 * inter),
            Gemm("down", inter, m.hidden_size),
        ]

    def lm_head(self) -> Gemm:
        m = self.shard.model
        return Gemm("lm_head", m.hidden_size, -(-m.vocab_size // self.tp))

    @property
    def weight_bytes(self) -> int:
        """Weights on one GPU (`capacity.weight_bytes_per_gpu`, as `attnbench fp8 --capacity`)."""
        from attnbench.workload.capacity import weight_bytes_per_gpu

        return weight_bytes_per_gpu(self.shard.model, self.tp, ITEMSIZE[self.dtype])

    @property
    def kv_bytes_per_token(self) -> int:
        """K and V of one token, every layer, this GPU's KV heads (`capacity`)."""
        from attnbench.workload.capacity import kv_bytes_per_token

        s = self.shard
        return kv_bytes_per_token(self.num_layers, s.num_kv_heads, s.head_dim, self.kv_dtype)

    @property
    def kv_cache_bytes(self) -> int:
        usable = self.gpu_mem_gib * GIB * self.mem_utilization - self.reserve_gib * GIB
        return max(0, int(usable - self.weight_bytes))

    @property
    def kv_pages(self) -> int:
        """Pages of the paged KV cache (the simulator's memory budget)."""
        return self.kv_cache_bytes // (self.page_size * self.kv_bytes_per_token)
