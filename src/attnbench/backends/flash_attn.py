"""FlashAttention-3 (Hopper) and FlashAttention-2 as attnbench backends.

Variants (FA3 through `flash_attn_interface` or, if absent, `fa3_fwd_interface`):

- `flash-attn:fa3`: FA3 as serving engines run it (vLLM's and SGLang's FA3 backends): every
  kind reads the case's paged KV cache, at its page size, through `page_table` with per-request
  lengths (`seqused_k`, the API's `cache_seqlens`). The page table is built from the case's
  `kv_indptr`/`kv_indices` and the lengths are `inputs.kv_lens`: the pages and lengths the
  reference reads. FA3's scheduler metadata (`get_scheduler_metadata`) is computed in plan, as
  engines compute it once per step for all layers; recomputing it is the `replan` that the
  sweep times as `plan_us` (details `scheduler_metadata`: `per-step, in plan`; with the knob
  off, or a build without it, FA3 computes it inside each run: `in each run`).
  A build without paged KV (fa3-fwd 0.0.3) or an HND cache makes this variant `unsupported`,
  with the reason; it never falls back to a copy, so `flash-attn:fa3` always means the paged
  cache and rows of different layouts never share a name.
- `flash-attn:fa3-contiguous`: the same kernels on copies made in plan (not timed):
  decode/append/shared_prefix/tree context through a contiguous `[batch, max_kv_len, Hkv, D]`
  cache with per-request lengths (knob `api=varlen`: K/V packed instead), prefill through
  `varlen` on packed K/V. Beside `flash-attn:fa3`, the cost of paging is a measured figure.
- tree (both): one causal call for a chain; otherwise what SGLang's FA3 backend does: context
  part by FA3 with its LSE, the small draft-tree part by masked attention in torch, merged by
  LSE (`fa3+lse-merge`).
- `flash-attn:fa3-cascade` (kind=shared_prefix): the shared prefix once for all queries
  stacked as one sequence (packed), each request's suffix separately (contiguous copy, as
  `fa3-contiguous`), merged by LSE.
- `flash-attn:fa2`: FA2 `flash_attn_varlen_func` on packed K/V for every kind (tree as above).

Every row's details name the layout (`kv_cache`: paged, contiguous or packed), the knobs, and
the build that ran (`library`, `fa_module`, `fa_distribution`, `fa_version`, `fa_build_flags`:
see `fa_lib.FlashLib.provenance`); `knobs_ignored` lists knobs that cannot matter for the case.

fp8 KV: FA3 needs q, k and v in fp8_e4m3 with `(batch, num_kv_heads)` float32 descales; q is
quantised in plan with a per-tensor scale, the reference then uses that q (`q_effective`), and
the error budget is fp8's (P is fp8 on that path). The output of the fp8 path is bf16.

Sliding windows: `window_size=(window_left, 0)` (FA3 and FA2; bottom-right aligned like the
reference). Attention sinks: `sinks=` (bf16 per query head) where the build takes it
(tokenspeed-fa3; `FlashLib.sinks`). Logit soft-capping: `softcap=` where the build has it
(`FlashLib.softcap`; tokenspeed-fa3 3.0.0.post20260810 compiles it out, so it refuses). MLA
is refused here (`flash-attn:mla`, `fa3_mla`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch

from attnbench.backends.base import PlannedRun, Unsupported, UnsupportedCase
from attnbench.backends.fa_calls import (
    Layout,
    Setup,
    merged,
    part,
    setup,
    single,
    tree_draft_part,
    varlen_part,
)
from attnbench.backends.fa_lib import FlashLib, build_summary, load_fa2, load_fa3
from attnbench.backends.features import missing_feature
from attnbench.backends.masks import is_chain
from attnbench.measure.hardware import DeviceInfo
from attnbench.workload.inputs import AttentionInputs
from attnbench.workload.spec import WorkloadSpec

FA3_PAGED_KNOBS: dict[str, tuple[object, ...]] = {
    "num_splits": (0, 1, 2, 4, 8, 16),
    "pack_gqa": (None, True, False),
    "scheduler_metadata": (True, False),
}
"""`flash-attn:fa3`: split-KV count (0: FA3's heuristic), pack-GQA (None: FA3 decides) and
scheduler metadata computed in plan (True) or inside each run (False); defaults first."""
FA3_KNOBS: dict[str, tuple[object, ...]] = {
    "num_splits": (0, 1, 2, 4, 8, 16),
    "pack_gqa": (None, True, False),
    "api": ("kvcache", "varlen"),
    "scheduler_metadata": (True, False),
}
"""`flash-attn:fa3-contiguous` and `-cascade`: also the copy's layout (`api`: a contiguous
KV cache with lengths, or varlen over packed K/V)."""
FP8_E5M2_REASON = "FlashAttention has no fp8_e5m2 kernels (its fp8 path is e4m3 only)"


def cascade_prefix_len(spec: WorkloadSpec) -> int:
    """Tokens physically shared by every request: the whole pages of the shared prefix."""
    return (spec.shared_prefix_len // spec.page_size) * spec.page_size


class FlashAttnBackend:
    """One FlashAttention variant (see the module docstring)."""

    devices = ("cuda",)

    def __init__(
        self, generation: int, cascade: bool = False, layout: Layout | None = None
    ) -> None:
        self.generation = generation
        self.cascade = cascade
        self.layout: Layout = layout or _default_layout(generation, cascade)
        if cascade and self.layout == "paged":
            raise ValueError("the cascade's suffix pass reads a contiguous copy, not the pages")
        self.name = "flash-attn:" + _variant_name(generation, cascade, self.layout)
        self.knobs: Mapping[str, tuple[object, ...]] = {}
        if generation == 3:
            self.knobs = FA3_PAGED_KNOBS if self.layout == "paged" else FA3_KNOBS

    def _lib(self) -> FlashLib | str:
        return load_fa3() if self.generation == 3 else load_fa2()

    def available(self) -> str | None:
        lib = self._lib()
        if isinstance(lib, str):
            return lib
        if self.layout == "paged" and not lib.paged:
            return _no_paged_kv(lib)
        return None

    def describe(self) -> str:
        """The build found and what it lacks (`attnbench backends` prints it); "" if none."""
        lib = self._lib()
        return "" if isinstance(lib, str) else build_summary(lib)

    def check(self, spec: WorkloadSpec, device: DeviceInfo) -> Unsupported | None:
        if device.kind != "cuda":
            return Unsupported(f"{self.name} needs a CUDA GPU")
        lib = self._lib()
        if isinstance(lib, str):
            return Unsupported(lib)
        features = ["window"] * lib.window + ["sinks"] * lib.sinks + ["softcap"] * lib.softcap
        reasons = {
            "mla": "{who} computes GQA attention; FA3 on MLA is flash-attn:mla",
            "window": f"{lib.label} was built without local (sliding-window) kernels",
            "sinks": f"{lib.label} takes no `sinks` (tokenspeed-fa3's FA3 build does)",
            "softcap": f"{lib.label} was built without logit soft-capping "
            "(FLASHATTENTION_DISABLE_SOFTCAP, or no `softcap` argument); soft-capped cases run on "
            "flashinfer:fa2/tc/fa3/auto and flex",
        }
        if refused := missing_feature(self.name, spec, features, reasons):
            return refused
        why = _check_build(lib, spec, device) or self._layout_reason(lib, spec)
        if why is None and self.cascade:
            why = _check_cascade(spec)
        no_context = any(kv == q for kv, q in zip(spec.kv_lens, spec.qo_lens, strict=True))
        if why is None and spec.kind == "tree" and not is_chain(spec) and no_context:
            why = "tree verification by LSE merge needs a non-empty context for every request"
        return Unsupported(why) if why else None

    def _layout_reason(self, lib: FlashLib, spec: WorkloadSpec) -> str | None:
        """Why this variant cannot read the case's cache as it claims to, or None."""
        if self.layout != "paged":
            return None
        if not lib.paged:
            return _no_paged_kv(lib)
        if spec.kv_layout != "NHD":
            return (
                "FA3 reads NHD pages [num_pages, page_size, num_kv_heads, head_dim]; this "
                "cache is HND (flash-attn:fa3-contiguous reads a copy)"
            )
        return None

    def plan(
        self,
        spec: WorkloadSpec,
        inputs: AttentionInputs,
        knobs: Mapping[str, object] | None = None,
    ) -> PlannedRun:
        lib = self._lib()
        if isinstance(lib, str):
            raise RuntimeError(lib)
        why = self._layout_reason(lib, spec)
        if why:
            raise UnsupportedCase(why)
        unknown = set(knobs or {}) - set(self.knobs)
        if unknown:
            raise ValueError(f"{self.name} has no knob(s) {sorted(unknown)}")
        chosen = {k: v[0] for k, v in self.knobs.items()} | dict(knobs or {})
        s = setup(lib, spec, inputs, chosen, self.layout)
        kv_lens = list(spec.kv_lens)
        zeros = [0] * spec.batch_size
        resolved = f"fa{lib.generation}"
        out: torch.Tensor | None
        if self.cascade:
            run, out = self._plan_cascade(s)
            resolved += "+cascade"
        elif spec.kind == "tree" and not is_chain(spec):
            n = spec.tree.num_nodes if spec.tree else 0
            ctx_call, _ = part(s, zeros, [kv - n for kv in kv_lens], causal=False)
            run, out = merged(s, ctx_call, tree_draft_part(s))
            resolved += "+lse-merge"
        elif spec.kind == "prefill" and s.layout != "paged":
            call, out = varlen_part(s, zeros, kv_lens, causal=spec.causal)
            run = single(call)
        else:  # decode, append, paged prefill, shared_prefix without cascade, a chain tree
            causal = spec.causal or spec.kind == "tree"
            call, out = part(s, zeros, kv_lens, causal=causal)
            run = single(call)
        s.details.update(library=lib.label, **lib.provenance(), **_knob_details(lib, chosen))
        ignored = _ignored_knobs(lib, spec, s.layout)
        if ignored:
            s.details["knobs_ignored"] = ",".join(ignored)
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

    def _plan_cascade(self, s: Setup) -> tuple[Callable[[], torch.Tensor], torch.Tensor]:
        spec = s.spec
        prefix = cascade_prefix_len(spec)
        # Prefix pass: every query of every request as one sequence over the prefix, once.
        pre_call, _ = varlen_part(
            s, [0], [prefix], causal=False, requests=[0], q_lens=[spec.total_q]
        )
        suf_call, _ = part(s, [prefix] * spec.batch_size, list(spec.kv_lens), causal=spec.causal)
        s.details["kv_cache"] = "prefix:packed+suffix:" + str(s.details["kv_cache"])
        s.details["prefix_tokens"] = prefix
        return merged(s, pre_call, suf_call)


