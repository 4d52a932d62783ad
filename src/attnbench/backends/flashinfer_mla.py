"""FlashInfer's MLA kernels (flashinfer-python 0.7.4 `flashinfer.mla`): `flashinfer:mla-fa2` and
`flashinfer:mla-fa3`, `BatchMLAPagedAttentionWrapper(workspace, backend="fa2" | "fa3")`.

The wrapper reads the absorbed form on the case's paged latent cache as serving engines store
it (SGLang's FlashInfer MLA backend): q packed `[total_q, Hq, 512 + 64]` and the cache packed
`[num_pages, page_size, 512 + 64]`, planned from CSR metadata (`MLAPlanMetadata.csr(qo_indptr,
kv_indptr, kv_indices, kv_len_arr)`, the case's page table and lengths), `head_dim_ckv` 512,
`head_dim_kpe` 64, the model's `sm_scale`, causal within each request. Re-planning is the
per-step `replan` timed as `plan_us`; the output `[total_q, Hq, 512]` is a fixed buffer.

Rules (0.7.4 `mla/_batch_mla/_backends/_fa_common.py`, `_validate_generated_fa_plan`), checked
in `check` without a GPU by `mla_refusal`: fp16/bf16 query; a latent in the query's dtype, or
fp8 e4m3 with a bf16 query on SM90 only (ckv 512, kpe 64; `scale_mode="kv-per-tensor"`,
`run(ckv_scale=, kpe_scale=)`, dequantised to bf16 in the kernel); fa2 needs SM80+, ckv a
multiple of 128 and kpe of 64; fa3 needs SM90 and ckv in (128, 256, 512). Neither takes sinks.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import torch

from attnbench.backends.base import PlannedRun, Unsupported
from attnbench.backends.features import mla_only
from attnbench.backends.flashinfer_common import WORKSPACE_BYTES, workspace
from attnbench.measure.hardware import DeviceInfo
from attnbench.workload.inputs import AttentionInputs, torch_dtype
from attnbench.workload.spec import WorkloadSpec

INSTALL_HINT = "pip install flashinfer-python"
BACKENDS = ("fa2", "fa3")
FA3_CKV_DIMS = (128, 256, 512)


def mla_refusal(backend: str, spec: WorkloadSpec, device: DeviceInfo) -> str | None:
    """Why `flashinfer:mla-<backend>` cannot run `spec` on `device` (None: it can)."""
    who = f"flashinfer:mla-{backend}"
    only = mla_only(who, spec, "plain attention runs on the other flashinfer:* variants")
    if only is not None:
        return only.reason
    assert spec.mla is not None
    ckv, kpe = spec.mla.kv_lora_rank, spec.mla.qk_rope_head_dim
    if device.kind != "cuda":
        return f"{who} needs a CUDA GPU (device is {device.kind})"
    if backend == "fa3" and device.sm != 90:
        return (
            f"{who}: FlashInfer's fa3 MLA kernel is SM90 (Hopper) only; this GPU is SM{device.sm}"
        )
    if backend == "fa2" and device.sm < 80:
        return f"{who}: FlashInfer's fa2 MLA kernel needs SM80+; this GPU is SM{device.sm}"
    if backend == "fa3" and ckv not in FA3_CKV_DIMS:
        return f"{who}: the fa3 MLA kernel takes kv_lora_rank in {FA3_CKV_DIMS}, not {ckv}"
    if ckv % 128 or kpe % 64:
        return f"{who}: kv_lora_rank must be a multiple of 128 and qk_rope_head_dim of 64"
    if spec.is_fp8:
        if spec.kv_dtype != "fp8_e4m3":
            return f"{who}: an fp8 latent cache is e4m3 only in 0.7.4 (no {spec.kv_dtype})"
        if device.sm // 10 != 9:
            return f"{who}: an fp8 latent cache needs SM90 in 0.7.4; this GPU is SM{device.sm}"
        if spec.dtype != "bfloat16":
            return f"{who}: an fp8 latent cache takes a bfloat16 query in 0.7.4, not {spec.dtype}"
        if (ckv, kpe) != (512, 64):
            return f"{who}: an fp8 latent cache needs kv_lora_rank 512 and qk_rope_head_dim 64"
    elif spec.kv_dtype != spec.dtype:
        return (
            f"{who}: a 16-bit latent must be in the query dtype ({spec.kv_dtype} vs {spec.dtype})"
        )
    return None


@functools.cache
def _import_error() -> str | None:
    try:
        import flashinfer.mla

        flashinfer.mla.BatchMLAPagedAttentionWrapper  # noqa: B018 (0.7.4's planned wrapper)
        flashinfer.mla.MLAPlanMetadata  # noqa: B018
    except Exception as exc:  # ImportError, AttributeError on an older flashinfer, a broken build
        why = " ".join(str(exc).split())[:240]
        return (
            f"flashinfer.mla (BatchMLAPagedAttentionWrapper with MLAPlanMetadata) not usable "
            f"({type(exc).__name__}: {why}); {INSTALL_HINT}>=0.7.4"
        )
    return None


class FlashInferMlaBackend:
    """`flashinfer:mla-fa2` / `flashinfer:mla-fa3` (see the module docstring)."""

    devices: tuple[str, ...] = ("cuda",)
    knobs: Mapping[str, tuple[object, ...]] = {}

    def __init__(self, backend: str) -> None:
        if backend not in BACKENDS:
            raise ValueError(f"backend={backend!r}; allowed: {', '.join(BACKENDS)}")
        self.backend = backend
        self.name = f"flashinfer:mla-{backend}"

    def available(self) -> str | None:
        return _import_error()

    def check(self, spec: WorkloadSpec, device: DeviceInfo) -> Unsupported | None:
        why = mla_refusal(self.backend, spec, device)
        return Unsupported(why) if why else None

    def plan(
        self,
        spec: WorkloadSpec,
        inputs: AttentionInputs,
        knobs: Mapping[str, object] | None = None,
    ) -> PlannedRun:
        import flashinfer
        from flashinfer.mla import BatchMLAPagedAttentionWrapper, MLAPlanMetadata

        assert spec.mla is not None
        if knobs:
            raise ValueError(f"{self.name} has no knobs; got {sorted(knobs)}")
        dev = inputs.device
        wrapper = BatchMLAPagedAttentionWrapper(workspace(dev), backend=self.backend)
        metadata = MLAPlanMetadata.csr(
            inputs.qo_indptr, inputs.kv_indptr, inputs.kv_indices, inputs.kv_lens
        )
        plan_kwargs: dict[str, Any] = {
            "metadata": metadata,
            "num_heads": spec.num_qo_heads,
            "head_dim_ckv": spec.mla.kv_lora_rank,
            "head_dim_kpe": spec.mla.qk_rope_head_dim,
            "page_size": spec.page_size,
            "causal": spec.causal,
            "sm_scale": spec.mla.sm_scale,
            "q_data_type": torch_dtype(spec.dtype),
            "kv_data_type": torch_dtype(spec.kv_dtype),
            "query_layout": "packed",
            "kv_cache_layout": "packed",
            "scale_mode": "kv-per-tensor" if spec.is_fp8 else "default",
        }

        def replan() -> None:
            wrapper.plan(**plan_kwargs)

        replan()
        out = torch.empty(
            spec.total_q, spec.num_qo_heads, spec.v_head_dim, dtype=inputs.q.dtype, device=dev
        )
        scales: dict[str, float] = {}
        if spec.is_fp8:
            scales = {"ckv_scale": inputs.ckv_scale, "kpe_scale": inputs.kpe_scale}
        q, latent = inputs.q, inputs.kv_cache

        def run() -> torch.Tensor:
            result: torch.Tensor = wrapper.run(query=q, kv_cache=latent, out=out, **scales)
            return result

        resolved = str(getattr(wrapper, "_planned_backend_name", None) or self.backend)
        return PlannedRun(
            run=run,
            resolved=resolved,
            details={
                "api": "BatchMLAPagedAttentionWrapper",
                "backend_requested": self.backend,
                "kernel": "mla-absorbed",
                "query_layout": "packed",
                "kv_cache_layout": "packed",
                "flashinfer": str(flashinfer.__version__),
            },
            out=out,
            workspace_bytes=WORKSPACE_BYTES,
            replan=replan,
        )


def backends() -> list[FlashInferMlaBackend]:
    return [FlashInferMlaBackend(b) for b in BACKENDS]
