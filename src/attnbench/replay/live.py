"""`attnbench replay --live N`: measure replayed steps on the GPU and report the cost model's error.

N steps are drawn from one replay (the hybrid's when there is one, else the first variant's):
decode steps spread evenly over the replay's range of batch KV tokens (quantiles of the steps
sorted by total KV, deterministic). Each sampled step's decode batch becomes a `WorkloadSpec`
with its exact KV lengths (and, with `prefill=True`, its prefill chunks one of kind
prefill/append), and runs as a job of a `run.session.RunSession` with every replayed decode
variant: the same worker pool, watchdog, accuracy gate and measurement as `attnbench run`. Each
measured row is kept (a JSONL results file, so it can be committed and fitted later) and
compared with the model's prediction for that very batch: error = predicted / measured - 1, per
call (one layer).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from attnbench.replay.costmodel import AttentionCostModel
from attnbench.replay.deployment import Deployment
from attnbench.replay.records import LiveError, LiveSample, LiveValidation
from attnbench.replay.simresult import SimResult
from attnbench.workload.spec import WorkloadSpec

Part = Literal["decode", "prefill"]

if TYPE_CHECKING:
    from attnbench.measure.hardware import DeviceInfo
    from attnbench.results import ResultRow

CaseRunner = Callable[[WorkloadSpec, list[str]], list["ResultRow"]]
"""The rows of one case run with the named variants: a session's `RunSession.run_case`."""


def sample_steps(
    sim: SimResult, count: int, *, part: str = "decode", offset: float = 0.0
) -> list[int]:
    """`count` step indices with a decode (or prefill) part, at evenly spaced quantiles of the
    part's size (total KV tokens for decode, query tokens for prefill); distinct batches only.
    `offset` (0 < offset < 1) takes instead the quantiles (i + offset) / count, e.g. the
    midpoints of `count` equal bins: a draw other than the default's, which takes both ends."""
    f = sim.features
    if part == "decode":
        have, size = f.n_decode > 0, f.kv_total
    else:
        have, size = f.n_prefill > 0, f.q_prefill
    steps = np.flatnonzero(have)
    if count <= 0 or not steps.size:
        return []
    order = steps[np.argsort(size[steps], kind="stable")]
    k = min(count, order.size)
    if offset:
        at = (np.arange(k) + offset) * (order.size - 1) / k
    else:
        at = np.linspace(0, order.size - 1, k)
    picks = np.unique(np.rint(at).astype(int))
    return sorted(int(order[i]) for i in picks)


def step_specs(
    sim: SimResult, step: int, dep: Deployment, part: str = "decode"
) -> list[tuple[WorkloadSpec, int]]:
    """The attention calls of one part of a replayed step, one per layer kind of `dep`
    (`models.layer_shapes`: window_left, sinks, soft-cap, softmax scale, layer_type, MLA), each
    with its layer count. An MLA decode call has `mla` set, the per-GPU query heads
    (`models.mla_heads`), one KV head and head_dim the latent's width."""
    b = sim.batch(step)
    out = []
    for kind in dep.kinds:
        common: dict[str, Any] = dict(
            num_qo_heads=kind.num_qo_heads,
            num_kv_heads=kind.num_kv_heads,
            head_dim=kind.head_dim,
            page_size=dep.page_size,
            dtype=dep.dtype,
            kv_dtype=dep.kv_dtype,
            model=dep.model,
            tp=dep.tp,
            num_layers=kind.num_layers,
            lengths=f"replay-step{step}",
            **kind.spec_fields,
        )
        if part == "decode":
            kv = tuple(int(v) for v in b.decode_kv_lens)
            spec = WorkloadSpec(kind="decode", kv_lens=kv, qo_lens=(1,) * len(kv), **common)
        else:
            kv = tuple(int(v) for v in b.prefill_kv_lens)
            qo = tuple(int(v) for v in b.prefill_qo_lens)
            call = "prefill" if qo == kv else "append"
            spec = WorkloadSpec(kind=call, kv_lens=kv, qo_lens=qo, **common)
        out.append((spec, kind.num_layers))
    return out


def step_spec(sim: SimResult, step: int, dep: Deployment, part: str = "decode") -> WorkloadSpec:
    """The attention call of one part of a replayed step, as a sweep case (a model of one
    layer kind; `step_specs` gives every kind's)."""
    specs = step_specs(sim, step, dep, part)
    if len(specs) != 1:
        raise ValueError(
            f"{dep.model} has {len(specs)} layer kinds: its steps are one call per kind "
            "(`step_specs`)"
        )
    return specs[0][0]


@dataclass
class LiveResult:
    backend: str
    part: Part
    step: int
    spec: WorkloadSpec
    status: str
    reason: str
    measured_us: float | None
    predicted_us: float
    measured_plan_us: float | None
    predicted_plan_us: float

    @property
    def rel_err(self) -> float | None:
        if not self.measured_us:
            return None
        return self.predicted_us / self.measured_us - 1.0

    def sample(self) -> LiveSample:
        s = self.spec
        return LiveSample(
            backend=self.backend,
            part=self.part,
            step=self.step,
            case_id=s.case_id,
            requests=s.batch_size,
            kv_total=s.total_kv,
            kv_max=max(s.kv_lens),
            q_total=s.total_q,
            status=self.status,
            reason=self.reason,
            measured_us=_nan(self.measured_us),
            predicted_us=self.predicted_us,
            rel_err=_nan(self.rel_err),
            measured_plan_us=_nan(self.measured_plan_us),
            predicted_plan_us=self.predicted_plan_us,
        )


def _nan(value: float | None) -> float:
    return math.nan if value is None else value


