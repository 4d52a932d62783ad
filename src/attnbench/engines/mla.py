"""What vLLM and SGLang run on Hopper for an MLA model (DeepSeek-V3, Kimi-K2), as attnbench
variants and knobs: the MLA settings and their rules, beside `engines.paths` (GQA/MHA).

Hopper (SM90) facts read from the source at the commits in `MLA_SOURCES`:

- vLLM picks an MLA backend by priority, the first that validates:
  `[FLASH_ATTN_MLA, FLASHMLA, FLASHINFER_MLA, TRITON_MLA, FLASHMLA_SPARSE]` (cuda.py
  `_get_backend_priorities`). With no backend named and FlashMLA's dense kernel supported, the
  block size is forced to 64 (`use_flashmla`, "we default to FlashMLA" in the comment), but the
  backend chosen is still the first valid one: FLASH_ATTN_MLA at block 64. A named backend
  that fails validation raises, with no fallback.
- vLLM FLASH_ATTN_MLA: SM90 only; `flash_attn_varlen_func(q=q_pe, k=k_pe cache, v=ckv cache,
  q_v=q_nope, block_table, seqused_k, causal=True, fa_version=3)` from vLLM's own
  vllm_flash_attn build, scheduler metadata from `get_scheduler_metadata` (headdim 64,
  headdim_v 512) each step, and `num_splits` = `flash_attn_max_num_splits_for_cuda_graph`
  under full CUDA graphs when the step has at most `max_cudagraph_capture_size` tokens, else 0.
  Block sizes a multiple of 16; KV `auto`/16-bit only ("FP8 KV cache not yet supported").
  Requests of up to 512 new tokens take this decode path (`reorder_batch_threshold`, varlen).
- vLLM FLASHMLA: SM90/SM100; `flash_mla_with_kvcache` on block 64 with `get_mla_metadata` per
  step (tile scheduler metadata, num_splits), causal; fp8 (`fp8`, `fp8_e4m3`) runs
  `flash_mla_with_kvcache_fp8` with a quantised query (`descale_q`, `descale_k`). Uniform
  query lengths up to 128 take the decode path. `fp8_ds_mla` belongs to the sparse backends
  (DeepSeek-V3.2), not this dense one.
- vLLM FLASHINFER_MLA: `supports_compute_capability` is `major == 10`: SM100 only (FlashInfer's
  trtllm-gen MLA decode, `trtllm_batch_decode_with_kv_cache_mla`); on Hopper it does not
  validate, so naming it raises.
- vLLM TRITON_MLA: its own Triton `decode_attention_fwd` (num_kv_splits=4) in the vllm wheel.
- vLLM's MLA prefill is a separate, non-absorbed path chosen by `mla_prefill_backend`,
  independent of the decode backend: on Hopper the only candidate is FLASH_ATTN (FA3 varlen at
  qk 192 / v 128 per head on the new tokens, context chunks up-projected and merged by LSE).
- SGLang uses the same `--attention-backend` names for MLA models (default `fa3` on Hopper).
  fa3: `flash_attn_with_kvcache(q=q_rope, k_cache=k_rope, v_cache=c_kv, qv=q_nope,
  page_table)` at `--page-size`, FA3's own split heuristic. flashinfer:
  `BatchMLAPagedAttentionWrapper(backend="auto")` (fa3 on SM90) planned at page size 1 (token
  indices), causal False for decode, a CUDA-graph wrapper per captured batch; prefill without
  a cached prefix through the ragged (non-absorbed) wrapper. flashmla: page size forced to
  64, `flash_mla_with_kvcache` with `get_mla_metadata(seq_lens, num_q_heads, 1)` for decode;
  extend and verify fall back to the FlashInfer MLA path.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

from attnbench.engines.setting import (
    SGLANG_ARGS,
    SGLANG_FA,
    VLLM_MAX_CAPTURE,
    KernelPath,
    Setting,
    Source,
    vllm_fa3_splits,
)
from attnbench.workload.spec import WorkloadSpec

if TYPE_CHECKING:
    from attnbench.engines.setting import Release

Family = Literal["gqa", "mla"]

VLLM_CUDA = Source(
    "vllm-project/vllm", "002db4951e0c4b326a559eb44b05698afd3e534a", "vllm/platforms/cuda.py"
)
VLLM_FA_MLA = Source(
    "vllm-project/vllm",
    "00b9b7ad3a37ff624e5816d1b7ae713ecb0a705f",
    "vllm/v1/attention/backends/mla/flashattn_mla.py",
)
VLLM_FLASHMLA = Source(
    "vllm-project/vllm",
    "01b1d34087531dbe1c20e84b241ba4644b92b913",
    "vllm/v1/attention/backends/mla/flashmla.py",
)
VLLM_FI_MLA = Source(
    "vllm-project/vllm",
    "002d68ef00d4b4ac34ec2394d430f3727c516a7d",
    "vllm/v1/attention/backends/mla/flashinfer_mla.py",
)
VLLM_TRITON_MLA = Source(
    "vllm-project/vllm",
    "0155494b1dca56b9818d5469f44dcdb87a0c1aed",
    "vllm/v1/attention/backends/mla/triton_mla.py",
)
VLLM_MLA_PREFILL = Source(
    "vllm-project/vllm",
    "04331387fd1f734cf116cdb059714dcdf8f01d18",
    "vllm/v1/attention/backends/mla/prefill/selector.py",
)
SGLANG_FI_MLA = Source(
    "sgl-project/sglang",
    "004d79cff9efa71aedfa007e0f66d80768a44619",
    "python/sglang/srt/layers/attention/flashinfer_mla_backend.py",
)
SGLANG_FLASHMLA = Source(
    "sgl-project/sglang",
    "004d79cff9efa71aedfa007e0f66d80768a44619",
    "python/sglang/srt/layers/attention/flashmla_backend.py",
)
MLA_SOURCES: tuple[Source, ...] = (
    VLLM_CUDA,
    VLLM_FA_MLA,
    VLLM_FLASHMLA,
    VLLM_FI_MLA,
    VLLM_TRITON_MLA,
    VLLM_MLA_PREFILL,
    SGLANG_FA,
    SGLANG_FI_MLA,
    SGLANG_FLASHMLA,
    SGLANG_ARGS,
)

VLLM_MLA_CUDA_GRAPH_SPLITS = 32
"""`flash_attn_max_num_splits_for_cuda_graph`, the config field FLASH_ATTN_MLA reads (default
32, shared/reference/engines-and-outside-anchors.md)."""
VLLM_DECODE_THRESHOLD = {"vllm:flash-attn-mla": 512, "vllm:flashmla": 128}
"""`reorder_batch_threshold`: requests of at most this many new tokens take the decode path."""

TRITON_MLA_MISSING = (
    "the Triton MLA kernel (decode_attention_fwd, 4 KV splits) lives in the vllm wheel; not "
    "carried here"
)

MLA_SETTINGS: tuple[Setting, ...] = (
    Setting(
        "vllm",
        "FLASH_ATTN_MLA",
        "vllm:flash-attn-mla",
        tuple(range(16, 1025, 16)),
        64,
        (VLLM_CUDA, VLLM_FA_MLA),
        "FA3's qv path (vllm_flash_attn) on the paged latent, scheduler metadata per step, "
        "num_splits capped under full CUDA graphs (steps of <= 512 tokens), else 0",
        kv_dtypes=("auto",),
        families=("mla",),
        mla_default=True,
    ),
    Setting(
        "vllm",
        "FLASHMLA",
        "vllm:flashmla",
        (64,),
        64,
        (VLLM_CUDA, VLLM_FLASHMLA),
        "FlashMLA flash_mla_with_kvcache on block 64, get_mla_metadata per step",
        kv_dtypes=("auto", "fp8_e4m3"),
        families=("mla",),
    ),
    Setting(
        "vllm",
        "FLASHINFER_MLA",
        "vllm:flashinfer-mla",
        (32, 64),
        64,
        (VLLM_CUDA, VLLM_FI_MLA),
        "FlashInfer's trtllm-gen MLA decode: SM100 only, not valid on Hopper",
        kv_dtypes=("auto", "fp8_e4m3"),
        families=("mla",),
    ),
    Setting(
        "vllm",
        "TRITON_MLA",
        "vllm:triton-mla",
        None,
        16,
        (VLLM_CUDA, VLLM_TRITON_MLA),
        "vLLM's own Triton decode_attention_fwd (4 KV splits); the kernel is in the vllm wheel",
        kv_dtypes=("auto", "fp8_e4m3"),
        extra={"unavailable": f"vllm:triton-mla: {TRITON_MLA_MISSING}"},
        families=("mla",),
    ),
    Setting(
        "sglang",
        "flashmla",
        "sglang:flashmla",
        (64,),
        64,
        (SGLANG_FLASHMLA, SGLANG_ARGS),
        "decode: FlashMLA flash_mla_with_kvcache, page size forced to 64, get_mla_metadata "
        "per step; extend and verify: the FlashInfer MLA path",
        kv_dtypes=("auto",),
        families=("mla",),
    ),
)


def family(spec: WorkloadSpec) -> Family:
    """The attention family a case belongs to: `mla` (latent cache) or `gqa` (GQA/MHA)."""
    return "mla" if spec.mla is not None else "gqa"


def _who(s: Setting) -> str:
    return f"{s.variant} ({s.engine} --attention-backend {s.name})"


def _others(s: Setting, fam: Family, settings: Sequence[Setting]) -> str:
    names = [o.variant for o in settings if o.engine == s.engine and fam in o.families]
    return ", ".join(names)


def _cache_refusal(s: Setting, spec: WorkloadSpec) -> str | None:
    who = _who(s)
    if s.page_sizes is not None and spec.page_size not in s.page_sizes:
        shown = ", ".join(str(p) for p in s.page_sizes[:4]) + (
            ", ..." if len(s.page_sizes) > 4 else ""
        )
        return f"{who}: page_size={spec.page_size}; the engine runs this backend at {shown}"
    kv = spec.kv_dtype if spec.is_fp8 else "auto"
    if kv not in s.kv_dtypes:
        return f"{who}: kv_dtype={spec.kv_dtype}; allowed for MLA: {', '.join(s.kv_dtypes)}"
    return None


def mla_kernel_path(
    s: Setting, spec: WorkloadSpec, settings: Sequence[Setting], rel: Release | None = None
) -> KernelPath | str:
    """`engines.paths.kernel_path` for an MLA case, or for any case on an MLA-only setting;
    `settings`: every engine setting (`paths.ALL_SETTINGS`), for the refusals that name where
    a family runs instead."""
    if spec.mla is None:
        return (
            f"{_who(s)} serves MLA models only (--model deepseek-v3, kimi-k2...); GQA/MHA "
            f"models run on {_others(s, 'gqa', settings)}"
        )
    if "mla" not in s.families:
        return (
            f"{_who(s)}: MLA models run on the engine's MLA backends "
            f"({_others(s, 'mla', settings)}), not this one"
        )
    why = _cache_refusal(s, spec)
    if why:
        return why
    if s.variant == "vllm:flash-attn-mla":
        return _vllm_flash_attn_mla(spec, rel)
    return _RULES[s.variant](spec)


def _vllm_prefill(variant: str, spec: WorkloadSpec) -> str | None:
    """vLLM's decode/prefill split: requests above `reorder_batch_threshold` new tokens (and,
    for FLASHMLA, batches of unequal query lengths) run the non-absorbed prefill path."""
    limit = VLLM_DECODE_THRESHOLD[variant]
    longest = max(spec.qo_lens)
    uneven = variant == "vllm:flashmla" and len(set(spec.qo_lens)) > 1
    if longest <= limit and not uneven:
        return None
    rule = f"{longest} new tokens > {limit}" if longest > limit else "unequal query lengths"
    return (
        f"{variant}: {rule}: vLLM runs this through its MLA prefill path, FA3 varlen on the "
        "up-projected (non-absorbed) heads at qk 192 / v 128 (mla_prefill_backend FLASH_ATTN "
        f"on Hopper, whatever the decode backend), not an absorbed MLA case "
        f"({VLLM_MLA_PREFILL.cite()})"
    )


def _vllm_flash_attn_mla(spec: WorkloadSpec, rel: Release | None) -> KernelPath | str:
    prefill = _vllm_prefill("vllm:flash-attn-mla", spec)
    if prefill:
        return prefill
    cap = VLLM_MLA_CUDA_GRAPH_SPLITS if rel is None or rel.version == "pinned" else None
    cap = cap if cap is not None else vllm_fa3_splits(rel)
    graphs = spec.total_q <= VLLM_MAX_CAPTURE
    splits = cap if graphs else 0
    rule = "<=" if graphs else ">"
    return KernelPath(
        "flash-attn:mla",
        {"num_splits": splits, "scheduler_metadata": True},
        f"FA3 qv path, {spec.total_q} tokens {rule} {VLLM_MAX_CAPTURE}: num_splits={splits}, "
        f"scheduler metadata per step ({VLLM_FA_MLA.cite()})",
    )


def _vllm_flashmla(spec: WorkloadSpec) -> KernelPath | str:
    prefill = _vllm_prefill("vllm:flashmla", spec)
    if prefill:
        return prefill
    if spec.is_fp8:
        return (
            "vllm:flashmla: with an fp8 cache vLLM runs flash_mla_with_kvcache_fp8, which "
            "quantises the query too (descale_q, descale_k); flashmla:dense times the 16-bit "
            f"call only ({VLLM_FLASHMLA.cite()})"
        )
    return KernelPath(
        "flashmla:dense",
        {},
        f"flash_mla_with_kvcache, block 64, get_mla_metadata per step ({VLLM_FLASHMLA.cite()})",
    )


def _vllm_flashinfer_mla(spec: WorkloadSpec) -> str:
    return (
        "vllm:flashinfer-mla: vLLM's FLASHINFER_MLA validates on SM100 only "
        "(supports_compute_capability: major == 10; FlashInfer's trtllm-gen MLA decode), so "
        f"on Hopper --attention-backend FLASHINFER_MLA raises ({VLLM_FI_MLA.cite()})"
    )


def _vllm_triton_mla(spec: WorkloadSpec) -> str:
    return f"vllm:triton-mla: {TRITON_MLA_MISSING} ({VLLM_TRITON_MLA.cite()})"


def _sglang_extend(variant: str, spec: WorkloadSpec) -> str | None:
    if spec.kind == "decode" and all(q == 1 for q in spec.qo_lens):
        return None
    return (
        f"{variant}: kind={spec.kind}: SGLang runs MLA extends without a cached prefix through "
        "the up-projected (non-absorbed) heads at qk 192 / v 128 (ragged prefill or FA3 "
        "varlen), and cached prefixes in chunks merged by LSE; no absorbed MLA case is that "
        f"call ({SGLANG_FI_MLA.cite()})"
    )


def _sglang_fa3(spec: WorkloadSpec) -> KernelPath | str:
    extend = _sglang_extend("sglang:fa3", spec)
    if extend:
        return extend
    if spec.is_fp8:
        return (
            "sglang:fa3: an fp8 MLA cache goes to FA3's qv path with k_descale/v_descale and a "
            "16-bit query; flash-attn:mla has no fp8 qv path"
        )
    return KernelPath(
        "flash-attn:mla",
        {},
        f"flash_attn_with_kvcache qv path on page_table, FA3's own split heuristic "
        f"({SGLANG_FA.cite()})",
    )


def _sglang_flashinfer(spec: WorkloadSpec) -> KernelPath | str:
    extend = _sglang_extend("sglang:flashinfer", spec)
    if extend:
        return extend
    return KernelPath(
        "flashinfer:mla-fa3",
        {},
        "BatchMLAPagedAttentionWrapper backend auto (fa3 on SM90), page size 1, causal False; "
        f"its CUDA-graph wrapper changes buffers, not the kernel ({SGLANG_FI_MLA.cite()})",
    )


def _sglang_flashmla(spec: WorkloadSpec) -> KernelPath | str:
    extend = _sglang_extend("sglang:flashmla", spec)
    if extend:
        return extend
    return KernelPath(
        "flashmla:dense",
        {},
        f"flash_mla_with_kvcache, page 64, get_mla_metadata per step ({SGLANG_FLASHMLA.cite()})",
    )


_RULES = {
    "vllm:flashmla": _vllm_flashmla,
    "vllm:flashinfer-mla": _vllm_flashinfer_mla,
    "vllm:triton-mla": _vllm_triton_mla,
    "sglang:fa3": _sglang_fa3,
    "sglang:flashinfer": _sglang_flashinfer,
    "sglang:flashmla": _sglang_flashmla,
}
