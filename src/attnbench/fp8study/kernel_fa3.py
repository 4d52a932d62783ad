"""FlashAttention-3's fp8 paged decode (`flash-attn:fa3`) in the kernel part of the fp8 study.

FA3's fp8 path takes q, K and V in fp8_e4m3: the query is quantised too (one per-tensor scale,
`flashinfer_common.quantize_query`, called by `fa_calls.setup`), so FA3's error has one more
cause than FlashInfer's, and each is measured apart (`run.kernel_error.error_split`):

    quant        fp64 reference on the dequantised fp8 K/V vs on the bf16 source (shared with
                 FlashInfer's records; the query is the bf16 one in both)
    q_quant      fp64 reference on the dequantised fp8 q and K/V vs on the bf16 q and
                 dequantised K/V: the query's own quantisation error
    kernel       FA3 fp8 decode vs fp64 reference on the dequantised fp8 q and K/V
    total        FA3 fp8 decode vs fp64 reference on the bf16 source
    bf16_kernel  FA3 on the bf16 source vs its fp64 reference (16-bit baseline)

The run is the sweep's own: `FlashAttnBackend(3).plan(spec, inputs)` with its default knobs
(paged KV through `page_table`, `q_descale`/`k_descale`/`v_descale` of shape (batch,
num_kv_heads) holding the per-tensor scales), and the dequantised query the reference uses is
its `q_effective`. FA3 has no e5m2 kernels: its `check` refuses the e5m2 pass, which records
`unsupported` with the reason. Its descales are per (request, KV head), so the per-(token, head)
scheme has no FA3 record.
"""

from __future__ import annotations

from typing import Any

import torch

FA3_VARIANT = "flash-attn:fa3"


def fa3_unavailable(device: str | torch.device) -> str | None:
    """None when FA3's fp8 paged decode can run on the CUDA device `device` (`kernel_study`
    checks CUDA first, for every kernel), else why not: no importable build, a build without
    paged KV or fp8, a GPU other than sm90."""
    from attnbench.backends.fa_lib import load_fa3
    from attnbench.backends.flash_attn import FlashAttnBackend
    from attnbench.measure.hardware import detect

    if torch.device(device).type != "cuda":
        return f"device {device} is not CUDA"
    reason = FlashAttnBackend(3).available()
    if reason is not None:
        return reason
    lib = load_fa3()
    if not isinstance(lib, str) and not lib.fp8:
        return f"{lib.label} was built without fp8 kernels (FLASHATTENTION_DISABLE_FP8)"
    sm = detect(str(torch.device(device))).sm
    if sm != 90:
        return f"FlashAttention-3 (Hopper kernels) needs sm90; this GPU is sm{sm}"
    return None


def fa3_fields(plan_details: dict[str, Any]) -> dict[str, Any]:
    """What FA3's record keeps of its plan: the query's scale and the plan's details."""
    return {"q_scale": plan_details.get("q_scale"), "details": plan_details}
