"""The sweep: for each case and backend variant, check, plan, gate on accuracy, measure, store.

    for spec in specs:                       (inputs and the fp64 reference built once per case)
        for backend in backends:
            available? check? -> plan (plan_us) -> poisoned run -> accuracy gate
            -> measure(runner) -> the timed output checked again -> metrics -> row

Before a case is built, its memory estimate (`workload.memory`) is checked against the memory
free on the device: a variant that cannot fit is an `unsupported` row saying how much it needs
and how much is free (`details.memory`), never a process the OS kills.

Every failure becomes a row: `unsupported` (with the backend's reason), `mismatch` (wrong or
non-finite output: never timed; or a timed output, a CUDA graph's replays included, that
fails the same check after timing), `oom` (memory freed, the sweep goes on), `error` (the
exception's type and message). Nothing here knows a particular library.
"""

from __future__ import annotations

import gc
import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from attnbench.backends.base import Backend, PlannedRun, UnsupportedCase
from attnbench.backends.reference import reference_attention
from attnbench.measure.config import MeasureConfig
from attnbench.measure.engine import measure
from attnbench.measure.hardware import Ceilings, DeviceInfo
from attnbench.measure.l2 import L2Flusher
from attnbench.results import ResultRow
from attnbench.run.gate import check_timed_output, gate
from attnbench.run.rows import TimedRun, failure_row, ok_row
from attnbench.workload import memory
from attnbench.workload.inputs import AttentionInputs, make_inputs
from attnbench.workload.spec import WorkloadSpec

PLAN_REPEATS = 5
__all__ = ["SweepContext", "failure_row", "fit_memory", "order_cases", "run_backend", "run_case"]


@dataclass
class SweepContext:
    run_id: str
    info: DeviceInfo
    measure_cfg: MeasureConfig
    ceilings: Ceilings | None = None
    skip: set[tuple[str, str]] = field(default_factory=set)
    """(case_id, backend) pairs to leave out (already finished, for --resume)."""
    on_row: Callable[[ResultRow], None] = lambda row: None
    on_start: Callable[[str, bool], None] = lambda backend, first_use: None
    """Called before each plan of a variant (each (case, variant), each tune trial) with its
    name and whether it is the variant's first plan on this shape family in this process
    (where libraries JIT-compile or load kernels): for watchdogs and progress lines."""
    on_planned: Callable[[str, float], None] = lambda backend, plan_s: None
    """Called once `plan` has returned, with its wall time in seconds: the watchdog then
    switches from the plan time limit to the run time limit."""
    planned_families: set[tuple[str, tuple[object, ...]]] = field(default_factory=set)
    """(variant, shape family) pairs planned in this process already (see `shape_family`)."""
    stop_when_poisoned: bool = False
    """After an `error` row, raise DeviceLost if the CUDA context is poisoned, rather than run
    the case's other variants in it (each would fail): worker processes set it, and the pool
    hands those variants to a fresh worker."""
    free_memory: Callable[[torch.device], int | None] | None = None
    """Bytes free where the case's tensors go (default `workload.memory.free_bytes`; a
    result of None means unknown: nothing is refused)."""
    _flusher: L2Flusher | None = None
    _availability: dict[str, str | None] = field(default_factory=dict)

    @property
    def device(self) -> torch.device:
        return self.info.torch_device

    def flusher(self) -> L2Flusher:
        if self._flusher is None:
            self._flusher = L2Flusher(self.device, self.info.l2_bytes)
        return self._flusher

    def availability(self, backend: Backend) -> str | None:
        if backend.name not in self._availability:
            try:
                self._availability[backend.name] = backend.available()
            except Exception as exc:  # a library that crashes on import is unavailable
                self._availability[backend.name] = f"{type(exc).__name__}: {exc}"[:300]
        return self._availability[backend.name]

    def first_use(self, backend: str, spec: WorkloadSpec) -> bool:
        """True the first time `backend` plans a case of `spec`'s shape family here."""
        key = (backend, shape_family(spec))
        first = key not in self.planned_families
        self.planned_families.add(key)
        return first


