"""KV-cache capacity: bytes per token, memory an fp8 cache saves, the largest batch that fits.

Per GPU, for a model sharded `tp` ways (`workload.models`):

    kv_bytes_per_token = 2 * num_layers * num_kv_heads * head_dim * itemsize(kv_dtype)
                         + 2 * num_layers * num_kv_heads * 4     (per-token scheme only: one
                                                                  fp32 scale per (token, head)
                                                                  for K and V; channel: V only)
    request_bytes(L)   = ceil(L / page_size) * page_size * kv_bytes_per_token   (whole pages)
    kv_budget          = hbm * utilization - weights - reserve - static scale tensors
    max_batch(L)       = floor(kv_budget / request_bytes(L))
    max_batch(mix)     = floor(kv_budget / mean request_bytes over the mix)
    memory_saved       = 1 - kv_bytes_per_token(fp8) / kv_bytes_per_token(16-bit)

so an fp8 cache saves at most 50% of the 16-bit cache (exactly 50% with static scales).
Weights: every linear layer of the decoder plus untied input/output embeddings, split tp ways.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from attnbench.workload.models import get_model
from attnbench.workload.shapes import ModelShape
from attnbench.workload.spec import ITEMSIZE, normalize_dtype

GIB = 1 << 30
SCALE_BYTES = 4
"""Scales are float32."""

GPU_MEMORY_GIB: dict[str, float] = {
    "h100-80gb": 79.1,
    "h200": 139.8,
}
"""Total device memory as `torch.cuda.get_device_properties().total_memory` reports it
(approximate): the H100 SXM sold as 80 GB and the H200 sold as 141 GB."""


_TOKEN_SCALED = {"token": 2, "channel": 1}
"""Per-token scale tensors a scheme keeps: `token` for K and V, `channel` for V (K is
per-channel, V per-token, as in KIVI)."""


def kv_bytes_per_token(
    num_layers: int, num_kv_heads: int, head_dim: int, kv_dtype: str, scheme: str = "tensor"
) -> int:
    """Bytes one token's K and V take on one GPU over all layers (see the module docstring)."""
    itemsize = ITEMSIZE[normalize_dtype(kv_dtype, field="kv_dtype")]
    per_token = 2 * num_layers * num_kv_heads * head_dim * itemsize
    if itemsize == 1:
        per_token += _TOKEN_SCALED.get(scheme, 0) * num_layers * num_kv_heads * SCALE_BYTES
    return per_token


def static_scale_bytes(
    num_layers: int, num_kv_heads: int, head_dim: int, kv_dtype: str, scheme: str = "tensor"
) -> int:
    """Bytes of the scale tensors that do not grow with tokens (K and V, every layer):
    tensor 1 + 1, head H + H, channel H*D (K only) scales per layer; none and token 0."""
    if ITEMSIZE[normalize_dtype(kv_dtype, field="kv_dtype")] != 1:
        return 0
    per_layer = {
        "none": 0,
        "tensor": 2,
        "head": 2 * num_kv_heads,
        "token": 0,
        "channel": num_kv_heads * head_dim,
    }
    if scheme not in per_layer:
        raise ValueError(f"scheme={scheme!r} is not known; allowed: {', '.join(per_layer)}")
    return num_layers * per_layer[scheme] * SCALE_BYTES


