"""What vLLM and SGLang run on Hopper for each engine setting, as attnbench variants and knobs.

Each engine setting (attention backend, KV dtype, block/page size, CUDA-graph capture, draft
verification) maps to the FlashInfer wrapper or FA3 call the engine makes, read from the
engines' source at the commits in `SOURCES` (the file and what was read are cited per rule).
The mapping is data plus a few pure rules (no torch): `kernel_path` answers, for an engine
variant and a case, which raw attnbench variant with which knobs reproduces the engine's call,
or why the engine would not run that case that way. The engine variants
(`backends.engine_variant`) run exactly that; `analysis.engine_rank` maps raw rows onto engine
paths only where a row's variant and knobs are the path.

Hopper facts read from the source (SM90; trtllm-gen kernels are SM100-only, so vLLM's
`use_trtllm_attention` is False and neither engine's TRT-LLM paths apply):

- vLLM FLASHINFER: decode through `BatchDecodeWithPagedKVCacheWrapper(use_tensor_cores=True)`
  for every group size (flashinfer.py `_get_decode_wrapper`: "Tensor cores are enabled by
  default"), one wrapper per captured batch size with `use_cuda_graph=True` when the decode
  CUDA-graph mode is FULL (the default FULL_AND_PIECEWISE), planned with `fixed_split_size=-1`
  and `disable_split_kv=False` (unless batch-invariant mode); prefill/append and draft
  verification (no spec-as-decode without TRT-LLM) through `BatchPrefillWithPagedKVCacheWrapper`
  with its default backend (`auto`); cascade disabled (`use_cascade_attention` returns False).
  Kernel block sizes 16, 32, 64; head sizes 64, 128, 256; no attention sinks.
- vLLM FLASH_ATTN (FA3 on SM90): `flash_attn_varlen_func` on the paged cache (`block_table`,
  `seqused_k`) with scheduler metadata from `get_scheduler_metadata` in the metadata builder
  (`aot_schedule` when FA3), and `num_splits = 16` (`_DEFAULT_MAX_NUM_SPLITS_FOR_CUDA_GRAPH`)
  whenever full CUDA graphs are on and the step has at most `max_cudagraph_capture_size`
  tokens, else 0 (FA3's heuristic). Block size a multiple of 16.
- SGLang flashinfer: decode wrapper `backend="fa2"`, `use_tensor_cores` by
  `should_use_tensor_core`: fp8 KV -> True, 16-bit KV -> GQA group size >= 4; token-granular
  KV indices (page size 1 in every plan call); captured batches plan with
  `fixed_split_size=None`, `disable_split_kv=False` (unless deterministic inference). Prefill
  without a cached prefix: `BatchPrefillWithRaggedKVCacheWrapper(backend="auto")` on the new
  tokens' K/V (fa3 on SM90 for 16-bit q and K/V); draft verification: the paged prefill
  wrapper `backend="fa2"` with the draft tree's custom mask.
- SGLang fa3: `flash_attn_with_kvcache` on `page_table` at the server's `--page-size`
  (default 1), `num_splits=0` (1 only with deterministic inference), no scheduler metadata
  (FA3 computes it in each call), pack_gqa left to FA3; fp8 KV casts q to fp8.
- SGLang triton (0.5.23): decode runs `decode_attention_fwd` (stage 1 per kv split, grouped for
  GQA, then the split reduction, which adds the sinks) on the token pool, its kv splits per
  request from `get_num_kv_splits_triton` over the CUDA-graph-padded batch (padding rows at
  seq_len 1; at most `--triton-attention-num-kv-splits` 8); Lean decode is ROCm-only. Window
  layers read the last min(seq_len, sliding_window_size) tokens. Prefill and append run
  `extend_attention_fwd` eagerly (the breakable prefill graph runs attention outside it).
- Windows, sinks, soft-cap (gpt-oss, Gemma-2): both engines' FA3 backends pass the window, the
  soft-cap and the sinks to FA3 (the raw variant reads them from the case); vLLM's FA3 builder
  turns its AOT scheduler off for a model with windowed and full layers. Both FlashInfer
  backends take windows and soft-caps and refuse sinks (`SINK_REFUSALS`). Which backend each
  engine picks per family: `engines.families`.
"""