def shape_family(spec: WorkloadSpec) -> tuple[object, ...]:
    """What a library compiles a kernel for: dtypes, heads, head_dim, layout, page size, kind.
    Cases of one family share compiled kernels; the first plan of a family pays the compile."""
    return (
        spec.dtype,
        spec.kv_dtype,
        spec.num_qo_heads,
        spec.num_kv_heads,
        spec.head_dim,
        spec.kv_layout,
        spec.page_size,
        spec.kind,
    )


KIND_ORDER = ("decode", "shared_prefix", "tree", "append", "prefill")  # decode answer first


def order_cases(specs: Iterable[WorkloadSpec]) -> list[WorkloadSpec]:
    """Decode cases first (`KIND_ORDER`), then group cases that share compiled kernels (dtype,
    kv dtype, shape, layout, page size) and sort by size within a group, so JIT modules and
    allocator blocks are reused."""

    def key(s: WorkloadSpec) -> tuple[object, ...]:
        rank = KIND_ORDER.index(s.kind) if s.kind in KIND_ORDER else len(KIND_ORDER)
        return (rank, *shape_family(s), s.total_kv, s.case_id)

    return sorted(specs, key=key)


def run_sweep(
    specs: list[WorkloadSpec], backends: list[Backend], ctx: SweepContext
) -> list[ResultRow]:
    rows: list[ResultRow] = []
    for spec in order_cases(specs):
        todo = [b for b in backends if (spec.case_id, b.name) not in ctx.skip]
        if todo:
            rows += run_case(spec, todo, ctx)
    return rows


def run_case(spec: WorkloadSpec, backends: list[Backend], ctx: SweepContext) -> list[ResultRow]:
    """All variants on one case; inputs and the reference are built once and shared."""
    rows: list[ResultRow] = []

    def emit(row: ResultRow) -> None:
        rows.append(row)
        ctx.on_row(row)

    runnable = runnable_on(spec, backends, ctx, emit)
    if not runnable:
        return rows

    inputs: AttentionInputs | None = None
    oracle: torch.Tensor | None = None
    try:
        inputs = make_inputs(spec, ctx.device)
        oracle = reference_attention(inputs)
    except Exception as exc:
        status = "oom" if _is_oom(exc) else "error"
        for b in runnable:
            emit(_row(ctx, spec, b, status, f"building inputs/reference: {_describe(exc)}"))
        release_memory()
        return rows

    for b in runnable:
        row = run_backend(spec, b, inputs, oracle, ctx)
        emit(row)
        release_memory()
        if row.status == "error" and ctx.stop_when_poisoned:
            check_device_alive(row)
    del inputs, oracle
    release_memory()
    return rows


class DeviceLost(RuntimeError):
    """A run left the GPU unusable (sticky CUDA error): later runs in this process would fail."""


def check_device_alive(row: ResultRow) -> None:
    """After an `error` row on CUDA, raise DeviceLost if the context is poisoned."""
    if not (torch.cuda.is_available() and torch.cuda.is_initialized()):
        return
    try:
        torch.cuda.synchronize()
    except Exception as exc:  # sticky error: illegal address, device-side assert...
        raise DeviceLost(f"{row.backend} {row.details.get('knobs')}: {row.reason}; {exc}") from exc


