"""The fp8 study's kernel part as a job kind of `run/` (`worker.KernelErrorJob`): each variant
on an fp8-KV case goes through the sweep's `run_backend` (plan, accuracy gate against the fp64
reference on the dequantised cache, measurement, row), and the error of the very output the gate
checked is split by cause beside it, in the row's `details.kernel_error`:

    quant        fp64 reference on the dequantised cache vs on the 16-bit source (no kernel)
    q_quant      the reference on the query the kernel saw vs on the 16-bit query (only for a
                 kernel that quantises the query, as FA3's fp8 path does)
    kernel       the output vs the reference on what the kernel read (the gate's reference)
    total        the output vs the reference on the 16-bit source
    bf16_kernel  the variant on the 16-bit source vs its reference (`baseline`)

The 16-bit source is the bf16 cache `make_inputs` quantised; `scheme` says how: `tensor` (one scale
per tensor, the cache `make_inputs` builds) or `token` (one scale per (token, KV head),
FlashInfer's `use_token_head_sf` layout, handed to the backend in `inputs.extras` as
`k_cache_sf` and `v_cache_sf`). `fp8study.kernel` turns the rows into the study's records.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import torch

from attnbench.backends.base import Backend, PlannedRun, Unsupported
from attnbench.backends.reference import reference_attention
from attnbench.results import ResultRow
from attnbench.run.sweep import (
    SweepContext,
    check_device_alive,
    failure_row,
    release_memory,
    run_backend,
    runnable_on,
)
from attnbench.workload.inputs import AttentionInputs, make_inputs, torch_dtype
from attnbench.workload.quant import token_head_quantize
from attnbench.workload.spec import WorkloadSpec

if TYPE_CHECKING:
    from attnbench.measure.hardware import DeviceInfo
    from attnbench.run.jobs import KernelErrorJob

SCHEMES = ("tensor", "token")


def error_metrics(out: torch.Tensor, ref: torch.Tensor) -> dict[str, float]:
    """Errors of `out` against `ref` (same shape `[rows, ..., head_dim]`), computed in fp64.

    max_abs_err = max |out - ref|; rmse = sqrt(mean (out - ref)^2);
    rel_l2_err = ||out - ref|| / ||ref||; cosine = cos(out, ref) over the flattened tensors;
    min_row_cosine = the worst cosine of one output vector (last axis) with its reference.
    """
    o, r = out.double(), ref.double()
    diff = o - r
    ref_norm = float(torch.linalg.vector_norm(r))
    rows_o, rows_r = o.reshape(-1, o.shape[-1]), r.reshape(-1, r.shape[-1])
    row_cos = torch.nn.functional.cosine_similarity(rows_o, rows_r, dim=-1, eps=1e-300)
    return {
        "max_abs_err": float(diff.abs().amax()) if diff.numel() else 0.0,
        "rmse": float(diff.pow(2).mean().sqrt()) if diff.numel() else 0.0,
        "rel_l2_err": float(torch.linalg.vector_norm(diff)) / ref_norm if ref_norm else 0.0,
        "cosine": float(
            torch.nn.functional.cosine_similarity(o.flatten(), r.flatten(), dim=0, eps=1e-300)
        ),
        "min_row_cosine": float(row_cos.min()) if row_cos.numel() else 1.0,
    }


@dataclass
class _Case:
    """One job's tensors: what the kernels read and its reference, the 16-bit source and its
    reference, and what every row of the job shares (`base`: scheme, scales, quant error)."""

    inputs: AttentionInputs
    oracle: torch.Tensor
    source: AttentionInputs
    ref_source: torch.Tensor
    base: dict[str, Any] = field(default_factory=dict)


def error_case(
    spec: WorkloadSpec, backends: list[Backend], ctx: SweepContext, job: KernelErrorJob
) -> list[ResultRow]:
    """Every variant on the fp8 case `spec`, rows in `backends`' order, each through `ctx`'s
    `on_row` as it is finished. A variant that cannot run here is its `unsupported` (or `error`)
    row, with the case's quantisation error all the same."""
    if job.scheme not in SCHEMES:
        raise ValueError(f"scheme={job.scheme!r}: allowed: {', '.join(SCHEMES)}")
    refused: dict[str, ResultRow] = {}

    def refuse(row: ResultRow) -> None:
        refused[row.backend] = row

    runnable = runnable_on(spec, backends, ctx, refuse)
    rows: list[ResultRow] = []

    def emit(row: ResultRow) -> None:
        rows.append(row)
        ctx.on_row(row)

    try:
        case = _build(spec, ctx.device, job.scheme)
    except Exception as exc:
        status = "oom" if "out of memory" in str(exc).lower() else "error"
        reason = f"building inputs/reference: {type(exc).__name__}: {exc}"[:400]
        for b in backends:
            emit(refused.get(b.name) or failure_row(ctx.run_id, spec, b.name, status, reason))
        release_memory()
        return rows
    for b in backends:
        if b.name in refused:
            emit(_with_errors(refused[b.name], dict(case.base)))
        elif b in runnable:
            emit(row := _measure(spec, b, case, ctx, job))
            release_memory()
            if row.status == "error" and ctx.stop_when_poisoned:
                check_device_alive(row)  # DeviceLost: the variants left go to a fresh worker
    del case
    release_memory()
    return rows


