"""`attnbench replay-validate`: the cost models' per-step error at scale, measured on the GPU.

Steps are drawn from replays of several traces (Azure code, Azure conv, Mooncake and the
450-agent stream by default): from each, `per_trace` decode steps at evenly spaced quantiles
of their total KV (`live.sample_steps`), so the draw spans small and large, short and skewed
batches. Every drawn step's exact decode batch is timed with every variant (a `Timer`: on the
GPU, a job of a `run.session.RunSession`, the same workers, watchdog and measurement as
`attnbench run`; in tests a fake) and compared with
the variant's model: error = predicted / measured - 1, per call (one layer). Per variant the
document gives the median and p90 absolute error, the share of steps outside the calibration
rows' range, and whether it meets the target (median <= 5%, p90 <= 10%).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from itertools import zip_longest
from typing import Any

import numpy as np

from attnbench.replay.costmodel import AttentionCostModel
from attnbench.replay.deployment import Deployment
from attnbench.replay.live import sample_steps, step_spec
from attnbench.replay.simresult import SimResult
from attnbench.workload.spec import WorkloadSpec

SCHEMA = "attnbench.replay-validation/1"
TRACES = ("azure-code", "azure-conv", "mooncake-conv", "agents:450")
TARGET_MEDIAN = 0.05
TARGET_P90 = 0.10
MIN_STEPS = 50


def target_text(
    median: float = TARGET_MEDIAN, p90: float = TARGET_P90, steps: int = MIN_STEPS
) -> str:
    """The target a variant meets, in words (a document's own `target`, else the code's)."""
    return f"median |error| <= {median:.0%}, p90 <= {p90:.0%}, over >= {steps} measured steps"


Timer = Callable[[WorkloadSpec, list[str]], Mapping[str, float | None]]
"""Measured per-call latency (us) of each named variant on one batch; None where it failed."""


@dataclass(frozen=True)
class DrawnStep:
    trace: str
    step: int
    spec: WorkloadSpec


@dataclass(frozen=True)
class StepError:
    trace: str
    step: int
    backend: str
    requests: int
    kv_total: int
    kv_max: int
    predicted_us: float
    measured_us: float | None
    outside: bool
    """The step lies beyond the calibration rows' range (the model extrapolates)."""
    kv_lens: tuple[int, ...] = ()
    """The batch's KV lengths, so the step can be re-predicted by a later model."""

    @property
    def rel_err(self) -> float | None:
        if not self.measured_us:
            return None
        return self.predicted_us / self.measured_us - 1.0

    def as_dict(self) -> dict[str, object]:
        return {
            "trace": self.trace,
            "step": self.step,
            "backend": self.backend,
            "requests": self.requests,
            "kv_total": self.kv_total,
            "kv_max": self.kv_max,
            "predicted_us": self.predicted_us,
            "measured_us": self.measured_us,
            "rel_err": self.rel_err,
            "outside": self.outside,
            "kv_lens": list(self.kv_lens),
        }


def draw_steps(sims: Mapping[str, SimResult], dep: Deployment, per_trace: int) -> list[DrawnStep]:
    """`per_trace` decode steps of each trace's replay, distinct batches, taken from the traces
    in turn (one of each, then the next of each), so a run cut short still covers every trace."""
    by_trace: list[list[DrawnStep]] = []
    for trace, sim in sims.items():
        seen: set[str] = set()
        mine = []
        for step in sample_steps(sim, per_trace):
            spec = step_spec(sim, step, dep)
            if spec.case_id not in seen:
                seen.add(spec.case_id)
                mine.append(DrawnStep(trace, step, spec))
        by_trace.append(mine)
    return [d for turn in zip_longest(*by_trace) for d in turn if d is not None]


def measure(
    drawn: list[DrawnStep],
    models: Mapping[str, AttentionCostModel],
    timer: Timer,
    progress: Callable[[str], None] = lambda msg: None,
    sink: list[StepError] | None = None,
) -> list[StepError]:
    """Time every drawn step with every variant that has a decode model; each step's errors go
    into `sink` (returned) as soon as it is timed, so an interrupted run keeps them."""
    names = sorted(n for n, m in models.items() if m.decode is not None)
    out: list[StepError] = [] if sink is None else sink
    for i, d in enumerate(drawn):
        s = d.spec
        progress(f"step {i + 1}/{len(drawn)} ({d.trace}): {s.batch_size} requests, {s.total_kv} KV")
        measured = timer(s, names)
        for name in names:
            err = step_error(d.trace, d.step, name, models[name], s.kv_lens, measured.get(name))
            out.append(err)
    return out


def step_error(
    trace: str,
    step: int,
    name: str,
    model: AttentionCostModel,
    kv_lens: Sequence[int],
    measured_us: float | None,
) -> StepError:
    """One variant's prediction for one decode batch beside what it measured."""
    kv = np.asarray(kv_lens, dtype=np.int64)
    far = model.decode_extrapolation(
        np.array([kv.size]), np.array([kv.sum()]), np.array([kv.max()])
    )[0]
    return StepError(
        trace=trace,
        step=step,
        backend=name,
        requests=int(kv.size),
        kv_total=int(kv.sum()),
        kv_max=int(kv.max()),
        predicted_us=float(model.decode_lens_us([int(v) for v in kv])),
        measured_us=measured_us,
        outside=bool(far > 1.0),
        kv_lens=tuple(int(v) for v in kv),
    )