def _default_layout(generation: int, cascade: bool) -> Layout:
    if generation != 3:
        return "packed"
    return "contiguous" if cascade else "paged"


def _variant_name(generation: int, cascade: bool, layout: Layout) -> str:
    base = "fa3" if generation == 3 else "fa2"
    if cascade:
        return base + "-cascade"
    return base + ("-contiguous" if generation == 3 and layout == "contiguous" else "")


def _no_paged_kv(lib: FlashLib) -> str:
    return (
        f"{lib.label} was built without paged KV (FLASHATTENTION_DISABLE_PAGEDKV): "
        "flash-attn:fa3-contiguous runs it on a contiguous copy; tokenspeed-fa3 has paged KV"
    )


def _knob_details(lib: FlashLib, knobs: dict[str, Any]) -> dict[str, str | int | float | bool]:
    if lib.generation != 3:
        return {}
    pack = knobs["pack_gqa"]
    details: dict[str, str | int | float | bool] = {
        "num_splits": int(knobs["num_splits"]),
        "pack_gqa": "auto" if pack is None else bool(pack),
        "out_buffer": "fixed" if lib.raw is not None else "allocated",
    }
    if "api" in knobs:
        details["api"] = str(knobs["api"])
    return details


def _ignored_knobs(lib: FlashLib, spec: WorkloadSpec, layout: Layout) -> list[str]:
    """Knobs that cannot change this case, whatever the others are (tune measures once)."""
    if lib.generation != 3:
        return []
    packed_only = layout == "contiguous" and spec.kind == "prefill"  # always varlen
    ignored = ["api"] if packed_only else []
    if packed_only or not lib.has_scheduler_metadata:
        ignored.append("scheduler_metadata")
    return ignored


def _check_build(lib: FlashLib, spec: WorkloadSpec, device: DeviceInfo) -> str | None:
    """Why this build cannot run `spec` on `device`, or None."""
    if lib.generation == 3 and device.sm != 90:
        return f"FlashAttention-3 (Hopper kernels) needs sm90; this GPU is sm{device.sm}"
    if lib.generation == 2 and device.sm < 80:
        return f"FlashAttention-2 needs sm80+; this GPU is sm{device.sm}"
    if spec.kv_dtype == "fp8_e5m2":
        return FP8_E5M2_REASON
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
    if lib.generation == 3 and lib.head_dim_bucket(spec.head_dim) is None:
        return f"{lib.label} was built without a head_dim kernel that holds {spec.head_dim}"
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
    return [
        FlashAttnBackend(3),
        FlashAttnBackend(3, layout="contiguous"),
        FlashAttnBackend(3, cascade=True),
        FlashAttnBackend(2),
    ]
