"""The knob search itself, free of torch: grids, keys and labels of configurations, the time
budget (`Deadline`, and each job's share of it), and `search`, which runs a trial function over a
grid (every configuration, or successive halving) and keeps the fastest that passed.

`run.tune` runs it on a case through the sweep's gate; this module knows nothing of kernels.
"""

from __future__ import annotations

import itertools
import json
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from attnbench.measure.config import MeasureConfig
from attnbench.results import ResultRow

GRID_LIMIT = 8
"""Grids up to this size are measured exhaustively; larger ones by successive halving."""
STAGE0_MS = 5.0
"""Timed work per configuration in the first halving stage (doubled at each stage)."""
TRIAL_WARMUP_MS = 2.0
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


DEFAULT_OPTIONS = TuneOptions()


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
    on_failure: Emit = lambda row: None,
) -> Search:
    """Find the fastest configuration of `grid` (grid[0] is the default, always measured).

    Every trial row gets `details.knobs` and `details.tune = {"stage": k, "trial": i}` and is
    passed to `on_trial`; a failed trial (mismatch, error, oom) also to `on_failure` first
    (where the caller frees memory or checks the device). Stops early (keeping the best so
    far) when `deadline` expires.
    """
    halving = len(grid) > opts.grid_limit
    found = Search(configs=len(grid), method="halving" if halving else "grid")
    run = _Trials(found, grid, trial, base_cfg, deadline, on_trial, opts, on_failure)
    budget_ms = opts.stage0_ms if halving else 4 * opts.stage0_ms
    alive = run.first_stage(budget_ms)
    while halving and len(alive) > 1 and not found.stopped:
        alive = run.ranked(alive)[: math.ceil(len(alive) / 2)]
        if len(alive) == 1:
            break
        budget_ms *= 2
        alive = run.next_stage(alive, budget_ms)
    found.winner = run.ranked(alive)[0] if alive else None
    return found


@dataclass
class _Trials:
    """One search's trials: each measured, annotated, counted in `s` and emitted."""

    s: Search
    grid: list[Knobs]
    trial: TrialFn
    base_cfg: MeasureConfig
    deadline: Deadline
    on_trial: Emit
    opts: TuneOptions
    on_failure: Emit

    def run(self, knobs: Knobs, stage: int, budget_ms: float) -> ResultRow:
        s = self.s
        row = self.trial(knobs, stage_config(self.base_cfg, budget_ms, self.opts.warmup_ms))
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
                s.failures.append(f"{knob_label(knobs, self.grid[0])}: {row.status} {row.reason}")
            self.on_failure(row)
        else:
            s.latency_us[knob_key(knobs)] = float(row.latency_us or math.inf)
        self.on_trial(row)
        return row

    def first_stage(self, budget_ms: float) -> list[Knobs]:
        """Every configuration once, skipping those that differ only in knobs the kernel
        ignored; returns those that passed."""
        s = self.s
        ignored: set[str] = set()
        seen: set[str] = set()
        alive: list[Knobs] = []
        for i, knobs in enumerate(self.grid):
            if i > 0 and self.deadline.expired():
                s.stopped = True
                break
            if knob_key(knobs, ignored) in seen:
                s.duplicates += 1
                continue
            row = self.run(knobs, 0, budget_ms)
            if i == 0:
                s.default_row = row
            ignored |= _ignored(row)
            seen.add(knob_key(knobs, ignored))
            if row.status == "ok":
                alive.append(knobs)
        s.stages = 1
        return alive

    def next_stage(self, alive: list[Knobs], budget_ms: float) -> list[Knobs]:
        """The survivors measured again with `budget_ms`; those the deadline left unmeasured
        keep their place."""
        s = self.s
        survivors: list[Knobs] = []
        for j, knobs in enumerate(alive):
            if self.deadline.expired():
                s.stopped = True
                survivors += alive[j:]
                break
            if self.run(knobs, s.stages, budget_ms).status == "ok":
                survivors.append(knobs)
            else:
                s.latency_us.pop(knob_key(knobs), None)
        s.stages += 1
        return survivors

    def ranked(self, configs: list[Knobs]) -> list[Knobs]:
        """Fastest first; stable, so the default wins ties."""
        return sorted(configs, key=lambda k: self.s.latency_us[knob_key(k)])


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
    if row_kind(row) == "prefill":
        return row.tflops_frac_measured
    return row.bandwidth_frac_measured


def row_kind(row: ResultRow) -> str | None:
    """The row's workload kind, whether its spec is typed or a plain dict (older rows)."""
    spec: Any = row.spec
    return spec.get("kind") if isinstance(spec, dict) else getattr(spec, "kind", None)


def final_reserve_s(cfg: MeasureConfig) -> float:
    """Time kept back per (case, variant) for its two final measurements (winner, default)."""
    return 2 * (cfg.warmup_ms + cfg.max_time_ms) / 1e3 + FINAL_OVERHEAD_S


def share_s(
    left_s: float,
    weight: int,
    pairs: int,
    weight_left: int,
    pairs_left: int,
    reserve_s: float,
    workers: int = 1,
) -> float:
    """Seconds of a budget with `left_s` left for work of `weight` (grid sizes) over `pairs`
    (case, variant) pairs, when `weight_left`/`pairs_left` (this work included) remain and
    `workers` run side by side: the time beyond every remaining pair's final reserve, split by
    weight, plus this work's own reserve; never more than what is left, never negative.

    The parent gives each job its share when it hands the job out; the job splits it between
    its variants the same way (workers=1). Time a job does not use stays in the budget, so the
    jobs after it get more."""
    if left_s <= 0 or weight_left <= 0:
        return 0.0
    spread = max(left_s - reserve_s * pairs_left / max(workers, 1), 0.0)
    part = spread * min(1.0, max(workers, 1) * weight / weight_left)
    return max(0.0, min(left_s, part + reserve_s * pairs))
