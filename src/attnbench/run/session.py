"""A session: where jobs execute and how their rows reach the sink. Every kernel attnbench
times runs in one: `run` and `tune` (`run_session`: every case of the plan with every variant),
the replay's live steps, `replay-validate` and the fp8 study's kernel part (each opens a
`RunSession` and hands it its cases, `RunSession.run_case`, with its own job kind). So they share
the worker pool and its watchdog, the accuracy gate, the measurement and the rows.

Three ways, same rows:
- in this process (CPU, no workers): simplest, used for quick CPU runs and tests; the same
  `worker.run_job` a worker runs;
- a pool of worker processes (`pool.WorkerPool`): always on GPUs (one per GPU, or as
  `--gpus` says), optional on CPU (`--workers N`); protects the session from hangs and crashes;
- Ray tasks (`--ray ADDRESS`): the same cases on a cluster, one GPU per task (`run` only).

The header row is written once the ceilings are known (measured here, or by the workers:
then every worker's device and ceilings are in the header's `workers`). `tune` is a mode of
`run_session`: its jobs carry a `TuneJob` (each gets its share of the time budget when handed
out) and its rows are `<variant>+tuned`, with every trial going to the sink's `on_trial`.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from attnbench.measure.hardware import Ceilings, DeviceInfo
from attnbench.results import Footer, Header, ResultRow, provenance
from attnbench.run.jobs import Job, JobKind, TuneJob
from attnbench.run.plan import RunPlan, RunSink
from attnbench.run.profiling import profiled
from attnbench.run.progress import Activity, fmt_s

if TYPE_CHECKING:
    from attnbench.run.pool import Prepare
    from attnbench.run.prebuild import Prebuild
    from attnbench.run.sweep import SweepContext
    from attnbench.workload.spec import WorkloadSpec


def make_header(
    run_id: str,
    settings: Mapping[str, Any],
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
        settings=dict(settings),
        device=info.as_dict(),
        ceilings=ceil,
        spec_sheet={"bandwidth_gbps": sheet.bandwidth_gbps, "tflops": sheet.tflops}
        if sheet
        else None,
        **extra,
    )


def run_session(plan: RunPlan, sink: RunSink) -> None:
    """`run` and `tune`: every (case, variant) of `plan` not in its `skip` (keys as the rows
    name them: `x+tuned` when tuning), cases grouped by shape family (`sweep.order_cases`)."""
    from attnbench.run.sweep import order_cases

    t0 = time.monotonic()
    kind = None if plan.tune is None else TuneJob(plan.tune.grid_limit, plan.tune.stage0_ms)
    names = [b.name for b in plan.backends]
    pre = _start_prebuild(plan, sink)
    report: dict[str, Any] | None = None
    setup_s: float | None = None
    try:
        with profiled("run"), RunSession(plan, sink) as session:
            jobs = [session.job(spec, names, kind) for spec in order_cases(plan.cases)]
            report = _finish_prebuild(pre, sink)
            setup_s = time.monotonic() - t0
            session.run_jobs([j for j in jobs if j is not None], _budget(plan))
        report = _first_use(pre, report, sink)
    except KeyboardInterrupt:  # the cut run's own record of its time, then the rows it kept
        sink.on_footer(_footer(plan, t0, setup_s, report, interrupted=True))
        raise
    finally:  # no prebuild process outlives the run (Ctrl-C while the workers start)
        if pre is not None:
            pre.stop()
    sink.on_footer(_footer(plan, t0, setup_s, report))


def _footer(
    plan: RunPlan,
    t0: float,
    setup_s: float | None,
    report: dict[str, Any] | None,
    interrupted: bool = False,
) -> Footer:
    """The run's footer; a run cut during its setup counts all of its time as setup."""
    wall_s = round(time.monotonic() - t0, 1)
    setup = wall_s if setup_s is None else round(setup_s, 1)
    return Footer(
        run_id=plan.run_id, wall_s=wall_s, setup_s=setup, prebuild=report, interrupted=interrupted
    )


def _start_prebuild(plan: RunPlan, sink: RunSink) -> Prebuild | None:
    """The prebuild's processes (`run.prebuild`), started before the workers so that both
    start up side by side; None where there is nothing to build or no prebuild on this run."""
    from attnbench.run import prebuild

    if not prebuild.enabled(plan):
        return None
    try:
        needs = prebuild.plan_needs(plan)
        if not (needs.modules or needs.flex):
            return None
        pre = prebuild.Prebuild(needs)
    except Exception as exc:  # never fails the run: the jobs compile on first use
        why = f"{type(exc).__name__}: {exc}"[:120]
        sink.on_note(f"prebuild skipped ({why}); kernels compile on first use")
        return None
    expected = prebuild.expected_s(needs)
    sink.on_note(f"prebuild: compiling {pre.what()} (expected ~{fmt_s(expected)})")
    for line in prebuild.plan_lines(needs):
        sink.on_note(line)
    return pre


