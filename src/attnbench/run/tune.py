"""Knob search: for each case and backend variant, find the fastest legal configuration.

    for case:                              inputs + fp64 reference built once (as the sweep does)
        for variant with knobs:            a share of the time budget, weighted by grid size
            grid = product of the legal values (the default configuration first)
            <= GRID_LIMIT configs: measure each once with a short budget
            more: successive halving: every config with a short budget, keep the best half,
                  double the budget, repeat until one is left
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

import gc
import itertools
import json
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from attnbench.backends.base import Backend
from attnbench.backends.reference import reference_attention
from attnbench.measure.config import MeasureConfig
from attnbench.results import ResultRow
from attnbench.run.sweep import SweepContext, failure_row, fit_memory, order_cases, run_backend
from attnbench.workload.inputs import AttentionInputs, make_inputs
from attnbench.workload.spec import WorkloadSpec

GRID_LIMIT = 8
"""Grids up to this size are measured exhaustively; larger ones by successive halving."""
STAGE0_MS = 5.0
"""Timed work per configuration in the first halving stage (doubled at each stage)."""
TRIAL_WARMUP_MS = 2.0
TUNED_SUFFIX = "+tuned"
FINAL_OVERHEAD_S = 0.5
"""Host overhead of one final measurement (plan, capture, accuracy), reserved per pair."""

Knobs = dict[str, Any]
TrialFn = Callable[[Knobs, MeasureConfig], ResultRow]
"""Runs one configuration with one measurement config; returns its row (never raises)."""
Emit = Callable[[ResultRow], None]


@dataclass(frozen=True)
class TuneOptions:
    grid_limit: int = GRID_LIMIT
    stage0_ms: float = STAGE0_MS
    warmup_ms: float = TRIAL_WARMUP_MS


class Deadline:
    """A wall-clock limit (None: none); `clock` is injectable for tests."""

    def __init__(self, seconds: float | None, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.end = None if seconds is None else clock() + seconds

    def left(self) -> float:
        return math.inf if self.end is None else self.end - self.clock()

    def expired(self) -> bool:
        return self.left() <= 0

    def sub(self, seconds: float) -> Deadline:
        """A deadline `seconds` from now, never later than this one."""
        child = Deadline(None, self.clock)
        child.end = min(self.end if self.end is not None else math.inf, self.clock() + seconds)
        return child


def knob_grid(declared: Mapping[str, tuple[object, ...]]) -> list[Knobs]:
    """Every combination of the declared values, the default (all first values) first."""
    names = list(declared)
    return [
        dict(zip(names, values, strict=True))
        for values in itertools.product(*(declared[n] for n in names))
    ]


def knob_key(knobs: Mapping[str, Any], ignore: set[str] | frozenset[str] = frozenset()) -> str:
    """A stable text key of a configuration, leaving out the `ignore`d knobs."""
    return json.dumps({k: v for k, v in sorted(knobs.items()) if k not in ignore}, default=str)


def knob_label(knobs: Mapping[str, Any], default: Mapping[str, Any]) -> str:
    """`num_splits=4,pack_gqa=True`: the knobs that differ from the default, or `default`."""
    diff = [f"{k}={v}" for k, v in knobs.items() if default.get(k, v) != v or k not in default]
    return ",".join(diff) or "default"


def stage_config(base: MeasureConfig, max_time_ms: float, warmup_ms: float) -> MeasureConfig:
    """The measurement config of a short trial: same timer and L2 policy, a small budget."""
    return replace(
        base,
        max_time_ms=min(max_time_ms, base.max_time_ms),
        warmup_ms=min(warmup_ms, base.warmup_ms),
    )


def is_rejection(row: ResultRow) -> bool:
    """The backend refused this knob combination (UnsupportedCase or ValueError in plan)."""
    return row.status == "unsupported" or (
        row.status == "error" and row.reason.startswith("ValueError")
    )


@dataclass
class Search:
    """What a search did and found, for one (case, variant)."""

    configs: int
    method: str
    """`grid` (every configuration measured) or `halving`."""
    trials: int = 0
    rejected: int = 0
    failed: int = 0
    duplicates: int = 0
    stages: int = 0
    stopped: bool = False
    """The time budget ended the search early."""
    latency_us: dict[str, float] = field(default_factory=dict)
    """Latest trial latency per configuration key."""
    default_row: ResultRow | None = None
    """The default configuration's first trial."""
    winner: Knobs | None = None
    failures: list[str] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "configs": self.configs,
            "trials": self.trials,
            "rejected": self.rejected,
            "failed": self.failed,
            "duplicates": self.duplicates,
            "stages": self.stages,
            "stopped_by_budget": self.stopped,
        }


