"""`vllm:triton-attn`: vLLM 0.34.0's TRITON_ATTN backend, its own Triton kernel
(`vllm/v1/attention/ops/triton_unified_attention.py`) called as `TritonAttentionImpl.forward`
calls it (`vllm/v1/attention/backends/triton_attn.py`), loaded from the pack that
`scripts/h200/pack_engine_triton.sh` extracts from the wheel (`engine_triton_load`).

The call, for a batch of decode, prefill or append requests in one launch:

    q           [total_q, Hq, d]                   the case's q
    k, v        [num_blocks, block, Hkv, d] views  of vLLM's cache [num_blocks, Hkv, block, 2d]
                                                   transposed (1, 2) and split at d, as forward
                                                   does: the case's pages copied into vLLM's
                                                   layout in plan (K|V side by side per head)
    block_table [B, max_blocks] int32              the case's page table; seqused_k = kv_lens
    window_size (window_left, 0), or (-1, -1)      vLLM: (sliding_window - 1, 0) for decoders
    softcap     the case's soft-cap, 0 for none    sinks: the case's per-head sinks
    k_descale   the cache scale, [B, Hkv]          expanded as forward does (1.0 for 16-bit)

With an fp8 cache the query is fp8 too, as on CUDA: `Attention.forward` quantises it with the
layer's query scale (`QuantFP8`, static per tensor; 1.0 without a checkpoint scale) since
TRITON_ATTN `supports_quant_query_input`, and forward passes that scale as `q_descale`. The
kernel then takes its fp8 path (fp8 Q.K and P.V products), so the gate's budget is fp8's and
its reference uses the quantised query (`vllm_query`).

and the split-KV ("3D") scratch the metadata builder allocates: 16 softmax segments, and
`seq_threshold_3D` = the CUDA-graph capture size nearest 128 // Hkv (MIN_LAUNCH_GRID_SIZE_2D;
vLLM's default capture sizes), rows for that many single-token requests. A batch of more
requests, or longer queries, runs the 2D kernel, as in vLLM.

Rules (triton_attn.py 0.34.0): block sizes that are multiples of 16; head sizes >= 32; 16-bit
queries; a 16-bit or fp8 e4m3 cache (fp8 per tensor, `FP8_PER_TENSOR`); decoder attention is
causal. Refused here: fp8 e5m2 (forward views any fp8 cache as the platform's e4m3), MLA (vLLM's
MLA backends), trees (a custom mask) and HND pages (vLLM's cache is its own layout).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from attnbench.backends import kvgather
from attnbench.backends.base import PlannedRun, Unsupported
from attnbench.backends.engine_triton_load import KERNEL_FILES, pack_dir
from attnbench.backends.features import MLA_VARIANTS, missing_feature
from attnbench.engines.paths import VLLM_TRITON_SEGMENTS as SEGMENTS
from attnbench.engines.paths import vllm_triton_launch as launch
from attnbench.engines.paths import vllm_triton_threshold as seq_threshold_3d
from attnbench.measure.hardware import DeviceInfo
from attnbench.workload.inputs import AttentionInputs
from attnbench.workload.quant import quantize
from attnbench.workload.spec import WorkloadSpec

NAME = "vllm:triton-attn"
WHEEL, (KERNEL_FILE,) = KERNEL_FILES[NAME]
KINDS = ("decode", "prefill", "append", "shared_prefix")


def refusal(spec: WorkloadSpec, device: DeviceInfo) -> str | None:
    """Why vLLM's TRITON_ATTN (as replayed here) cannot run `spec` (None: it can)."""
    mla = "{who} is vLLM's GQA/MHA backend; MLA cases run on " + MLA_VARIANTS
    refused = missing_feature(NAME, spec, ("window", "sinks", "softcap"), {"mla": mla})
    if refused is not None:
        return refused.reason
    if device.kind != "cuda":
        return f"{NAME} runs the engine's Triton kernel on a CUDA GPU; this is {device.kind}"
    if spec.kind not in KINDS:
        return f"{NAME}: kind={spec.kind} is not replayed (decode, prefill and append are)"
    if not spec.causal:
        return f"{NAME}: vLLM's decoder attention is causal"
    if spec.page_size % 16:
        return f"{NAME}: vLLM's Triton backend takes block sizes that are multiples of 16"
    if spec.head_dim < 32:
        return f"{NAME}: vLLM's Triton backend takes head sizes >= 32, not {spec.head_dim}"
    if spec.kv_layout != "NHD":
        return f"{NAME}: the case's pages are copied into vLLM's layout from NHD pages only"
    if spec.dtype not in ("bfloat16", "float16"):
        return f"{NAME}: 16-bit queries only, not {spec.dtype}"
    if spec.is_fp8 and spec.kv_dtype != "fp8_e4m3":
        return (
            f"{NAME}: vLLM views an fp8 cache as the platform's fp8 (e4m3 on CUDA); "
            f"{spec.kv_dtype} is not replayed"
        )
    if not spec.is_fp8 and spec.kv_dtype != spec.dtype:
        return f"{NAME}: a 16-bit cache in the query dtype ({spec.kv_dtype} vs {spec.dtype})"
    return None


@functools.cache
def _load_error(pack: Path) -> str | None:
    from attnbench.backends.engine_triton_load import pack_missing, vllm_unified_attention

    missing = pack_missing(NAME)
    if missing:
        return missing

    try:
        vllm_unified_attention(pack)
    except Exception as exc:  # the kernel file's imports under the stub parents
        why = " ".join(str(exc).split())[:240]
        return f"{NAME}: {KERNEL_FILE} not importable ({type(exc).__name__}: {why})"
    return None