from __future__ import annotations

from collections.abc import Sequence

from attnbench.engines.mla import MLA_SETTINGS, mla_kernel_path
from attnbench.engines.setting import (  # noqa: F401 (re-exported: callers import them from here)
    ENGINES,
    SGLANG_ARGS,
    SGLANG_FA,
    SGLANG_FI,
    SGLANG_TRITON,
    SOURCES,
    VLLM_CUDA_GRAPH_SPLITS,
    VLLM_FA,
    VLLM_FI,
    VLLM_GRAPHS,
    VLLM_MAX_CAPTURE,
    VLLM_TRITON,
    Engine,
    KernelPath,
    Release,
    Setting,
    Source,
    vllm_fa3_splits,
)
from attnbench.workload.spec import WorkloadSpec

SGLANG_MAX_CAPTURE = {"tp<4": 256, "tp>=4": 512}
"""`cuda_graph_max_bs` on an H200 (server_args.py, 90-160 GiB class)."""


def vllm_capture_sizes(max_size: int = VLLM_MAX_CAPTURE) -> list[int]:
    """vLLM's default CUDA-graph batch sizes (compilation.py / vllm.py `_set_cudagraph_sizes`)."""
    sizes = [1, 2, 4, *range(8, 256, 8), *range(256, max_size + 1, 16)]
    return [s for s in sizes if s <= max_size]


def sglang_capture_sizes(max_bs: int = SGLANG_MAX_CAPTURE["tp<4"]) -> list[int]:
    """SGLang's default CUDA-graph batch sizes without speculative decoding
    (server_args.py `_generate_cuda_graph_batch_sizes`)."""
    sizes = [1, 2, 4, 8, 12, *range(16, 257, 8), *range(272, 512, 16), *range(512, max_bs + 1, 32)]
    return [s for s in sizes if s <= max_bs]


SETTINGS: tuple[Setting, ...] = (
    Setting(
        "vllm",
        "FLASH_ATTN",
        "vllm:flash-attn",
        tuple(range(16, 1025, 16)),
        16,
        (VLLM_FA, VLLM_GRAPHS),
        "FA3 varlen on the paged cache, scheduler metadata per step, num_splits=16 under full "
        "CUDA graphs (steps of <= 512 tokens), else 0",
        default=True,
        kv_dtypes=("auto", "fp8_e4m3"),
    ),
    Setting(
        "vllm",
        "FLASHINFER",
        "vllm:flashinfer",
        (16, 32, 64),
        16,
        (VLLM_FI, VLLM_GRAPHS),
        "decode: FlashInfer decode wrapper on tensor cores, CUDA-graph wrapper per captured "
        "batch, default split; prefill and verification: paged prefill wrapper, backend auto",
    ),
    Setting(
        "vllm",
        "TRITON_ATTN",
        "vllm:triton-attn",
        tuple(range(16, 1025, 16)),
        16,
        (VLLM_TRITON, VLLM_GRAPHS),
        "vLLM's own Triton kernel (unified_attention) on its paged cache: split-KV (3D, 16 "
        "segments) for single-token batches up to the capture size nearest 128 // KV heads, "
        "else 2D; windows, sinks and soft-cap in the kernel",
        kv_dtypes=("auto", "fp8_e4m3"),
    ),
    Setting(
        "sglang",
        "fa3",
        "sglang:fa3",
        None,
        1,
        (SGLANG_FA, SGLANG_ARGS),
        "FA3 flash_attn_with_kvcache on page_table, num_splits=0, no scheduler metadata",
        default=True,
        kv_dtypes=("auto", "fp8_e4m3"),
        families=("gqa", "mla"),
        mla_default=True,
    ),
    Setting(
        "sglang",
        "triton",
        "sglang:triton",
        None,
        1,
        (SGLANG_TRITON, SGLANG_ARGS),
        "SGLang's own Triton kernels on its token pool: decode split-KV (stage 1 + reduce), "
        "kv splits per request from the CUDA-graph-padded batch (at most 8); prefill and "
        "append: extend_attention_fwd; windows, sinks and logit_cap in the kernels",
        kv_dtypes=("auto", "fp8_e4m3"),
    ),
    Setting(
        "sglang",
        "flashinfer",
        "sglang:flashinfer",
        (1,),
        1,
        (SGLANG_FI, SGLANG_ARGS),
        "decode: fa2 decode wrapper, tensor cores for fp8 KV or group >= 4, page size 1, "
        "CUDA-graph wrapper per captured batch; prefill: ragged wrapper (fa3 on SM90); "
        "verification: paged fa2 prefill with the tree mask",
        families=("gqa", "mla"),
    ),
)
"""The settings that serve GQA/MHA models (SGLang's also serve MLA models); `ALL_SETTINGS`
adds the MLA-only ones (`engines.mla.MLA_SETTINGS`)."""