def _finish_prebuild(pre: Prebuild | None, sink: RunSink) -> dict[str, Any] | None:
    """Wait for the prebuild; its report (for the footer), its outcome as notes."""
    from attnbench.run import prebuild

    if pre is None:
        return None
    try:
        report = pre.wait(sink.on_status)
    except Exception as exc:
        why = f"{type(exc).__name__}: {exc}"[:300]
        sink.on_note(f"prebuild failed ({why[:120]}); kernels compile on first use")
        return {"error": why}
    for line in prebuild.summary(report):
        sink.on_note(line)
    return report


def _first_use(
    pre: Prebuild | None, report: dict[str, Any] | None, sink: RunSink
) -> dict[str, Any] | None:
    """The prebuild's report with the modules the jobs still compiled (`first_use`), said."""
    from attnbench.run import prebuild

    if pre is None or report is None:
        return report
    builds = pre.first_use()
    line = prebuild.first_use_line(builds)
    if line is not None:
        sink.on_note(line)
    return {**report, "first_use": builds}


class RunSession:
    """One session on `plan`: opened once (ceilings measured, workers started, header written),
    then any number of jobs, closed once. Rows go to the sink as they are finished; each
    `run_jobs` / `run_case` also returns the rows of its own jobs."""

    def __init__(self, plan: RunPlan, sink: RunSink) -> None:
        self.plan = plan
        self.sink = replace(sink, on_row=self._row)
        self._forward = sink.on_row
        self._rows: list[ResultRow] = []
        self._next_id = 0
        self._runner: _Runner | None = None

    def __enter__(self) -> RunSession:
        mode = self.plan.where.mode
        runners: dict[str, type[_Inline | _Pool | _Ray]] = {
            "inline": _Inline,
            "pool": _Pool,
            "ray": _Ray,
        }
        self._runner = runners[mode](self.plan, self.sink)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._runner is not None:
            self._runner.close()
            self._runner = None

    def job(self, spec: WorkloadSpec, backends: Sequence[str], kind: JobKind = None) -> Job | None:
        """A job of `spec` with the `backends` not finished yet (`plan.skip`); None if none."""
        probe, skip = Job(0, {}, (), kind=kind), self.plan.skip
        names = tuple(n for n in backends if (spec.case_id, probe.row_name(n)) not in skip)
        if not names:
            return None
        self._next_id += 1
        return Job(self._next_id, spec.model_dump(mode="json"), names, 0, spec.case_id, kind)

    def run_case(
        self, spec: WorkloadSpec, backends: Sequence[str], kind: JobKind = None
    ) -> list[ResultRow]:
        """One case with `backends` (a job of `kind`); its rows."""
        job = self.job(spec, backends, kind)
        return self.run_jobs([job] if job is not None else [])

    def run_jobs(self, jobs: Sequence[Job], prepare: Prepare | None = None) -> list[ResultRow]:
        """`jobs` in order (workers take them as they come free); the rows they wrote."""
        if self._runner is None:
            raise RuntimeError("RunSession.run_jobs outside `with RunSession(...)`")
        self._rows = []
        self._runner.run(list(jobs), prepare or _as_is)
        rows, self._rows = self._rows, []
        return rows

    def _row(self, row: ResultRow) -> None:
        self._rows.append(row)
        self._forward(row)


def _as_is(job: Job, pending: Sequence[Job]) -> Job:
    return job


class _Runner(ABC):
    """Where a session's jobs execute: opened with the session, closed with it."""

    @abstractmethod
    def run(self, jobs: list[Job], prepare: Prepare) -> None:
        """Run `jobs` in order, each through `prepare` first."""

    def close(self) -> None:
        return None


