"""The kernel calls behind the `flash-attn` variants: what one plan shares (`Setup`), one call
through the KV-cache API (paged or a contiguous copy) or varlen over packed K/V, FA3's scheduler
metadata, the draft-tree part in torch and the LSE merge. `flash_attn` picks the calls for a
case; the variants and their rules are described there.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import torch

from attnbench.backends import kvgather
from attnbench.backends.fa3_record import METADATA_IN_PLAN, decision_details
from attnbench.backends.fa_lib import FlashLib
from attnbench.backends.flashinfer_common import quantize_query
from attnbench.backends.merge import masked_attention_lse, merge_states
from attnbench.workload.inputs import AttentionInputs, tree_ancestor_mask
from attnbench.workload.spec import WorkloadSpec

PartCall = Callable[[], tuple[torch.Tensor, torch.Tensor]]
"""Runs one kernel call; returns (out `[total_q, Hq, D]`, lse `[total_q, Hq]` natural log)."""

Layout = Literal["paged", "contiguous", "packed"]

METADATA_IN_RUN = "in each run"


@dataclass
class Setup:
    """What every kernel call of one plan shares."""

    lib: FlashLib
    spec: WorkloadSpec
    inputs: AttentionInputs
    knobs: dict[str, Any]
    q: torch.Tensor
    """Query as the kernel sees it `[total_q, Hq, D]` (fp8 on the fp8 path)."""
    layout: Layout = "contiguous"
    """How KV-cache calls read K/V: the paged cache, or copies (contiguous or packed)."""
    q_scale: float | None = None
    details: dict[str, str | int | float | bool] = field(default_factory=dict)
    replans: list[Callable[[], None]] = field(default_factory=list)

    @property
    def sm_scale(self) -> float:
        return self.spec.sm_scale

    @property
    def out_dtype(self) -> torch.dtype:
        return torch.bfloat16 if self.q_scale is not None else self.q.dtype

    def common(self, batch: int) -> dict[str, Any]:
        """Keyword arguments of every call: scale, descales (fp8), FA3 tuning knobs, a sliding
        window as (window_left, 0), the soft-cap (`softcap`: cap * tanh(s / cap) on the scaled
        logits) and the sink logits (bf16 `[num_qo_heads]`)."""
        kw: dict[str, Any] = {"softmax_scale": self.sm_scale}
        if self.spec.logits_soft_cap > 0:
            kw["softcap"] = self.spec.logits_soft_cap
        if self.spec.window_left >= 0:
            kw["window_size_left"], kw["window_size_right"] = self.spec.window_left, 0
        if self.inputs.sinks is not None:
            kw["sinks"] = self.inputs.sinks
        if self.lib.generation == 3:
            kw["num_splits"] = self.knobs["num_splits"]
            kw["pack_gqa"] = self.knobs["pack_gqa"]
        if self.q_scale is not None:
            shape = (batch, self.spec.num_kv_heads)
            dev = self.q.device
            for name, scale in (
                ("q_descale", self.q_scale),
                ("k_descale", self.inputs.k_scale),
                ("v_descale", self.inputs.v_scale),
            ):
                kw[name] = torch.full(shape, scale, dtype=torch.float32, device=dev)
        return kw

    def out_buffer(self, total_q: int) -> torch.Tensor | None:
        if self.lib.raw is None:
            return None
        spec = self.spec
        shape = (total_q, spec.num_qo_heads, spec.head_dim)
        return torch.empty(shape, dtype=self.out_dtype, device=self.q.device)


def lse_tokens(lse: torch.Tensor, q_lens: list[int]) -> torch.Tensor:
    """FlashAttention's LSE as `[total_q, Hq]`: varlen gives `[Hq, total_q]`; old FA2 builds
    give `[batch, Hq, max_q]`."""
    if lse.dim() == 2:
        return lse.t()
    rows, cols = kvgather.padded_index(q_lens, lse.device)
    return lse[rows, :, cols]


def varlen_part(
    s: Setup,
    starts: list[int],
    ends: list[int],
    *,
    causal: bool,
    requests: list[int] | None = None,
    q_lens: list[int] | None = None,
) -> tuple[PartCall, torch.Tensor | None]:
    """One varlen call over K/V ranges packed contiguously (copied here, not timed)."""
    q_lens = list(s.spec.qo_lens) if q_lens is None else q_lens
    dev = s.q.device
    k, v = kvgather.packed_kv(s.inputs, starts, ends, requests)
    k_lens = [e - b for b, e in zip(starts, ends, strict=True)]
    cu_q = kvgather.int32(kvgather.exclusive_cumsum(q_lens), dev)
    cu_k = kvgather.int32(kvgather.exclusive_cumsum(k_lens), dev)
    out = s.out_buffer(sum(q_lens))
    kw = s.common(len(q_lens))
    kw.update(
        cu_seqlens_q=cu_q,
        cu_seqlens_k=cu_k,
        max_seqlen_q=max(q_lens),
        max_seqlen_k=max(k_lens),
        is_causal=causal,
    )
    if out is not None:
        kw["out"] = out
    s.details["kv_cache"] = "packed"
    lib, q = s.lib, s.q

    def call() -> tuple[torch.Tensor, torch.Tensor]:
        o, lse = lib.forward(q, k, v, **kw)
        return o, lse_tokens(lse, q_lens)

    return call, out


def cache_part(
    s: Setup, starts: list[int], ends: list[int], *, causal: bool
) -> tuple[PartCall, torch.Tensor | None]:
    """One KV-cache call (flash_attn_with_kvcache semantics): each request's queries over keys
    starts[b]..ends[b], read through the page table (layout `paged`: every range starts at 0)
    or from a contiguous copy."""
    spec, lib = s.spec, s.lib
    kw = s.common(spec.batch_size)
    page_size: int | None = None
    if s.layout == "paged":
        if any(starts):
            raise ValueError("a paged read starts every request at its first token")
        k_cache, v_cache, table, seqlens = kvgather.paged_kv(s.inputs, ends)
        kw["page_table"] = table
        page_size = spec.page_size
        max_k = table.shape[1] * page_size  # what FA3 derives from the table: metadata must match
    else:
        k_cache, v_cache = kvgather.padded_kv(s.inputs, starts, ends)
        seqlens = kvgather.int32([e - b for b, e in zip(starts, ends, strict=True)], s.q.device)
        max_k = k_cache.shape[1]
    s.details["kv_cache"] = s.layout
    cu_q = s.inputs.qo_indptr
    max_q = max(spec.qo_lens)
    kw.update(cu_seqlens_q=cu_q, max_seqlen_q=max_q, seqused_k=seqlens, is_causal=causal)
    out = s.out_buffer(spec.total_q)
    if out is not None:
        kw["out"] = out
    if s.knobs["scheduler_metadata"] and lib.has_scheduler_metadata:
        meta_args = (seqlens, max_k, page_size, causal)
        kw["scheduler_metadata"] = scheduler_metadata_call(s, *meta_args)
        if spec.kind == "decode" and spec.window_left < 0:
            try:  # a record, never a reason for the row to fail
                s.details.update(record_decision(s, kw, k_cache, v_cache, meta_args))
            except Exception as exc:
                s.details["fa3_metadata"] = f"unread: {type(exc).__name__}: {exc}"[:200]
    q_lens = list(spec.qo_lens)
    q = s.q

    def call() -> tuple[torch.Tensor, torch.Tensor]:
        o, lse = lib.forward(q, k_cache, v_cache, **kw)
        return o, lse_tokens(lse, q_lens)

    return call, out


MetadataArgs = tuple[torch.Tensor, int, int | None, bool]
"""(seqused_k, max_seqlen_k, page_size, causal) of a KV-cache call."""


def _metadata_fn(s: Setup, args: MetadataArgs, pack_gqa: bool | None) -> Callable[[], torch.Tensor]:
    """FA3's `get_scheduler_metadata` for this call's arguments, with `pack_gqa` as given."""
    spec, lib = s.spec, s.lib
    seqlens, max_k, page_size, causal = args
    cu_q, max_q = s.inputs.qo_indptr, max(spec.qo_lens)
    window = {"window_size": (spec.window_left, 0)} if spec.window_left >= 0 else {}

    def compute() -> torch.Tensor:
        meta: torch.Tensor = lib.module.get_scheduler_metadata(
            spec.batch_size,
            max_q,
            max_k,
            spec.num_qo_heads,
            spec.num_kv_heads,
            spec.head_dim,
            seqlens,
            qkv_dtype=s.q.dtype,
            cu_seqlens_q=cu_q,
            page_size=page_size,
            causal=causal,
            num_splits=s.knobs["num_splits"],
            pack_gqa=pack_gqa,
            **window,
        )
        return meta

    return compute


def scheduler_metadata_call(
    s: Setup, seqlens: torch.Tensor, max_k: int, page_size: int | None, causal: bool
) -> torch.Tensor:
    """FA3's scheduler metadata for this call, computed now (in plan); its recomputation is
    appended to the per-step replan. Its arguments mirror the forward call's exactly (FA3 sizes
    the split buffers from the forward's own arguments)."""
    compute = _metadata_fn(s, (seqlens, max_k, page_size, causal), s.knobs["pack_gqa"])
    meta = compute()

    def replan() -> None:
        meta.copy_(compute())

    s.replans.append(replan)
    s.details["scheduler_metadata"] = METADATA_IN_PLAN
    return meta


