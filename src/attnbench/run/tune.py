"""Knob search on a case: for each backend variant with knobs, find the fastest legal
configuration. `tune` is a mode of the run path: the parent hands out cases as jobs (with a
share of the time budget) to the same workers, under the same watchdog; a worker runs
`tune_case` where `run` runs `sweep.run_case`.

    tune_case(case):                       the sweep's check loop, inputs + fp64 reference once
        for variant with knobs:            a share of the job's budget, weighted by grid size
            search (tune_search.search):   every config, or successive halving
            re-measure the winner and the default with the normal measurement config
            -> a trial row per measurement, one `<variant>+tuned` row

Every trial goes through `sweep.run_backend` (plan, accuracy gate against the reference, then
timing), so a configuration that computes a wrong answer never wins. A configuration the backend
refuses (`plan` raising ValueError or UnsupportedCase) is skipped and counted; one that fails
(mismatch, error, oom) is dropped and counted. Configurations that differ only in knobs the
backend reports as ignored for this case (`details.knobs_ignored`) are measured once.
Kernels compiled by one trial are reused by the next (same process).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

import torch

from attnbench.backends.base import Backend
from attnbench.backends.reference import reference_attention
from attnbench.backends.variant import TUNED_SUFFIX, tuned_name
from attnbench.measure.config import MeasureConfig
from attnbench.results import ResultRow
from attnbench.run.sweep import (
    DeviceLost,
    SweepContext,
    check_device_alive,
    failure_row,
    release_memory,
    run_backend,
    runnable_on,
)
from attnbench.run.tune_search import (
    DEFAULT_OPTIONS,
    FINAL_OVERHEAD_S,
    GRID_LIMIT,
    STAGE0_MS,
    TRIAL_WARMUP_MS,
    Deadline,
    Emit,
    Knobs,
    Search,
    TrialFn,
    TuneOptions,
    annotate,
    ceiling_fraction,
    final_reserve_s,
    knob_grid,
    knob_key,
    knob_label,
    search,
    share_s,
)
from attnbench.workload.inputs import AttentionInputs, make_inputs
from attnbench.workload.spec import WorkloadSpec

__all__ = [
    "FINAL_OVERHEAD_S",
    "GRID_LIMIT",
    "STAGE0_MS",
    "TRIAL_WARMUP_MS",
    "TUNED_SUFFIX",
    "Deadline",
    "DeviceLost",
    "Knobs",
    "TuneOptions",
    "TuneOutcome",
    "ceiling_fraction",
    "knob_grid",
    "knob_key",
    "knob_label",
    "make_trial",
    "search",
    "tune_case",
    "tune_variant",
]


@dataclass
class TuneOutcome:
    case_id: str
    variant: str
    search: Search | None
    tuned: ResultRow


def tune_variant(
    spec: WorkloadSpec,
    backend: Backend,
    ctx: SweepContext,
    trial: TrialFn,
    deadline: Deadline,
    on_trial: Emit,
    opts: TuneOptions = DEFAULT_OPTIONS,
) -> TuneOutcome:
    """Search one variant's knobs on one case, re-measure winner and default, build the
    `<variant>+tuned` row (returned; the caller writes it)."""
    grid = knob_grid(backend.knobs)
    default = grid[0]
    found = search(grid, trial, ctx.measure_cfg, deadline, on_trial, opts, after_failure)
    name = tuned_name(backend.name)
    if found.winner is None:
        first = found.default_row
        status = first.status if first is not None else "error"
        why = found.failures[0] if found.failures else (first.reason if first else "no trial ran")
        tuned = failure_row(
            ctx.run_id,
            spec,
            name,
            status,
            f"no knob configuration passed ({found.trials} tried): {why}"[:400],
            details={"tune": found.summary()},
        )
        return TuneOutcome(spec.case_id, backend.name, found, tuned)

    def final(knobs: Knobs, role: str) -> ResultRow:
        row = annotate(trial(knobs, ctx.measure_cfg), knobs, {"stage": "final", "role": role})
        on_trial(row)
        return row

    winner_row = final(found.winner, "winner") if found.winner != default else None
    default_row: ResultRow | None = None
    if found.default_row is not None and found.default_row.status == "ok":
        default_row = final(default, "default")  # written last: the variant's normal row
    best, best_knobs, notes = _pick_best(found, winner_row, default_row, default)
    if best is None or best.status != "ok":
        tuned = failure_row(
            ctx.run_id,
            spec,
            name,
            best.status if best else "error",
            f"re-measure failed: {best.reason if best else 'no row'}"[:400],
            details={"tune": found.summary()},
        )
        return TuneOutcome(spec.case_id, backend.name, found, tuned)
    tuned = _tuned_row(name, found, (best, best_knobs), (default_row, default), notes)
    return TuneOutcome(spec.case_id, backend.name, found, tuned)


def _pick_best(
    found: Search, winner_row: ResultRow | None, default_row: ResultRow | None, default: Knobs
) -> tuple[ResultRow | None, Knobs, list[str]]:
    """The re-measured row to publish and its knobs: the search winner unless it failed or was
    not faster than the default on re-measure (then the default, with a note saying so)."""
    assert found.winner is not None
    best, best_knobs = winner_row, found.winner
    notes: list[str] = []
    default_ok = default_row is not None and default_row.status == "ok"
    if (
        best is None
        or best.status != "ok"
        or (
            default_ok
            and default_row is not None
            and (default_row.latency_us or math.inf) <= (best.latency_us or math.inf)
        )
    ):
        if best is not None:
            notes.append(
                f"search winner {knob_label(found.winner, default)} "
                f"{'failed' if best.status != 'ok' else 'was not faster'} on re-measure"
            )
        best, best_knobs = default_row, default
    return best, best_knobs, notes


def _tuned_row(
    name: str,
    found: Search,
    best_and_knobs: tuple[ResultRow, Knobs],
    default_and_knobs: tuple[ResultRow | None, Knobs],
    notes: list[str],
) -> ResultRow:
    """The `<variant>+tuned` row: the best re-measured row, renamed, with its knobs, the
    search's summary and (when the default was re-measured) the speed-up over it."""
    best, best_knobs = best_and_knobs
    default_row, default = default_and_knobs
    details = dict(best.details)
    details.pop("tune", None)
    details["knobs"] = dict(best_knobs)
    details["knobs_label"] = knob_label(best_knobs, default)
    summary = found.summary()
    if found.winner != best_knobs:
        summary["search_winner"] = dict(found.winner or {})
    details["tune"] = summary
    if default_row is not None and default_row.status == "ok" and default_row.latency_us:
        details["default_latency_us"] = default_row.latency_us
        details["default_frac_measured"] = ceiling_fraction(default_row)
        details["speedup_vs_default"] = default_row.latency_us / float(best.latency_us or math.inf)
    reason = "; ".join([*notes, best.reason] if best.reason else notes)
    return best.model_copy(update={"backend": name, "details": details, "reason": reason})