def setting(variant: str) -> Setting:
    for s in ALL_SETTINGS:
        if s.variant == variant:
            return s
    allowed = ", ".join(s.variant for s in ALL_SETTINGS)
    raise ValueError(f"engine variant {variant!r} is not known; allowed: {allowed}")


def default_setting(engine: Engine, family: str = "gqa") -> Setting:
    """The engine's own choice on Hopper for a model of `family` (`gqa` or `mla`)."""
    return next(
        s for s in settings_for(engine, family) if (s.mla_default if family == "mla" else s.default)
    )


def settings_for(engine: Engine, family: str) -> list[Setting]:
    """The engine's settings that serve models of `family` (`gqa` or `mla`)."""
    return [s for s in ALL_SETTINGS if s.engine == engine and family in s.families]


_FI_GRAPH: dict[str, object] = {
    "use_cuda_graph": True,
    "disable_split_kv": False,
    "fixed_split_size": None,
}
_FI_SPLIT: dict[str, object] = {"disable_split_kv": False, "fixed_split_size": None}


def _is_chain(spec: WorkloadSpec) -> bool:
    tree = spec.tree
    return tree is not None and all(p == i - 1 for i, p in enumerate(tree.parents))


def _single_token(spec: WorkloadSpec) -> bool:
    return spec.kind in ("decode", "shared_prefix") and all(q == 1 for q in spec.qo_lens)


def sglang_tensor_cores(spec: WorkloadSpec) -> bool:
    """SGLang's `should_use_tensor_core`: fp8 KV, or 16-bit KV with GQA group size >= 4."""
    return spec.is_fp8 or spec.group_size >= 4


VLLM_FA_034 = Source("vllm-project/vllm", "62d4bc3c7", "vllm/v1/attention/backends/flash_attn.py")
"""vLLM 0.34.0's wheel (`vllm/_version.py` commit_id g62d4bc3c7)."""
VLLM_FI_034 = Source("vllm-project/vllm", "62d4bc3c7", "vllm/v1/attention/backends/flashinfer.py")
SGLANG_HOOK_0523 = Source(
    "sgl-project/sglang", "v0.5.23", "python/sglang/srt/arg_groups/model_hook.py"
)
"""SGLang 0.5.23's wheel (its `_version.py` names no commit: the release tag)."""
SINK_REFUSALS: dict[str, str] = {
    "vllm:flashinfer": "attention sinks: at the pinned commit FLASHINFER serves no sinks on "
    f"SM90 ({VLLM_FI.cite()}); in 0.34.0 `supports_sink` holds on SM90 only where XQA decode "
    "can load (NVIDIA's cubins), decode then runs XQA and prefill "
    "BatchAttentionWithAttentionSinkWrapper, which no attnbench variant is "
    f"({VLLM_FI_034.cite()})",
    "sglang:flashinfer": "attention sinks: SGLang asserts 'GptOssForCausalLM requires one of "
    "[triton, trtllm_mha, fa3, fa4, ...] attention backend' and its default picks flashinfer "
    "only for models without sinks ('FlashInfer does not support attention sinks') "
    f"({SGLANG_HOOK_0523.cite()})",
}
"""Engine settings that refuse attention sinks on Hopper, with the engine's own check."""


