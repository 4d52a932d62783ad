"""Measurement fidelity: does the engine's time agree with what profilers see, and with itself?

For a handful of cases (one backend variant each) this measures, in this process:
- the accuracy gate (inputs, plan, one run against the fp64 reference), once per case, and
  after the engine's timing the output its timed calls left (`gate.check_timed_output`);
- the engine's median twice in a row (repeatability), and where it replays a CUDA graph, once
  more with CUDA events around eager launches (what a graph saves on this call);
- what the torch profiler (CUPTI) records per call, L2 flushed before each call exactly as the
  engine does (`run.cupti`): kernel time, first-start to last-end span, kernels per call;
- the plan mode (FlashInfer's CUDA-graph or eager plan: `--cases small` times fa2 and tc in
  both) and, with `nvbench_records`, nvbench's cold GPU time of the same planned call
  (`run.nvbench`; all calls in one nvbench run, which nvbench allows once per process).
Optionally (`ncu_cases`), Nsight Compute in one child process per backend variant (`run.ncu`):
the child builds each case's inputs and plan again, never the reference (the gate above has
passed), and profiles one window per case, split at marker kernels: `timing` cases 3 calls with
time, DRAM, occupancy, SM activity and waves; `sm-activity` cases 1 call with only SM activity,
occupancy, grid, waves and time (fewer replay passes). Each record names the ncu options, the
profile, its passes and the group's wall time.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from attnbench.backends import select_backends
from attnbench.backends.reference import reference_attention
from attnbench.measure.accuracy import check_accuracy
from attnbench.measure.config import MeasureConfig
from attnbench.measure.engine import Measurement, measure
from attnbench.measure.hardware import detect
from attnbench.measure.l2 import L2Flusher
from attnbench.run.cupti import CuptiTimes, cupti_times
from attnbench.run.fidelity_cases import (
    PR2055,
    SM_ACTIVITY_BACKENDS,
    SMALL_VARIANTS,
    FidelityCase,
    default_cases,
    select_cases,
    sm_activity_cases,
    small_cases,
    with_knobs,
)
from attnbench.run.gate import check_timed_output
from attnbench.run.ncu import CHILD_TAG, MARKER_CYCLES, profile_group
from attnbench.run.nvbench import time_calls
from attnbench.workload.inputs import make_inputs
from attnbench.workload.spec import WorkloadSpec

__all__ = [
    "PR2055",
    "SMALL_VARIANTS",
    "SM_ACTIVITY_BACKENDS",
    "FidelityCase",
    "check_case",
    "default_cases",
    "ncu_cases",
    "nvbench_records",
    "select_cases",
    "sm_activity_cases",
    "small_cases",
    "with_knobs",
]


def finished_records(path: Path) -> list[dict[str, Any]]:
    """The case records already in a fidelity JSON (none if the file is missing or empty)."""
    if not path.exists() or path.stat().st_size == 0:
        return []
    doc = json.loads(path.read_text(encoding="utf-8"))
    cases = doc.get("cases") if isinstance(doc, dict) else None
    return [c for c in cases if isinstance(c, dict)] if isinstance(cases, list) else []


def _prepare(
    case: FidelityCase, device: torch.device, gate: bool = True
) -> tuple[Any, Any, torch.Tensor | None]:
    """Inputs and plan, run once; with `gate`, checked against the fp64 reference, which is
    returned (the ncu child passes gate=False: the parent's gate already passed on the same
    seeded inputs)."""
    (backend,) = select_backends([case.backend])
    inputs = make_inputs(case.spec, device)
    planned = backend.plan(case.spec, inputs, dict(case.knobs) or None)
    out = planned.run()
    torch.cuda.synchronize()
    if not gate:
        return inputs, planned, None
    ref = reference_attention(inputs, q=planned.q_effective)
    acc = check_accuracy(planned.unpack(out), ref, planned.precision or case.spec.dtype)
    if not acc.passed:
        raise RuntimeError(f"{case.backend} fails the accuracy gate: {acc.reason}")
    return inputs, planned, ref


def check_case(
    case: FidelityCase, cfg: MeasureConfig, keep: dict[str, Any] | None = None
) -> dict[str, Any]:
    """One case's record (module docstring); with `keep`, its planned run is kept there under
    `record_key` for `nvbench_records`."""
    dev = torch.device("cuda:0")
    flusher = L2Flusher(dev, detect("cuda:0").l2_bytes)
    head: dict[str, Any] = {"case": case.name, "backend": case.backend}
    head |= {"knobs": dict(case.knobs)} if case.knobs else {}
    try:
        inputs, planned, ref = _prepare(case, dev)
        assert ref is not None
        timed = _engine(planned, cfg, dev, flusher, ref, planned.precision or case.spec.dtype)
        cupti = cupti_times(planned.run, flusher)
    except Exception as exc:
        return head | {"status": "error", "reason": f"{type(exc).__name__}: {exc}"[:400]}
    if keep is not None:
        keep[record_key(head)] = (planned, inputs)
    return head | _timings(case, planned, timed, cupti)


def _engine(
    planned: Any,
    cfg: MeasureConfig,
    dev: torch.device,
    flusher: L2Flusher,
    ref: torch.Tensor,
    precision: str,
) -> list[Measurement]:
    """The engine's measurement, its repeat, and where it replayed a CUDA graph, CUDA events
    around eager launches of the same call; each one's timed output checked right after it
    (RuntimeError naming the timer where it is wrong)."""
    out = planned.out

    def once(c: MeasureConfig) -> Measurement:
        m = measure(
            planned.run,
            c,
            device=dev,
            flusher=flusher,
            graph_safe=planned.graph_safe,
            poison=[out] if out is not None else [],
        )
        check = check_timed_output(planned, m, ref, precision)
        if check is not None and not check.passed:
            raise RuntimeError(f"the timed output ({m.timer}): {check.reason}")
        return m

    first = once(cfg)
    runs = [first, once(cfg)]
    if first.timer == "cuda-graph":
        runs.append(once(replace(cfg, timer="cuda-event")))
    return runs


def _timings(
    case: FidelityCase, planned: Any, timed: list[Measurement], cupti: CuptiTimes
) -> dict[str, Any]:
    first, second = timed[0], timed[1]
    a, b = first.stats.median_us, second.stats.median_us
    rec: dict[str, Any] = {
        "resolved": planned.resolved,
        "plan_mode": planned.plan_mode,
        "status": "ok",
        "timer": first.timer,
        "engine_us": a,
        "engine_repeat_us": b,
        "repeat_diff": abs(b - a) / a,
        "profiler_kernel_us": cupti.kernel_us,
        "profiler_diff": (a - cupti.kernel_us) / cupti.kernel_us,
        "profiler_span_us": cupti.span_us,
        "profiler_kernels_per_call": cupti.kernels_per_call,
        "total_kv_tokens": sum(case.spec.kv_lens),
        "clocks": first.clocks,
        "clocks_repeat": second.clocks,
    }
    if len(timed) > 2:
        rec["engine_eager_us"] = timed[2].stats.median_us
    return rec


def record_key(rec: Mapping[str, Any]) -> str:
    """One name per (case, variant, knobs): the nvbench call's axis value."""
    knobs = ",".join(f"{k}={v}" for k, v in sorted((rec.get("knobs") or {}).items()))
    return f"{rec['case']} {rec['backend']}" + (f" [{knobs}]" if knobs else "")


