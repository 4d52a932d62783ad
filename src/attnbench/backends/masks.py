"""Which keys each query may see, as boolean masks for kernels that take masks.

The rule (the same as the reference oracle's): query i of a request with qo_len n and kv_len L
sits at absolute position L - n + i. Causal: it sees keys 0..L-n+i (bottom-right aligned); with
a sliding window (spec.window_left = W) only keys L-n+i-W..L-n+i. kind=tree: it sees the whole
context (L - n tokens) and, among the n draft tokens, itself and its tree ancestors. Non-causal
specs see every key.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from attnbench.workload.inputs import tree_ancestor_mask
from attnbench.workload.spec import WorkloadSpec


def request_mask(
    spec: WorkloadSpec, qo_len: int, kv_len: int, device: torch.device | str = "cpu"
) -> torch.Tensor | None:
    """Bool `[qo_len, kv_len]` of allowed keys for one request, or None when all are allowed."""
    if spec.kind == "tree" and spec.tree is not None:
        allowed = torch.ones(qo_len, kv_len, dtype=torch.bool, device=device)
        allowed[:, kv_len - qo_len :] = tree_ancestor_mask(spec.tree.parents).to(device)
        return allowed
    windowed = 0 <= spec.window_left < kv_len - 1
    if not spec.causal or (qo_len == 1 and not windowed):
        return None
    pos = torch.arange(qo_len, device=device) + (kv_len - qo_len)
    keys = torch.arange(kv_len, device=device)[None, :]
    allowed = keys <= pos[:, None]
    if windowed:
        allowed &= keys >= pos[:, None] - spec.window_left
    return allowed


def window_applies(spec: WorkloadSpec) -> bool:
    """A sliding window hides some key from some query (a request longer than the window)."""
    return spec.window_left >= 0 and max(spec.kv_lens) > spec.window_left + 1


def needs_mask(spec: WorkloadSpec) -> bool:
    """True when some query must not see some key of its own request."""
    if spec.kind == "tree" or window_applies(spec):
        return True
    return spec.causal and any(q > 1 for q in spec.qo_lens)


def is_square_causal(spec: WorkloadSpec) -> bool:
    """Causal with qo_len == kv_len for every request and no window that bites: top-left and
    bottom-right agree, so a kernel's own `is_causal` is the whole mask."""
    return (
        spec.kind != "tree"
        and not window_applies(spec)
        and all(q == k for q, k in zip(spec.qo_lens, spec.kv_lens, strict=True))
    )


def padded_mask(
    spec: WorkloadSpec, max_q: int, max_kv: int, device: torch.device | str = "cpu"
) -> torch.Tensor:
    """Bool `[batch_size, 1, max_q, max_kv]` for padded SDPA: a query sees its allowed keys
    and no padding key. Padding query rows see key 0 only (so no row is fully masked, which
    would make some kernels write NaN; those rows are dropped by `unpack`)."""
    mask = torch.zeros(spec.batch_size, 1, max_q, max_kv, dtype=torch.bool, device=device)
    mask[:, :, :, 0] = True
    for b, (n, seq_len) in enumerate(zip(spec.qo_lens, spec.kv_lens, strict=True)):
        allowed = request_mask(spec, n, seq_len, device)
        if allowed is None:
            mask[b, 0, :n, :seq_len] = True
        else:
            mask[b, 0, :n, :seq_len] = allowed
    return mask


@dataclass(frozen=True)
class TokenIds:
    """Per-token facts of a packed (concatenated, unpadded) batch, for document-style masks.

    q_req/kv_req: request of each query/key token; q_pos/kv_pos: its absolute position in
    that request; q_node: the draft-node index of a query (its index within the request's
    queries); kv_node: the draft-node index of a key, -1 for context keys (kind=tree only).
    All int32 on one device; lengths total_q and total_kv.
    """

    q_req: torch.Tensor
    q_pos: torch.Tensor
    q_node: torch.Tensor
    kv_req: torch.Tensor
    kv_pos: torch.Tensor
    kv_node: torch.Tensor
    tree: torch.Tensor | None
    """[n, n] ancestor mask for kind=tree, else None."""


def token_ids(spec: WorkloadSpec, device: torch.device | str = "cpu") -> TokenIds:
    """Ids for a batch packed as q `[total_q]`, k/v `[total_kv]`, requests in order."""
    dev = torch.device(device)
    qo = torch.tensor(spec.qo_lens, dtype=torch.long, device=dev)
    kv = torch.tensor(spec.kv_lens, dtype=torch.long, device=dev)
    ctx = kv - qo
    reqs = torch.arange(spec.batch_size, device=dev)
    q_req = torch.repeat_interleave(reqs, qo)
    q_node = torch.arange(spec.total_q, device=dev) - (torch.cumsum(qo, 0) - qo)[q_req]
    kv_req = torch.repeat_interleave(reqs, kv)
    kv_pos = torch.arange(spec.total_kv, device=dev) - (torch.cumsum(kv, 0) - kv)[kv_req]
    kv_node = (kv_pos - ctx[kv_req]).clamp_(min=-1)
    tree = None
    if spec.kind == "tree" and spec.tree is not None:
        tree = tree_ancestor_mask(spec.tree.parents).to(dev)
    i32 = torch.int32
    return TokenIds(
        q_req.to(i32),
        (q_node + ctx[q_req]).to(i32),
        q_node.to(i32),
        kv_req.to(i32),
        kv_pos.to(i32),
        kv_node.to(i32),
        tree,
    )


def is_chain(spec: WorkloadSpec) -> bool:
    """A tree whose node i's parent is i - 1: verification is plain causal attention."""
    return spec.tree is not None and spec.tree.parents == tuple(range(-1, spec.tree.num_nodes - 1))