def record_decision(
    s: Setup,
    kw: dict[str, Any],
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    args: MetadataArgs,
) -> dict[str, str | int | bool]:
    """What FA3 decided for this decode call, as it reports it (`backends.fa3_record`): the
    metadata's splits and order, pack-GQA by recomputing the metadata with it forced each way,
    the static split count from the split buffers of one forward call. In plan, not timed."""
    values = [int(v) for v in kw["scheduler_metadata"].tolist()]
    pack: bool | str = s.knobs["pack_gqa"] if s.knobs["pack_gqa"] is not None else "unknown"
    if s.knobs["pack_gqa"] is None:
        same = {p: _metadata_fn(s, args, p)().tolist() == values for p in (True, False)}
        pack = "either" if all(same.values()) else next((p for p, e in same.items() if e), pack)
    splits: int | None = None
    if s.lib.raw is not None:
        res = s.lib.raw.fwd(s.q, k_cache, v_cache, **kw)
        accum = res[2] if len(res) > 2 else None
        splits = int(accum.shape[0]) if isinstance(accum, torch.Tensor) and accum.numel() else 1
    return decision_details(values, s.spec.batch_size, splits, pack)


def part(
    s: Setup, starts: list[int], ends: list[int], *, causal: bool
) -> tuple[PartCall, torch.Tensor | None]:
    """Per-request ranges through the KV-cache API (paged, or a contiguous copy when knob
    `api=kvcache`) or varlen over packed K/V (`api=varlen`; FA2)."""
    if s.layout == "paged" or (s.layout == "contiguous" and s.knobs["api"] == "kvcache"):
        return cache_part(s, starts, ends, causal=causal)
    return varlen_part(s, starts, ends, causal=causal)


