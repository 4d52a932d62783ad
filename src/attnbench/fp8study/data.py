"""Synthetic queries and KV caches for the FP8 numerics study, in fp64.

Every kind is seeded twice: `seed` fixes what belongs to the *model* (which channels are
outliers and how large), `sample_seed` the tokens. A static scheme's calibration sample is the
same model with another `sample_seed`, as an engine calibrates once on other prompts.

Kinds (q `[num_queries, num_qo_heads, head_dim]`, k and v `[num_tokens, num_kv_heads, head_dim]`):

- `random`: q, k, v ~ N(0, 1).
- `outlier_channels`: k ~ N(0, 1) with `OUTLIER_CHANNELS` channels per KV head scaled by a
  factor log-uniform in [10, 100], the pre-RoPE key outlier channels KVQuant and KIVI report;
  v ~ N(0, 1). The query's matching channels are divided by the same factor so the logits have
  the `random` kind's scale: the kind isolates what the wider K range does to quantisation
  (with unscaled queries the softmax is near one-hot and error grows with the logits).
- `fa3_outliers`: q, k, v ~ N(0, 1) + N(0, 100) * Bernoulli(0.001), the FlashAttention-3
  paper's outlier distribution (§4.3).
- `small`: k, v ~ 0.01 * N(0, 1), below e4m3's smallest normal (2**-6); q ~ 100 * N(0, 1) so
  the logits match `random`. Shows what an unscaled (scale 1) cache does to small values.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

OUTLIER_CHANNELS = 4
OUTLIER_FACTOR_RANGE = (10.0, 100.0)
FA3_OUTLIER_PROB = 0.001
FA3_OUTLIER_STD = 10.0
SMALL_SCALE = 0.01

DATA_KINDS: dict[str, str] = {
    "random": "q, k, v ~ N(0,1)",
    "outlier_channels": (
        f"k ~ N(0,1), {OUTLIER_CHANNELS} channels per KV head x log-uniform"
        f"[{OUTLIER_FACTOR_RANGE[0]:g}, {OUTLIER_FACTOR_RANGE[1]:g}] (KVQuant/KIVI); "
        "q's matching channels / factor; v ~ N(0,1)"
    ),
    "fa3_outliers": "q, k, v ~ N(0,1) + N(0,100) * Bernoulli(0.001) (FA3 paper)",
    "small": f"k, v ~ {SMALL_SCALE:g} * N(0,1); q ~ {1 / SMALL_SCALE:g} * N(0,1)",
}


@dataclass
class QKV:
    """One synthetic attention problem, fp64."""

    q: torch.Tensor
    """`[num_queries, num_qo_heads, head_dim]`"""
    k: torch.Tensor
    """`[num_tokens, num_kv_heads, head_dim]`"""
    v: torch.Tensor
    """`[num_tokens, num_kv_heads, head_dim]`"""


def _generator(device: torch.device, seed: int) -> torch.Generator:
    return torch.Generator(device=device).manual_seed(seed)


def outlier_factors(
    num_kv_heads: int, head_dim: int, seed: int, device: torch.device
) -> torch.Tensor:
    """`[num_kv_heads, head_dim]` per-channel K magnitudes: 1, except `OUTLIER_CHANNELS`
    random channels per head with a factor log-uniform in `OUTLIER_FACTOR_RANGE`."""
    gen = torch.Generator().manual_seed(seed)
    factors = torch.ones(num_kv_heads, head_dim, dtype=torch.float64)
    lo, hi = (math.log(f) for f in OUTLIER_FACTOR_RANGE)
    n = min(OUTLIER_CHANNELS, head_dim)
    for h in range(num_kv_heads):
        channels = torch.randperm(head_dim, generator=gen)[:n]
        logs = torch.empty(n, dtype=torch.float64).uniform_(lo, hi, generator=gen)
        factors[h, channels] = logs.exp()
    return factors.to(device)


@dataclass(frozen=True)
class QKVShape:
    """The shape of one problem: `num_tokens` keys and values, `num_queries` queries."""

    num_tokens: int
    num_queries: int
    num_qo_heads: int
    num_kv_heads: int
    head_dim: int


def make_qkv(
    kind: str,
    shape: QKVShape,
    *,
    seed: int,
    sample_seed: int,
    device: str | torch.device = "cpu",
) -> QKV:
    """Draw one problem of `kind` (see the module docstring)."""
    num_tokens, num_queries, head_dim = shape.num_tokens, shape.num_queries, shape.head_dim
    num_qo_heads, num_kv_heads = shape.num_qo_heads, shape.num_kv_heads
    if kind not in DATA_KINDS:
        raise ValueError(f"data kind {kind!r} is not known; allowed: {', '.join(DATA_KINDS)}")
    if num_qo_heads % num_kv_heads:
        raise ValueError(f"num_qo_heads={num_qo_heads} must be a multiple of {num_kv_heads}")
    dev = torch.device(device)
    gen = _generator(dev, sample_seed)

    def normal(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen, dtype=torch.float64, device=dev)

    q = normal(num_queries, num_qo_heads, head_dim)
    k = normal(num_tokens, num_kv_heads, head_dim)
    v = normal(num_tokens, num_kv_heads, head_dim)
    if kind == "outlier_channels":
        factors = outlier_factors(num_kv_heads, head_dim, seed, dev)
        k = k * factors
        group = num_qo_heads // num_kv_heads
        q = q / factors.repeat_interleave(group, dim=0)
    elif kind == "fa3_outliers":

        def spiky(t: torch.Tensor) -> torch.Tensor:
            hits = torch.rand(t.shape, generator=gen, dtype=torch.float64, device=dev)
            extra = normal(*t.shape) * FA3_OUTLIER_STD
            return t + extra * (hits < FA3_OUTLIER_PROB)

        q, k, v = spiky(q), spiky(k), spiky(v)
    elif kind == "small":
        q = q / SMALL_SCALE
        k = k * SMALL_SCALE
        v = v * SMALL_SCALE
    return QKV(q, k, v)