def _mixed_windows(spec: WorkloadSpec) -> bool:
    """Whether the case's model mixes windowed and full layers (gpt-oss, Gemma-2): vLLM's FA3
    metadata builder then sees more than one sliding-window config and turns its AOT
    scheduler off (`_get_sliding_window_configs`: `aot_schedule = False`)."""
    from attnbench.workload.models import MODELS

    model = MODELS.get(spec.model or "")
    if model is None:  # only a model with windows names its full layers
        return spec.layer_type == "full_attention"
    return model.sliding_window is not None and len(set(model.layer_types)) > 1


def _common(s: Setting, spec: WorkloadSpec) -> str | None:
    who = f"{s.variant} ({s.engine} --attention-backend {s.name})"
    if spec.mla is not None:
        return f"{who}: MLA models run on the engine's MLA backends, not this one"
    if spec.sinks and s.variant in SINK_REFUSALS:
        return f"{who}: {SINK_REFUSALS[s.variant]}"
    reads_cache = not (s.variant == "sglang:flashinfer" and spec.kind == "prefill")
    if reads_cache and s.page_sizes is not None and spec.page_size not in s.page_sizes:
        shown = ", ".join(str(p) for p in s.page_sizes[:4]) + (
            ", ..." if len(s.page_sizes) > 4 else ""
        )
        return f"{who}: page_size={spec.page_size}; the engine runs this backend at {shown}"
    kv = "auto" if not spec.is_fp8 else spec.kv_dtype
    if kv not in s.kv_dtypes:
        return f"{who}: kv_dtype={spec.kv_dtype}; allowed: {', '.join(s.kv_dtypes)}"
    if spec.kind == "tree" and not _is_chain(spec) and s.engine == "vllm":
        return f"{who}: vLLM verifies draft chains causally; tree-shaped drafts are not run"
    return None


def engine_page_size(variant: str, spec: WorkloadSpec) -> int:
    """The page size the engine runs a case at: SGLang's flashinfer backend indexes tokens
    (page size 1) whatever `--page-size` says, and its ragged prefill reads no pages."""
    return 1 if variant == "sglang:flashinfer" else spec.page_size


def kernel_path(variant: str, spec: WorkloadSpec, rel: Release | None = None) -> KernelPath | str:
    """The raw variant + knobs that reproduce engine variant `variant` on `spec`, or why the
    engine would not run this case through that backend. `rel`: the engine release whose
    rules apply (default: the pinned commits'; vLLM FLASH_ATTN's split cap depends on it)."""
    s = setting(variant)
    if spec.mla is not None or "gqa" not in s.families:
        return mla_kernel_path(s, spec, ALL_SETTINGS, rel)
    why = _common(s, spec)
    if why:
        return why
    if variant == "vllm:flash-attn":
        return _vllm_flash_attn(spec, vllm_fa3_splits(rel))
    return _RULES[variant](spec)


def _vllm_flashinfer(spec: WorkloadSpec) -> KernelPath | str:
    cite = VLLM_FI.cite()
    if _single_token(spec):
        return KernelPath(
            "flashinfer:tc",
            _FI_GRAPH,
            f"decode wrapper, use_tensor_cores=True, CUDA graph ({cite})",
        )
    return KernelPath(
        "flashinfer:auto",
        {},
        f"paged prefill wrapper, backend auto; no spec-as-decode on SM90 ({cite})",
    )


def _vllm_flash_attn(spec: WorkloadSpec, cap: int = VLLM_CUDA_GRAPH_SPLITS) -> KernelPath | str:
    graphs = spec.total_q <= VLLM_MAX_CAPTURE
    splits = cap if graphs else 0
    rule = "<=" if graphs else ">"
    aot = not _mixed_windows(spec)
    metadata = (
        "scheduler metadata per step"
        if aot
        else f"no scheduler metadata (windowed and full layers: AOT schedule off, "
        f"{VLLM_FA_034.cite()})"
    )
    return KernelPath(
        "flash-attn:fa3",
        {"num_splits": splits, "pack_gqa": None, "scheduler_metadata": aot},
        f"{spec.total_q} tokens {rule} {VLLM_MAX_CAPTURE}: num_splits={splits}, {metadata}"
        f"{_FA3_FEATURES_VLLM * bool(spec.features())} ({VLLM_FA.cite()})",
    )


