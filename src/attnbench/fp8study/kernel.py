"""Kernel error of FlashInfer's and FA3's fp8 paged decode, kept apart from quantisation error.

For each shape and fp8 format, `make_inputs` builds a bf16 paged KV cache (the *source*) and an
fp8 copy with per-tensor scales (real = stored * k_scale, what `run(k_scale=, v_scale=)` takes).
A second fp8 copy uses per-(token, head) scales, FlashInfer 0.7.4's `use_token_head_sf` layout
(`plan(use_token_head_sf=True)`, `run(kv_cache_sf=(k_sf, v_sf))`, float32 `[num_pages,
page_size, num_kv_heads]` for NHD; real = stored * sf), the brief's "per-token dynamic scaling".

    quantisation error = fp64 reference on the dequantised fp8 cache vs on the bf16 source
    kernel error       = FlashInfer fp8 decode vs fp64 reference on the dequantised fp8 cache
    total error        = FlashInfer fp8 decode vs fp64 reference on the bf16 source
    bf16 kernel error  = FlashInfer on the bf16 source vs its fp64 reference (16-bit baseline)

FlashAttention-3's fp8 decode (`flash-attn:fa3`, per-tensor scales, e4m3 only; it quantises
the query too, measured apart) runs beside them on each shape: `kernel_fa3`.

Both libraries are imported lazily; without CUDA, FlashInfer or FA3 the study records why it
skipped (`kernel_study`'s reason) and runs whichever of the two it can.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import torch

from attnbench.fp8study.errors import error_metrics
from attnbench.workload.quant import FP8_MAX, fp8_format, quantize

if TYPE_CHECKING:
    from attnbench.fp8study.config import StudyConfig
    from attnbench.workload.inputs import AttentionInputs
    from attnbench.workload.spec import WorkloadSpec

WORKSPACE_BYTES = 128 << 20
KERNEL_VARIANTS: dict[str, bool] = {"flashinfer:fa2": False, "flashinfer:tc": True}
"""Variant (named as the sweep names it) -> `use_tensor_cores` of
BatchDecodeWithPagedKVCacheWrapper(backend="fa2"): the CUDA-core decode kernel, or the
tensor-core (fa2 prefill template) one. Both dequantise fp8 K/V to the query dtype and keep q
unquantised (FA3's fp8 path quantises q too: `kernel_fa3` measures that error apart). The
per-token scale layout runs on the tensor-core path only (FlashInfer forces it)."""
KvScales = tuple[torch.Tensor, torch.Tensor]


def cuda_unavailable(device: str | torch.device) -> str | None:
    """None when `device` is a usable CUDA device, else why not (one wording for FlashInfer and
    FA3, so a run without CUDA records the reason once)."""
    if torch.device(device).type != "cuda":
        return f"device {device} is not CUDA (the fp8 decode kernels run on NVIDIA GPUs)"
    if not torch.cuda.is_available():
        return "CUDA is not available"
    return None


def kernel_unavailable(device: str | torch.device) -> str | None:
    """None when FlashInfer's fp8 decode can run on `device`, else why not."""
    reason = cuda_unavailable(device)
    if reason is not None:
        return reason
    try:
        import flashinfer  # noqa: F401
    except Exception as exc:  # ImportError, or a broken CUDA/JIT install
        return f"flashinfer is not importable: {type(exc).__name__}: {exc}".splitlines()[0]
    return None


def flashinfer_decode(
    inputs: AttentionInputs, use_tensor_cores: bool, kv_cache_sf: KvScales | None = None
) -> tuple[torch.Tensor, str]:
    """Run BatchDecodeWithPagedKVCacheWrapper once: (out `[batch, num_qo_heads, head_dim]`,
    the resolved backend). An fp8 cache passes `k_scale`/`v_scale`, or per-(token, head)
    scales `kv_cache_sf` when given."""
    import flashinfer

    spec = inputs.spec
    workspace = torch.zeros(WORKSPACE_BYTES, dtype=torch.uint8, device=inputs.device)
    wrapper = flashinfer.BatchDecodeWithPagedKVCacheWrapper(
        workspace, spec.kv_layout, use_tensor_cores=use_tensor_cores, backend="fa2"
    )
    extra: dict[str, Any] = {"use_token_head_sf": True} if kv_cache_sf is not None else {}
    wrapper.plan(
        inputs.kv_indptr,
        inputs.kv_indices,
        inputs.kv_last_page_len,
        spec.num_qo_heads,
        spec.num_kv_heads,
        spec.head_dim,
        spec.page_size,
        q_data_type=inputs.q.dtype,
        kv_data_type=inputs.kv_cache.dtype,
        **extra,
    )
    if kv_cache_sf is not None:
        out = wrapper.run(inputs.q, inputs.kv_cache, kv_cache_sf=kv_cache_sf)
    elif inputs.kv_cache.dtype in FP8_MAX:
        out = wrapper.run(inputs.q, inputs.kv_cache, k_scale=inputs.k_scale, v_scale=inputs.v_scale)
    else:
        out = wrapper.run(inputs.q, inputs.kv_cache)
    torch.cuda.synchronize(inputs.device)
    return out, str(getattr(wrapper, "resolved_backend", ""))


def token_head_quantize(
    kv_source: torch.Tensor, fp8_dtype: torch.dtype
) -> tuple[torch.Tensor, KvScales, torch.Tensor]:
    """Per-(token, head) fp8 copy of an NHD cache `[num_pages, 2, page_size, num_kv_heads, D]`.

    Returns (fp8 cache, (k_sf, v_sf) float32 `[num_pages, page_size, num_kv_heads]`, the
    dequantised cache in float32): sf = amax over head_dim / format max (1 for an all-zero row).
    """
    amax = kv_source.abs().float().amax(dim=-1)  # [P, 2, S, H]
    sf = torch.where(amax > 0, amax / FP8_MAX[fp8_dtype], torch.ones_like(amax))
    stored = quantize(kv_source, sf[..., None], fp8_dtype)
    dequant = stored.float() * sf[..., None]
    return stored, (sf[:, 0].contiguous(), sf[:, 1].contiguous()), dequant


def _spec(cfg: StudyConfig, kv_lens: tuple[int, ...], kv_dtype: str) -> WorkloadSpec:
    from attnbench.workload.spec import WorkloadSpec

    return WorkloadSpec.model_validate(
        {
            "kind": "decode",
            "num_qo_heads": cfg.num_qo_heads,
            "num_kv_heads": cfg.num_kv_heads,
            "head_dim": cfg.head_dim,
            "kv_lens": kv_lens,
            "qo_lens": (1,) * len(kv_lens),
            "page_size": cfg.kernel_page_size,
            "kv_layout": "NHD",
            "dtype": "bfloat16",
            "kv_dtype": kv_dtype,
            "seed": cfg.seed,
        }
    )


def kernel_study(
    cfg: StudyConfig, on_record: Callable[[dict[str, Any]], None] | None = None
) -> tuple[list[dict[str, Any]], str | None]:
    """(records, None), or (records, why a library was skipped), or ([], why) when no kernel
    can run here. `on_record` gets each record as it is measured, so a run cut short keeps
    what it finished. Order: the per-tensor scheme in each format, then the per-(token, head)
    one, each over every shape (per shape: FlashInfer's variants, then FA3): e4m3's per-tensor
    kernels (the ones a serving deployment uses, and those a warm FlashInfer cache holds) come
    first, the modules that must still be JIT-compiled (e5m2, token-head scales) later."""
    from attnbench.fp8study import kernel_fa3

    cuda = cuda_unavailable(cfg.device)
    skipped = {
        "flashinfer": kernel_unavailable(cfg.device),
        kernel_fa3.FA3_VARIANT: cuda or kernel_fa3.fa3_unavailable(cfg.device),
    }
    reasons = {lib: why for lib, why in skipped.items() if why is not None}
    reason = "; ".join(f"{lib}: {why}" for lib, why in reasons.items()) or None
    if len(reasons) == len(skipped):  # nothing runs here; no CUDA is one cause, said once
        causes = set(reasons.values())
        return [], causes.pop() if len(causes) == 1 else reason
    running = set(skipped) - set(reasons)
    records: list[dict[str, Any]] = []
    for scheme in ("tensor", "token"):
        if scheme == "token" and "flashinfer" in reasons:
            continue  # only FlashInfer takes per-(token, head) scales
        for fmt_name in cfg.formats:
            for label, batch_size, lengths in cfg.kernel_shapes:
                shape = (label, batch_size, lengths)
                for rec in _shape_records(cfg, scheme, fmt_name, *shape, running):
                    records.append(rec)
                    if on_record is not None:
                        on_record(rec)
    return records, reason


def _shape_records(
    cfg: StudyConfig,
    scheme: str,
    fmt_name: str,
    label: str,
    batch_size: int,
    lengths: str,
    libraries: set[str],
) -> Iterator[dict[str, Any]]:
    """One shape and format under one scaling scheme, each record as it is measured:
    per-tensor scales on both FlashInfer decode kernels and FA3, or per-(token, head) scales
    on FlashInfer's tensor-core path. `libraries`: those that run here."""
    from attnbench.backends.reference import reference_attention
    from attnbench.fp8study.kernel_fa3 import FA3_VARIANT, fa3_record
    from attnbench.workload.inputs import make_inputs
    from attnbench.workload.lengths import parse_lengths

    kv_lens = parse_lengths(lengths, batch_size, cfg.seed)[0].kv_lens
    fmt = fp8_format(fmt_name)
    spec = _spec(cfg, kv_lens, f"fp8_{fmt.name}")
    inputs = make_inputs(spec, cfg.device, keep_high_precision=True)
    kv_source = inputs.extras.pop("kv_cache_hp")
    source_spec = _spec(cfg, kv_lens, "bfloat16")
    source = replace(inputs, spec=source_spec, kv_cache=kv_source, k_scale=1.0, v_scale=1.0)
    ref_source = reference_attention(source)
    shape = {
        "shape": label,
        "batch_size": len(kv_lens),
        "lengths": lengths,
        "max_kv_len": max(kv_lens),
        "format": fmt.name,
    }
    if scheme == "tensor":
        ref_fp8 = reference_attention(inputs)
        base = {
            **shape,
            "scheme": "tensor",
            "k_scale": inputs.k_scale,
            "v_scale": inputs.v_scale,
            "quant": error_metrics(ref_fp8, ref_source),
        }
        if "flashinfer" in libraries:
            for variant, tensor_cores in KERNEL_VARIANTS.items():
                yield _measure(
                    variant, tensor_cores, inputs, None, source, ref_fp8, ref_source, base
                )
        if FA3_VARIANT in libraries:
            yield fa3_record(base, inputs, source, ref_fp8, ref_source)
        del ref_fp8
    else:
        stored, sf, dequant = token_head_quantize(kv_source, fmt.dtype)
        # the per-tensor k_scale/v_scale must not apply to these caches
        token_inputs = replace(inputs, kv_cache=stored, k_scale=1.0, v_scale=1.0)
        ref_token = reference_attention(replace(token_inputs, kv_cache=dequant))
        del dequant
        base = {**shape, "scheme": "token", "quant": error_metrics(ref_token, ref_source)}
        yield _measure("flashinfer:tc", True, token_inputs, sf, source, ref_token, ref_source, base)
        del token_inputs, stored, sf, ref_token
    del inputs, source, ref_source
    torch.cuda.empty_cache()


def _measure(
    variant: str,
    tensor_cores: bool,
    inputs: AttentionInputs,
    kv_cache_sf: KvScales | None,
    source: AttentionInputs,
    ref_fp8: torch.Tensor,
    ref_source: torch.Tensor,
    base: dict[str, Any],
) -> dict[str, Any]:
    rec: dict[str, Any] = {**base, "variant": variant, "status": "ok", "reason": ""}
    try:
        out, resolved = flashinfer_decode(inputs, tensor_cores, kv_cache_sf)
        rec["resolved"] = resolved
        nonfinite = int((~torch.isfinite(out)).sum())
        if nonfinite:
            rec.update(status="mismatch", reason=f"output has {nonfinite} NaN/Inf values")
            return rec
        rec["kernel"] = error_metrics(out, ref_fp8)
        rec["total"] = error_metrics(out, ref_source)
    except Exception as exc:  # a failure is a value: recorded, never a crash of the study
        rec.update(status="error", reason=f"{type(exc).__name__}: {exc}".splitlines()[0][:300])
        return rec
    try:
        out16, resolved16 = flashinfer_decode(source, tensor_cores)
        rec["bf16_resolved"] = resolved16
        rec["bf16_kernel"] = error_metrics(out16, ref_source)
    except Exception as exc:
        rec["bf16_reason"] = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
    return rec