def rescore(
    steps: Sequence[Mapping[str, Any]], models: Mapping[str, AttentionCostModel]
) -> list[StepError]:
    """The measured steps of a validation document re-predicted by `models` (refitted, say,
    after a cost-model change): the measurements stay, the predictions are new. ValueError for a
    document whose steps lack their KV lengths, or a variant with no decode model."""
    out = []
    for s in steps:
        name = str(s["backend"])
        m = models.get(name)
        if m is None or m.decode is None:
            have = ", ".join(sorted(n for n, v in models.items() if v.decode is not None))
            raise ValueError(f"backend {name}: no decode cost model in the rows; have: {have}")
        if not s.get("kv_lens"):
            raise ValueError(
                "the document's steps carry no kv_lens (written before replay-validate kept "
                "them); measure again to rescore"
            )
        us = s.get("measured_us")
        measured = float(us) if us else None
        out.append(step_error(str(s["trace"]), int(s["step"]), name, m, s["kv_lens"], measured))
    return out


def error_stats(steps: list[StepError]) -> dict[str, dict[str, float | int | bool]]:
    """Per variant: steps drawn and measured, median / p90 / max absolute error, mean error,
    the share outside the calibration range, and whether it meets the target."""
    out: dict[str, dict[str, float | int | bool]] = {}
    for name in sorted({s.backend for s in steps}):
        mine = [s for s in steps if s.backend == name]
        errs = np.array([e for s in mine if (e := s.rel_err) is not None])
        some = errs.size > 0
        med = float(np.median(np.abs(errs))) if some else math.nan
        p90 = float(np.quantile(np.abs(errs), 0.9)) if some else math.nan
        out[name] = {
            "steps": len(mine),
            "measured": int(errs.size),
            "median_abs_err": med,
            "p90_abs_err": p90,
            "max_abs_err": float(np.abs(errs).max()) if some else math.nan,
            "mean_err": float(errs.mean()) if some else math.nan,
            "outside_share": sum(s.outside for s in mine) / len(mine),
            "meets_target": bool(
                errs.size >= MIN_STEPS and med <= TARGET_MEDIAN and p90 <= TARGET_P90
            ),
        }
    return out


def validation_document(
    steps: list[StepError],
    traces: list[str],
    models: Mapping[str, AttentionCostModel],
    provenance: dict[str, object],
    sources: list[str],
    complete: bool = True,
) -> dict[str, object]:
    """The committed validation file: provenance, the models, every step, the statistics;
    `complete` is False when the run was cut short (the steps timed so far are kept)."""
    return {
        "schema": SCHEMA,
        "provenance": provenance,
        "complete": complete,
        "traces": traces,
        "sources": sources,
        "target": {"median_abs_err": TARGET_MEDIAN, "p90_abs_err": TARGET_P90, "steps": MIN_STEPS},
        "models": [m.as_dict() for _, m in sorted(models.items())],
        "summary": error_stats(steps),
        "steps": [s.as_dict() for s in steps],
    }


def gpu_timer(
    device: str, rows_path: str, max_time_ms: float = 100.0
) -> tuple[Timer, Callable[[], None], str]:
    """A Timer that runs each batch as a job of one `RunSession` on the GPU (at most
    `max_time_ms` of timed calls per variant), writing every row to `rows_path` (a results
    file); (timer, close, GPU name). RuntimeError without CUDA."""
    from pathlib import Path

    from attnbench.backends import select_backends
    from attnbench.measure.config import MeasureConfig
    from attnbench.replay.live import cuda_device
    from attnbench.results import ResultWriter
    from attnbench.run.plan import RunPlan, RunSink, placement
    from attnbench.run.session import RunSession

    why = "replay-validate needs a CUDA GPU (it measures the drawn steps on it)"
    info = cuda_device(device, why)
    path = Path(rows_path)
    plan = RunPlan(
        run_id=path.stem,
        device=info,
        where=placement(info),
        measure_cfg=MeasureConfig(max_time_ms=max_time_ms),
        settings={"replay_validate": True},
    )
    writer = ResultWriter(path).__enter__()
    session = RunSession(plan, RunSink(on_row=writer.write, on_header=writer.write))
    try:
        session.__enter__()
    except BaseException:
        writer.__exit__(None, None, None)
        raise
    known: set[str] = set()

    def timer(spec: WorkloadSpec, names: list[str]) -> dict[str, float | None]:
        missing = [n for n in names if n not in known]
        if missing:  # an unknown name is a ValueError here, not a worker's crash
            known.update(b.name for b in select_backends(missing))
        rows = session.run_case(spec, [n for n in names if n in known])
        return {r.backend: (r.latency_us if r.status == "ok" else None) for r in rows}

    def close() -> None:
        try:
            session.__exit__(None, None, None)
        finally:
            writer.__exit__(None, None, None)

    return timer, close, info.name