def runnable_on(
    spec: WorkloadSpec,
    backends: list[Backend],
    ctx: SweepContext,
    emit: Callable[[ResultRow], None],
) -> list[Backend]:
    """The variants that can run `spec` here: available, accepted by `check`, and fitting in
    the free memory. Each other variant becomes a row through `emit`: `unsupported` with the
    reason, or `error` when `check` itself raised. The one check loop of `run` and `tune`."""
    runnable: list[Backend] = []
    for b in backends:
        why = ctx.availability(b)
        if why is None:
            try:
                unsupported = b.check(spec, ctx.info)
                why = unsupported.reason if unsupported else None
            except Exception as exc:
                emit(_row(ctx, spec, b, "error", f"check failed: {_describe(exc)}"))
                continue
        if why is not None:
            emit(_row(ctx, spec, b, "unsupported", why))
        else:
            runnable.append(b)
    return fit_memory(spec, runnable, ctx, emit)


def fit_memory(
    spec: WorkloadSpec,
    backends: list[Backend],
    ctx: SweepContext,
    emit: Callable[[ResultRow], None],
) -> list[Backend]:
    """The variants whose estimated peak fits in the free memory; the others become
    `unsupported` rows naming what they need and what is free (`details.memory`)."""
    if not backends:
        return backends
    free = (ctx.free_memory or memory.free_bytes)(ctx.device)
    if free is None:
        return backends
    where = "GPU" if ctx.device.type == "cuda" else "host"
    kept: list[Backend] = []
    for b in backends:
        est = memory.estimate(spec, b.name)
        reason = memory.too_big(est, free, where)
        if reason is None:
            kept.append(b)
            continue
        info = est.as_dict() | {"free_bytes": free, "where": where}
        emit(_row(ctx, spec, b, "unsupported", reason, details={"memory": info}))
    return kept


@dataclass
class _Attempt:
    """What one (case, variant) has built so far: a failure row names it."""

    planned: PlannedRun | None = None
    timing: dict[str, Any] = field(default_factory=dict)
    base_mem: int = 0
    plan_us: float = 0.0
    first_use: bool = False


def run_backend(
    spec: WorkloadSpec,
    backend: Backend,
    inputs: AttentionInputs,
    oracle: torch.Tensor,
    ctx: SweepContext,
    knobs: dict[str, Any] | None = None,
) -> ResultRow:
    """One (case, variant): never raises; any failure is the returned row."""
    attempt = _Attempt(first_use=ctx.first_use(backend.name, spec))
    ctx.on_start(backend.name, attempt.first_use)
    try:
        _build(spec, backend, inputs, ctx, knobs, attempt)
        return _gate_and_time(spec, backend, inputs, oracle, ctx, attempt)
    except UnsupportedCase as exc:
        return _row(ctx, spec, backend, "unsupported", str(exc))
    except Exception as exc:
        from attnbench.backends.flashinfer_refusal import library_refusal

        if (refusal := library_refusal(str(exc))) is not None:  # "Unsupported group_size: 7"
            return _row(ctx, spec, backend, "unsupported", refusal)
        status = "oom" if _is_oom(exc) else "error"
        resolved = attempt.planned.resolved if attempt.planned is not None else ""
        return _row(
            ctx,
            spec,
            backend,
            status,
            _describe(exc),
            resolved=resolved,
            details=attempt.timing | ({"traceback": _tb_tail(exc)} if status == "error" else {}),
        )
    finally:
        attempt.planned = None


def _build(
    spec: WorkloadSpec,
    backend: Backend,
    inputs: AttentionInputs,
    ctx: SweepContext,
    knobs: dict[str, Any] | None,
    attempt: _Attempt,
) -> None:
    """Plan `backend` for `spec` into `attempt`: the one-off plan's time, then the replan's."""
    dev = ctx.device
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
        torch.cuda.reset_peak_memory_stats(dev)
        attempt.base_mem = torch.cuda.memory_allocated(dev)
    t0 = time.perf_counter()
    attempt.planned = backend.plan(spec, inputs, knobs)
    _sync(dev)
    first_plan_s = time.perf_counter() - t0
    # the one-off plan() that built this runner: on a family's first use it includes the
    # library's JIT compile (or loading compiled kernels); plan_us is the per-step replan
    attempt.timing = {"first_plan_s": round(first_plan_s, 6)}
    if attempt.first_use:
        attempt.timing["first_use"] = True
    ctx.on_planned(backend.name, first_plan_s)
    attempt.plan_us = _time_replan(attempt.planned, dev)


