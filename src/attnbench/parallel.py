"""Worker processes: cases run in child processes, one (or more) per GPU.

Why: a kernel that hangs, a crash that kills the process, or a CUDA error that poisons the
context then costs one (case, variant), not the sweep. Each worker pins one GPU through
CUDA_VISIBLE_DEVICES, measures that GPU's ceilings, then takes cases from the parent one at a
time (dynamic sharding: fast workers take more). It streams rows back; the parent writes them.

Failure handling (parent side):
- a (case, variant) whose run and measurement take longer than `case_timeout_s`, or whose
  `plan` takes longer than `plan_timeout_s` (plan is where libraries JIT-compile kernels, which
  can take minutes the first time): the worker is killed, a `timeout` row is written, the
  case's remaining variants go back to the queue, a fresh worker starts;
- a worker that dies: its in-flight (case, variant) is retried once on a fresh worker; if that
  dies too, an `error` row says so;
- an `error` row that mentions a CUDA error: the worker exits after the case (its context may
  be poisoned) and a fresh one takes its place.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from attnbench.measure.config import MeasureConfig
from attnbench.results import ResultRow

POLL_S = 0.2
READY_TIMEOUT_S = 600.0


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
    slot: WorkerSlot,
    run_id: str,
    measure_cfg: MeasureConfig,
    inbox: Any,
    outbox: Any,
) -> None:
    """Entry point of a worker process (spawned: nothing is inherited but the arguments)."""
    if slot.gpu is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = str(slot.gpu)
    from attnbench.backends import select_backends
    from attnbench.hardware import detect, measure_ceilings
    from attnbench.sweep import SweepContext, run_case
    from attnbench.workload.spec import WorkloadSpec

    info = detect("cuda:0" if slot.gpu is not None else "cpu")
    ceilings = measure_ceilings(info, quick=info.kind == "cpu")
    outbox.put(("ready", slot.worker_id, info.as_dict(), ceilings.as_dict()))
    while True:
        job: Job | None = inbox.get()
        if job is None:
            return
        poisoned = False

        def on_row(row: ResultRow, job: Job = job) -> None:
            nonlocal poisoned
            row.details = {**row.details, "worker": slot.worker_id, "gpu": slot.gpu}
            poisoned |= row.status == "error" and "cuda error" in row.reason.lower()
            outbox.put(("row", slot.worker_id, job.job_id, row.model_dump(mode="json")))

        def on_start(name: str, job: Job = job) -> None:
            outbox.put(("start", slot.worker_id, job.job_id, name))

        def on_planned(name: str, job: Job = job) -> None:
            outbox.put(("planned", slot.worker_id, job.job_id, name))

        ctx = SweepContext(
            run_id=run_id,
            info=info,
            measure_cfg=measure_cfg,
            ceilings=ceilings,
            on_row=on_row,
            on_start=on_start,
            on_planned=on_planned,
        )
        spec = WorkloadSpec.model_validate(job.spec)
        run_case(spec, select_backends(list(job.backends)), ctx)
        outbox.put(("done", slot.worker_id, job.job_id))
        if poisoned:
            return


@dataclass
class _Worker:
    slot: WorkerSlot
    proc: Any
    inbox: Any
    ready: bool = False
    job: Job | None = None
    current: str | None = None
    started_s: float = 0.0
    planned: bool = False
    """Whether the current variant's plan (JIT compilation) has finished."""
    finished: set[str] = field(default_factory=set)