class _Inline(_Runner):
    """Every job in this process, through the same `run_job` a worker runs."""

    def __init__(self, plan: RunPlan, sink: RunSink) -> None:
        from attnbench.measure.hardware import measure_ceilings
        from attnbench.run.sweep import SweepContext

        info = plan.device
        sink.on_status("measuring this device's ceilings (copy bandwidth, matmul TFLOP/s)")
        ceilings = measure_ceilings(info, quick=info.kind == "cpu")
        sink.on_header(make_header(plan.run_id, plan.settings, info, ceilings))
        self.base: SweepContext = SweepContext(
            run_id=plan.run_id, info=info, measure_cfg=plan.measure_cfg, ceilings=ceilings
        )
        self.outlet = _Outlet(sink)

    def run(self, jobs: list[Job], prepare: Prepare) -> None:
        from attnbench.run.worker import run_job

        for i, job in enumerate(jobs):
            run_job(prepare(job, jobs[i + 1 :]), self.base, self.outlet)


class _Pool(_Runner):
    """The jobs on worker processes (`pool.WorkerPool`), started once for the session."""

    def __init__(self, plan: RunPlan, sink: RunSink) -> None:
        from attnbench.run.pool import PoolEvents, WorkerPool
        from attnbench.run.worker import WorkerSlot

        def ready(infos: list[dict[str, Any]]) -> None:
            ceilings = infos[0]["ceilings"] if infos else None  # none: no worker could start
            sink.on_header(make_header(plan.run_id, plan.settings, plan.device, ceilings, infos))

        events = PoolEvents(
            on_row=sink.on_row,
            on_ready=ready,
            on_trial=sink.on_trial,
            on_skip=lambda job, backend: sink.on_skip(job.case_id, backend),
            on_activity=sink.on_activity,
        )
        slots = [WorkerSlot(i, g) for i, g in enumerate(plan.where.gpus)]
        sink.on_status(f"starting {len(slots)} worker(s); each measures its device's ceilings")
        self.pool = WorkerPool(slots, plan.run_id, plan.measure_cfg, events, plan.limits)
        self.pool.__enter__()

    def run(self, jobs: list[Job], prepare: Prepare) -> None:
        self.pool.prepare = prepare
        self.pool.drain(jobs)

    def close(self) -> None:
        self.pool.close()


class _Ray(_Runner):
    """The jobs as Ray tasks (`run.raycluster`): plain measurement jobs only."""

    def __init__(self, plan: RunPlan, sink: RunSink) -> None:
        from attnbench.run.raycluster import connect

        self.plan, self.sink = plan, sink
        address = plan.where.ray_address or "local"
        sink.on_status(f"connecting to Ray at {address}")
        connect(address)  # before the header: a cluster that cannot be reached writes nothing
        sink.on_header(make_header(plan.run_id, plan.settings, plan.device, None))

    def run(self, jobs: list[Job], prepare: Prepare) -> None:
        from attnbench.run.raycluster import run_on_ray

        if any(j.kind is not None for j in jobs):
            raise ValueError("ray: only `run` jobs run as Ray tasks")
        p = self.plan
        address = p.where.ray_address or "local"
        run_on_ray(address, jobs, p.run_id, p.measure_cfg, p.device.kind, self.sink.on_row)


def _budget(plan: RunPlan) -> Prepare:
    """How a job is handed out: as it is, or (tune with a budget) with its share of the time
    left, weighted by grid size against the jobs still waiting (`tune_search.share_s`)."""
    from attnbench.run.tune_search import Deadline, final_reserve_s, knob_grid, share_s

    tune = plan.tune
    if tune is None or tune.budget_s is None:
        return _as_is
    deadline = Deadline(tune.budget_s)
    grid = {b.name: len(knob_grid(b.knobs)) for b in plan.backends}
    reserve_s = final_reserve_s(plan.measure_cfg)
    workers = len(plan.where.gpus) or 1

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
        return replace(job, kind=replace(job.tune, budget_s=share))

    return prepare


class _Outlet:
    """The sink, as the in-process path's `worker.JobSink`."""

    def __init__(self, sink: RunSink) -> None:
        self.sink = sink

    def _activity(self, job: Job, backend: str, phase: Any, **extra: Any) -> None:
        now = time.monotonic()
        self.sink.on_activity(Activity(0, job.case_id, backend, phase, now, **extra))

    def started(self, job: Job, backend: str, first_use: bool) -> None:
        self._activity(job, backend, "plan", first_use=first_use)

    def planned(self, job: Job, backend: str, plan_s: float) -> None:
        self._activity(job, backend, "run", plan_s=plan_s)

    def trial(self, job: Job, row: ResultRow) -> None:
        self.sink.on_trial(row)

    def row(self, job: Job, row: ResultRow) -> None:
        self.sink.on_row(row)
        self._activity(job, row.backend, "idle")

    def skipped(self, job: Job, backend: str) -> None:
        self.sink.on_skip(job.case_id, backend)