_FA3_FEATURES_VLLM = "; window_size=(w-1, 0), softcap and s_aux=sinks passed to FA3"
_FA3_FEATURES_SGLANG = (
    "; window_size=(w-1, 0) (its sliding_window_size is already w-1), softcap=logit_cap and "
    "sinks= passed to FA3"
)


def _sglang_flashinfer(spec: WorkloadSpec) -> KernelPath | str:
    cite = SGLANG_FI.cite()
    if _single_token(spec):
        tc = sglang_tensor_cores(spec)
        knobs = _FI_GRAPH if tc else {"use_cuda_graph": True}
        rule = "fp8 KV" if spec.is_fp8 else f"group size {spec.group_size} {'>=' if tc else '<'} 4"
        variant = "flashinfer:tc" if tc else "flashinfer:fa2"
        return KernelPath(
            variant, knobs, f"decode wrapper fa2, tensor cores={tc} ({rule}) ({cite})"
        )
    if spec.kind == "prefill":
        if spec.is_fp8:
            return (
                "sglang:flashinfer: SGLang's ragged prefill reads the new tokens' K/V in the "
                "model dtype, not the fp8 cache; measure prefill with a 16-bit KV cache"
            )
        return KernelPath(
            "flashinfer:ragged-fa3", {}, f"ragged prefill wrapper, auto -> fa3 on SM90 ({cite})"
        )
    if spec.kind == "tree":
        return KernelPath(
            "flashinfer:fa2", _FI_SPLIT, f"verify: paged fa2 prefill, custom mask ({cite})"
        )
    return (
        f"sglang:flashinfer: kind={spec.kind} runs as ragged (new tokens) + paged fa2 (cached "
        "prefix) merged by LSE in SGLang; no attnbench variant is that composition"
    )


def _sglang_fa3(spec: WorkloadSpec) -> KernelPath | str:
    return KernelPath(
        "flash-attn:fa3",
        {"num_splits": 0, "pack_gqa": None, "scheduler_metadata": False},
        f"flash_attn_with_kvcache, num_splits=0, no scheduler metadata"
        f"{_FA3_FEATURES_SGLANG * bool(spec.features())} ({SGLANG_FA.cite()})",
    )


VLLM_TRITON_SEGMENTS = 16
"""NUM_PAR_SOFTMAX_SEGMENTS (triton_attn.py): the split-KV kernel's softmax segments."""
VLLM_TRITON_MIN_GRID_2D = 128
"""MIN_LAUNCH_GRID_SIZE_2D (triton_attn.py)."""


def vllm_triton_threshold(num_kv_heads: int) -> int:
    """TRITON_ATTN's `seq_threshold_3D` with CUDA graphs on (the default): the capture size
    nearest 128 // num_kv_heads (the first of two equally near, as `min` picks)."""
    target = VLLM_TRITON_MIN_GRID_2D // num_kv_heads
    return min(vllm_capture_sizes(), key=lambda size: abs(size - target))


VLLM_TRITON_MAX_3D_QUERY_LEN = 8
"""MAX_3D_QUERY_LEN (triton_unified_attention.py): longer queries take the 2D kernel."""