def tune_case(
    spec: WorkloadSpec,
    backends: list[Backend],
    ctx: SweepContext,
    deadline: Deadline,
    on_trial: Emit,
    on_tuned: Emit,
    on_skipped: Callable[[str], None] = lambda backend: None,
    opts: TuneOptions = DEFAULT_OPTIONS,
) -> list[TuneOutcome]:
    """Tune every variant with knobs on one case within `deadline` (a job's share of the run's
    budget). `on_tuned` receives the `+tuned` rows (and `unsupported`/`error` ones for variants
    that cannot run here), `on_trial` every trial, `on_skipped` the variants the budget left
    untouched. Raises DeviceLost after writing the variant's error row when a trial leaves the
    GPU unusable (the worker then exits and a fresh one takes the variants left)."""
    tunable = [b for b in backends if b.knobs]
    runnable = runnable_on(spec, tunable, ctx, lambda row: on_tuned(_tuned_name(row)))
    outcomes: list[TuneOutcome] = []
    if not runnable:
        return outcomes
    if deadline.expired():
        for b in runnable:
            on_skipped(b.name)
        return outcomes
    try:
        inputs = make_inputs(spec, ctx.device)
        oracle = reference_attention(inputs)
    except Exception as exc:
        status = "oom" if "out of memory" in str(exc).lower() else "error"
        reason = f"building inputs/reference: {type(exc).__name__}: {exc}"[:400]
        for b in runnable:
            on_tuned(failure_row(ctx.run_id, spec, tuned_name(b.name), status, reason))
        release_memory()
        return outcomes
    weight_left = sum(len(knob_grid(b.knobs)) for b in runnable)
    pairs_left = len(runnable)
    reserve_s = final_reserve_s(ctx.measure_cfg)
    for b in runnable:
        weight = len(knob_grid(b.knobs))
        if deadline.expired():
            on_skipped(b.name)
        else:
            share = share_s(deadline.left(), weight, 1, weight_left, pairs_left, reserve_s)
            trial = make_trial(spec, b, inputs, oracle, ctx)
            try:
                out = tune_variant(
                    spec, b, ctx, trial, deadline.sub(max(share - reserve_s, 0.0)), on_trial, opts
                )
            except DeviceLost as exc:
                reason = f"CUDA error: the GPU is unusable after a trial: {exc}"[:400]
                on_tuned(failure_row(ctx.run_id, spec, tuned_name(b.name), "error", reason))
                raise
            on_tuned(out.tuned)
            outcomes.append(out)
            release_memory()
        weight_left -= weight
        pairs_left -= 1
    del inputs, oracle
    release_memory()
    return outcomes


def after_failure(row: ResultRow) -> None:
    """After a failed trial: free memory after an oom; raise DeviceLost if an error left the
    CUDA context poisoned."""
    if row.status == "oom":
        release_memory()
    if row.status == "error":
        check_device_alive(row)


def make_trial(
    spec: WorkloadSpec,
    backend: Backend,
    inputs: AttentionInputs,
    oracle: torch.Tensor,
    ctx: SweepContext,
) -> TrialFn:
    """A trial of `backend` on the case: `sweep.run_backend` with the trial's measure config."""

    def trial(knobs: Knobs, cfg: MeasureConfig) -> ResultRow:
        return run_backend(spec, backend, inputs, oracle, replace(ctx, measure_cfg=cfg), knobs)

    return trial


def _tuned_name(row: ResultRow) -> ResultRow:
    """A sweep row under the `<variant>+tuned` name tune writes."""
    return row.model_copy(update={"backend": tuned_name(row.backend)})
