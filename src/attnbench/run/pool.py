"""Worker processes: cases run in child processes, one (or more) per GPU (this module is the
parent's side; `run.worker` the child's and the messages between them).

Why: a kernel that hangs, a crash that kills the process, or a CUDA error that poisons the
context then costs one (case, variant), not the sweep. Each worker pins one GPU through
CUDA_VISIBLE_DEVICES, measures that GPU's ceilings, then takes cases from the parent one at a
time (dynamic sharding: fast workers take more). It streams rows back (and, for `tune`, every
trial); the parent writes them. What each worker is doing now (case, variant, plan or run,
since when, first use) goes to `on_activity`.

Each worker talks to the parent over its own pipe, and the parent holds no copy of the
worker's end. So a worker that dies at any moment, even halfway through writing a message,
closes its pipe: the parent reads the complete messages it sent, sees end-of-file where a
message was cut, and never waits on a lock or a byte that a dead process holds. (A queue
shared by all workers has one write lock: a worker killed while holding it blocked every
other worker, and the parent with them.)

Failure handling (parent side):
- a (case, variant) whose run and measurement take longer than `case_timeout_s`, or whose
  `plan` takes longer than `plan_timeout_s` (plan is where libraries JIT-compile kernels, which
  can take minutes the first time): the worker is killed, a `timeout` row is written, the
  case's remaining variants go back to the queue, a fresh worker starts;
- a worker that dies: its in-flight (case, variant) is retried once on a fresh worker; if that
  dies too, an `error` row says so;
- a worker that dies (or stays silent for `ready_timeout_s`) before it is ready,
  `MAX_START_FAILURES` times in a row: its slot is given up; with no slot left, every case
  not yet run becomes an `error` row that says why, and the pool returns;
- an `error` row that left the CUDA context poisoned (a sticky error: illegal address...):
  the worker exits at once (`sweep.DeviceLost`), the case's other variants go back to the
  queue and a fresh worker takes its place (they would only fail in that context); any other
  error row that mentions a CUDA error: the worker exits after the case.
"""

from __future__ import annotations

import multiprocessing as mp
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from multiprocessing.connection import Connection, wait
from typing import Any

from attnbench.measure.config import MeasureConfig
from attnbench.results import ResultRow
from attnbench.run.jobs import Job
from attnbench.run.plan import Limits
from attnbench.run.progress import Activity
from attnbench.run.worker import (
    JobDone,
    Message,
    Planned,
    Ready,
    RowDone,
    Skipped,
    Started,
    Trial,
    WorkerSlot,
    WorkerTarget,
    worker_main,
)

POLL_S = 0.2
MAX_START_FAILURES = 3
Prepare = Callable[[Job, Sequence[Job]], Job]
"""How a job is handed out, given the jobs still waiting (tune gives it its share of the time
budget there)."""


def _as_is(job: Job, pending: Sequence[Job]) -> Job:
    return job


def _ignore(*args: object) -> None:
    return None


@dataclass(frozen=True)
class PoolEvents:
    """What the pool reports: every row (the workers' and the watchdog's failure rows), the
    workers' devices and ceilings once all are ready (an empty list when none could start),
    every tune trial, each (job, variant) the tune budget left untouched, what runs now."""

    on_row: Callable[[ResultRow], None]
    on_ready: Callable[[list[dict[str, Any]]], None] = _ignore
    on_trial: Callable[[ResultRow], None] = _ignore
    on_skip: Callable[[Job, str], None] = _ignore
    on_activity: Callable[[Activity], None] = _ignore


@dataclass
class _Worker:
    slot: WorkerSlot
    proc: Any
    conn: Connection
    born_s: float
    ready: bool = False
    broken: bool = False
    """The pipe reached end-of-file or a cut message: the worker is gone or going."""
    job: Job | None = None
    current: str | None = None
    started_s: float = 0.0
    planned: bool = False
    """Whether the current variant's plan (JIT compilation) has finished."""
    first_use: bool = False
    finished: set[str] = field(default_factory=set)