def vllm_cache(inputs: AttentionInputs) -> tuple[torch.Tensor, torch.Tensor]:
    """The case's NHD pages [P, 2, page, Hkv, d] copied into vLLM's TRITON_ATTN cache
    [P, Hkv, page, 2d], then viewed as forward views it: K and V [P, page, Hkv, d]."""
    pages = inputs.kv_cache
    d = pages.shape[-1]
    raw = pages.view(torch.uint8) if pages.element_size() == 1 else pages  # fp8: copied as bytes
    cache = torch.cat([raw[:, 0], raw[:, 1]], dim=-1).transpose(1, 2).contiguous()
    k, v = cache.view(pages.dtype).transpose(1, 2).split(d, dim=-1)
    return k, v


VLLM_Q_SCALE = 1.0
"""`layer._q_scale` (attention.py `_init_kv_cache_quant`): 1.0 unless a checkpoint sets one."""


def vllm_query(spec: WorkloadSpec, q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The query forward hands the kernel, and its `q_descale`: with an fp8 cache, q / scale
    saturated and cast to fp8 e4m3 (`QuantFP8` per tensor), else q itself and None."""
    if not spec.is_fp8:
        return q, None
    q8 = quantize(q, VLLM_Q_SCALE, torch.float8_e4m3fn)
    return q8, torch.tensor(VLLM_Q_SCALE, device=q.device, dtype=torch.float32)


def _scratch(spec: WorkloadSpec, device: torch.device) -> dict[str, torch.Tensor]:
    """The builder's split-KV buffers: rows for seq_threshold_3D single-token requests."""
    rows = seq_threshold_3d(spec.num_kv_heads)
    padded = 1 << (spec.head_dim - 1).bit_length()
    heads = spec.num_qo_heads
    f32 = torch.float32
    return {
        "softmax_segm_output": torch.empty(rows, heads, SEGMENTS, padded, device=device, dtype=f32),
        "softmax_segm_max": torch.empty(rows, heads, SEGMENTS, device=device, dtype=f32),
        "softmax_segm_expsum": torch.empty(rows, heads, SEGMENTS, device=device, dtype=f32),
    }


class VllmTritonAttn:
    """`vllm:triton-attn` (see the module docstring)."""

    name = NAME
    devices: tuple[str, ...] = ("cuda",)
    knobs: Mapping[str, tuple[object, ...]] = {}
    summary = f"vLLM's TRITON_ATTN: the engine's own Triton kernel ({WHEEL} wheel: {KERNEL_FILE})"

    def __repr__(self) -> str:
        return f"VllmTritonAttn({self.name!r})"

    def describe(self) -> str:
        return self.summary

    def available(self) -> str | None:
        return _load_error(pack_dir())

    def check(self, spec: WorkloadSpec, device: DeviceInfo) -> Unsupported | None:
        why = refusal(spec, device)
        return Unsupported(why) if why else None

    def plan(
        self,
        spec: WorkloadSpec,
        inputs: AttentionInputs,
        knobs: Mapping[str, object] | None = None,
    ) -> PlannedRun:
        from attnbench.backends.engine_triton_load import (
            vllm_kv_quant_mode,
            vllm_unified_attention,
        )

        if knobs:
            raise ValueError(f"{self.name} has no knobs; got {sorted(knobs)}")
        unified_attention = vllm_unified_attention(pack_dir())
        dev = inputs.q.device
        k, v = vllm_cache(inputs)
        q, q_descale = vllm_query(spec, inputs.q)
        descale = (spec.batch_size, spec.num_kv_heads)
        kw: dict[str, Any] = {
            "q": q,
            "k": k,
            "v": v,
            "out": torch.empty_like(inputs.q),
            "cu_seqlens_q": inputs.qo_indptr.int(),
            "max_seqlen_q": max(spec.qo_lens),
            "seqused_k": inputs.kv_lens.int(),
            "max_seqlen_k": max(spec.kv_lens),
            "softmax_scale": spec.sm_scale,
            "causal": True,
            "window_size": (spec.window_left, 0) if spec.window_left >= 0 else (-1, -1),
            "block_table": kvgather.page_table(inputs),
            "softcap": spec.logits_soft_cap,
            "q_descale": q_descale,
            "k_descale": torch.tensor([inputs.k_scale], device=dev).expand(descale),
            "v_descale": torch.tensor([inputs.v_scale], device=dev).expand(descale),
            "seq_threshold_3D": seq_threshold_3d(spec.num_kv_heads),
            "num_par_softmax_segments": SEGMENTS,
            "sinks": inputs.sinks,
            "kv_quant_mode": vllm_kv_quant_mode("FP8_PER_TENSOR" if spec.is_fp8 else "NONE"),
            **_scratch(spec, dev),
        }

        def run() -> torch.Tensor:
            unified_attention(**kw)
            out: torch.Tensor = kw["out"]
            return out

        return PlannedRun(
            run=run,
            resolved=launch(spec),
            details={
                "api": "unified_attention",
                "library": WHEEL,
                "kv_cache": "paged (vLLM's TRITON_ATTN layout)",
                "seq_threshold_3d": int(kw["seq_threshold_3D"]),
                "softmax_segments": SEGMENTS,
            },
            out=kw["out"],
            q_effective=None if q_descale is None else q.float() * VLLM_Q_SCALE,
            precision="fp8_e4m3" if spec.is_fp8 else "",
        )


def backends() -> list[VllmTritonAttn]:
    return [VllmTritonAttn()]
