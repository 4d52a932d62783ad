"""The correctness oracle: plain PyTorch attention over the paged cache, one request at a time.

This is the slowest and clearest code in attnbench. It gathers each request's pages, dequantises
fp8, computes softmax(q k^T * sm_scale + mask) v in fp64 (oracle) or fp32 (the `reference`
backend), and needs nothing but torch, on CPU or GPU. Every other backend is checked against it
before it is timed.

Beyond plain GQA it computes:

- a sliding window (spec.window_left = W): query at position p sees keys max(0, p - W)..p;
- logit soft-capping (spec.logits_soft_cap = c, Gemma-2): each scaled logit s becomes
  c * tanh(s / c) before the mask and the softmax, as Gemma-2 computes it (HF `Gemma2Attention`:
  scores / softcap, tanh, * softcap), with the softmax scale spec.sm_scale
  (query_pre_attn_scalar ** -0.5 where the model sets it);
- attention sinks (spec.sinks): one logit per query head joins each softmax denominator as a
  key with no value, as gpt-oss computes it (`torch.cat([QK, S])`, softmax, sink column
  dropped): out = sum_j exp(s_j) v_j / (sum_j exp(s_j) + exp(sink));
- MLA in its absorbed form (spec.mla): logits = sm_scale * q . latent over all 576 values
  (q_nope . ckv + q_pe . kpe), out = softmax(logits) @ ckv, every query head on the one latent.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from attnbench.backends.base import PlannedRun, Unsupported
from attnbench.measure.hardware import DeviceInfo
from attnbench.workload.inputs import AttentionInputs, tree_ancestor_mask
from attnbench.workload.spec import WorkloadSpec

_LOGITS_BUDGET_BYTES = 1 << 29  # 512 MiB of logits per chunk of queries


def reference_attention(
    inputs: AttentionInputs,
    *,
    accum_dtype: torch.dtype = torch.float64,
    q: torch.Tensor | None = None,
) -> torch.Tensor:
    """Attention output `[total_q, num_qo_heads, head_dim]` in `accum_dtype`.

    Args:
        inputs: the case's tensors (paged KV cache in its stored dtype).
        accum_dtype: dtype of every product and sum (float64 for the oracle).
        q: query values to use instead of `inputs.q` (e.g. the fp8-rounded query a kernel saw),
            shape `[total_q, num_qo_heads, head_dim]`.

    Mask: query i of a request with qo_len n and kv_len L sits at position L - n + i and, when
    causal, sees keys 0..L-n+i; for kind=tree, it sees the whole context and its tree ancestors.
    """
    spec = inputs.spec
    q_all = inputs.q if q is None else q
    if spec.mla is not None:
        return mla_reference(inputs, accum_dtype=accum_dtype, q=q_all)
    sm_scale = spec.sm_scale
    num_kv, group, dim = spec.num_kv_heads, spec.group_size, spec.head_dim
    sinks = None
    if inputs.sinks is not None:  # [Hq] -> [Hkv, group, 1, 1] beside the logits [Hkv, g, q, k]
        sinks = inputs.sinks.to(device=q_all.device, dtype=accum_dtype).view(num_kv, group, 1, 1)
    out = torch.empty(spec.total_q, spec.num_qo_heads, dim, dtype=accum_dtype, device=q_all.device)
    tree = tree_ancestor_mask(spec.tree.parents).to(q_all.device) if spec.tree else None

    q0 = 0
    for b in range(spec.batch_size):
        k, v = inputs.request_kv(b)  # [L, num_kv_heads, head_dim]
        k = k.to(accum_dtype) * inputs.k_scale
        v = v.to(accum_dtype) * inputs.v_scale
        seq_len, n = spec.kv_lens[b], spec.qo_lens[b]
        # [n, num_qo_heads, D] -> [num_kv_heads, group, n, D]: query head h uses KV head h // group
        qb = q_all[q0 : q0 + n].to(accum_dtype).view(n, num_kv, group, dim).permute(1, 2, 0, 3)
        chunk = max(1, _LOGITS_BUDGET_BYTES // (spec.num_qo_heads * seq_len * 8))
        for c0 in range(0, n, chunk):
            c1 = min(n, c0 + chunk)
            logits = soft_cap(torch.einsum("hgqd,khd->hgqk", qb[:, :, c0:c1], k) * sm_scale, spec)
            allowed = _mask(spec, seq_len, n, c0, c1, tree, logits.device)
            if allowed is not None:
                logits.masked_fill_(~allowed, float("-inf"))
            probs = _softmax(logits, sinks)
            ob = torch.einsum("hgqk,khd->qhgd", probs, v)  # [c, num_kv_heads, group, D]
            out[q0 + c0 : q0 + c1] = ob.reshape(c1 - c0, spec.num_qo_heads, dim)
        q0 += n
    return out


def soft_cap(logits: torch.Tensor, spec: WorkloadSpec) -> torch.Tensor:
    """`cap * tanh(logits / cap)` under spec.logits_soft_cap (Gemma-2), else the logits."""
    cap = spec.logits_soft_cap
    return logits if cap <= 0 else torch.tanh(logits / cap) * cap


def _softmax(logits: torch.Tensor, sinks: torch.Tensor | None) -> torch.Tensor:
    """softmax over the last axis; with sinks, each row's denominator also holds exp(sink)."""
    if sinks is None:
        return torch.softmax(logits, dim=-1)
    sink = sinks.expand(*logits.shape[:-1], 1)
    return torch.softmax(torch.cat([logits, sink], dim=-1), dim=-1)[..., :-1]