def vllm_triton_launch(spec: WorkloadSpec) -> str:
    """The kernel unified_attention launches for this batch on Hopper, as its launcher picks
    (triton_unified_attention.py): `3d` (split-KV) where every query has at most
    MAX_3D_QUERY_LEN tokens, the requests' query blocks (BLOCK_Q = BLOCK_M // group tokens
    each) number at most `vllm_triton_threshold`, and the builder's scratch (that many rows,
    one query token each, without speculative decoding) holds every query token; else `2d`."""
    threshold = vllm_triton_threshold(spec.num_kv_heads)
    group = spec.num_qo_heads // spec.num_kv_heads
    block_m = 16 if group <= 16 else 1 << (group - 1).bit_length()
    block_q = block_m // group
    max_q = max(spec.qo_lens)
    blocks = spec.batch_size * -(max_q // -block_q)
    fits = max_q <= VLLM_TRITON_MAX_3D_QUERY_LEN and spec.total_q <= threshold
    return "3d" if fits and blocks <= threshold else "2d"


def _vllm_triton(spec: WorkloadSpec) -> KernelPath | str:
    """No raw library call: the engine's own kernel is the variant (`backends.vllm_triton`)."""
    return KernelPath(
        "vllm:triton-attn",
        {},
        f"unified_attention from the wheel, {vllm_triton_launch(spec)} launch "
        f"({VLLM_TRITON.cite()})",
    )


SGLANG_TRITON_MAX_KV_SPLITS = 8
"""`--triton-attention-num-kv-splits` on CUDA (arg_groups/fields/exec_.py; 16 only on ROCm)."""
SGLANG_TRITON_MIN_BLOCK_KV = 32
"""_MIN_BLOCK_KV (decode_attention.py): a split's KV length is a multiple of it."""
SGLANG_TRITON_SMS = 132
"""`get_device_core_count` on an H100 SXM or H200 (the replay reads the live count)."""
SGLANG_TRITON_KINDS = ("decode", "shared_prefix", "prefill", "append")


def sglang_graph_batch(batch: int, max_bs: int = SGLANG_MAX_CAPTURE["tp<4"]) -> int:
    """The batch SGLang's decode CUDA graph runs for `batch` requests: the smallest capture
    size that holds it, its extra rows at seq_len 1 (`get_cuda_graph_seq_len_fill_value`);
    past the largest capture size the step runs eagerly, unpadded."""
    if batch > max_bs:
        return batch
    return min(size for size in sglang_capture_sizes(max_bs) if size >= batch)


def _cdiv(a: int, b: int) -> int:
    return -(a // -b)


def _f32(x: float) -> float:
    import struct

    return float(struct.unpack("f", struct.pack("f", x))[0])


def sglang_triton_kv_splits(
    seq_lens: Sequence[int],
    num_qo_heads: int,
    num_kv_heads: int,
    sms: int = SGLANG_TRITON_SMS,
    max_kv_splits: int = SGLANG_TRITON_MAX_KV_SPLITS,
) -> list[int]:
    """Per request, the kv splits SGLang 0.5.23's `get_num_kv_splits_triton` (kernels/ops/
    attention/metadata.py) writes for a decode batch of `seq_lens` (the padded batch under
    CUDA graphs), mirrored in Python, its float32 steps rounded as float32 (the replay runs
    the kernel itself)."""
    import math

    longest, shortest = max(seq_lens), min(seq_lens)
    if longest * 8 < shortest * 10:
        shortest = longest
    chunk_1 = _cdiv(longest, min(_cdiv(longest, shortest), max_kv_splits))
    ext = _f32(_f32(float(longest)) / 64.0)
    cores = int(_f32(sms * max(_f32(math.log2(ext)), 1.0)))
    group = num_qo_heads // num_kv_heads
    tiles = num_qo_heads if group == 1 else _cdiv(num_qo_heads, min(16, group))
    chunk_2 = _cdiv(longest, min(_cdiv(cores, len(seq_lens) * tiles), max_kv_splits))
    return [max(_cdiv(n, chunk_1), _cdiv(n, chunk_2)) for n in seq_lens]


def sglang_triton_decode(spec: WorkloadSpec, sms: int = SGLANG_TRITON_SMS) -> tuple[int, list[int]]:
    """A decode step of `spec` on SGLang's triton backend: the batch its kernels launch for
    (`sglang_graph_batch`) and the real requests' kv splits, computed over the padded batch's
    seq lens (full lengths also for window layers: forward_decode passes `num_kv_splits`,
    not `window_num_kv_splits`)."""
    graph = sglang_graph_batch(spec.batch_size)
    lens = [*spec.kv_lens, *[1] * (graph - spec.batch_size)]
    splits = sglang_triton_kv_splits(lens, spec.num_qo_heads, spec.num_kv_heads, sms)
    return graph, splits[: spec.batch_size]


def sglang_triton_launch(spec: WorkloadSpec) -> str:
    """The kernels SGLang's triton backend launches for `spec` on Hopper: `extend` for a
    prefill or append batch, else decode's stage 1 (`grouped` for GQA, `mha` for one query
    head per KV head) and its split reduction."""
    if spec.kind in ("prefill", "append"):
        return "extend"
    return "grouped" if spec.group_size > 1 else "mha"


def _sglang_triton(spec: WorkloadSpec) -> KernelPath | str:
    """No raw library call: the engine's own kernels are the variant (`backends.sglang_triton`)."""
    if spec.kind not in SGLANG_TRITON_KINDS or not spec.causal:
        return f"sglang:triton: kind={spec.kind} (causal={spec.causal}) is not replayed"
    launch = sglang_triton_launch(spec)
    if launch == "extend":
        what = "extend_attention_fwd (prefix from the pool, new tokens contiguous)"
    else:
        graph, splits = sglang_triton_decode(spec)
        what = (
            f"decode_attention_fwd {launch}, batch {spec.batch_size} run as {graph}, kv splits "
            f"{min(splits)}..{max(splits)} of {SGLANG_TRITON_MAX_KV_SPLITS}"
        )
    return KernelPath("sglang:triton", {}, f"{what} from the wheel ({SGLANG_TRITON.cite()})")


_RULES = {
    "vllm:flashinfer": _vllm_flashinfer,
    "vllm:triton-attn": _vllm_triton,
    "vllm:flash-attn": _vllm_flash_attn,
    "sglang:flashinfer": _sglang_flashinfer,
    "sglang:fa3": _sglang_fa3,
    "sglang:triton": _sglang_triton,
}


def command(s: Setting, kv_dtype: str, page_size: int) -> str:
    """The launch command for setting `s` with this KV dtype and page size."""
    kv = kv_dtype if kv_dtype.startswith("fp8") else "auto"
    if s.engine == "vllm":
        return (
            f"vllm serve MODEL --attention-backend {s.name} --kv-cache-dtype {kv} "
            f"--block-size {page_size}"
        )
    return (
        f"python -m sglang.launch_server --model-path MODEL --attention-backend {s.name} "
        f"--kv-cache-dtype {kv} --page-size {page_size}"
    )


_VLLM_FLAGS = frozenset({"--attention-backend", "--kv-cache-dtype", "--block-size"})
_SGLANG_FLAGS = frozenset(
    {"--model-path", "--attention-backend", "--kv-cache-dtype", "--page-size"}
)
RELEASES: tuple[Release, ...] = (
    Release(
        "vllm",
        "pinned",
        ("the commits in SOURCES",),
        _VLLM_FLAGS | {"--tensor-parallel-size"},
        f"{VLLM_FA.cite()}; {VLLM_GRAPHS.cite()}",
        fa3_cuda_graph_splits=VLLM_CUDA_GRAPH_SPLITS,
    ),
    Release(
        "vllm",
        "0.34.0",
        ("0.34.0",),
        _VLLM_FLAGS
        | {
            "--tensor-parallel-size",
            "--attention-config",
            "--cudagraph-capture-sizes",
            "--max-cudagraph-capture-size",
        },
        "vllm 0.34.0 (package index): vllm/config/attention.py, vllm/config/cache.py, "
        "vllm/config/compilation.py, as summarised in shared/reference/"
        "engines-and-outside-anchors.md (2026-12-07)",
        (
            "VLLM_ATTENTION_BACKEND is gone (PR #26315, issue #50292): --attention-backend or "
            "--attention-config -ac.backend=",
            "CUDA-graph sizes: --cudagraph-capture-sizes and --max-cudagraph-capture-size "
            "(--cuda-graph-sizes removed)",
            "FA3's num_splits cap under full CUDA graphs is the config field "
            "flash_attn_max_num_splits_for_cuda_graph, default 32 (the pinned commit: a "
            "constant 16)",
            "FLASHINFER decode on SM90 runs XQA (attnbench's flashinfer:xqa) where NVIDIA's "
            "cubins load: steps of <= 256 tokens on a 16-bit cache, every step on fp8 "
            f"({VLLM_FI_034.cite()}); vllm:flashinfer reproduces the pinned commit's decode "
            "wrapper, so rows of this release's FLASHINFER decode are flashinfer:xqa's",
        ),
        fa3_cuda_graph_splits=32,
    ),
    Release(
        "sglang",
        "pinned",
        ("the commits in SOURCES",),
        _SGLANG_FLAGS | {"--tp", "--cuda-graph-max-bs", "--cuda-graph-bs"},
        f"{SGLANG_ARGS.cite()}",
    ),
    Release(
        "sglang",
        "0.5.23",
        ("0.5.23",),
        _SGLANG_FLAGS
        | {
            "--tp",
            "--decode-attention-backend",
            "--prefill-attention-backend",
            "--cuda-graph-max-bs-decode",
            "--cuda-graph-bs-decode",
            "--cuda-graph-max-bs-prefill",
            "--cuda-graph-bs-prefill",
        },
        "sglang 0.5.23 wheel: srt/server_args.py, srt/arg_groups/model_override_base.py, as "
        "summarised in shared/reference/engines-and-outside-anchors.md (2026-12-07)",
        (
            "--cuda-graph-max-bs and --cuda-graph-bs are gone: --cuda-graph-max-bs-decode / "
            "--cuda-graph-bs-decode (and -prefill)",
            "--decode-attention-backend and --prefill-attention-backend set the phases apart "
            "and win over --attention-backend",
            "models with attention sinks: fa3 on Hopper (CUDA >= 12.3; gpt-oss's own override "
            "sets fa3 on SM90), triton only where neither the Hopper nor the SM100 default "
            "applies, never flashinfer (model_override_base.py get_default_attn_backend, "
            "model_overrides/gpt_oss.py)",
        ),
        sinks_backend="fa3",
    ),
)
"""Engine releases attnbench knows, oldest first per engine; the last of an engine is the
default (`release`)."""


def releases(engine: Engine) -> list[Release]:
    return [r for r in RELEASES if r.engine == engine]


def release(engine: Engine, version: str | None = None) -> Release:
    """The release `version` of `engine` (default: the newest known); a one-line error names
    the known ones."""
    known = releases(engine)
    if version is None:
        return known[-1]
    for r in known:
        if r.version == version:
            return r
    allowed = ", ".join(r.version for r in known)
    raise ValueError(f"--engine-version={version!r} is not known for {engine}; allowed: {allowed}")


def release_command(variant: str, kv: str, page_size: int, tp: int, rel: Release) -> list[str]:
    """The launch command for engine variant `variant` in release `rel`, one flag group a
    line, the first naming the releases it was checked against."""
    s = setting(variant)
    if s.engine != rel.engine:
        raise ValueError(f"{variant} is a {s.engine} setting, not {rel.engine}'s")
    note = f"# flags of {rel.label()}"
    if s.engine == "vllm":
        return [
            note,
            "vllm serve MODEL",
            f"--tensor-parallel-size {tp}",
            f"--attention-backend {s.name}",
            f"--kv-cache-dtype {kv}",
            f"--block-size {page_size}",
        ]
    return [
        note,
        "python -m sglang.launch_server",
        "--model-path MODEL",
        f"--tp {tp}",
        f"--attention-backend {s.name}",
        f"--kv-cache-dtype {kv}",
        f"--page-size {page_size}",
    ]


def command_flags(lines: list[str]) -> set[str]:
    """Every `--flag` of a command's lines (comments left out)."""
    words = " ".join(ln for ln in lines if not ln.startswith("#")).split()
    return {w.split("=")[0] for w in words if w.startswith("--")}


ALL_SETTINGS: tuple[Setting, ...] = (*SETTINGS, *MLA_SETTINGS)
"""Every engine setting: `SETTINGS` (GQA/MHA, SGLang's also MLA) and the MLA-only ones."""
