"""`flashmla:dense`: FlashMLA's dense MLA decode, the SM90 kernel upstream FlashMLA dropped, from
the `sgl-flash-mla` 1.0.0 wheel (its `flash_mla_legacy` op namespace, `use_legacy=True`).

`flash_mla_with_kvcache` reads the absorbed form on the case's paged latent cache, as vLLM's
and SGLang's FlashMLA backends call it:

    q           [B, s_q, Hq, 576]         the case's q [total_q, Hq, 576], viewed per request
    k_cache     [num_pages, 64, 1, 576]   a view of the latent cache [num_pages, 64, 576]
    block_table [B, max_pages] int32      the case's page table; cache_seqlens = kv_lens
    head_dim_v  512                       ckv, the first kv_lora_rank values of each token

with the model's sm_scale, causal within each request (the last s_q keys), and the output a
new `[B, s_q, Hq, 512]` per call (the op takes no `out`), viewed as `[total_q, Hq, 512]` for
the gate. The split-KV schedule (`get_mla_decoding_metadata(kv_lens, s_q * Hq, 1, Hq,
use_legacy=True)`) is per step, shared by every layer, as engines run `get_mla_metadata`: it is
built in plan and is the `replan` timed as plan_us.

Rules (`flash_mla_interface.py` and the checks of `_C_legacy.abi3.so`, 1.0.0), checked in
`check` without a GPU by `flashmla_refusal`: SM90 only ("Dense decode MLA is only supported on
SM90a"); page (block) size 64 ("page_block_size must be 64"); one latent head of 576 = 512 +
64 and values of 512; the same number of queries in every request (q is `[B, s_q, ...]`); a
16-bit query (bf16 or fp16) and a cache in its dtype ("query and key must have the same
dtype"); any number of query heads (the op folds s_q x Hq into one axis; DeepSeek-V3 at tp 8,
16 heads, ran on an H100, issue 47). It is a decode kernel: the engines call it for decode and
verification steps, never prefill. fp8 is refused: the dense fp8 kernel
(`fwd_kvcache_mla_fp8`) takes an fp8 query and one `descale_k` for the whole 576-wide token,
where attnbench's fp8 latent has separate ckv and kpe scales and a bf16 query.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import torch

from attnbench.backends import kvgather
from attnbench.backends.base import PlannedRun, Unsupported
from attnbench.backends.features import mla_only
from attnbench.measure.hardware import DeviceInfo
from attnbench.workload.inputs import AttentionInputs
from attnbench.workload.spec import WorkloadSpec

NAME = "flashmla:dense"
INSTALL_HINT = "pip install sgl-flash-mla==1.0.0 --no-deps"
PAGE_SIZE = 64
"""FlashMLA's block size: the only page size its kernels take."""
DTYPES = ("bfloat16", "float16")
LATENT = (512, 64)
"""(kv_lora_rank, qk_rope_head_dim): head_size_k 576, head_size_v 512."""
FP8_REASON = (
    f"{NAME}: FlashMLA's dense fp8 kernel takes an fp8 query and one descale_k for the whole "
    "576-wide token; attnbench's fp8 latent has separate ckv and kpe scales and a bf16 query"
)


def flashmla_refusal(spec: WorkloadSpec, device: DeviceInfo) -> str | None:
    """Why `flashmla:dense` cannot run `spec` on `device` (None: it can)."""
    only = mla_only(NAME, spec, "plain attention runs on flashinfer:* and flash-attn:*")
    if only is not None:
        return only.reason
    assert spec.mla is not None
    if device.kind != "cuda" or device.sm != 90:
        where = f"SM{device.sm}" if device.kind == "cuda" else device.kind
        return f"{NAME}: FlashMLA's dense decode kernel is SM90 (Hopper) only; this is {where}"
    if spec.kind == "prefill":
        return (
            f"{NAME}: FlashMLA's dense kernel is a decode kernel (engines call it for decode "
            "and verification steps); MLA prefill runs on flashinfer:mla-* and sdpa:mla"
        )
    if spec.page_size != PAGE_SIZE:
        return f"{NAME}: FlashMLA's block size is {PAGE_SIZE}; page_size {spec.page_size} is not"
    if (spec.mla.kv_lora_rank, spec.mla.qk_rope_head_dim) != LATENT:
        return f"{NAME}: FlashMLA takes a 576-wide latent (kv_lora_rank 512 + rope 64) only"
    if len(set(spec.qo_lens)) != 1:
        return (
            f"{NAME}: FlashMLA takes q as [batch, s_q, heads, 576], the same number of queries "
            f"per request; this case's qo_lens differ ({min(spec.qo_lens)}..{max(spec.qo_lens)})"
        )
    if spec.is_fp8:
        return FP8_REASON
    if spec.dtype not in DTYPES:
        return f"{NAME}: the dense kernel takes a bf16 or fp16 query, not {spec.dtype}"
    if spec.kv_dtype != spec.dtype:
        return f"{NAME}: the latent must be in the query dtype ({spec.kv_dtype} vs {spec.dtype})"
    return None