def predict(model: AttentionCostModel, spec: WorkloadSpec) -> tuple[float, float]:
    """(per-call latency, plan) the model predicts for `spec`, microseconds."""
    from attnbench.measure import metrics

    n = np.array([spec.batch_size])
    zero = np.array([0])
    if spec.kind == "decode":
        us = np.array([model.decode_lens_us(spec.kv_lens)])  # the step's lengths are known
        plan = model.plan_us(n, zero)
    else:
        pairs = np.array([metrics.attended_pairs(spec)])
        us = model.prefill_us(n, np.array([spec.total_q]), pairs)
        plan = model.plan_us(zero, n)
    return float(us[0]), float(plan[0])


def error_summary(results: list[LiveResult]) -> dict[str, LiveError]:
    """Per (backend, part): rows measured, relative RMSE, median and max |error|."""
    out: dict[str, LiveError] = {}
    for key in sorted({(r.backend, r.part) for r in results}):
        errs = np.array(
            [e for r in results if (r.backend, r.part) == key and (e := r.rel_err) is not None]
        )
        n_all = sum(1 for r in results if (r.backend, r.part) == key)
        some = errs.size > 0
        out[f"{key[0]} {key[1]}"] = LiveError(
            measured=int(errs.size),
            samples=n_all,
            rel_rmse=float(np.sqrt(np.mean(errs**2))) if some else math.nan,
            median_abs_err=float(np.median(np.abs(errs))) if some else math.nan,
            max_abs_err=float(np.abs(errs).max()) if some else math.nan,
            mean_err=float(errs.mean()) if some else math.nan,
        )
    return out


def measure_samples(
    sim: SimResult,
    models: dict[str, AttentionCostModel],
    dep: Deployment,
    count: int,
    run_case: CaseRunner,
    *,
    prefill: bool = False,
    progress: Callable[[str], None] = lambda msg: None,
) -> list[LiveResult]:
    """Run `count` sampled steps (per part) of `sim` through `run_case` with every variant of
    `models` that has a model for the part; one LiveResult per (step, variant)."""
    results: list[LiveResult] = []
    parts: tuple[Literal["decode", "prefill"], ...] = (
        ("decode", "prefill") if prefill else ("decode",)
    )
    for part in parts:
        names = [
            n
            for n, m in sorted(models.items())
            if (m.decode if part == "decode" else m.prefill) is not None
        ]
        if not names:
            continue
        for step in sample_steps(sim, count, part=part):
            spec = step_spec(sim, step, dep, part)
            progress(f"live {part} step {step}: {spec.batch_size} requests, {spec.total_kv} KV")
            for row in run_case(spec, names):
                pred, plan = predict(models[row.backend], spec)
                ok = row.status == "ok"
                results.append(
                    LiveResult(
                        backend=row.backend,
                        part=part,
                        step=step,
                        spec=spec,
                        status=row.status,
                        reason=row.reason,
                        measured_us=row.latency_us if ok else None,
                        predicted_us=pred,
                        measured_plan_us=row.plan_us if ok else None,
                        predicted_plan_us=plan,
                    )
                )
    return results


@dataclass(frozen=True)
class LiveOptions:
    """What `--live` measures: `count` sampled steps per part (decode; prefill too with
    `prefill`) on `device`."""

    count: int
    prefill: bool = False
    device: str = "auto"


def run_live(
    sim: SimResult,
    models: dict[str, AttentionCostModel],
    dep: Deployment,
    opts: LiveOptions,
    out_path: Path,
    *,
    sampled_from: str = "",
    progress: Callable[[str], None] = lambda msg: None,
) -> LiveValidation:
    """Measure `count` sampled steps of `sim` with every variant in `models` on the GPU.

    Writes the measured rows to `out_path` (a results file: header + rows, cold-L2 CUDA-graph
    timing as `attnbench run`) and returns the comparison (`sampled_from`: the candidate `sim`
    replayed). Needs CUDA; raises RuntimeError without it.
    """
    from attnbench.backends import select_backends
    from attnbench.results import ResultWriter
    from attnbench.run.plan import RunPlan, RunSink, placement
    from attnbench.run.session import RunSession

    count, prefill = opts.count, opts.prefill
    why = "--live needs a CUDA GPU (it measures the replayed steps on it)"
    info = cuda_device(opts.device, why)
    known = {b.name for b in select_backends(sorted(models))}
    plan = RunPlan(
        run_id=out_path.stem,
        device=info,
        where=placement(info),
        settings={"replay_live": {"samples": count, "prefill": prefill}},
    )
    with ResultWriter(out_path) as writer:
        sink = RunSink(on_row=writer.write, on_header=writer.write, on_status=progress)
        with RunSession(plan, sink) as session:
            results = measure_samples(
                sim,
                {n: m for n, m in models.items() if n in known},
                dep,
                count,
                session.run_case,
                prefill=prefill,
                progress=progress,
            )
    return live_report(results, str(out_path), info.name, sampled_from)


def cuda_device(device: str, why: str) -> DeviceInfo:
    """The CUDA device `device` names (`auto` resolved); RuntimeError(`why`) when it is not one."""
    from attnbench.measure.hardware import detect, resolve_device

    dev, _ = resolve_device(device)
    info = detect(dev)
    if info.kind != "cuda":
        raise RuntimeError(why)
    return info


def live_report(
    results: list[LiveResult], rows_file: str, device: str, sampled_from: str = ""
) -> LiveValidation:
    summary = error_summary(results)
    worst = [v.rel_rmse for v in summary.values() if math.isfinite(v.rel_rmse)]
    return LiveValidation(
        rows_file=rows_file,
        device=device,
        samples=[r.sample() for r in results],
        summary=summary,
        worst_rel_rmse=max(worst) if worst else math.nan,
        sampled_from=sampled_from,
    )
