"""`flash-attn:mla`: FlashAttention-3 on MLA's absorbed form, where the build has the kernel.

FA3 has no head_dim 576 kernel (its largest is 256). It runs absorbed MLA instead as head_dim 64
with a separate value width 512 plus the `qv` input (hopper/flash_api.cpp: `head_size <= 64 &&
head_size_v <= 512`, "q_v is only supported for hdim_v >= 256"): scores are q.k + qv.v, so

    q = q_pe [total_q, Hq, 64]       k = kpe pages [P, page_size, 1, 64]
    qv = q_nope [total_q, Hq, 512]   v = ckv pages [P, page_size, 1, 512]

over the case's page table, with the model's sm_scale, every query head on the one latent head.
That is the 64 x 512 kernel that `FLASH_ATTENTION_DISABLE_HDIMDIFF64` compiles out: the official
tokenspeed-fa3 wheel sets it, so there this variant is `unsupported` with that reason (checked
from the build flags before anything is built).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from attnbench.backends import kvgather
from attnbench.backends.base import PlannedRun, Unsupported
from attnbench.backends.fa_lib import FlashLib, load_fa3
from attnbench.backends.features import mla_only
from attnbench.measure.hardware import DeviceInfo
from attnbench.workload.inputs import AttentionInputs
from attnbench.workload.spec import WorkloadSpec

HDIMDIFF64_FLAGS = ("FLASH_ATTENTION_DISABLE_HDIMDIFF64", "FLASHATTENTION_DISABLE_HDIMDIFF64")
"""Both spellings: FA3's setup.py writes the first into flash_attn_config (the others use
FLASHATTENTION_)."""


def no_hdimdiff64(lib: FlashLib) -> bool:
    """The build compiled out the head_dim 64 / head_dim_v 256-512 kernels MLA runs on."""
    return any(lib.build_flags.get(flag, False) for flag in HDIMDIFF64_FLAGS)


def fa3_mla_refusal(lib: FlashLib | str, spec: WorkloadSpec, device: DeviceInfo) -> str | None:
    """Why `flash-attn:mla` cannot run `spec` (None: it can)."""
    only = mla_only("flash-attn:mla", spec, "plain attention runs on flash-attn:fa3")
    if only is not None:
        return only.reason
    assert spec.mla is not None
    if isinstance(lib, str):
        return lib
    if device.kind != "cuda" or device.sm != 90:
        return "flash-attn:mla: FA3's qv path (head_dim 64, head_dim_v 512) is SM90 only"
    if no_hdimdiff64(lib):
        return (
            f"{lib.label} was built with FLASH_ATTENTION_DISABLE_HDIMDIFF64: no head_dim 64 / "
            "head_dim_v 512 kernel, the only way FA3 runs MLA's absorbed form (q_pe.kpe + "
            "q_nope.ckv through qv); head_dim 576 exceeds FA3's 256 maximum"
        )
    if lib.disabled("HDIM64") or not lib.paged:
        return f"{lib.label} lacks the head_dim 64 or paged-KV kernels"
    if (spec.mla.kv_lora_rank, spec.mla.qk_rope_head_dim) != (512, 64):
        return "flash-attn:mla: attnbench drives FA3's qv path for kv_lora_rank 512 + rope 64"
    if spec.is_fp8:
        return "flash-attn:mla: FA3's fp8 path quantises q too; no fp8 qv path is exposed"
    if spec.kv_dtype != spec.dtype:
        return f"q dtype {spec.dtype} and latent dtype {spec.kv_dtype} differ"
    return None


class Fa3MlaBackend:
    name = "flash-attn:mla"
    devices: tuple[str, ...] = ("cuda",)
    knobs: Mapping[str, tuple[object, ...]] = {}

    def available(self) -> str | None:
        lib = load_fa3()
        return lib if isinstance(lib, str) else None

    def check(self, spec: WorkloadSpec, device: DeviceInfo) -> Unsupported | None:
        why = fa3_mla_refusal(load_fa3(), spec, device)
        return Unsupported(why) if why else None

    def plan(
        self,
        spec: WorkloadSpec,
        inputs: AttentionInputs,
        knobs: Mapping[str, object] | None = None,
    ) -> PlannedRun:
        lib = load_fa3()
        if isinstance(lib, str):
            raise RuntimeError(lib)
        assert spec.mla is not None
        rank = spec.mla.kv_lora_rank
        latent = inputs.kv_cache  # [P, page_size, 576]
        k_pages = latent[..., rank:].unsqueeze(2)  # [P, page_size, 1, 64], views of the cache
        v_pages = latent[..., :rank].unsqueeze(2)  # [P, page_size, 1, 512]
        q_pe, q_nope = inputs.q[..., rank:], inputs.q[..., :rank]
        kw: dict[str, Any] = {
            "softmax_scale": spec.mla.sm_scale,
            "page_table": kvgather.page_table(inputs),
            "seqused_k": inputs.kv_lens,
            "cu_seqlens_q": inputs.qo_indptr,
            "max_seqlen_q": max(spec.qo_lens),
            "is_causal": spec.causal,
            "q_v" if lib.raw is not None else "qv": q_nope,
        }
        out = None
        if lib.raw is not None:
            out = torch.empty(
                spec.total_q, spec.num_qo_heads, rank, dtype=inputs.q.dtype, device=inputs.device
            )
            kw["out"] = out

        def run() -> torch.Tensor:
            o, _ = lib.forward(q_pe, k_pages, v_pages, **kw)
            result: torch.Tensor = o
            return result

        return PlannedRun(
            run=run,
            resolved="fa3-qv",
            details={"kv_cache": "paged", "library": lib.label, **lib.provenance()},
            out=out,
        )


def backends() -> list[Fa3MlaBackend]:
    return [Fa3MlaBackend()]