def request_bytes(kv_len: int, page_size: int, bytes_per_token: int) -> int:
    """Bytes of one request's cache: its tokens rounded up to whole pages."""
    if kv_len <= 0 or page_size <= 0:
        raise ValueError("kv_len and page_size must be positive")
    return -(-kv_len // page_size) * page_size * bytes_per_token


def model_params(model: ModelShape) -> int:
    """Parameters of a decoder-only model: q/k/v/o, gated MLP and norms per layer, untied
    input and output embeddings, final norm."""
    h, d = model.hidden_size, model.head_dim
    attn = h * model.num_qo_heads * d * 2 + h * model.num_kv_heads * d * 2
    mlp = 3 * h * model.intermediate_size
    per_layer = attn + mlp + 2 * h
    return model.num_layers * per_layer + 2 * model.vocab_size * h + h


def weight_bytes_per_gpu(model: ModelShape, tp: int, bytes_per_param: float = 2.0) -> int:
    """Weights one GPU holds at tensor-parallel degree `tp` (every tensor split evenly)."""
    return int(model_params(model) * bytes_per_param / tp)


def max_batch(budget_bytes: int, kv_lens: list[int], page_size: int, bytes_per_token: int) -> int:
    """Largest number of requests whose caches fit `budget_bytes`: one length, or the mean
    request of a length mix (steady state with that mix)."""
    if budget_bytes <= 0:
        return 0
    sizes = [request_bytes(n, page_size, bytes_per_token) for n in kv_lens]
    return int(budget_bytes * len(sizes) // sum(sizes))


@dataclass(frozen=True)
class CapacityRow:
    gpu: str
    hbm_bytes: int
    kv_dtype: str
    scheme: str
    bytes_per_token: int
    weight_bytes: int
    budget_bytes: int
    max_tokens: int
    max_batch: dict[str, int] = field(default_factory=dict)
    """Length label -> largest batch."""
    saved_fraction: float = 0.0
    """1 - bytes_per_token / bytes_per_token of the 16-bit cache."""


@dataclass(frozen=True)
class CapacityScenario:
    """The deployment a capacity table is for.

    model, tp: model shape and tensor-parallel degree (per-GPU heads and weights).
    utilization: fraction of device memory the engine may use (vLLM's default 0.9).
    reserve_gib: activations, CUDA graphs and workspace kept out of the KV budget.
    """

    model: str = "llama-3.1-70b"
    tp: int = 8
    page_size: int = 16
    kv_dtypes: tuple[str, ...] = ("bfloat16", "fp8_e4m3")
    fp8_schemes: tuple[str, ...] = ("tensor", "token")
    utilization: float = 0.9
    reserve_gib: float = 4.0
    weight_bytes_per_param: float = 2.0


def capacity_table(
    lengths: dict[str, list[int]],
    gpus: dict[str, float] | None = None,
    scenario: CapacityScenario = CapacityScenario(),
) -> list[CapacityRow]:
    """One row per (GPU, kv dtype, scheme): the scenario's KV budget and largest batches.
    `lengths`: label -> request lengths (one length, or a mix); `gpus`: name -> total memory
    in GiB (default `GPU_MEMORY_GIB`)."""
    sc = scenario
    model, tp, page_size, utilization = sc.model, sc.tp, sc.page_size, sc.utilization
    reserve_gib, weight_bytes_per_param = sc.reserve_gib, sc.weight_bytes_per_param
    kv_dtypes, fp8_schemes = sc.kv_dtypes, sc.fp8_schemes
    shape = get_model(model)
    shard = shape.shard(tp)
    weights = weight_bytes_per_gpu(shape, tp, weight_bytes_per_param)
    rows: list[CapacityRow] = []
    for gpu, gib in (gpus or GPU_MEMORY_GIB).items():
        hbm = int(gib * GIB)
        base_bpt = kv_bytes_per_token(shard.num_layers, shard.num_kv_heads, shard.head_dim, "bf16")
        for kv_dtype in kv_dtypes:
            canon = normalize_dtype(kv_dtype, field="kv_dtype")
            for scheme in fp8_schemes if ITEMSIZE[canon] == 1 else ("none",):
                dims = (shard.num_layers, shard.num_kv_heads, shard.head_dim, canon, scheme)
                bpt = kv_bytes_per_token(*dims)
                fixed = static_scale_bytes(*dims)
                budget = int(hbm * utilization) - weights - int(reserve_gib * GIB) - fixed
                rows.append(
                    CapacityRow(
                        gpu=gpu,
                        hbm_bytes=hbm,
                        kv_dtype=canon,
                        scheme=scheme,
                        bytes_per_token=bpt,
                        weight_bytes=weights,
                        budget_bytes=max(budget, 0),
                        max_tokens=max(budget, 0) // bpt,
                        max_batch={
                            label: max_batch(budget, lens, page_size, bpt)
                            for label, lens in lengths.items()
                        },
                        saved_fraction=1.0 - bpt / base_bpt,
                    )
                )
    return rows