def mla_reference(
    inputs: AttentionInputs,
    *,
    accum_dtype: torch.dtype = torch.float64,
    q: torch.Tensor | None = None,
) -> torch.Tensor:
    """Absorbed MLA `[total_q, num_qo_heads, kv_lora_rank]` in `accum_dtype` (module docstring).

    The latent is dequantised with ckv_scale (its first kv_lora_rank values) and kpe_scale (the
    rest); causal queries at the end of their request, as in `reference_attention`.
    """
    spec = inputs.spec
    assert spec.mla is not None
    rank = spec.mla.kv_lora_rank
    q_all = inputs.q if q is None else q
    out = torch.empty(spec.total_q, spec.num_qo_heads, rank, dtype=accum_dtype, device=q_all.device)
    q0 = 0
    for b in range(spec.batch_size):
        latent = inputs.request_latent(b).to(accum_dtype)  # [L, 576]
        latent[:, :rank] *= inputs.ckv_scale
        latent[:, rank:] *= inputs.kpe_scale
        seq_len, n = spec.kv_lens[b], spec.qo_lens[b]
        qb = q_all[q0 : q0 + n].to(accum_dtype)  # [n, Hq, 576]
        chunk = max(1, _LOGITS_BUDGET_BYTES // (spec.num_qo_heads * seq_len * 8))
        for c0 in range(0, n, chunk):
            c1 = min(n, c0 + chunk)
            logits = torch.einsum("qhd,kd->hqk", qb[c0:c1], latent) * spec.mla.sm_scale
            allowed = _mask(spec, seq_len, n, c0, c1, None, logits.device)
            if allowed is not None:
                logits.masked_fill_(~allowed, float("-inf"))
            probs = torch.softmax(logits, dim=-1)
            out[q0 + c0 : q0 + c1] = torch.einsum("hqk,kd->qhd", probs, latent[:, :rank])
        q0 += n
    return out


def _mask(
    spec: WorkloadSpec,
    seq_len: int,
    n: int,
    c0: int,
    c1: int,
    tree: torch.Tensor | None,
    device: torch.device,
) -> torch.Tensor | None:
    """Bool [c1 - c0, seq_len] of allowed keys for queries c0..c1 of a request, or None (all)."""
    if tree is not None:
        allowed = torch.ones(c1 - c0, seq_len, dtype=torch.bool, device=device)
        allowed[:, seq_len - n :] = tree[c0:c1]
        return allowed
    windowed = 0 <= spec.window_left < seq_len - 1
    if not spec.causal or (n == 1 and not windowed):
        return None
    pos = torch.arange(c0, c1, device=device) + (seq_len - n)  # absolute query positions
    keys = torch.arange(seq_len, device=device)
    allowed = keys[None, :] <= pos[:, None]
    if windowed:
        allowed &= keys[None, :] >= pos[:, None] - spec.window_left
    return allowed


class ReferenceBackend:
    """The oracle as a timed backend (fp32), so CPU-only machines produce real rows too."""

    name = "reference"
    devices = ("cpu", "cuda")
    knobs: Mapping[str, tuple[object, ...]] = {}

    def available(self) -> str | None:
        return None

    def check(self, spec: WorkloadSpec, device: DeviceInfo) -> Unsupported | None:
        return None

    def plan(
        self,
        spec: WorkloadSpec,
        inputs: AttentionInputs,
        knobs: Mapping[str, object] | None = None,
    ) -> PlannedRun:
        def run() -> torch.Tensor:
            return reference_attention(inputs, accum_dtype=torch.float32)

        return PlannedRun(run=run, resolved="torch-fp32", graph_safe=False)


def backends() -> list[ReferenceBackend]:
    return [ReferenceBackend()]
