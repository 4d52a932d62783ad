"""Which FlashInfer entry point serves a case, and why not: pure rules, no flashinfer import.

Every variant maps a `WorkloadSpec` to a `Route` (the wrapper or function that runs it, the
library `backend=` string, and a few facts) or to an `Unsupported` reason. The rules restate
the constraints of flashinfer-python 0.7.4 (decode.py, prefill.py, cascade.py, xqa.py,
utils.py `determine_attention_backend` / `is_fa3_backend_supported`), so `check()` answers
without a GPU and the answers are tested on CPU.

Routes:

    decode   BatchDecodeWithPagedKVCacheWrapper (CUDA-core, tensor-core, cudnn, trtllm-gen, auto);
             q_len_per_req > 1 is its multi-token (speculative / MTP) path, bottom-right causal
    xqa      flashinfer.decode.xqa_batch_decode_with_kv_cache (TensorRT-LLM XQA, SM90/100/120)
    paged    BatchPrefillWithPagedKVCacheWrapper (fa2 / fa3 / auto; custom mask for trees)
    ragged   BatchPrefillWithRaggedKVCacheWrapper over K/V gathered contiguously in plan
    cascade  MultiLevelCascadeAttentionWrapper: level 0 = the shared prefix pages once,
             level 1 = each request's own pages, merged by their log-sum-exp
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from attnbench.backends.base import Unsupported
from attnbench.backends.features import missing_feature
from attnbench.workload.spec import TreeSpec, WorkloadSpec

if TYPE_CHECKING:  # annotations only: measure.hardware imports torch, these rules need none
    from attnbench.measure.hardware import DeviceInfo

Api = Literal["decode", "xqa", "paged", "ragged", "cascade"]

INSTALL_HINT = "pip install flashinfer-python"

FIXED_SPLIT_SIZES: tuple[object, ...] = (None, 64, 256, 1024)
"""`fixed_split_size` values (in pages; None: FlashInfer's own split heuristic)."""

Knobs = Mapping[str, tuple[object, ...]]
_GRAPH: dict[str, tuple[object, ...]] = {"use_cuda_graph": (True, False)}
_SPLIT: dict[str, tuple[object, ...]] = {
    "disable_split_kv": (False, True),
    "fixed_split_size": FIXED_SPLIT_SIZES,
}
_PDL: dict[str, tuple[object, ...]] = {"enable_pdl": (True, False)}  # xqa.py: on if SM90+

VARIANTS: dict[str, tuple[str, Knobs]] = {
    "fa2": (
        "decode: CUDA-core decode kernel; prefill/append/tree: fa2 paged prefill",
        _GRAPH | _SPLIT,
    ),
    "tc": (
        "decode wrapper on tensor cores (fa2 prefill kernel); q_len_per_req for MTP",
        _GRAPH | _SPLIT,
    ),
    "fa3": ("fa3 (SM90) paged prefill kernel for every kind; fp8 KV with an fp8 query", {}),
    "cudnn": ("decode wrapper, backend='cudnn' (cuDNN paged SDPA decode graph)", _GRAPH),
    "auto": ("library defaults: decode wrapper auto / paged prefill auto", _GRAPH),
    "xqa": ("TensorRT-LLM XQA decode (xqa_batch_decode_with_kv_cache)", _PDL),
    "trtllm-gen": ("decode wrapper, backend='trtllm-gen' (Blackwell only)", _GRAPH),
    "ragged-fa2": ("prefill over contiguous (ragged) K/V, fa2", _SPLIT),
    "ragged-fa3": ("prefill over contiguous (ragged) K/V, fa3 (SM90)", {}),
    "cascade": ("shared prefix: MultiLevelCascadeAttentionWrapper, 2 levels", {}),
}

FA3_HEAD_DIMS = (64, 128, 256)
XQA_PAGE_SIZES = (16, 32, 64, 128)
XQA_MAX_Q_LEN_PER_REQ = 1024
"""XQA's multi-token (speculative-decoding) path, query rows per request at most: with 0.7.4 on
SM90 longer appends crash with an illegal memory access, poisoning the CUDA context, while 1024
rows pass the gate (the replay calibration rows show both). xqa.py states no bound."""
CUDA_CORE_DECODE_GROUP_SIZES = (1, 2, 3, 4, 6, 8, 16)
"""GQA group sizes (num_qo_heads / num_kv_heads) the CUDA-core batch decode kernel is compiled
for: 0.7.4 include/flashinfer/utils.cuh `DISPATCH_GQA_GROUP_SIZE`, which csrc/batch_decode.cu
dispatches on in plan and run; any other size raises "Unsupported group_size: N" in plan. The
decode wrapper takes that kernel whenever use_tensor_cores=False (flashinfer:fa2, and
flashinfer:auto's single-token decode: its cuDNN pick needs SM100 and group 4/8/16 at d256).
Every other path takes any group size: the tensor-core decode and fa2/fa3 prefill kernels divide
by it at run time (`uint_fastdiv group_size`), XQA compiles a module per `HEAD_GRP_SIZE` (one JIT
build per group size; head_dim > 256 would need group <= 16), cuDNN and trtllm-gen take the head
counts at run time."""


@dataclass(frozen=True)
class Route:
    """How one variant runs one case."""

    api: Api
    backend: str = ""
    """The library's `backend=` argument (`fa2`, `fa3`, `auto`, `cudnn`, `trtllm-gen`)."""
    use_tensor_cores: bool = False
    q_len_per_req: int = 1
    """Query rows per request on the decode/xqa multi-token path."""
    custom_mask: bool = False
    """Tree verification through `plan(custom_mask=...)` (FlashInfer packs it)."""
    fp8_query: bool = False
    """FA3 FP8: the kernel needs q in the KV cache's fp8 dtype, quantised in plan."""
    knobs_used: tuple[str, ...] = ()
    """The variant's knobs this route applies; the others are recorded as ignored."""


def is_chain(tree: TreeSpec | None) -> bool:
    """True for a linear draft chain (node i's parent is i - 1): its mask is plain causal."""
    return tree is not None and all(p == i - 1 for i, p in enumerate(tree.parents))


def _single_token(spec: WorkloadSpec) -> bool:
    """Decode-shaped: one query per request over the paged cache (decode, shared-prefix decode)."""
    return spec.kind in ("decode", "shared_prefix") and all(q == 1 for q in spec.qo_lens)


def _decode_rows(spec: WorkloadSpec, who: str) -> int | str:
    """q_len_per_req for the decode-wrapper / XQA family, or why it cannot serve the case."""
    if spec.kind == "prefill":
        return f"{who} is a decode path; prefill runs on flashinfer:fa2/fa3/ragged-fa2/ragged-fa3"
    if spec.kind == "tree" and not is_chain(spec.tree):
        return (
            f"{who} takes no custom mask: only chain trees (causal) run here; "
            "tree masks run on flashinfer:fa2 or flashinfer:auto"
        )
    lens = set(spec.qo_lens)
    if len(lens) != 1:
        return f"{who}'s multi-token path (q_len_per_req) needs the same qo_len in every request"
    rows = lens.pop()
    if rows > 1 and spec.kind != "tree" and not spec.causal:
        return f"{who}'s multi-token path is bottom-right causal only (spec.causal=False)"
    return rows


def cascade_shared_pages(spec: WorkloadSpec) -> int | str:
    """Pages of the shared prefix that level 0 of the cascade serves, or why there are none.

    The inputs share `shared_prefix_len // page_size` whole pages. Level 1 needs at least one
    page per request and every query must see all of level 0 (causal), so a request whose KV
    ends on the last shared page moves that page to level 1.
    """
    if spec.kind != "shared_prefix":
        return "flashinfer:cascade serves kind=shared_prefix only"
    shared = spec.shared_prefix_len // spec.page_size
    pages = [-(-n // spec.page_size) for n in spec.kv_lens]
    if any(p <= shared for p in pages):
        shared -= 1
    if shared <= 0:
        return (
            f"shared_prefix_len={spec.shared_prefix_len} leaves no whole shared page before "
            f"each request's own tokens (page_size={spec.page_size}): nothing for level 0"
        )
    if spec.causal:
        for kv, qo in zip(spec.kv_lens, spec.qo_lens, strict=True):
            if shared * spec.page_size > kv - qo + 1:
                return "a query would not see the whole shared level (causal); use fa2/fa3"
    return shared


def _common(spec: WorkloadSpec, device: DeviceInfo) -> str | None:
    if device.kind != "cuda":
        return f"FlashInfer needs a CUDA GPU (device is {device.kind})"
    if device.sm < 80:
        return f"FlashInfer attention here needs SM80+ (this GPU is SM{device.sm})"
    if not spec.is_fp8 and spec.kv_dtype != spec.dtype:
        return (
            f"a 16-bit KV cache must be in the query dtype (kv_dtype={spec.kv_dtype}, "
            f"dtype={spec.dtype})"
        )
    if spec.head_dim % 16 or not 16 <= spec.head_dim <= 256:
        return f"head_dim={spec.head_dim}: FlashInfer kernels take a multiple of 16 in [16, 256]"
    return None


def cuda_core_group_size(spec: WorkloadSpec, who: str) -> str | None:
    """Why FlashInfer's CUDA-core decode cannot take this GQA group size (None if it can)."""
    group = spec.group_size
    if group in CUDA_CORE_DECODE_GROUP_SIZES:
        return None
    sizes = ", ".join(str(g) for g in CUDA_CORE_DECODE_GROUP_SIZES)
    return (
        f"{who}: group size {group} ({spec.num_qo_heads}/{spec.num_kv_heads} heads): FlashInfer's "
        f"CUDA-core decode supports {sizes}; use flashinfer:tc (tensor cores take any group size)"
    )


def fa3_refusal(spec: WorkloadSpec, device: DeviceInfo, who: str) -> str | None:
    if device.sm // 10 != 9:
        return f"{who}: FlashInfer's FA3 kernels are SM90 (Hopper) only (this GPU is SM{device.sm})"
    if spec.head_dim not in FA3_HEAD_DIMS:
        return f"{who}: FA3 prefill takes head_dim in {FA3_HEAD_DIMS}, not {spec.head_dim}"
    if spec.kind == "tree":
        return (
            f"{who}: FlashInfer's SM90 (FA3) kernels take no custom mask (is_fa3_backend_"
            "supported); tree masks run on fa2 (flashinfer:auto resolves to fa2)"
        )
    return None


SINK_VARIANTS = ("xqa", "trtllm-gen")
"""Variants whose kernels take `sinks` in 0.7.4 (XQA: float32 per head, SM90 included). The
fa2/fa3 modules' `paged_run` drop the argument (prefill.py), so the others would ignore it."""
_FEATURE_REASONS = {
    "mla": "{who} computes GQA attention; MLA cases run on flashinfer:mla-fa2/-fa3",
    "sinks": "{who}: FlashInfer 0.7.4's fa2/fa3 kernels drop `sinks` (its run() passes them to "
    "trtllm-gen, cuDNN and XQA only); flashinfer:xqa serves sinks on SM90",
    "window": "{who}: MultiLevelCascadeAttentionWrapper takes no window_left per level",
    "softcap": "{who} takes no logit soft-cap in 0.7.4 (XQA's call has no such argument, "
    "trtllm-gen's plan asserts it is 0, cuDNN's decode graph takes none); soft-capped cases run "
    "on flashinfer:fa2/tc/fa3/auto",
}


SOFT_CAP_VARIANTS = ("fa2", "tc", "fa3", "auto", "ragged-fa2", "ragged-fa3")
"""Variants whose wrappers take `plan(logits_soft_cap=)` in 0.7.4 (the fa2 and fa3 prefill and
the decode modules are built with `use_logits_soft_cap`); XQA's call has no such argument,
trtllm-gen's plan asserts it is 0 and cuDNN's decode graph takes none."""


def _features(short: str, spec: WorkloadSpec) -> Unsupported | None:
    """Refusals for MLA, sliding windows, sinks and soft-caps (`plan(window_left=)` serves
    windows, `plan(logits_soft_cap=)` soft-caps)."""
    supported = ["window"] * (short != "cascade") + ["sinks"] * (short in SINK_VARIANTS)
    supported += ["softcap"] * (short in SOFT_CAP_VARIANTS)
    reasons = dict(_FEATURE_REASONS)
    if short == "cudnn":
        reasons["sinks"] = "{who}: cuDNN takes sinks only with cudnn-frontend 1.30+ (SM100 FROST)"
    return missing_feature(f"flashinfer:{short}", spec, supported, reasons)


def route(short: str, spec: WorkloadSpec, device: DeviceInfo) -> Route | Unsupported:
    """The route of variant `flashinfer:<short>` for `spec` on `device`, or why it has none."""
    if short not in VARIANTS:
        raise ValueError(f"unknown FlashInfer variant {short!r}; allowed: {', '.join(VARIANTS)}")
    refused = _features(short, spec)
    if refused is not None:
        return refused
    why = _common(spec, device)
    found = why if why is not None else _ROUTERS[short](spec, device)
    return Unsupported(found) if isinstance(found, str) else found


def _fa2(spec: WorkloadSpec, device: DeviceInfo) -> Route | str:
    if _single_token(spec):
        return cuda_core_group_size(spec, "flashinfer:fa2") or Route(
            "decode", "fa2", knobs_used=("use_cuda_graph",)
        )
    return Route(
        "paged",
        "fa2",
        custom_mask=spec.kind == "tree",
        knobs_used=("disable_split_kv", "fixed_split_size"),
    )


def _tc(spec: WorkloadSpec, device: DeviceInfo) -> Route | str:
    rows = _decode_rows(spec, "flashinfer:tc")
    if isinstance(rows, str):
        return rows
    return Route(
        "decode",
        "fa2",
        use_tensor_cores=True,
        q_len_per_req=rows,
        knobs_used=("use_cuda_graph", "disable_split_kv", "fixed_split_size"),
    )


def _fa3_paged(spec: WorkloadSpec, device: DeviceInfo) -> Route | str:
    why = fa3_refusal(spec, device, "flashinfer:fa3")
    if why:
        return why
    return Route("paged", "fa3", fp8_query=spec.is_fp8)


def _cudnn(spec: WorkloadSpec, device: DeviceInfo) -> Route | str:
    if spec.is_fp8:
        return (
            "cuDNN decode in FlashInfer takes fp16/bf16 q, KV and output of one dtype (no fp8 KV)"
        )
    rows = _decode_rows(spec, "flashinfer:cudnn")
    if isinstance(rows, str):
        return rows
    return Route("decode", "cudnn", q_len_per_req=rows, knobs_used=("use_cuda_graph",))


def _auto(spec: WorkloadSpec, device: DeviceInfo) -> Route | str:
    if _single_token(spec):
        return cuda_core_group_size(spec, "flashinfer:auto") or Route(
            "decode", "auto", knobs_used=("use_cuda_graph",)
        )
    return Route("paged", "auto", custom_mask=spec.kind == "tree")


def _xqa(spec: WorkloadSpec, device: DeviceInfo) -> Route | str:
    if device.sm // 10 not in (9, 10, 12):
        return f"XQA runs on SM90, SM100 and SM120 only (this GPU is SM{device.sm})"
    if spec.page_size not in XQA_PAGE_SIZES:
        return f"XQA takes page_size in {XQA_PAGE_SIZES}, not {spec.page_size}"
    if spec.kv_dtype == "fp8_e5m2":
        return "XQA's fp8 KV cache is e4m3 only (no e5m2)"
    rows = _decode_rows(spec, "flashinfer:xqa")
    if isinstance(rows, str):
        return rows
    if rows > XQA_MAX_Q_LEN_PER_REQ:
        return (
            f"XQA's multi-token path takes at most {XQA_MAX_Q_LEN_PER_REQ} query rows per "
            f"request here (qo_len {rows} crashed with an illegal memory access on SM90); "
            "long appends run on flashinfer:fa2/fa3"
        )
    return Route("xqa", q_len_per_req=rows)


def _trtllm_gen(spec: WorkloadSpec, device: DeviceInfo) -> Route | str:
    if device.sm // 10 != 10:
        return (
            f"trtllm-gen kernels are built for SM100/SM103 (Blackwell) only (this GPU is "
            f"SM{device.sm}); on SM90 trtllm_batch_decode_with_kv_cache runs XQA: flashinfer:xqa"
        )
    rows = _decode_rows(spec, "flashinfer:trtllm-gen")
    if isinstance(rows, str):
        return rows
    return Route("decode", "trtllm-gen", q_len_per_req=rows, knobs_used=("use_cuda_graph",))


Router = Callable[[WorkloadSpec, "DeviceInfo"], "Route | str"]


def _ragged(backend: str) -> Router:
    def router(spec: WorkloadSpec, device: DeviceInfo) -> Route | str:
        who = f"flashinfer:ragged-{backend}"
        if spec.kind != "prefill":
            return (
                f"{who} serves kind=prefill (a prompt's own K/V); other kinds read the paged cache"
            )
        if backend == "fa3":
            why = fa3_refusal(spec, device, who)
            if why:
                return why
            return Route("ragged", "fa3", fp8_query=spec.is_fp8)
        return Route("ragged", "fa2", knobs_used=("disable_split_kv", "fixed_split_size"))

    return router


def _cascade(spec: WorkloadSpec, device: DeviceInfo) -> Route | str:
    shared = cascade_shared_pages(spec)
    if isinstance(shared, str):
        return shared
    if spec.is_fp8:
        return (
            "MultiLevelCascadeAttentionWrapper.run(q, paged_kv_cache) takes no k_scale/v_scale "
            "in 0.7.4: an fp8 KV cache would be read unscaled"
        )
    return Route("cascade", "auto")


_ROUTERS: dict[str, Router] = {
    "fa2": _fa2,
    "tc": _tc,
    "fa3": _fa3_paged,
    "cudnn": _cudnn,
    "auto": _auto,
    "xqa": _xqa,
    "trtllm-gen": _trtllm_gen,
    "ragged-fa2": _ragged("fa2"),
    "ragged-fa3": _ragged("fa3"),
    "cascade": _cascade,
}


def resolve_knobs(declared: Knobs, overrides: Mapping[str, object] | None) -> dict[str, object]:
    """Knob values for one plan: each declared knob's default (its first value) unless overridden.

    Raises ValueError for an unknown knob or a value outside the declared ones.
    """
    values = {name: legal[0] for name, legal in declared.items()}
    for name, value in (overrides or {}).items():
        if name not in declared:
            allowed = ", ".join(declared) or "none"
            raise ValueError(f"knob {name!r} is not known here; allowed: {allowed}")
        if not any(value is v or (value == v and type(value) is type(v)) for v in declared[name]):
            allowed = ", ".join(repr(v) for v in declared[name])
            raise ValueError(f"knob {name}={value!r} is not allowed; allowed: {allowed}")
        values[name] = value
    return values


def cascade_levels(
    kv_indptr: list[int], kv_indices: list[int], shared_pages: int
) -> tuple[list[int], list[int], list[int]]:
    """Split a page table whose requests start with the same `shared_pages` pages.

    Returns:
        (level0_indices, level1_indptr, level1_indices): the shared pages once, and each
        request's remaining pages. Raises ValueError if the requests do not share them.
    """
    shared = kv_indices[:shared_pages]
    indptr1, indices1 = [0], []
    for b in range(len(kv_indptr) - 1):
        pages = kv_indices[kv_indptr[b] : kv_indptr[b + 1]]
        if pages[:shared_pages] != shared:
            raise ValueError(f"request {b} does not start with the shared prefix pages")
        indices1 += pages[shared_pages:]
        indptr1.append(len(indices1))
    return shared, indptr1, indices1
