"""Shared pieces of the FlashInfer variants: workspaces, fp8 queries, page tables, XQA masks.

Everything here is plain torch (no flashinfer import), so it runs and is tested on CPU.
"""

from __future__ import annotations

import torch

from attnbench.backends.flashinfer_rules import Route
from attnbench.workload.inputs import AttentionInputs, torch_dtype
from attnbench.workload.quant import per_tensor_scale, quantize
from attnbench.workload.spec import WorkloadSpec

WORKSPACE_BYTES = 128 << 20
"""Float workspace per device (FlashInfer's recommended 128 MiB), zeroed once."""

_WORKSPACES: dict[tuple[str, str], torch.Tensor] = {}


def workspace(
    device: torch.device, tag: str = "float", nbytes: int = WORKSPACE_BYTES
) -> torch.Tensor:
    """The zero-initialised uint8 workspace of `device` for `tag`, created on first use.

    Wrappers run one after another, so all share the `float` one; XQA keeps its own (`xqa`):
    its first 8 MiB are semaphores that must stay zero between launches.
    """
    key = (str(device), tag)
    buf = _WORKSPACES.get(key)
    if buf is None:
        buf = torch.zeros(nbytes, dtype=torch.uint8, device=device)
        _WORKSPACES[key] = buf
    return buf


def quantize_query(q: torch.Tensor, kv_dtype: str) -> tuple[torch.Tensor, float, torch.Tensor]:
    """Per-tensor fp8 query for FA3's fp8 path (its kernel needs q in the KV cache's dtype).

    Args:
        q: `[total_q, num_qo_heads, head_dim]` in fp16/bf16.
        kv_dtype: `fp8_e4m3` or `fp8_e5m2`.

    Returns:
        (q8, q_scale, q_effective): the fp8 query, its scale (real = stored * q_scale) and the
        values the kernel sees, `q8 * q_scale` in float32, for the reference.
    """
    fp8 = torch_dtype(kv_dtype)
    scale = per_tensor_scale(q, fp8)
    q8 = quantize(q, scale, fp8)
    return q8, scale, q8.float() * scale


def dense_block_tables(inputs: AttentionInputs) -> torch.Tensor:
    """Page table as `[batch_size, max_pages]` int32 (zero padded), as XQA reads it."""
    indptr = inputs.kv_indptr.tolist()
    indices = inputs.kv_indices.tolist()
    counts = [indptr[b + 1] - indptr[b] for b in range(len(indptr) - 1)]
    table = torch.zeros(len(counts), max(counts), dtype=torch.int32)
    for b, n in enumerate(counts):
        table[b, :n] = torch.tensor(indices[indptr[b] : indptr[b] + n], dtype=torch.int32)
    return table.to(inputs.device)


def xqa_causal_mask(batch_size: int, q_len: int, device: torch.device) -> torch.Tensor:
    """XQA's draft-block mask for `q_len` causal rows per request.

    Row r may see draft tokens 0..r. Bits are packed little-endian into uint32 words (bit j of
    word w = draft token 32 * w + j) and handed over as pairs of uint16, as
    `flashinfer.decode._make_xqa_mtp_causal_mask` builds them.

    Returns:
        `[batch_size, q_len, 2 * ceil(q_len / 32)]` uint16 on `device`.
    """
    words = -(-q_len // 32)
    rows = torch.arange(q_len).unsqueeze(1)
    cols = torch.arange(words * 32).unsqueeze(0)
    allowed = (cols <= rows).view(q_len, words, 32).to(torch.int64)
    packed = (allowed << torch.arange(32, dtype=torch.int64)).sum(dim=-1)  # [q_len, words]
    halves = torch.stack((packed & 0xFFFF, packed >> 16), dim=-1).reshape(q_len, 2 * words)
    mask = halves.to(torch.int32).to(torch.uint16)
    return mask.unsqueeze(0).expand(batch_size, -1, -1).contiguous().to(device)


def output_buffer(spec: WorkloadSpec, inputs: AttentionInputs) -> torch.Tensor:
    """The fixed output `[total_q, num_qo_heads, head_dim]` in the query dtype."""
    return torch.empty(
        spec.total_q,
        spec.num_qo_heads,
        spec.head_dim,
        dtype=torch_dtype(spec.dtype),
        device=inputs.device,
    )


def logits_kwargs(spec: WorkloadSpec) -> dict[str, float]:
    """`plan()` keywords for the logits: `logits_soft_cap` under a soft-cap (Gemma-2) and
    `sm_scale` where the model sets its own scale (query_pre_attn_scalar); otherwise none, and
    FlashInfer uses 1/sqrt(head_dim), the same value."""
    kwargs: dict[str, float] = {}
    if spec.logits_soft_cap > 0:
        kwargs["logits_soft_cap"] = spec.logits_soft_cap
    if spec.query_pre_attn_scalar > 0:
        kwargs["sm_scale"] = spec.sm_scale
    return kwargs


def knob_details(route: Route, knobs: dict[str, object]) -> dict[str, str | int | float | bool]:
    """Knob values the route applied (None as `none`) and the ones it ignored, for the row."""
    details: dict[str, str | int | float | bool] = {}
    for name, value in knobs.items():
        if name in route.knobs_used:
            details[name] = value if isinstance(value, str | int | float) else str(value).lower()
    ignored = sorted(set(knobs) - set(route.knobs_used))
    if ignored:
        details["knobs_ignored"] = ",".join(ignored)
    return details
