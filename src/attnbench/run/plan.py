"""What a session is given: a `RunPlan` (what to run, where, with which limits) and a `RunSink`
(where its header, rows, trials and progress go). Every kernel timed by attnbench goes through
a session built from these two values: `run`, `tune`, the replay's live steps, `replay-validate`
and the fp8 study's kernel part (`run.session`).

Where the limits of a run are decided:
- `placement` turns `--gpus`/`--workers`/`--ray` into worker slots (a cap on `--workers`
  belongs there);
- `Limits` holds the watchdog's time limits;
- `RunPlan.measure_cfg` holds the timer and the measurement budget.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from attnbench.measure.config import MeasureConfig

if TYPE_CHECKING:
    from attnbench.backends.base import Backend
    from attnbench.measure.hardware import DeviceInfo
    from attnbench.results import Footer, Header, ResultRow
    from attnbench.run.progress import Activity
    from attnbench.workload.spec import WorkloadSpec

READY_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class Limits:
    """The watchdog's limits. A worker past one is killed, the (case, variant) it was on becomes
    a `timeout` row (or an `error` row for a worker that never started), and a fresh worker
    takes what is left."""

    case_timeout_s: float = 600.0
    """Run, accuracy gate and measurement of one (case, variant); 0: no limit."""
    plan_timeout_s: float = 1800.0
    """A variant's `plan`, where libraries JIT-compile kernels on first use."""
    ready_timeout_s: float = READY_TIMEOUT_S
    """A worker's start (imports, ceilings) until it says it is ready."""


@dataclass(frozen=True)
class TunePlan:
    """What makes a session a `tune`: the search's settings and the run's time budget."""

    grid_limit: int
    stage0_ms: float
    budget_s: float | None = None

    def header(self) -> dict[str, Any]:
        """The `tune` entry of the header's settings."""
        return {
            "grid_limit": self.grid_limit,
            "stage_ms": self.stage0_ms,
            "budget_s": self.budget_s,
        }


@dataclass(frozen=True)
class Placement:
    mode: str
    """`inline`, `pool` or `ray`."""
    gpus: tuple[int | None, ...] = ()
    """One entry per worker: a GPU index, or None for a CPU worker."""
    ray_address: str | None = None


def placement(
    info: DeviceInfo,
    gpus: str | None = None,
    workers: int = 0,
    ray: str | None = None,
    visible_gpus: int = 0,
    tune: bool = False,
) -> Placement:
    """Decide where cases run: on a GPU always in worker processes (one per `--gpus` entry,
    default one on `info`'s GPU), on the CPU in this process unless `workers` asks for some, on
    a Ray cluster with `ray`. Raises ValueError for an impossible request."""
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
        return Placement("pool", gpus=(None,) * cap_workers(workers, usable_cpus())[0])
    return Placement("inline")


def usable_cpus() -> int:
    """CPU cores this process may run on (its affinity mask where the OS has one)."""
    import os

    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if affinity is not None else os.cpu_count() or 1


def cap_workers(workers: int, cores: int) -> tuple[int, str | None]:
    """CPU workers to start for `--workers` on `cores` cores: at most one per core (each is a
    process with its own torch and threads: 64 on 2 cores took 8.5 GB and finished nothing),
    and the note saying so when the request was capped."""
    if workers <= cores:
        return workers, None
    return cores, f"workers={workers}: capped at {cores}, the CPU cores this process may use"


def visible_gpus() -> int:
    """CUDA GPUs this process sees (0 without CUDA): what `--gpus all` means."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


@dataclass(frozen=True)
class RunPlan:
    """What to run, where, with which limits: everything a session needs except its sink.

    `cases` x `backends` are the work of `run` and `tune` (`session.run_session`); the studies
    open a session on a plan without cases and hand it their cases one at a time
    (`RunSession.run_case`)."""

    run_id: str
    device: DeviceInfo
    where: Placement
    measure_cfg: MeasureConfig = field(default_factory=MeasureConfig)
    settings: Mapping[str, Any] = field(default_factory=dict)
    """The header's settings: what the run was asked for."""
    limits: Limits = field(default_factory=Limits)
    skip: frozenset[tuple[str, str]] = frozenset()
    """(case_id, row name) pairs already finished (`--resume`): left out of every job."""
    cases: tuple[WorkloadSpec, ...] = ()
    backends: tuple[Backend, ...] = ()
    tune: TunePlan | None = None
    """Set for `tune`: every job searches its variants' knobs (rows `<variant>+tuned`)."""

    def row_name(self, backend: str) -> str:
        """The name this plan's rows carry for `backend` (`<variant>+tuned` when tuning)."""
        from attnbench.backends.variant import tuned_name

        return tuned_name(backend) if self.tune is not None else backend

    @property
    def todo(self) -> int:
        """(case, variant) pairs of `cases` x `backends` this plan sets out to run."""
        keys = ((s.case_id, self.row_name(b.name)) for s in self.cases for b in self.backends)
        return sum(key not in self.skip for key in keys)


def _ignore(*args: object) -> None:
    return None


@dataclass(frozen=True)
class RunSink:
    """Where a session's output goes. The header comes first (once the ceilings are known),
    then every row as it is finished; with `tune`, every trial and each (case_id, variant) the
    budget left untouched; and what runs now, for a progress line. The footer comes last."""

    on_row: Callable[[ResultRow], None] = _ignore
    on_header: Callable[[Header], None] = _ignore
    on_trial: Callable[[ResultRow], None] = _ignore
    on_skip: Callable[[str, str], None] = _ignore
    on_status: Callable[[str], None] = _ignore
    on_activity: Callable[[Activity], None] = _ignore
    on_footer: Callable[[Footer], None] = _ignore
    """Once the run has ended: its wall and setup time (`results.Footer`)."""
    on_note: Callable[[str], None] = _ignore
    """A line to keep above the progress line (the prebuild's plan and outcome)."""
