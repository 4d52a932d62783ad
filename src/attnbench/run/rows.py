"""The rows the sweep writes: a measured row (latency, bytes, FLOPs, fractions of the measured
and spec-sheet ceilings) and a row without timings (unsupported, mismatch, error, oom, timeout).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from attnbench.backends.base import PlannedRun
from attnbench.measure import metrics
from attnbench.measure.hardware import Ceilings, DeviceInfo
from attnbench.results import ResultRow, now_iso, thin_samples
from attnbench.workload.spec import WorkloadSpec


@dataclass(frozen=True)
class TimedRun:
    """What a gated, timed (case, variant) produced: its planned run, the per-step replan time,
    the measurement (`measure.engine.Measurement`), the gate's accuracy, the peak memory and
    the row's details."""

    planned: PlannedRun
    plan_us: float
    measurement: Any
    accuracy: dict[str, Any]
    peak_memory_bytes: int | None
    details: dict[str, Any]


def ok_row(
    run_id: str,
    info: DeviceInfo,
    ceil: Ceilings | None,
    spec: WorkloadSpec,
    backend: str,
    timed: TimedRun,
) -> ResultRow:
    """A measured row: latency, plan time, bytes, FLOPs and their fractions of the ceilings; the
    FLOP/s fractions against the matmul ceiling of the precision the kernel multiplies in
    (`metrics.mma_dtype`), which the row names (`tflops_ceiling`)."""
    planned, plan_us, m = timed.planned, timed.plan_us, timed.measurement
    details = timed.details
    latency_us = m.stats.median_us
    nbytes = metrics.bytes_moved(spec)
    nflops = metrics.flops(spec)
    gbps = metrics.bandwidth_gbps(nbytes.total, latency_us)
    tflops = metrics.tflops_per_s(nflops, latency_us)
    sheet = info.spec_sheet
    ceiling = metrics.matmul_ceiling_key(metrics.mma_dtype(spec.dtype, planned.precision))
    if planned.extra_bytes:
        details["extra_bytes"] = planned.extra_bytes
    if planned.workspace_bytes:
        details["workspace_bytes"] = planned.workspace_bytes
    return ResultRow(
        run_id=run_id,
        case_id=spec.case_id,
        backend=backend,
        resolved=planned.resolved,
        status="ok",
        reason="; ".join(m.notes),
        spec=spec.model_dump(mode="json"),
        latency_us=latency_us,
        latency=m.stats.as_dict(),
        samples_us=thin_samples(m.samples_us),
        plan_us=plan_us,
        per_token_ms=metrics.per_token_ms(latency_us, plan_us, spec.num_layers),
        bytes=nbytes.as_dict(),
        flops=nflops,
        bandwidth_gbps=gbps,
        tflops=tflops,
        bandwidth_frac_measured=metrics.fraction(gbps, ceil.copy_bandwidth_gbps if ceil else None),
        bandwidth_frac_read=metrics.fraction(gbps, ceil.read_bandwidth_gbps if ceil else None),
        bandwidth_frac_spec=metrics.fraction(gbps, sheet.bandwidth_gbps if sheet else None),
        tflops_frac_measured=metrics.fraction(
            tflops, ceil.matmul_tflops.get(ceiling) if ceil else None
        ),
        tflops_frac_spec=metrics.fraction(tflops, sheet.tflops.get(ceiling) if sheet else None),
        tflops_ceiling=ceiling,
        peak_memory_bytes=timed.peak_memory_bytes,
        kv_cache_bytes=metrics.kv_cache_bytes(spec),
        accuracy=timed.accuracy,
        measurement=m.as_dict(),
        details=details,
        timestamp=now_iso(),
    )


def failure_row(
    run_id: str, spec: WorkloadSpec, backend: str, status: str, reason: str, **extra: Any
) -> ResultRow:
    """A row without timings: unsupported, mismatch, error, oom or timeout."""
    return ResultRow(
        run_id=run_id,
        case_id=spec.case_id,
        backend=backend,
        status=status,
        reason=reason,
        spec=spec.model_dump(mode="json"),
        kv_cache_bytes=metrics.kv_cache_bytes(spec),
        timestamp=now_iso(),
        **extra,
    )