def nvbench_records(records: list[dict[str, Any]], kept: Mapping[str, Any]) -> None:
    """nvbench's time of every kept call, in one nvbench run, added to its record (with
    `nvbench_diff`, engine vs nvbench); where nvbench is missing or failed, the record's
    `nvbench` entry says so. Records whose call was not kept (a resumed run's) are left."""
    calls = {key: kept[key][0].run for key in kept}
    found = time_calls(calls) if calls else {}
    for rec in records:
        key = record_key(rec) if rec.get("status") == "ok" else ""
        if key not in found:
            continue
        n = found[key]
        rec["nvbench"] = n
        if n.get("status") == "ok" and n.get("gpu_median_us"):
            rec["nvbench_diff"] = (rec["engine_us"] - n["gpu_median_us"]) / n["gpu_median_us"]


def ncu_groups(cases: list[FidelityCase]) -> list[list[FidelityCase]]:
    """The cases one ncu child profiles together: one group per (backend, profile), in the
    order each first appears."""
    return [[cases[i] for i in g] for g in _group_indices(cases)]


def _group_indices(cases: list[FidelityCase]) -> list[list[int]]:
    groups: dict[tuple[str, str], list[int]] = {}
    for i, c in enumerate(cases):
        groups.setdefault((c.backend, c.ncu_profile.name), []).append(i)
    return list(groups.values())


def ncu_cases(cases: list[FidelityCase], timeout_s: float | None = None) -> list[dict[str, Any]]:
    """One `ncu` record per case, in order: one child per group (`ncu_groups`), its timeout
    scaled to its number of cases unless `timeout_s` is given."""
    if torch.cuda.is_available():
        torch.cuda.empty_cache()  # the parent's cached blocks: room for ncu's saved memory
    out: list[dict[str, Any]] = [{} for _ in cases]
    for group in _group_indices(cases):
        specs = [
            {
                "backend": cases[i].backend,
                "spec": cases[i].spec.model_dump(mode="json"),
                "knobs": dict(cases[i].knobs),
            }
            for i in group
        ]
        recs = profile_group(specs, cases[group[0]].ncu_profile, __name__, timeout_s)
        for i, rec in zip(group, recs, strict=True):
            out[i] = rec
    return out


def ncu_case(case: FidelityCase, timeout_s: float | None = None) -> dict[str, Any]:
    """Profile one case under Nsight Compute in a child process; per-call sums of the metrics."""
    return ncu_cases([case], timeout_s)[0]


def _child(payload: str) -> None:
    """Run under ncu: per spec, inputs and plan (no reference), warm-up, then one profiled
    window: a marker kernel and `calls` calls. A spec that fails is reported and skipped."""
    data = json.loads(payload)
    calls = int(data["calls"])
    cudart = torch.cuda.cudart()
    dev = torch.device("cuda:0")
    for i, item in enumerate(data["specs"]):
        state: dict[str, Any] = {"i": i, "status": "ok", "window": False}
        try:
            spec = WorkloadSpec.model_validate(item["spec"])
            knobs = tuple(sorted((item.get("knobs") or {}).items()))
            case = FidelityCase("child", item["backend"], spec, knobs=knobs)
            _inputs, planned, _ = _prepare(case, dev, False)
            for _ in range(3):
                planned.run()
            torch.cuda.synchronize()
            cudart.cudaProfilerStart()
            state["window"] = True
            torch.cuda._sleep(MARKER_CYCLES)  # ATen's spin_kernel: where this window starts
            for _ in range(calls):
                planned.run()
            torch.cuda.synchronize()
        except Exception as exc:
            state.update(status="error", reason=f"{type(exc).__name__}: {exc}"[:400])
        finally:
            if state["window"]:
                cudart.cudaProfilerStop()
        print(CHILD_TAG + json.dumps(state), flush=True)
        _inputs = planned = None
        torch.cuda.empty_cache()  # kernel replay saves what is allocated: keep it to one spec


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        _child(sys.argv[2])
