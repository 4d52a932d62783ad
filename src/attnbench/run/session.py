"""One `attnbench run`: where the cases execute and how rows reach the results file.

Three ways, same rows:
- in this process (CPU, no workers): simplest, used for quick CPU runs and tests;
- a pool of worker processes (`parallel.WorkerPool`): always on GPUs (one per GPU, or as
  `--gpus` says), optional on CPU (`--workers N`); protects the sweep from hangs and crashes;
- Ray tasks (`--ray ADDRESS`): the same cases on a cluster, one GPU per task.

The header row is written once the ceilings are known (measured here, or by the workers:
then every worker's device and ceilings are in the header's `workers`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from attnbench.backends.base import Backend
from attnbench.measure.config import MeasureConfig
from attnbench.measure.hardware import Ceilings, DeviceInfo
from attnbench.results import Header, ResultRow, provenance
from attnbench.workload.spec import WorkloadSpec


@dataclass(frozen=True)
class Placement:
    mode: str
    """`inline`, `pool` or `ray`."""
    gpus: tuple[int | None, ...] = ()
    """One entry per worker: a GPU index, or None for a CPU worker."""
    ray_address: str | None = None


def placement(
    info: DeviceInfo, gpus: str | None, workers: int, ray: str | None, visible_gpus: int
) -> Placement:
    """Decide where cases run; raises ValueError for an impossible request."""
    from attnbench.run.worker import parse_gpus

    if ray:
        from attnbench.run.raycluster import check_address

        check_address(ray)
        return Placement("ray", ray_address=ray)
    if info.kind == "cuda":
        ids = parse_gpus(gpus, visible_gpus) if gpus else [info.index]
        return Placement("pool", gpus=tuple(ids))
    if gpus:
        raise ValueError("gpus: no CUDA GPU in use (device is cpu); use --workers for CPU")
    if workers:
        return Placement("pool", gpus=(None,) * workers)
    return Placement("inline")


def make_header(
    run_id: str,
    settings: dict[str, Any],
    info: DeviceInfo,
    ceilings: Ceilings | dict[str, Any] | None,
    workers: list[dict[str, Any]] | None = None,
) -> Header:
    ceil = ceilings.as_dict() if isinstance(ceilings, Ceilings) else ceilings
    sheet = info.spec_sheet
    extra: dict[str, Any] = {"workers": workers} if workers else {}
    return Header(
        run_id=run_id,
        provenance=provenance(),
        settings=settings,
        device=info.as_dict(),
        ceilings=ceil,
        spec_sheet={"bandwidth_gbps": sheet.bandwidth_gbps, "tflops": sheet.tflops}
        if sheet
        else None,
        **extra,
    )


def run_session(
    *,
    run_id: str,
    specs: list[WorkloadSpec],
    backends: list[Backend],
    info: DeviceInfo,
    where: Placement,
    measure_cfg: MeasureConfig,
    settings: dict[str, Any],
    skip: set[tuple[str, str]],
    case_timeout_s: float,
    plan_timeout_s: float = 1800.0,
    write: Callable[[Header | ResultRow], None],
    on_status: Callable[[str], None] = lambda text: None,
) -> None:
    """Run every (case, variant) not in `skip`; `write` receives the header, then each row."""
    from attnbench.run.sweep import order_cases

    ordered = order_cases(specs)
    if where.mode == "inline":
        from attnbench.measure.hardware import measure_ceilings
        from attnbench.run.sweep import SweepContext, run_sweep

        on_status("measuring this device's ceilings (copy bandwidth, matmul TFLOP/s)")
        ceilings = measure_ceilings(info, quick=info.kind == "cpu")
        write(make_header(run_id, settings, info, ceilings))
        ctx = SweepContext(
            run_id=run_id,
            info=info,
            measure_cfg=measure_cfg,
            ceilings=ceilings,
            skip=skip,
            on_row=write,
        )
        run_sweep(ordered, backends, ctx)
        return

    jobs = _jobs(ordered, backends, skip)
    if where.mode == "ray":
        from attnbench.run.raycluster import run_on_ray

        write(make_header(run_id, settings, info, None))
        run_on_ray(where.ray_address or "local", jobs, run_id, measure_cfg, info.kind, write)
        return

    from attnbench.run.pool import WorkerPool
    from attnbench.run.worker import WorkerSlot

    slots = [WorkerSlot(i, g) for i, g in enumerate(where.gpus)]

    def ready(infos: list[dict[str, Any]]) -> None:
        ceilings = infos[0]["ceilings"] if infos else None  # none: no worker could start
        write(make_header(run_id, settings, info, ceilings, workers=infos))

    on_status(f"starting {len(slots)} worker(s); each measures its device's ceilings")
    pool = WorkerPool(
        slots,
        run_id,
        measure_cfg,
        case_timeout_s=case_timeout_s,
        plan_timeout_s=plan_timeout_s,
        on_row=write,
        on_ready=ready,
    )
    pool.run(jobs)


def _jobs(
    specs: list[WorkloadSpec], backends: list[Backend], skip: set[tuple[str, str]]
) -> list[Any]:
    from attnbench.run.worker import Job

    jobs: list[Any] = []
    for spec in specs:
        names = tuple(b.name for b in backends if (spec.case_id, b.name) not in skip)
        if names:
            jobs.append(Job(len(jobs), spec.model_dump(mode="json"), names))
    return jobs