@functools.cache
def _import_error() -> str | None:
    try:
        import flash_mla

        legacy = flash_mla.has_legacy()
    except Exception as exc:  # ImportError, or an extension that will not load with this torch
        why = " ".join(str(exc).split())[:240]
        return f"flash_mla not importable ({type(exc).__name__}: {why}); {INSTALL_HINT}"
    if not legacy:
        return (
            f"flash_mla {flash_mla.__version__} has no legacy (SM90) kernels: has_legacy() is "
            f"False; {INSTALL_HINT}"
        )
    return None


class FlashMlaBackend:
    """`flashmla:dense` (see the module docstring)."""

    name = NAME
    devices: tuple[str, ...] = ("cuda",)
    knobs: Mapping[str, tuple[object, ...]] = {}

    def available(self) -> str | None:
        return _import_error()

    def check(self, spec: WorkloadSpec, device: DeviceInfo) -> Unsupported | None:
        why = flashmla_refusal(spec, device)
        return Unsupported(why) if why else None

    def plan(
        self,
        spec: WorkloadSpec,
        inputs: AttentionInputs,
        knobs: Mapping[str, object] | None = None,
    ) -> PlannedRun:
        import flash_mla

        assert spec.mla is not None
        if knobs:
            raise ValueError(f"{self.name} has no knobs; got {sorted(knobs)}")
        batch, s_q, heads = spec.batch_size, spec.qo_lens[0], spec.num_qo_heads
        rank = spec.mla.kv_lora_rank
        q = inputs.q.view(batch, s_q, heads, spec.head_dim)  # [B, s_q, Hq, 576]
        k_cache = inputs.kv_cache.unsqueeze(2)  # [num_pages, 64, 1, 576]
        table, lens = kvgather.page_table(inputs), inputs.kv_lens
        sched, _ = flash_mla.get_mla_metadata()

        def replan() -> None:
            meta, splits = flash_mla.get_mla_decoding_metadata(
                lens, s_q * heads, 1, heads, False, None, use_legacy=True
            )
            sched.tile_scheduler_metadata, sched.num_splits = meta, splits

        replan()
        kw: dict[str, Any] = {
            "softmax_scale": spec.mla.sm_scale,
            "causal": spec.causal,
            "use_legacy": True,
        }

        def run() -> torch.Tensor:
            out, _ = flash_mla.flash_mla_with_kvcache(q, k_cache, table, lens, rank, sched, **kw)
            result: torch.Tensor = out
            return result

        def unpack(out: torch.Tensor) -> torch.Tensor:
            return out.reshape(spec.total_q, heads, rank)

        assert sched.tile_scheduler_metadata is not None
        return PlannedRun(
            run=run,
            resolved="dense-sm90",
            details={
                "api": "flash_mla_with_kvcache",
                "ops": "flash_mla_legacy",
                "kernel": "dense-decode",
                "kv_cache": "paged",
                "library": f"sgl-flash-mla {flash_mla.__version__}",
                "num_sm_parts": int(sched.tile_scheduler_metadata.shape[0]),
            },
            unpack=unpack,
            replan=replan,
        )


def backends() -> list[FlashMlaBackend]:
    return [FlashMlaBackend()]