class WorkerPool:
    """Runs jobs on worker processes; see the module docstring for the failure rules.

    `run(jobs)` starts the workers, runs the jobs and stops them. As a context manager the pool
    stays up between batches: `with pool: pool.drain(a); pool.drain(b)` measures each worker's
    ceilings once and reports `on_ready` once."""

    def __init__(
        self,
        slots: list[WorkerSlot],
        run_id: str,
        measure_cfg: MeasureConfig,
        events: PoolEvents,
        limits: Limits | None = None,
        prepare: Prepare = _as_is,
        target: WorkerTarget = worker_main,
    ) -> None:
        self._ctx = mp.get_context("spawn")
        self.slots = slots
        self.run_id = run_id
        self.measure_cfg = measure_cfg
        self.events = events
        self.limits = limits if limits is not None else Limits()
        self.prepare = prepare
        self.target = target
        self.workers: dict[int, _Worker] = {}
        self.infos: dict[int, dict[str, Any]] = {}
        self.start_failures: dict[int, int] = {}
        self.given_up: dict[int, str] = {}
        """Slots that never started, with why."""
        self.announced = False
        """`on_ready` was called (once, when every worker first was ready, or none could be)."""
        self.cut_messages = 0
        """Messages cut short by a worker's death (read as end-of-file, then dropped)."""

    # -- lifecycle ---------------------------------------------------------------------------
    def _start(self, slot: WorkerSlot) -> None:
        parent_end, child_end = self._ctx.Pipe(duplex=True)
        proc = self._ctx.Process(
            target=self.target,
            args=(slot, self.run_id, self.measure_cfg, child_end),
            daemon=True,
        )
        proc.start()
        child_end.close()  # the worker holds the only copy: its death closes the pipe
        self.workers[slot.worker_id] = _Worker(slot, proc, parent_end, born_s=time.monotonic())

    def _kill(self, w: _Worker) -> None:
        if w.proc.is_alive():
            w.proc.kill()
        w.proc.join(timeout=10)
        w.conn.close()

    def close(self) -> None:
        for w in self.workers.values():
            if w.proc.is_alive() and not w.broken:
                self._send(w, None)
        deadline = time.monotonic() + 10
        for w in self.workers.values():
            w.proc.join(timeout=max(0.1, deadline - time.monotonic()))
            self._kill(w)

    def _send(self, w: _Worker, item: Job | None) -> bool:
        try:
            w.conn.send(item)
            return True
        except (OSError, ValueError):  # the worker is gone: its pipe is closed
            w.broken = True
            return False

    def __enter__(self) -> WorkerPool:
        for slot in self.slots:
            self._start(slot)
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the loop ----------------------------------------------------------------------------
    def run(self, jobs: list[Job]) -> None:
        """Start the workers, run `jobs`, stop the workers."""
        with self:
            self.drain(jobs)

    def drain(self, jobs: Sequence[Job]) -> None:
        """Run `jobs` on the started workers; return once each has its rows."""
        pending = deque(jobs)
        while pending or any(w.job is not None for w in self.workers.values()):
            self._receive()
            if not self.announced and all(w.ready for w in self.workers.values()):
                self.announced = True
                self.events.on_ready([self.infos[w] for w in sorted(self.infos)])
            for w in list(self.workers.values()):
                self._watch(w, pending)
            if not self.workers:
                self._give_up(pending)
                return
            if self.announced:  # no job before every worker is up: the header comes first
                self._hand_out(pending)

    def _hand_out(self, pending: deque[Job]) -> None:
        for w in self.workers.values():
            if w.ready and w.job is None and pending and not w.broken:
                job = self.prepare(pending.popleft(), tuple(pending))
                w.job, w.current, w.finished = job, None, set()
                if not self._send(w, job):
                    pending.appendleft(job)
                    w.job = None

    def _receive(self) -> None:
        """Wait up to POLL_S for a message or a worker's exit; handle what arrived."""
        waitables: list[Any] = []
        for w in self.workers.values():
            if not w.broken:
                waitables.append(w.conn)
            waitables.append(w.proc.sentinel)
        wait(waitables, timeout=POLL_S)
        for w in list(self.workers.values()):
            self._read_all(w)

    def _read_all(self, w: _Worker) -> None:
        """Every complete message waiting on `w`'s pipe. A dead writer closes the pipe, so this
        never blocks on a worker that is gone: a cut message reads as end-of-file."""
        while not w.broken:
            try:
                if not w.conn.poll():
                    return
                msg: Message = w.conn.recv()
            except EOFError:  # a clean end: the worker closed its pipe between messages
                w.broken = True
                return
            except OSError:  # "got end of file during message": it died while writing
                self.cut_messages += 1
                w.broken = True
                return
            self._handle(w, msg)

    def _handle(self, w: _Worker, msg: Message) -> None:
        if isinstance(msg, Ready):
            w.ready = True
            self.start_failures.pop(w.slot.worker_id, None)
            self.infos[w.slot.worker_id] = {
                "worker": w.slot.worker_id,
                "gpu": w.slot.gpu,
                "device": msg.device,
                "ceilings": msg.ceilings,
            }
            return
        job, now = w.job, time.monotonic()
        if job is None or msg.job_id != job.job_id:
            return  # a message from a job already given up on
        match msg:
            case Started():
                w.current, w.started_s, w.planned = msg.backend, now, False
                w.first_use = msg.first_use
                self._activity(w, job, msg.backend, "plan", now)
            case Planned():
                w.started_s, w.planned = now, True
                self._activity(w, job, msg.backend, "run", now, msg.plan_s)
            case Trial():
                self.events.on_trial(ResultRow.model_validate(msg.row))
            case RowDone():
                self._row_done(w, job, ResultRow.model_validate(msg.row), now)
            case Skipped():
                w.finished.add(msg.backend)
                self.events.on_skip(job, msg.backend)
            case JobDone():
                w.job, w.current = None, None

    def _row_done(self, w: _Worker, job: Job, row: ResultRow, now: float) -> None:
        name = next((b for b in job.backends if job.row_name(b) == row.backend), row.backend)
        w.finished.add(name)
        if w.current == name:
            w.current = None
            self._activity(w, job, name, "idle", now)
        self.events.on_row(row)

    def _activity(
        self, w: _Worker, job: Job, backend: str, phase: Any, now: float, plan_s: float = 0.0
    ) -> None:
        self.events.on_activity(
            Activity(
                w.slot.worker_id,
                job.case_id,
                backend,
                phase,
                now,
                first_use=w.first_use,
                plan_s=plan_s if phase == "run" else None,
            )
        )

    def _watch(self, w: _Worker, pending: deque[Job]) -> None:
        """Kill a worker stuck past its limit; replace a dead one; requeue what is left."""
        now = time.monotonic()
        lim = self.limits
        limit = lim.case_timeout_s if w.planned else lim.plan_timeout_s
        overdue = (
            lim.case_timeout_s > 0
            and w.job is not None
            and w.current is not None
            and now - w.started_s > limit
        )
        late = not w.ready and now - w.born_s > lim.ready_timeout_s
        dead = w.broken or not w.proc.is_alive()
        if not (overdue or dead or late):
            return
        self._read_all(w)  # rows it sent before dying still count
        self._kill(w)  # also collects the exit code of a worker that is already gone
        if not w.ready:
            what = f"did not start within {lim.ready_timeout_s:g} s" if late else "exited"
            self._failed_start(w, what)
            return
        job, current = w.job, w.current
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
            elif current is not None and job.attempt >= 1:
                self._emit_failure(
                    job,
                    current,
                    "error",
                    f"worker process died twice (exit code {w.proc.exitcode})",
                )
                left = [b for b in left if b != current]
            if left:
                attempt = job.attempt + 1 if (not overdue and current is not None) else job.attempt
                pending.appendleft(replace(job, backends=tuple(left), attempt=attempt))
            if current is not None:
                self._activity(w, job, current, "idle", now)
        self._start(w.slot)  # also replaces a worker that exited on purpose (poisoned context)

    def _failed_start(self, w: _Worker, what: str) -> None:
        wid = w.slot.worker_id
        self.start_failures[wid] = self.start_failures.get(wid, 0) + 1
        if self.start_failures[wid] < MAX_START_FAILURES:
            self._start(w.slot)
            return
        del self.workers[wid]
        self.given_up[wid] = (
            f"worker {wid} {what} {MAX_START_FAILURES} times (last exit code {w.proc.exitcode})"
        )

    def _give_up(self, pending: deque[Job]) -> None:
        """No worker could start: every variant not yet run becomes an error row."""
        if not self.announced:
            self.announced = True
            self.events.on_ready([])
        why = "; ".join(self.given_up.values()) or "no worker could start"
        while pending:
            job = pending.popleft()
            for name in job.backends:
                self._emit_failure(job, name, "error", why)

    def _emit_failure(self, job: Job, backend: str, status: str, reason: str) -> None:
        from attnbench.run.sweep import failure_row
        from attnbench.workload.spec import WorkloadSpec

        spec = WorkloadSpec.model_validate(job.spec)
        self.events.on_row(failure_row(self.run_id, spec, job.row_name(backend), status, reason))
