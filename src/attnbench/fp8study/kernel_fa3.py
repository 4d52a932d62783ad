"""FlashAttention-3's fp8 paged decode (`flash-attn:fa3`) in the kernel part of the fp8 study.

FA3's fp8 path takes q, K and V in fp8_e4m3: the query is quantised too (one per-tensor scale,
`flashinfer_common.quantize_query`, called by `fa_calls.setup`), so FA3's error has one more
cause than FlashInfer's, and each is measured apart:

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
its `q_effective`. FA3 has no e5m2 kernels: the e5m2 pass records `unsupported` with the reason.
Its descales are per (request, KV head), so the per-(token, head) scheme has no FA3 record.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from attnbench.fp8study.errors import error_metrics

if TYPE_CHECKING:
    from attnbench.workload.inputs import AttentionInputs

FA3_VARIANT = "flash-attn:fa3"
FA3_FORMATS = ("e4m3",)
"""The fp8 formats FA3's kernels take (its fp8 path is e4m3 only)."""


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


def fa3_decode(inputs: AttentionInputs) -> tuple[torch.Tensor, torch.Tensor | None, dict[str, Any]]:
    """Plan and run FA3 once on `inputs` (its spec says bf16 or fp8 KV): (out `[batch,
    num_qo_heads, head_dim]`, the dequantised query the kernel saw or None when it took the
    query as is, the plan's details with `resolved`). Raises UnsupportedCase when the backend
    refuses the case here."""
    from attnbench.backends.base import UnsupportedCase
    from attnbench.backends.flash_attn import FlashAttnBackend
    from attnbench.measure.hardware import detect

    backend = FlashAttnBackend(3)
    refused = backend.check(inputs.spec, detect(str(inputs.device)))
    if refused is not None:
        raise UnsupportedCase(refused.reason)
    planned = backend.plan(inputs.spec, inputs)
    out = planned.unpack(planned.run())
    if inputs.device.type == "cuda":
        torch.cuda.synchronize(inputs.device)
    return out, planned.q_effective, {"resolved": planned.resolved, **planned.details}


def fa3_errors(
    out: torch.Tensor, ref_q8: torch.Tensor, ref_fp8: torch.Tensor, ref_source: torch.Tensor
) -> dict[str, dict[str, float]]:
    """The error split of one FA3 fp8 output: `q_quant` (the reference on the dequantised query
    `ref_q8` vs on the original one `ref_fp8`, both on the dequantised K/V), `kernel` (the
    output vs `ref_q8`) and `total` (the output vs `ref_source`, the bf16 q and K/V)."""
    return {
        "q_quant": error_metrics(ref_q8, ref_fp8),
        "kernel": error_metrics(out, ref_q8),
        "total": error_metrics(out, ref_source),
    }


def fa3_record(
    base: dict[str, Any],
    inputs: AttentionInputs,
    source: AttentionInputs,
    ref_fp8: torch.Tensor,
    ref_source: torch.Tensor,
) -> dict[str, Any]:
    """FA3's record for one shape and format under per-tensor scales (`base` holds the shape,
    format, k_scale/v_scale and `quant`). A refusal or failure is a value in the record."""
    from attnbench.backends.base import UnsupportedCase
    from attnbench.backends.flash_attn import FP8_E5M2_REASON
    from attnbench.backends.reference import reference_attention

    rec: dict[str, Any] = {**base, "variant": FA3_VARIANT, "status": "ok", "reason": ""}
    if base["format"] not in FA3_FORMATS:
        rec.update(status="unsupported", reason=FP8_E5M2_REASON)
        return rec
    try:
        out, q_effective, details = fa3_decode(inputs)
        rec["resolved"] = str(details.pop("resolved"))
        rec["q_scale"] = details.get("q_scale")
        rec["details"] = details
        nonfinite = int((~torch.isfinite(out)).sum())
        if nonfinite:
            rec.update(status="mismatch", reason=f"output has {nonfinite} NaN/Inf values")
            return rec
        ref_q8 = ref_fp8 if q_effective is None else reference_attention(inputs, q=q_effective)
        rec.update(fa3_errors(out, ref_q8, ref_fp8, ref_source))
    except UnsupportedCase as exc:
        rec.update(status="unsupported", reason=str(exc).splitlines()[0][:300])
        return rec
    except Exception as exc:  # a failure is a value: recorded, never a crash of the study
        rec.update(status="error", reason=f"{type(exc).__name__}: {exc}".splitlines()[0][:300])
        return rec
    try:
        out16, _, details16 = fa3_decode(source)
        rec["bf16_resolved"] = str(details16["resolved"])
        rec["bf16_kernel"] = error_metrics(out16, ref_source)
    except Exception as exc:
        rec["bf16_reason"] = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
    return rec