def tree_draft_part(s: Setup) -> Callable[[], tuple[torch.Tensor, torch.Tensor]]:
    """The [n x n] draft part of tree verification in torch (fp32), batched over requests."""
    spec, inputs = s.spec, s.inputs
    assert spec.tree is not None
    n = spec.tree.num_nodes
    starts = [kv - n for kv in spec.kv_lens]
    k_d, v_d = kvgather.padded_kv(inputs, starts, list(spec.kv_lens))  # [B, n, Hkv, D]
    allowed = tree_ancestor_mask(spec.tree.parents).to(s.q.device)
    q_view = s.q.view(spec.batch_size, n, spec.num_qo_heads, spec.head_dim)
    fp8 = s.q_scale is not None
    q_scale = s.q_scale or 1.0
    k_scale, v_scale = inputs.k_scale, inputs.v_scale
    sm_scale = s.sm_scale

    def call() -> tuple[torch.Tensor, torch.Tensor]:
        if not fp8:
            return masked_attention_lse(q_view, k_d, v_d, allowed, sm_scale)
        q = q_view.float() * q_scale
        k = k_d.float() * k_scale
        v = v_d.float() * v_scale
        return masked_attention_lse(q, k, v, allowed, sm_scale)

    return call


def merged(
    s: Setup, first: PartCall, second: PartCall
) -> tuple[Callable[[], torch.Tensor], torch.Tensor]:
    out = torch.empty(
        s.spec.total_q, s.spec.num_qo_heads, s.spec.head_dim, dtype=s.out_dtype, device=s.q.device
    )

    def run() -> torch.Tensor:
        o_a, lse_a = first()
        o_b, lse_b = second()
        merge_states(o_a, lse_a, o_b, lse_b, out=out)
        return out

    return run, out


def single(call: PartCall) -> Callable[[], torch.Tensor]:
    def run() -> torch.Tensor:
        return call()[0]

    return run


def setup(
    lib: FlashLib,
    spec: WorkloadSpec,
    inputs: AttentionInputs,
    knobs: dict[str, Any],
    layout: Layout,
) -> Setup:
    s = Setup(lib, spec, inputs, knobs, q=inputs.q, layout=layout)
    if lib.generation == 3:
        s.details["scheduler_metadata"] = METADATA_IN_RUN  # until a call computes it in plan
    if spec.logits_soft_cap > 0:
        s.details["softcap"] = spec.logits_soft_cap
    if spec.is_fp8:  # FA3's fp8 path takes an fp8 query: one per-tensor scale (a pure function)
        s.q, s.q_scale, _ = quantize_query(inputs.q, spec.kv_dtype)
        s.details["q_scale"] = s.q_scale
        s.details["out_dtype"] = "bfloat16"
    return s
