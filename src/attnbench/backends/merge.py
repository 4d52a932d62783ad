"""Split attention and its merge: partial outputs combined by their log-sum-exp (LSE).

Attention over keys K = K_a ∪ K_b can be computed as two partial attentions, each returning its
normalised output o_x and lse_x = log(sum_j exp(s_j)) over its keys (natural log, as
FlashAttention returns it; FlashInfer's is base 2). Then

    lse = logaddexp(lse_a, lse_b)
    o   = o_a * exp(lse_a - lse) + o_b * exp(lse_b - lse)

This is how engines without an arbitrary-mask kernel verify draft trees (context part by the
fast kernel, tree part separately) and how cascade attention shares a prefix.
"""

from __future__ import annotations

import torch


def _finite_or_neg_inf(lse: torch.Tensor) -> torch.Tensor:
    # FlashAttention writes +inf (not -inf) as the LSE of a row with no keys; such a partial
    # carries no weight.
    return torch.where(torch.isfinite(lse), lse, torch.full_like(lse, float("-inf")))


def merge_states(
    o_a: torch.Tensor,
    lse_a: torch.Tensor,
    o_b: torch.Tensor,
    lse_b: torch.Tensor,
    out: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Merge two partial attention states.

    Args:
        o_a, o_b: partial outputs `[tokens, heads, head_dim]`, any float dtype.
        lse_a, lse_b: their natural-log LSEs `[tokens, heads]` (any strides).
        out: optional buffer `[tokens, heads, head_dim]` to write the merged output into.

    Returns:
        (o, lse): merged output `[tokens, heads, head_dim]` (in `out` if given, else float32)
        and merged LSE `[tokens, heads]` float32. A row where both parts are empty gets NaN.
    """
    la = _finite_or_neg_inf(lse_a.float())
    lb = _finite_or_neg_inf(lse_b.float())
    lse = torch.logaddexp(la, lb)
    wa = torch.exp(la - lse).unsqueeze(-1)
    wb = torch.exp(lb - lse).unsqueeze(-1)
    merged = o_a.float() * wa + o_b.float() * wb
    if out is None:
        return merged, lse
    out.copy_(merged)
    return out, lse


def masked_attention_lse(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    allowed: torch.Tensor,
    sm_scale: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Small batched attention with a shared mask, returning output and LSE (fp32 math).

    For the [n x n] draft-tree part of tree verification, where n is tens of tokens.

    Args:
        q: `[batch, n_q, num_qo_heads, head_dim]`.
        k, v: `[batch, n_k, num_kv_heads, head_dim]` (already dequantised if fp8).
        allowed: bool `[n_q, n_k]`, the same for every request and head; every row needs
            at least one True.
        sm_scale: softmax scale.

    Returns:
        (o, lse): `[batch * n_q, num_qo_heads, head_dim]` float32 and `[batch * n_q,
        num_qo_heads]` float32 (natural log), request-major like a packed query.
    """
    batch, n_q, hq, dim = q.shape
    hkv = k.shape[2]
    group = hq // hkv
    qg = q.float().view(batch, n_q, hkv, group, dim)
    scores = torch.einsum("bqhgd,bkhd->bhgqk", qg, k.float()) * sm_scale
    scores = scores.masked_fill(~allowed, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)  # [b, h, g, q]
    probs = torch.exp(scores - lse.unsqueeze(-1))
    o = torch.einsum("bhgqk,bkhd->bqhgd", probs, v.float())
    o = o.reshape(batch * n_q, hq, dim)
    lse_out = lse.permute(0, 3, 1, 2).reshape(batch * n_q, hq)
    return o, lse_out
