"""The worker side of the pool (`run.pool`): what the parent and a worker process send each
other (a `Job` down; `Ready`, `Started`, `Planned`, `Trial`, `RowDone`, `Skipped`, `JobDone` up),
`run_job` (one job of any kind: what a worker does with a job, and what the in-process path does
too), the worker's entry point, and which GPUs `--gpus` names.

A job's kind (`run.jobs`) says what is done with its case and variants; each kind goes through
the sweep's `run_backend` (plan, accuracy gate, measurement, row), under the same watchdog.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any, Protocol

from attnbench.measure.config import MeasureConfig
from attnbench.results import ResultRow
from attnbench.run.jobs import Job, KernelErrorJob, TuneJob
from attnbench.run.profiling import profiled

if TYPE_CHECKING:
    from attnbench.backends.base import Backend
    from attnbench.run.sweep import SweepContext
    from attnbench.workload.spec import WorkloadSpec


@dataclass(frozen=True)
class WorkerSlot:
    """Where a worker runs: a physical GPU index (None for CPU)."""

    worker_id: int
    gpu: int | None


# Messages from a worker to the parent.
@dataclass(frozen=True)
class Ready:
    device: dict[str, Any]
    ceilings: dict[str, Any]


@dataclass(frozen=True)
class Started:
    """A plan begins (the watchdog's plan limit starts): each (case, variant), each trial."""

    job_id: int
    backend: str
    first_use: bool = False
    """The variant's first plan on this shape family in this worker (JIT compiles here)."""


@dataclass(frozen=True)
class Planned:
    job_id: int
    backend: str
    plan_s: float = 0.0
    """Wall time of the plan() call (on first use: the library's compile or load)."""


@dataclass(frozen=True)
class Trial:
    """One measured configuration of a tune search (written to the trials file)."""

    job_id: int
    row: dict[str, Any]


@dataclass(frozen=True)
class RowDone:
    job_id: int
    row: dict[str, Any]


@dataclass(frozen=True)
class Skipped:
    """The time budget ended before this variant of the job was tuned (no row)."""

    job_id: int
    backend: str


@dataclass(frozen=True)
class JobDone:
    job_id: int


Message = Ready | Started | Planned | Trial | RowDone | Skipped | JobDone
WorkerTarget = Callable[[WorkerSlot, str, MeasureConfig, Connection], None]
"""A worker's entry point: (slot, run_id, measure config, its end of the pipe)."""


def parse_gpus(text: str, visible: int) -> list[int]:
    """`all` -> every visible GPU; `N` -> the first N; `0,0,1` -> exactly these (repeats put
    several workers on one GPU). Raises ValueError naming what is allowed."""
    t = text.strip().lower()
    if t == "all":
        if visible == 0:
            raise ValueError("gpus=all: no CUDA GPU is visible")
        return list(range(visible))
    if "," in t:
        try:
            ids = [int(x) for x in t.split(",") if x.strip()]
        except ValueError:
            raise ValueError(f"gpus={text!r}: allowed: all, N, or a list like 0,1") from None
    else:
        if not t.isdigit() or int(t) == 0:
            raise ValueError(f"gpus={text!r}: allowed: all, N (>0), or a list like 0,1")
        ids = list(range(int(t)))
    bad = [i for i in ids if i < 0 or i >= visible]
    if bad:
        raise ValueError(f"gpus={text!r}: GPU {bad[0]} is not visible ({visible} visible)")
    return ids


class JobSink(Protocol):
    """Where `run_job` sends what happens: messages to the parent (a worker), or the session's
    callbacks (the in-process path)."""

    def started(self, job: Job, backend: str, first_use: bool) -> None: ...
    def planned(self, job: Job, backend: str, plan_s: float) -> None: ...
    def trial(self, job: Job, row: ResultRow) -> None: ...
    def row(self, job: Job, row: ResultRow) -> None: ...
    def skipped(self, job: Job, backend: str) -> None: ...


def run_job(job: Job, base: SweepContext, sink: JobSink) -> None:
    """One job, by its kind (see the module docstring). Raises `sweep.DeviceLost` when a run
    left the GPU unusable (its row is sent first)."""
    from attnbench.backends import select_backends
    from attnbench.workload.spec import WorkloadSpec

    ctx = replace(
        base,
        on_row=lambda row: sink.row(job, row),
        on_start=lambda name, first_use: sink.started(job, name, first_use),
        on_planned=lambda name, plan_s: sink.planned(job, name, plan_s),
    )
    spec = WorkloadSpec.model_validate(job.spec)
    backends = select_backends(list(job.backends))
    if isinstance(job.kind, TuneJob):
        _tune(job, job.kind, spec, backends, ctx, sink)
    elif isinstance(job.kind, KernelErrorJob):
        from attnbench.run.kernel_error import error_case

        error_case(spec, backends, ctx, job.kind)
    else:
        from attnbench.run.sweep import run_case

        run_case(spec, backends, ctx)


def _tune(
    job: Job,
    t: TuneJob,
    spec: WorkloadSpec,
    backends: list[Backend],
    ctx: SweepContext,
    sink: JobSink,
) -> None:
    from attnbench.run.tune import Deadline, TuneOptions, tune_case

    tune_case(
        spec,
        backends,
        ctx,
        Deadline(t.budget_s),
        on_trial=lambda row: sink.trial(job, row),
        on_tuned=ctx.on_row,
        on_skipped=lambda name: sink.skipped(job, name),
        opts=TuneOptions(grid_limit=t.grid_limit, stage0_ms=t.stage0_ms),
    )


class _PipeSink:
    """A worker's sink: every event is a message on its pipe to the parent."""

    def __init__(self, conn: Connection, slot: WorkerSlot) -> None:
        self.conn = conn
        self.slot = slot
        self.poisoned = False
        """An error row mentioned a CUDA error: the context may be unusable, so exit."""

    def started(self, job: Job, backend: str, first_use: bool) -> None:
        self.conn.send(Started(job.job_id, backend, first_use))

    def planned(self, job: Job, backend: str, plan_s: float) -> None:
        self.conn.send(Planned(job.job_id, backend, plan_s))

    def trial(self, job: Job, row: ResultRow) -> None:
        self.conn.send(Trial(job.job_id, self._tag(row).model_dump(mode="json")))

    def row(self, job: Job, row: ResultRow) -> None:
        row = self._tag(row)
        self.poisoned |= row.status == "error" and "cuda error" in row.reason.lower()
        self.conn.send(RowDone(job.job_id, row.model_dump(mode="json")))

    def skipped(self, job: Job, backend: str) -> None:
        self.conn.send(Skipped(job.job_id, backend))

    def _tag(self, row: ResultRow) -> ResultRow:
        tags = {"worker": self.slot.worker_id, "gpu": self.slot.gpu}
        return row.model_copy(update={"details": {**row.details, **tags}})


def worker_main(
    slot: WorkerSlot, run_id: str, measure_cfg: MeasureConfig, conn: Connection
) -> None:
    """Entry point of a worker process (spawned: nothing is inherited but the arguments).
    Exits when the parent sends None or goes away, and after a job that may have left the
    GPU unusable (the parent starts a fresh worker for what is left)."""
    if slot.gpu is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = str(slot.gpu)
    from attnbench.measure.hardware import detect, measure_ceilings
    from attnbench.run.sweep import SweepContext

    info = detect("cuda:0" if slot.gpu is not None else "cpu")
    ceilings = measure_ceilings(info, quick=info.kind == "cpu")
    conn.send(Ready(info.as_dict(), ceilings.as_dict()))
    base = SweepContext(
        run_id=run_id,
        info=info,
        measure_cfg=measure_cfg,
        ceilings=ceilings,
        stop_when_poisoned=True,
    )
    with profiled("worker"):
        _serve(conn, base, _PipeSink(conn, slot))


def _serve(conn: Connection, base: SweepContext, sink: _PipeSink) -> None:
    """Run the parent's jobs until it sends None or goes away, or the GPU is lost."""
    from attnbench.run.sweep import DeviceLost

    while True:
        try:
            job: Job | None = conn.recv()
        except (EOFError, OSError):
            return  # the parent is gone
        if job is None:
            return
        try:
            run_job(job, base, sink)
        except DeviceLost:
            return  # no JobDone: the parent hands the variants left to a fresh worker
        conn.send(JobDone(job.job_id))
        if sink.poisoned:
            return