def search(
    grid: list[Knobs],
    trial: TrialFn,
    base_cfg: MeasureConfig,
    deadline: Deadline,
    on_trial: Emit = lambda row: None,
    opts: TuneOptions = TuneOptions(),
) -> Search:
    """Find the fastest configuration of `grid` (grid[0] is the default, always measured).

    Every trial row gets `details.knobs` and `details.tune = {"stage": k, "trial": i}` and is
    passed to `on_trial`. Stops early (keeping the best so far) when `deadline` expires.
    """
    halving = len(grid) > opts.grid_limit
    s = Search(configs=len(grid), method="halving" if halving else "grid")
    ignored: set[str] = set()
    seen: set[str] = set()

    def run(knobs: Knobs, stage: int, budget_ms: float) -> ResultRow:
        row = trial(knobs, stage_config(base_cfg, budget_ms, opts.warmup_ms))
        row = annotate(row, knobs, {"stage": stage, "trial": s.trials})
        s.trials += 1
        if is_rejection(row):
            s.rejected += 1
            row = row.model_copy(
                update={"status": "unsupported", "reason": f"knobs rejected: {row.reason}"}
            )
        elif row.status != "ok":
            s.failed += 1
            if len(s.failures) < 3:
                s.failures.append(f"{knob_label(knobs, grid[0])}: {row.status} {row.reason}")
            if row.status == "oom":
                free_memory()
            if row.status == "error":
                check_device_alive(row)
        else:
            s.latency_us[knob_key(knobs)] = float(row.latency_us or math.inf)
        on_trial(row)
        return row

    budget_ms = opts.stage0_ms if halving else 4 * opts.stage0_ms
    alive: list[Knobs] = []
    for i, knobs in enumerate(grid):
        if i > 0 and deadline.expired():
            s.stopped = True
            break
        if knob_key(knobs, ignored) in seen:
            s.duplicates += 1
            continue
        row = run(knobs, 0, budget_ms)
        if i == 0:
            s.default_row = row
        ignored |= _ignored(row)
        seen.add(knob_key(knobs, ignored))
        if row.status == "ok":
            alive.append(knobs)
    s.stages = 1

    def ranked(configs: list[Knobs]) -> list[Knobs]:
        return sorted(configs, key=lambda k: s.latency_us[knob_key(k)])  # stable: default wins ties

    while halving and len(alive) > 1 and not s.stopped:
        alive = ranked(alive)[: math.ceil(len(alive) / 2)]
        if len(alive) == 1:
            break
        budget_ms *= 2
        survivors: list[Knobs] = []
        for j, knobs in enumerate(alive):
            if deadline.expired():
                s.stopped = True
                survivors += alive[j:]
                break
            if run(knobs, s.stages, budget_ms).status == "ok":
                survivors.append(knobs)
            else:
                s.latency_us.pop(knob_key(knobs), None)
        alive = survivors
        s.stages += 1
    s.winner = ranked(alive)[0] if alive else None
    return s


def annotate(row: ResultRow, knobs: Knobs, tune: dict[str, Any]) -> ResultRow:
    details = dict(row.details)
    details["knobs"] = dict(knobs)
    details["tune"] = tune
    return row.model_copy(update={"details": details})


def _ignored(row: ResultRow) -> set[str]:
    text = row.details.get("knobs_ignored")
    return {k for k in str(text).split(",") if k} if text else set()


def ceiling_fraction(row: ResultRow) -> float | None:
    """The row's fraction of its binding measured ceiling: matmul TFLOP/s for prefill,
    copy bandwidth for everything else (decode, append, trees, shared prefixes)."""
    if row.spec.get("kind") == "prefill":
        return row.tflops_frac_measured
    return row.bandwidth_frac_measured


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
    opts: TuneOptions = TuneOptions(),
) -> TuneOutcome:
    """Search one variant's knobs on one case, re-measure winner and default, build the
    `<variant>+tuned` row (returned; the caller writes it)."""
    grid = knob_grid(backend.knobs)
    default = grid[0]
    found = search(grid, trial, ctx.measure_cfg, deadline, on_trial, opts)
    name = backend.name + TUNED_SUFFIX
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
    best, best_knobs = winner_row, found.winner
    notes: list[str] = []
    if (
        best is None
        or best.status != "ok"
        or (
            default_row is not None
            and default_row.status == "ok"
            and (default_row.latency_us or math.inf) <= (best.latency_us or math.inf)
        )
    ):
        if best is not None:
            notes.append(
                f"search winner {knob_label(found.winner, default)} "
                f"{'failed' if best.status != 'ok' else 'was not faster'} on re-measure"
            )
        best, best_knobs = default_row, default
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
    details = dict(best.details)
    details.pop("tune", None)
    details["knobs"] = dict(best_knobs)
    details["knobs_label"] = knob_label(best_knobs, default)
    summary = found.summary()
    if found.winner != best_knobs:
        summary["search_winner"] = dict(found.winner)
    details["tune"] = summary
    if default_row is not None and default_row.status == "ok" and default_row.latency_us:
        details["default_latency_us"] = default_row.latency_us
        details["default_frac_measured"] = ceiling_fraction(default_row)
        details["speedup_vs_default"] = default_row.latency_us / float(best.latency_us or math.inf)
    reason = "; ".join([*notes, best.reason] if best.reason else notes)
    tuned = best.model_copy(update={"backend": name, "details": details, "reason": reason})
    return TuneOutcome(spec.case_id, backend.name, found, tuned)


