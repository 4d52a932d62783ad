"""Attention shapes of current open models, and how tensor parallelism shards them.

Shapes come from each model's published `config.json` (num_attention_heads,
num_key_value_heads, head_dim or hidden_size / num_attention_heads, num_hidden_layers).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ModelShape:
    """Attention-relevant shape of a decoder-only model (all layers alike)."""

    name: str
    num_qo_heads: int
    num_kv_heads: int
    head_dim: int
    num_layers: int
    hidden_size: int
    intermediate_size: int
    """MLP width, for the non-attention GEMM roofline of the serving replay."""
    vocab_size: int

    def shard(self, tp: int) -> ShardedShape:
        """The per-GPU shape at tensor-parallel degree `tp`, as vLLM and SGLang shard it.

        Query heads are split evenly (tp must divide them). KV heads are split when tp divides
        them; when tp exceeds them, each KV head is replicated on tp / num_kv_heads GPUs, so every
        GPU holds one KV head (vLLM `get_num_kv_heads`: max(1, num_kv_heads // tp)).
        """
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


MODELS: dict[str, ModelShape] = {
    m.name: m
    for m in (
        # meta-llama/Llama-3.1-8B-Instruct config.json
        ModelShape("llama-3.1-8b", 32, 8, 128, 32, 4096, 14336, 128256),
        # meta-llama/Llama-3.1-70B-Instruct config.json
        ModelShape("llama-3.1-70b", 64, 8, 128, 80, 8192, 28672, 128256),
        # meta-llama/Llama-3.1-405B-Instruct config.json
        ModelShape("llama-3.1-405b", 128, 8, 128, 126, 16384, 53248, 128256),
        # Qwen/Qwen2.5-72B-Instruct config.json: 64 q / 8 kv heads, hidden 8192
        ModelShape("qwen2.5-72b", 64, 8, 128, 80, 8192, 29568, 152064),
        # Qwen/Qwen3-32B config.json: head_dim 128 with 64 q / 8 kv heads over hidden 5120
        ModelShape("qwen3-32b", 64, 8, 128, 64, 5120, 25600, 151936),
        # mistralai/Mistral-7B-Instruct-v0.3 config.json: 32 q / 8 kv heads
        ModelShape("mistral-7b", 32, 8, 128, 32, 4096, 14336, 32768),
        # google/gemma-2-27b config.json: head_dim 128, 32 q / 16 kv heads
        ModelShape("gemma-2-27b", 32, 16, 128, 46, 4608, 36864, 256000),
        # google/gemma-2-9b config.json: head_dim 256, 16 q / 8 kv heads
        ModelShape("gemma-2-9b", 16, 8, 256, 42, 3584, 14336, 256000),
    )
}


def get_model(name: str) -> ModelShape:
    key = name.strip().lower()
    if key not in MODELS:
        raise ValueError(f"model={name!r} is not known; allowed: {', '.join(MODELS)}")
    return MODELS[key]
