"""FlashAttention-3 (Hopper) and FlashAttention-2 as attnbench backends.

Variants:

- `flash-attn:fa3`: FA3 through `flash_attn_interface` or, if absent, `fa3_fwd_interface`.
  prefill: `varlen` over K/V packed contiguously in plan. decode/append/shared_prefix: a KV
  cache with per-request lengths (`flash_attn_with_kvcache` semantics): paged through
  `page_table` where the build has paged KV, else a contiguous `[batch, max_kv_len, Hkv, D]`
  copy made in plan (knob `api=varlen` uses the packed layout instead). tree: one causal call
  for a chain; otherwise what SGLang's FA3 backend does: context part by FA3 with its LSE, the
  small draft-tree part by masked attention in torch, merged by LSE (`fa3+lse-merge`).
- `flash-attn:fa3-cascade` (kind=shared_prefix): the shared prefix once for all queries
  stacked as one sequence, each request's suffix separately, merged by LSE.
- `flash-attn:fa2`: FA2 `flash_attn_varlen_func` on packed K/V for every kind (tree as above).

fp8 KV: FA3 needs q, k and v in fp8_e4m3 with `(batch, num_kv_heads)` float32 descales; q is
quantised in plan with a per-tensor scale, the reference then uses that q (`q_effective`), and
the error budget is fp8's (P is fp8 on that path). The output of the fp8 path is bf16.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from attnbench.backends import kvgather
from attnbench.backends.base import PlannedRun, Unsupported
from attnbench.backends.fa_lib import FlashLib, load_fa2, load_fa3
from attnbench.backends.masks import is_chain
from attnbench.backends.merge import masked_attention_lse, merge_states
from attnbench.hardware import DeviceInfo
from attnbench.quant import per_tensor_scale, quantize
from attnbench.workload.inputs import AttentionInputs, torch_dtype, tree_ancestor_mask
from attnbench.workload.spec import WorkloadSpec

PartCall = Callable[[], tuple[torch.Tensor, torch.Tensor]]
"""Runs one kernel call; returns (out `[total_q, Hq, D]`, lse `[total_q, Hq]` natural log)."""

FA3_KNOBS: dict[str, tuple[object, ...]] = {
    "num_splits": (0, 1, 2, 4, 8, 16),
    "pack_gqa": (None, True, False),
    "api": ("kvcache", "varlen"),
    "scheduler_metadata": (True, False),
}


@dataclass
class _Setup:
    """What every kernel call of one plan shares."""

    lib: FlashLib
    spec: WorkloadSpec
    inputs: AttentionInputs
    knobs: dict[str, Any]
    q: torch.Tensor
    """Query as the kernel sees it `[total_q, Hq, D]` (fp8 on the fp8 path)."""
    q_scale: float | None = None
    details: dict[str, str | int | float | bool] = field(default_factory=dict)
    replans: list[Callable[[], None]] = field(default_factory=list)

    @property
    def sm_scale(self) -> float:
        return 1.0 / math.sqrt(self.spec.head_dim)

    @property
    def out_dtype(self) -> torch.dtype:
        return torch.bfloat16 if self.q_scale is not None else self.q.dtype

    def common(self, batch: int) -> dict[str, Any]:
        """Keyword arguments of every call: scale, descales (fp8), FA3 tuning knobs."""
        kw: dict[str, Any] = {"softmax_scale": self.sm_scale}
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


def _lse_tokens(lse: torch.Tensor, q_lens: list[int]) -> torch.Tensor:
    """FlashAttention's LSE as `[total_q, Hq]`: varlen gives `[Hq, total_q]`; old FA2 builds
    give `[batch, Hq, max_q]`."""
    if lse.dim() == 2:
        return lse.t()
    rows, cols = kvgather.padded_index(q_lens, lse.device)
    return lse[rows, :, cols]


def _varlen_part(
    s: _Setup,
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
        return o, _lse_tokens(lse, q_lens)

    return call, out


def _cache_part(
    s: _Setup, starts: list[int], ends: list[int], *, causal: bool
) -> tuple[PartCall, torch.Tensor | None]:
    """One KV-cache call (flash_attn_with_kvcache semantics): each request's queries over
    keys starts[b]..ends[b]; paged when the build allows and every range starts at 0."""
    spec, inputs, lib = s.spec, s.inputs, s.lib
    dev = s.q.device
    lens = [e - b for b, e in zip(starts, ends, strict=True)]
    seqlens = kvgather.int32(lens, dev)
    cu_q = inputs.qo_indptr
    max_q = max(spec.qo_lens)
    kw = s.common(spec.batch_size)
    paged = lib.paged and spec.kv_layout == "NHD" and not any(starts)
    if paged:
        k_cache, v_cache = inputs.kv_cache[:, 0], inputs.kv_cache[:, 1]
        table = kvgather.page_table(inputs)
        kw["page_table"] = table
        max_k = table.shape[1] * spec.page_size
        s.details["kv_cache"] = "paged"
    else:
        k_cache, v_cache = kvgather.padded_kv(inputs, starts, ends)
        max_k = k_cache.shape[1]
        s.details["kv_cache"] = "contiguous"
    kw.update(cu_seqlens_q=cu_q, max_seqlen_q=max_q, seqused_k=seqlens, is_causal=causal)
    out = s.out_buffer(spec.total_q)
    if out is not None:
        kw["out"] = out
    if s.knobs["scheduler_metadata"] and lib.has_scheduler_metadata:

        def metadata() -> torch.Tensor:
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
                page_size=spec.page_size if paged else None,
                causal=causal,
                num_splits=s.knobs["num_splits"],
                pack_gqa=s.knobs["pack_gqa"],
            )
            return meta

        meta = metadata()
        kw["scheduler_metadata"] = meta

        def replan() -> None:
            meta.copy_(metadata())

        s.replans.append(replan)
        s.details["scheduler_metadata"] = True
    q_lens = list(spec.qo_lens)
    q = s.q

    def call() -> tuple[torch.Tensor, torch.Tensor]:
        o, lse = lib.forward(q, k_cache, v_cache, **kw)
        return o, _lse_tokens(lse, q_lens)

    return call, out


def _part(
    s: _Setup, starts: list[int], ends: list[int], *, causal: bool
) -> tuple[PartCall, torch.Tensor | None]:
    """Per-request ranges through the KV-cache API or varlen (knob `api`; FA2: varlen)."""
    if s.lib.generation == 3 and s.knobs["api"] == "kvcache":
        return _cache_part(s, starts, ends, causal=causal)
    return _varlen_part(s, starts, ends, causal=causal)


def _tree_draft_part(s: _Setup) -> Callable[[], tuple[torch.Tensor, torch.Tensor]]:
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


def _merged(
    s: _Setup, first: PartCall, second: PartCall
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


def _single(call: PartCall) -> Callable[[], torch.Tensor]:
    def run() -> torch.Tensor:
        return call()[0]

    return run


def cascade_prefix_len(spec: WorkloadSpec) -> int:
    """Tokens physically shared by every request: the whole pages of the shared prefix."""
    return (spec.shared_prefix_len // spec.page_size) * spec.page_size


class FlashAttnBackend:
    """One FlashAttention variant (see the module docstring)."""

    devices = ("cuda",)

    def __init__(self, generation: int, cascade: bool = False) -> None:
        self.generation = generation
        self.cascade = cascade
        base = "fa3" if generation == 3 else "fa2"
        self.name = f"flash-attn:{base}" + ("-cascade" if cascade else "")
        self.knobs: Mapping[str, tuple[object, ...]] = FA3_KNOBS if generation == 3 else {}

    def _lib(self) -> FlashLib | str:
        return load_fa3() if self.generation == 3 else load_fa2()

    def available(self) -> str | None:
        lib = self._lib()
        return lib if isinstance(lib, str) else None

    def check(self, spec: WorkloadSpec, device: DeviceInfo) -> Unsupported | None:
        if device.kind != "cuda":
            return Unsupported(f"{self.name} needs a CUDA GPU")
        lib = self._lib()
        if isinstance(lib, str):
            return Unsupported(lib)
        why = _check_build(lib, spec, device)
        if why is None and self.cascade:
            why = _check_cascade(spec)
        no_context = any(kv == q for kv, q in zip(spec.kv_lens, spec.qo_lens, strict=True))
        if why is None and spec.kind == "tree" and not is_chain(spec) and no_context:
            why = "tree verification by LSE merge needs a non-empty context for every request"
        return Unsupported(why) if why else None

    def plan(
        self,
        spec: WorkloadSpec,
        inputs: AttentionInputs,
        knobs: Mapping[str, object] | None = None,
    ) -> PlannedRun:
        lib = self._lib()
        if isinstance(lib, str):
            raise RuntimeError(lib)
        chosen = {k: v[0] for k, v in self.knobs.items()} | dict(knobs or {})
        s = _setup(lib, spec, inputs, chosen)
        kv_lens = list(spec.kv_lens)
        zeros = [0] * spec.batch_size
        resolved = f"fa{lib.generation}"
        out: torch.Tensor | None
        if self.cascade:
            run, out = self._plan_cascade(s)
            resolved += "+cascade"
        elif spec.kind == "prefill":
            call, out = _varlen_part(s, zeros, kv_lens, causal=spec.causal)
            run = _single(call)
        elif spec.kind == "tree" and not is_chain(spec):
            n = spec.tree.num_nodes if spec.tree else 0
            ctx_call, _ = _part(s, zeros, [kv - n for kv in kv_lens], causal=False)
            run, out = _merged(s, ctx_call, _tree_draft_part(s))
            resolved += "+lse-merge"
        else:  # decode, append, shared_prefix without cascade, a chain tree (plain causal)
            causal = spec.causal or spec.kind == "tree"
            call, out = _part(s, zeros, kv_lens, causal=causal)
            run = _single(call)
        s.details.update(library=lib.label, **_knob_details(lib, chosen))
        replans = list(s.replans)

        def replan() -> None:
            for r in replans:
                r()

        return PlannedRun(
            run=run,
            resolved=resolved,
            details=s.details,
            out=out,
            q_effective=None if s.q_scale is None else s.q.float() * s.q_scale,
            precision="" if s.q_scale is None else "fp8_e4m3",
            replan=replan if replans else None,
        )

    def _plan_cascade(self, s: _Setup) -> tuple[Callable[[], torch.Tensor], torch.Tensor]:
        spec = s.spec
        prefix = cascade_prefix_len(spec)
        # Prefix pass: every query of every request as one sequence over the prefix, once.
        pre_call, _ = _varlen_part(
            s, [0], [prefix], causal=False, requests=[0], q_lens=[spec.total_q]
        )
        suf_call, _ = _part(s, [prefix] * spec.batch_size, list(spec.kv_lens), causal=spec.causal)
        s.details["kv_cache"] = "prefix:packed+suffix:" + str(s.details["kv_cache"])
        s.details["prefix_tokens"] = prefix
        return _merged(s, pre_call, suf_call)


def _setup(
    lib: FlashLib, spec: WorkloadSpec, inputs: AttentionInputs, knobs: dict[str, Any]
) -> _Setup:
    s = _Setup(lib, spec, inputs, knobs, q=inputs.q)
    if spec.is_fp8:
        fp8 = torch_dtype(spec.kv_dtype)
        s.q_scale = per_tensor_scale(inputs.q, fp8)
        s.q = quantize(inputs.q, s.q_scale, fp8)
        s.details["q_scale"] = s.q_scale
        s.details["out_dtype"] = "bfloat16"
    return s


def _knob_details(lib: FlashLib, knobs: dict[str, Any]) -> dict[str, str | int | float | bool]:
    if lib.generation != 3:
        return {}
    pack = knobs["pack_gqa"]
    return {
        "num_splits": int(knobs["num_splits"]),
        "pack_gqa": "auto" if pack is None else bool(pack),
        "api": str(knobs["api"]),
        "out_buffer": "fixed" if lib.raw is not None else "allocated",
    }


def _check_build(lib: FlashLib, spec: WorkloadSpec, device: DeviceInfo) -> str | None:
    """Why this build cannot run `spec` on `device`, or None."""
    if lib.generation == 3 and device.sm != 90:
        return f"FlashAttention-3 (Hopper kernels) needs sm90; this GPU is sm{device.sm}"
    if lib.generation == 2 and device.sm < 80:
        return f"FlashAttention-2 needs sm80+; this GPU is sm{device.sm}"
    if spec.kv_dtype == "fp8_e5m2":
        return "FlashAttention has no fp8_e5m2 kernels (its fp8 path is e4m3 only)"
    if spec.is_fp8 and not lib.fp8:
        hint = " (FA2 is fp16/bf16 only)" if lib.generation == 2 else ""
        return f"{lib.label} has no fp8 kernels{hint}"
    if not spec.is_fp8 and spec.kv_dtype != spec.dtype:
        return f"q dtype {spec.dtype} and KV dtype {spec.kv_dtype} differ (one dtype needed)"
    if not spec.is_fp8 and spec.dtype == "float16" and not lib.fp16:
        return (
            f"{lib.label} was built without fp16 (FLASHATTENTION_DISABLE_FP16): "
            "bf16 and fp8_e4m3 only"
        )
    align = 16 if spec.is_fp8 else 8
    if spec.head_dim > 256 or spec.head_dim % align:
        return f"head_dim={spec.head_dim} unsupported: needs <= 256 and a multiple of {align}"
    return None


def _check_cascade(spec: WorkloadSpec) -> str | None:
    if spec.kind != "shared_prefix":
        return "the cascade variant serves kind=shared_prefix only"
    prefix = cascade_prefix_len(spec)
    if prefix == 0:
        return (
            f"shared_prefix_len={spec.shared_prefix_len} is shorter than a page "
            f"({spec.page_size}): no physically shared pages"
        )
    if any(kv - q < prefix for kv, q in zip(spec.kv_lens, spec.qo_lens, strict=True)):
        return "cascade needs every query after the shared prefix"
    return None


def backends() -> list[FlashAttnBackend]:
    return [FlashAttnBackend(3), FlashAttnBackend(3, cascade=True), FlashAttnBackend(2)]