def run_tune(
    specs: list[WorkloadSpec],
    backends: list[Backend],
    ctx: SweepContext,
    deadline: Deadline,
    on_trial: Emit,
    on_tuned: Emit,
    opts: TuneOptions = TuneOptions(),
    on_status: Callable[[str], None] = lambda text: None,
) -> tuple[list[TuneOutcome], list[str]]:
    """Tune every (case, variant with knobs); returns the outcomes and the pairs the budget
    left untouched (`case_id variant`). `on_tuned` receives the `+tuned` rows (and
    `unsupported` ones for pairs that cannot run)."""
    tunable = [b for b in backends if b.knobs]
    ordered = order_cases(specs)
    pairs: list[tuple[WorkloadSpec, list[Backend]]] = []
    for spec in ordered:
        runnable: list[Backend] = []
        for b in tunable:
            why = ctx.availability(b)
            if why is None:
                try:
                    unsupported = b.check(spec, ctx.info)
                    why = unsupported.reason if unsupported else None
                except Exception as exc:
                    why = f"check failed: {type(exc).__name__}: {exc}"[:400]
            if why is not None:
                on_tuned(failure_row(ctx.run_id, spec, b.name + TUNED_SUFFIX, "unsupported", why))
            else:
                runnable.append(b)
        runnable = fit_memory(spec, runnable, ctx, lambda row: on_tuned(_tuned_name(row)))
        if runnable:
            pairs.append((spec, runnable))

    weight_left = sum(len(knob_grid(b.knobs)) for _, bs in pairs for b in bs)
    pairs_left = sum(len(bs) for _, bs in pairs)
    final_s = 2 * (ctx.measure_cfg.warmup_ms + ctx.measure_cfg.max_time_ms) / 1e3
    reserve_s = final_s + FINAL_OVERHEAD_S
    ctx.flusher()  # made once, shared by every trial's context
    outcomes: list[TuneOutcome] = []
    skipped: list[str] = []
    for spec, runnable in pairs:
        if deadline.expired():
            skipped += [f"{spec.case_id} {b.name}" for b in runnable]
            continue
        on_status(f"{spec.case_id}: inputs and reference")
        try:
            inputs = make_inputs(spec, ctx.device)
            oracle = reference_attention(inputs)
        except Exception as exc:
            status = "oom" if "out of memory" in str(exc).lower() else "error"
            for b in runnable:
                reason = f"building inputs/reference: {type(exc).__name__}: {exc}"[:400]
                on_tuned(failure_row(ctx.run_id, spec, b.name + TUNED_SUFFIX, status, reason))
            free_memory()
            continue
        for b in runnable:
            weight = len(knob_grid(b.knobs))
            if deadline.expired():
                skipped.append(f"{spec.case_id} {b.name}")
            else:
                share = (deadline.left() - reserve_s * pairs_left) * weight / weight_left
                on_status(f"{spec.case_id} {b.name}: {weight} configs, {max(share, 0):.1f} s")
                trial = make_trial(spec, b, inputs, oracle, ctx)
                pair_deadline = deadline.sub(max(share, 0.0))
                out = tune_variant(spec, b, ctx, trial, pair_deadline, on_trial, opts)
                on_tuned(out.tuned)
                outcomes.append(out)
                free_memory()
            weight_left -= weight
            pairs_left -= 1
        del inputs, oracle
        free_memory()
    return outcomes, skipped


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


class DeviceLost(RuntimeError):
    """A trial left the GPU unusable (sticky CUDA error): later trials would only fail."""


def check_device_alive(row: ResultRow) -> None:
    """After an `error` trial on CUDA, raise DeviceLost if the context is poisoned."""
    if not (torch.cuda.is_available() and torch.cuda.is_initialized()):
        return
    try:
        torch.cuda.synchronize()
    except Exception as exc:  # sticky error: illegal address, device-side assert...
        raise DeviceLost(f"{row.backend} {row.details.get('knobs')}: {row.reason}; {exc}") from exc


def free_memory() -> None:
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def _tuned_name(row: ResultRow) -> ResultRow:
    """A sweep row under the `<variant>+tuned` name tune writes."""
    return row.model_copy(update={"backend": row.backend + TUNED_SUFFIX})