def _build(spec: WorkloadSpec, device: torch.device, scheme: str) -> _Case:
    """The case's fp8 inputs under `scheme`, its 16-bit source, and both references."""
    inputs = make_inputs(spec, device, keep_high_precision=True)
    kv_source = inputs.extras.pop("kv_cache_hp")
    # make_inputs quantised a bf16 cache: the source is that cache, as a bf16-KV case
    source_spec = WorkloadSpec.model_validate({**spec.model_dump(), "kv_dtype": "bfloat16"})
    source = replace(inputs, spec=source_spec, kv_cache=kv_source, k_scale=1.0, v_scale=1.0)
    ref_source = reference_attention(source)
    if scheme == "tensor":
        oracle = reference_attention(inputs)
        base: dict[str, Any] = {"k_scale": inputs.k_scale, "v_scale": inputs.v_scale}
    else:
        stored, (k_sf, v_sf), dequant = token_head_quantize(kv_source, torch_dtype(spec.kv_dtype))
        scales = {**inputs.extras, "k_cache_sf": k_sf, "v_cache_sf": v_sf}
        # the per-tensor k_scale/v_scale must not apply to this cache
        inputs = replace(inputs, kv_cache=stored, k_scale=1.0, v_scale=1.0, extras=scales)
        oracle = reference_attention(replace(inputs, kv_cache=dequant))
        del dequant
        base = {}
    base = {"scheme": scheme, **base, "quant": error_metrics(oracle, ref_source)}
    return _Case(inputs, oracle, source, ref_source, base)


def _measure(
    spec: WorkloadSpec, backend: Backend, case: _Case, ctx: SweepContext, job: KernelErrorJob
) -> ResultRow:
    """One variant: its row from `run_backend`, with the error split of its gated output."""
    knobs: dict[str, Any] | None = {k: v for k, v in job.knobs if k in backend.knobs} or None
    seen = _Seen(backend)
    row = run_backend(spec, seen, case.inputs, case.oracle, ctx, knobs)
    errors = dict(case.base)
    out = seen.out
    if out is None or not bool(torch.isfinite(out).all()):
        return _with_errors(row, errors)  # failed before its output, or a non-finite one
    ref_seen = None
    if seen.q_effective is not None:
        ref_seen = reference_attention(case.inputs, q=seen.q_effective)
    errors |= error_split(out, case.ref_source, case.oracle, ref_seen)
    errors["plan_details"] = seen.details
    del out, ref_seen, seen
    if job.baseline:
        errors.update(_baseline(backend, case, ctx, knobs))
    return _with_errors(row, errors)


def error_split(
    out: torch.Tensor,
    ref_source: torch.Tensor,
    ref_read: torch.Tensor,
    ref_seen: torch.Tensor | None = None,
) -> dict[str, dict[str, float]]:
    """The error of one output by cause. `ref_read`: the reference on the cache the kernel read
    and the 16-bit query; `ref_seen`: on the query it saw, when it quantised it (then its
    `q_quant` is `ref_seen` against `ref_read`, and the kernel is judged against `ref_seen`);
    `ref_source`: on the 16-bit query and cache (`total`)."""
    errors: dict[str, dict[str, float]] = {}
    ref = ref_read
    if ref_seen is not None:
        errors["q_quant"] = error_metrics(ref_seen, ref_read)
        ref = ref_seen
    errors["kernel"] = error_metrics(out, ref)
    errors["total"] = error_metrics(out, ref_source)
    return errors


def _baseline(
    backend: Backend, case: _Case, ctx: SweepContext, knobs: dict[str, Any] | None
) -> dict[str, Any]:
    """The variant on the 16-bit source: its error against the source's reference."""
    seen = _Seen(backend)
    row = run_backend(case.source.spec, seen, case.source, case.ref_source, ctx, knobs)
    if seen.out is None:
        return {"bf16_reason": row.reason or row.status}
    return {"bf16_resolved": row.resolved, "bf16_kernel": error_metrics(seen.out, case.ref_source)}


def _with_errors(row: ResultRow, errors: dict[str, Any]) -> ResultRow:
    details = {**row.details, "kernel_error": errors}
    return row.model_copy(update={"details": type(row.details).model_validate(details)})


class _Seen:
    """`backend` as it is, keeping a copy of the output its accuracy gate checked (and the
    query values the kernel saw, and the plan's details), for the error split."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.name = backend.name
        self.devices = backend.devices
        self.knobs = backend.knobs
        self.out: torch.Tensor | None = None
        self.q_effective: torch.Tensor | None = None
        self.details: dict[str, Any] = {}

    def available(self) -> str | None:
        return self.backend.available()

    def check(self, spec: WorkloadSpec, device: DeviceInfo) -> Unsupported | None:
        return self.backend.check(spec, device)

    def plan(
        self,
        spec: WorkloadSpec,
        inputs: AttentionInputs,
        knobs: Mapping[str, object] | None = None,
    ) -> PlannedRun:
        planned = self.backend.plan(spec, inputs, knobs)
        self.q_effective, self.details = planned.q_effective, dict(planned.details)
        unpack = planned.unpack

        def keep(raw: torch.Tensor) -> torch.Tensor:
            got = unpack(raw)
            self.out = got.detach().clone()
            return got

        return replace(planned, unpack=keep)