class WorkerPool:
    """Runs jobs on worker processes; see the module docstring for the failure rules."""

    def __init__(
        self,
        slots: list[WorkerSlot],
        run_id: str,
        measure_cfg: MeasureConfig,
        *,
        case_timeout_s: float = 0.0,
        plan_timeout_s: float = 1800.0,
        on_row: Callable[[ResultRow], None],
        on_ready: Callable[[list[dict[str, Any]]], None] = lambda infos: None,
    ) -> None:
        self._ctx = mp.get_context("spawn")
        self._outbox = self._ctx.Queue()
        self.slots = slots
        self.run_id = run_id
        self.measure_cfg = measure_cfg
        self.case_timeout_s = case_timeout_s
        self.plan_timeout_s = plan_timeout_s
        self.on_row = on_row
        self.on_ready = on_ready
        self.workers: dict[int, _Worker] = {}
        self.infos: dict[int, dict[str, Any]] = {}

    # -- lifecycle ---------------------------------------------------------------------------
    def _start(self, slot: WorkerSlot) -> _Worker:
        inbox = self._ctx.Queue()
        proc = self._ctx.Process(
            target=worker_main,
            args=(slot, self.run_id, self.measure_cfg, inbox, self._outbox),
            daemon=True,
        )
        proc.start()
        w = _Worker(slot, proc, inbox)
        self.workers[slot.worker_id] = w
        return w

    def _kill(self, w: _Worker) -> None:
        if w.proc.is_alive():
            w.proc.kill()
        w.proc.join(timeout=10)

    def close(self) -> None:
        for w in self.workers.values():
            if w.proc.is_alive():
                w.inbox.put(None)
        deadline = time.monotonic() + 10
        for w in self.workers.values():
            w.proc.join(timeout=max(0.1, deadline - time.monotonic()))
            self._kill(w)

    # -- the loop ----------------------------------------------------------------------------
    def run(self, jobs: list[Job]) -> None:
        pending = deque(jobs)
        for slot in self.slots:
            self._start(slot)
        announced = False
        t0 = time.monotonic()
        try:
            while pending or any(w.job is not None for w in self.workers.values()):
                self._drain()
                if not announced and all(w.ready for w in self.workers.values()):
                    announced = True
                    self.on_ready([self.infos[s.worker_id] for s in self.slots])
                if not announced and time.monotonic() - t0 > READY_TIMEOUT_S:
                    raise RuntimeError("workers did not start within 10 minutes")
                for w in list(self.workers.values()):
                    self._watch(w, pending)
                for w in self.workers.values():
                    # no job before every worker is up: the header (with all ceilings) comes first
                    if announced and w.ready and w.job is None and pending and w.proc.is_alive():
                        job = pending.popleft()
                        w.job, w.current, w.finished = job, None, set()
                        w.inbox.put(job)
        finally:
            self.close()

    def _drain(self) -> None:
        try:
            msg = self._outbox.get(timeout=POLL_S)
        except queue.Empty:
            return
        while True:
            self._handle(msg)
            try:
                msg = self._outbox.get_nowait()
            except queue.Empty:
                return

    def _handle(self, msg: tuple[Any, ...]) -> None:
        kind, wid = msg[0], msg[1]
        w = self.workers.get(wid)
        if kind == "ready":
            self.infos[wid] = {
                "worker": wid,
                "gpu": self.slots[wid].gpu,
                "device": msg[2],
                "ceilings": msg[3],
            }
            if w is not None:
                w.ready = True
            return
        if w is None or w.job is None or msg[2] != w.job.job_id:
            return  # a message from a job already given up on
        if kind == "start":
            w.current, w.started_s, w.planned = msg[3], time.monotonic(), False
        elif kind == "planned":
            w.started_s, w.planned = time.monotonic(), True
        elif kind == "row":
            row = ResultRow.model_validate(msg[3])
            w.finished.add(row.backend)
            w.current = None
            self.on_row(row)
        elif kind == "done":
            w.job, w.current = None, None

    def _watch(self, w: _Worker, pending: deque[Job]) -> None:
        """Kill a worker stuck past the timeout; replace a dead one; requeue what is left."""
        limit = self.case_timeout_s if w.planned else self.plan_timeout_s
        overdue = (
            self.case_timeout_s > 0
            and w.job is not None
            and w.current is not None
            and time.monotonic() - w.started_s > limit
        )
        dead = not w.proc.is_alive()
        if not (overdue or dead):
            return
        if dead:
            self._drain_dead_worker(w)  # rows it sent before dying still count
        job, current = w.job, w.current
        if overdue:
            self._kill(w)
        if job is not None:
            left = [b for b in job.backends if b not in w.finished]
            if overdue and current is not None:
                self._emit_failure(
                    job,
                    current,
                    "timeout",
                    f"{'run' if w.planned else 'plan (JIT compile)'} took over {limit:g} s: "
                    "worker killed",
                )
                left = [b for b in left if b != current]
            elif dead and current is not None and job.attempt >= 1:
                self._emit_failure(
                    job,
                    current,
                    "error",
                    f"worker process died twice (exit code {w.proc.exitcode})",
                )
                left = [b for b in left if b != current]
            if left:
                attempt = job.attempt + 1 if (dead and current is not None) else job.attempt
                pending.appendleft(Job(job.job_id, job.spec, tuple(left), attempt))
        self._start(w.slot)  # also replaces a worker that exited on purpose (poisoned context)

    def _drain_dead_worker(self, w: _Worker) -> None:
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            try:
                self._handle(self._outbox.get(timeout=0.05))
            except queue.Empty:
                return

    def _emit_failure(self, job: Job, backend: str, status: str, reason: str) -> None:
        from attnbench.sweep import failure_row
        from attnbench.workload.spec import WorkloadSpec

        spec = WorkloadSpec.model_validate(job.spec)
        self.on_row(failure_row(self.run_id, spec, backend, status, reason))
