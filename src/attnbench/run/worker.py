"""The worker side of the pool (`run.pool`): what the parent and a worker process send each
other (a `Job` down, `Ready`/`Started`/`Planned`/`RowDone`/`JobDone` up), the worker's entry
point, and which GPUs `--gpus` names.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from attnbench.measure.config import MeasureConfig
from attnbench.results import ResultRow


@dataclass(frozen=True)
class WorkerSlot:
    """Where a worker runs: a physical GPU index (None for CPU)."""

    worker_id: int
    gpu: int | None


@dataclass(frozen=True)
class Job:
    job_id: int
    spec: dict[str, Any]
    backends: tuple[str, ...]
    attempt: int = 0


# Messages from a worker to the parent.
@dataclass(frozen=True)
class Ready:
    device: dict[str, Any]
    ceilings: dict[str, Any]


@dataclass(frozen=True)
class Started:
    job_id: int
    backend: str


@dataclass(frozen=True)
class Planned:
    job_id: int
    backend: str


@dataclass(frozen=True)
class RowDone:
    job_id: int
    row: dict[str, Any]


@dataclass(frozen=True)
class JobDone:
    job_id: int


Message = Ready | Started | Planned | RowDone | JobDone
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


def worker_main(
    slot: WorkerSlot, run_id: str, measure_cfg: MeasureConfig, conn: Connection
) -> None:
    """Entry point of a worker process (spawned: nothing is inherited but the arguments).
    Exits when the parent sends None or goes away."""
    if slot.gpu is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = str(slot.gpu)
    from attnbench.backends import select_backends
    from attnbench.measure.hardware import detect, measure_ceilings
    from attnbench.run.sweep import SweepContext, run_case
    from attnbench.workload.spec import WorkloadSpec

    info = detect("cuda:0" if slot.gpu is not None else "cpu")
    ceilings = measure_ceilings(info, quick=info.kind == "cpu")
    conn.send(Ready(info.as_dict(), ceilings.as_dict()))
    while True:
        try:
            job: Job | None = conn.recv()
        except (EOFError, OSError):
            return  # the parent is gone
        if job is None:
            return
        poisoned = False

        def on_row(row: ResultRow, job: Job = job) -> None:
            nonlocal poisoned
            row.details = {**row.details, "worker": slot.worker_id, "gpu": slot.gpu}
            poisoned |= row.status == "error" and "cuda error" in row.reason.lower()
            conn.send(RowDone(job.job_id, row.model_dump(mode="json")))

        def on_start(name: str, job: Job = job) -> None:
            conn.send(Started(job.job_id, name))

        def on_planned(name: str, job: Job = job) -> None:
            conn.send(Planned(job.job_id, name))

        ctx = SweepContext(
            run_id=run_id,
            info=info,
            measure_cfg=measure_cfg,
            ceilings=ceilings,
            on_row=on_row,
            on_start=on_start,
            on_planned=on_planned,
        )
        run_case(WorkloadSpec.model_validate(job.spec), select_backends(list(job.backends)), ctx)
        conn.send(JobDone(job.job_id))
        if poisoned:
            return