def _gate_and_time(
    spec: WorkloadSpec,
    backend: Backend,
    inputs: AttentionInputs,
    oracle: torch.Tensor,
    ctx: SweepContext,
    attempt: _Attempt,
) -> ResultRow:
    """Gate the planned run against the oracle, time it, re-check the timed output: the row."""
    planned = attempt.planned
    assert planned is not None
    dev = ctx.device
    acc, ref = gate(planned, inputs, oracle, spec)
    details: dict[str, Any] = (
        dict(planned.details) | attempt.timing | {"plan_mode": planned.plan_mode}
    )
    mismatch = {"resolved": planned.resolved, "details": details}
    if not acc.passed:
        return _row(ctx, spec, backend, "mismatch", acc.reason, accuracy=acc.as_dict(), **mismatch)
    m = measure(
        planned.run,
        ctx.measure_cfg,
        device=dev,
        flusher=ctx.flusher(),
        graph_safe=planned.graph_safe,
        poison=[planned.out] if planned.out is not None else [],
    )
    timed = check_timed_output(planned, m, ref, acc.precision)
    del ref
    if timed is not None and not timed.passed:
        reason = f"the timed output ({m.timer}, after {m.stats.n} timed calls): {timed.reason}"
        accuracy = timed.as_dict() | {"timed_output": True}
        return _row(ctx, spec, backend, "mismatch", reason, accuracy=accuracy, **mismatch)
    cuda = dev.type == "cuda"
    peak = (torch.cuda.max_memory_allocated(dev) - attempt.base_mem) if cuda else None
    if timed is not None:
        acc = replace(acc, timed_rel_l2_err=timed.rel_l2_err)
    timed_run = TimedRun(planned, attempt.plan_us, m, acc.as_dict(), peak, details)
    return ok_row(ctx.run_id, ctx.info, ctx.ceilings, spec, backend.name, timed_run)


def _row(
    ctx: SweepContext,
    spec: WorkloadSpec,
    backend: Backend,
    status: str,
    reason: str,
    **extra: Any,
) -> ResultRow:
    return failure_row(ctx.run_id, spec, backend.name, status, reason, **extra)


def _time_replan(planned: PlannedRun, dev: torch.device) -> float:
    """Host time of the per-step planning work, median of a few repeats (0 if none)."""
    replan = planned.replan
    if replan is None:
        return 0.0
    samples = []
    for _ in range(PLAN_REPEATS):
        _sync(dev)
        t0 = time.perf_counter()
        replan()
        _sync(dev)
        samples.append((time.perf_counter() - t0) * 1e6)
    samples.sort()
    return samples[len(samples) // 2]


def _sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def _is_oom(exc: BaseException) -> bool:
    return (
        isinstance(exc, torch.cuda.OutOfMemoryError | MemoryError)
        or "out of memory" in str(exc).lower()
    )


def _describe(exc: BaseException, limit: int = 400) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}"[:limit]


def _tb_tail(exc: BaseException, lines: int = 6) -> str:
    tb = traceback.format_exception(type(exc), exc, exc.__traceback__)
    return "".join(tb[-lines:])[-1500:]


def release_memory() -> None:
    """Release what the last run left: cyclic garbage (gc), then the allocator's cached
    blocks. What survives a collection here is long-lived (modules, library caches) and is
    frozen (`gc.freeze`), so the next collection scans only what was made since: a full
    collection over torch's, Inductor's and sympy's objects took 0.25 s each on an H100 host,
    31 s of one default run's 77 s of cases. Frozen objects are still freed when nothing
    refers to them; only a reference cycle among them would stay."""
    gc.collect()
    gc.freeze()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
