"""One `attnbench run` or `attnbench tune`: where the cases execute and how rows reach the
results file. `tune` is a mode of the same session: same cases, header, placement, workers and
watchdog; its jobs carry a `TuneJob` (each gets its share of the time budget when handed out)
and its rows are `<variant>+tuned`, with every trial going to `on_trial`.

Three ways, same rows:
- in this process (CPU, no workers): simplest, used for quick CPU runs and tests; the same
  `worker.run_job` a worker runs;
- a pool of worker processes (`pool.WorkerPool`): always on GPUs (one per GPU, or as
  `--gpus` says), optional on CPU (`--workers N`); protects the sweep from hangs and crashes;
- Ray tasks (`--ray ADDRESS`): the same cases on a cluster, one GPU per task (`run` only).

The header row is written once the ceilings are known (measured here, or by the workers:
then every worker's device and ceilings are in the header's `workers`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from attnbench.backends.base import Backend
from attnbench.measure.config import MeasureConfig
from attnbench.measure.hardware import Ceilings, DeviceInfo
from attnbench.results import Header, ResultRow, provenance
from attnbench.run.progress import Activity
from attnbench.run.tune_search import Deadline, final_reserve_s, knob_grid, share_s
from attnbench.run.worker import Job, TuneJob
from attnbench.workload.spec import WorkloadSpec


@dataclass(frozen=True)
class TunePlan:
    """What makes a session a `tune`: the search's settings and the run's time budget."""

    grid_limit: int
    stage0_ms: float
    budget_s: float | None = None


@dataclass(frozen=True)
class Placement:
    mode: str
    """`inline`, `pool` or `ray`."""
    gpus: tuple[int | None, ...] = ()
    """One entry per worker: a GPU index, or None for a CPU worker."""
    ray_address: str | None = None


def placement(
    info: DeviceInfo,
    gpus: str | None,
    workers: int,
    ray: str | None,
    visible_gpus: int,
    tune: bool = False,
) -> Placement:
    """Decide where cases run; raises ValueError for an impossible request."""
    from attnbench.run.worker import parse_gpus

    if ray and tune:
        raise ValueError("ray: tune runs on this host's workers only; allowed: --gpus, --workers")
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
    tune: TunePlan | None = None,
    on_trial: Callable[[ResultRow], None] = lambda row: None,
    on_skip: Callable[[str, str], None] = lambda case_id, backend: None,
    on_activity: Callable[[Activity], None] = lambda activity: None,
) -> None:
    """Run every (case, variant) not in `skip` (keys as the rows name them: `x+tuned` when
    tuning); `write` receives the header, then each row; `on_trial` each tune trial, `on_skip`
    each (case, variant) the tune budget left untouched, `on_activity` what runs now."""
    from attnbench.run.sweep import order_cases

    jobs = _jobs(order_cases(specs), backends, skip, tune)
    prepare = _budget(tune, backends, measure_cfg, len(where.gpus) or 1)
    if where.mode == "inline":
        from attnbench.measure.hardware import measure_ceilings

        on_status("measuring this device's ceilings (copy bandwidth, matmul TFLOP/s)")
        ceilings = measure_ceilings(info, quick=info.kind == "cpu")
        write(make_header(run_id, settings, info, ceilings))
        _run_inline(
            jobs,
            prepare,
            _Outlet(write, on_trial, on_skip, on_activity),
            run_id,
            info,
            measure_cfg,
            ceilings,
        )
        return

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
        on_trial=on_trial,
        on_skip=lambda job, backend: on_skip(job.case_id, backend),
        on_activity=on_activity,
        prepare=prepare,
    )
    pool.run(jobs)


def _jobs(
    specs: list[WorkloadSpec],
    backends: list[Backend],
    skip: set[tuple[str, str]],
    tune: TunePlan | None,
) -> list[Job]:
    t = None if tune is None else TuneJob(tune.grid_limit, tune.stage0_ms)
    jobs: list[Job] = []
    for spec in specs:
        probe = Job(0, {}, (), tune=t)
        names = tuple(
            b.name for b in backends if (spec.case_id, probe.row_name(b.name)) not in skip
        )
        if names:
            jobs.append(Job(len(jobs), spec.model_dump(mode="json"), names, 0, spec.case_id, t))
    return jobs


Prepare = Callable[[Job, Sequence[Job]], Job]


def _budget(
    tune: TunePlan | None, backends: list[Backend], cfg: MeasureConfig, workers: int
) -> Prepare:
    """How a job is handed out: as it is, or (tune with a budget) with its share of the time
    left, weighted by grid size against the jobs still waiting (`tune_search.share_s`)."""
    if tune is None or tune.budget_s is None:
        return lambda job, pending: job
    deadline = Deadline(tune.budget_s)
    grid = {b.name: len(knob_grid(b.knobs)) for b in backends}
    reserve_s = final_reserve_s(cfg)

    def prepare(job: Job, pending: Sequence[Job]) -> Job:
        weight = sum(grid.get(n, 1) for n in job.backends)
        waiting = [n for j in pending for n in j.backends]
        share = share_s(
            deadline.left(),
            weight,
            len(job.backends),
            weight + sum(grid.get(n, 1) for n in waiting),
            len(job.backends) + len(waiting),
            reserve_s,
            workers,
        )
        assert job.tune is not None
        return replace(job, tune=replace(job.tune, budget_s=share))

    return prepare


@dataclass(frozen=True)
class _Outlet:
    """The session's callbacks, as the in-process path's `worker.JobSink`."""

    write: Callable[[Header | ResultRow], None]
    on_trial: Callable[[ResultRow], None]
    on_skip: Callable[[str, str], None]
    on_activity: Callable[[Activity], None]

    def started(self, job: Job, backend: str, first_use: bool) -> None:
        self.on_activity(Activity(0, job.case_id, backend, "plan", time.monotonic(), first_use))

    def planned(self, job: Job, backend: str, plan_s: float) -> None:
        now = time.monotonic()
        self.on_activity(Activity(0, job.case_id, backend, "run", now, plan_s=plan_s))

    def trial(self, job: Job, row: ResultRow) -> None:
        self.on_trial(row)

    def row(self, job: Job, row: ResultRow) -> None:
        self.write(row)
        now = time.monotonic()
        self.on_activity(Activity(0, job.case_id, row.backend, "idle", now))

    def skipped(self, job: Job, backend: str) -> None:
        self.on_skip(job.case_id, backend)


def _run_inline(
    jobs: list[Job],
    prepare: Prepare,
    outlet: _Outlet,
    run_id: str,
    info: DeviceInfo,
    measure_cfg: MeasureConfig,
    ceilings: Ceilings,
) -> None:
    """Every job in this process, through the same `run_job` a worker runs."""
    from attnbench.run.sweep import SweepContext
    from attnbench.run.worker import run_job

    base = SweepContext(run_id=run_id, info=info, measure_cfg=measure_cfg, ceilings=ceilings)
    for i, job in enumerate(jobs):
        run_job(prepare(job, jobs[i + 1 :]), base, outlet)
