"""Measurement fidelity: does the engine's time agree with what profilers see, and with itself?

For a handful of cases (one backend variant each) this measures, in this process:
- the accuracy gate (inputs, plan, one run against the fp64 reference), once per case;
- the engine's median twice in a row (repeatability: within 2% for kernels over 50 us);
- the CUDA kernel time the torch profiler (CUPTI) records per call, L2 flushed before each call
  exactly as the engine does, flush kernels left out.
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
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from attnbench.backends import select_backends
from attnbench.backends.reference import reference_attention
from attnbench.measure.accuracy import check_accuracy
from attnbench.measure.config import MeasureConfig
from attnbench.measure.engine import measure
from attnbench.measure.hardware import detect
from attnbench.measure.l2 import L2Flusher
from attnbench.run.ncu import (
    CHILD_TAG,
    MARKER_CYCLES,
    SM_ACTIVITY,
    TIMING,
    NcuProfile,
    profile_group,
)
from attnbench.workload.inputs import make_inputs
from attnbench.workload.spec import WorkloadSpec


@dataclass(frozen=True)
class FidelityCase:
    name: str
    backend: str
    spec: WorkloadSpec
    ncu_profile: NcuProfile = TIMING
    """What `--ncu` measures of this case (run.ncu.TIMING or SM_ACTIVITY)."""
    knobs: tuple[tuple[str, object], ...] = ()
    """Knob overrides for the plan (`--knob`), e.g. (("enable_pdl", False),)."""


def _spec(kind: Any, lens: tuple[int, ...], **kw: Any) -> WorkloadSpec:
    qo = lens if kind == "prefill" else (1,) * len(lens)
    return WorkloadSpec(
        kind=kind,
        num_qo_heads=32,
        num_kv_heads=8,
        head_dim=128,
        kv_lens=lens,
        qo_lens=qo,
        page_size=16,
        dtype="bfloat16",
        **kw,
    )


def default_cases() -> list[FidelityCase]:
    """Decode short and long (one- and two-kernel paths), a ragged batch, and a long prefill."""
    from attnbench.workload.lengths import parse_lengths

    (mixed,) = parse_lengths("mixed", 32, 0)
    return [
        FidelityCase("decode-32x1k", "flashinfer:fa2", _spec("decode", (1024,) * 32)),
        FidelityCase("decode-32x16k", "flashinfer:tc", _spec("decode", (16384,) * 32)),
        FidelityCase("decode-32x16k", "flash-attn:fa3", _spec("decode", (16384,) * 32)),
        FidelityCase(
            "decode-mixed", "flashinfer:fa2", _spec("decode", mixed.kv_lens, lengths=mixed.label)
        ),
        FidelityCase("prefill-4x16k", "flash-attn:fa3", _spec("prefill", (16384,) * 4)),
    ]


SM_ACTIVITY_BACKENDS = (
    "flashinfer:fa2",
    "flashinfer:tc",
    "flashinfer:xqa",
    "flash-attn:fa3",
    "flash-attn:fa3-contiguous",
)


def sm_activity_cases() -> list[FidelityCase]:
    """The brief's claim that uniform grids leave most SMs idle on ragged batches, put to ncu:
    every decode kernel on three batches of 32 requests holding the same total KV (the brief's
    mixed 256..64k batch, the same tokens spread evenly, and four 64k requests beside 28 short
    ones), so only the raggedness differs."""
    from attnbench.workload.lengths import parse_lengths

    (mixed,) = parse_lengths("mixed", 32, 0)
    total = sum(mixed.kv_lens)
    uniform = (round(total / 32),) * 32
    short = round((total - 4 * 65536) / 28)
    four_long = (65536,) * 4 + (short,) * 28
    batches = {
        "uniform": _spec("decode", uniform),
        "mixed": _spec("decode", mixed.kv_lens, lengths=mixed.label),
        "4-long": _spec("decode", four_long, lengths=f"4x65536+28x{short}"),
    }
    return [
        FidelityCase(f"sm-{name}", backend, spec, SM_ACTIVITY)
        for backend in SM_ACTIVITY_BACKENDS
        for name, spec in batches.items()
    ]


def with_knobs(cases: list[FidelityCase], knobs: dict[str, object]) -> list[FidelityCase]:
    """The cases with `knobs` set on every plan; ValueError (naming the allowed knobs and
    values) where a case's variant does not declare one of them."""
    if not knobs:
        return cases
    from attnbench.backends.flashinfer_rules import resolve_knobs

    out = []
    for c in cases:
        (backend,) = select_backends([c.backend])
        try:
            resolve_knobs(backend.knobs, knobs)
        except ValueError as exc:
            raise ValueError(f"--knob: {c.backend}: {exc}") from None
        out.append(replace(c, knobs=tuple(sorted(knobs.items()))))
    return out


def select_cases(cases: list[FidelityCase], backends: list[str]) -> list[FidelityCase]:
    """The cases of the named variants (all when none is named); an unknown name is an error
    listing the allowed ones."""
    if not backends:
        return cases
    allowed = sorted({c.backend for c in cases})
    unknown = [b for b in backends if b not in allowed]
    if unknown:
        raise ValueError(
            f"--backend: {', '.join(unknown)} not among these cases' variants "
            f"({', '.join(allowed)})"
        )
    return [c for c in cases if c.backend in backends]


def finished_records(path: Path) -> list[dict[str, Any]]:
    """The case records already in a fidelity JSON (none if the file is missing or empty)."""
    if not path.exists() or path.stat().st_size == 0:
        return []
    doc = json.loads(path.read_text(encoding="utf-8"))
    cases = doc.get("cases") if isinstance(doc, dict) else None
    return [c for c in cases if isinstance(c, dict)] if isinstance(cases, list) else []


def _prepare(case: FidelityCase, device: torch.device, gate: bool = True) -> tuple[Any, Any]:
    """Inputs and plan, run once; with `gate`, checked against the fp64 reference (the ncu
    child passes gate=False: the parent's gate already passed on the same seeded inputs)."""
    (backend,) = select_backends([case.backend])
    inputs = make_inputs(case.spec, device)
    planned = backend.plan(case.spec, inputs, dict(case.knobs) or None)
    out = planned.run()
    torch.cuda.synchronize()
    if not gate:
        return inputs, planned
    ref = reference_attention(inputs, q=planned.q_effective)
    acc = check_accuracy(planned.unpack(out), ref, planned.precision or case.spec.dtype)
    if not acc.passed:
        raise RuntimeError(f"{case.backend} fails the accuracy gate: {acc.reason}")
    return inputs, planned


def profiler_kernel_us(fn: Any, flusher: L2Flusher, calls: int = 30) -> float:
    """Mean summed CUDA kernel time per call (torch profiler / CUPTI), the flush kernels left
    out. Kernel events carry no reliable link to the call that launched them, so this is the
    total over `calls` calls divided by `calls`."""
    from torch.profiler import ProfilerActivity, profile

    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    flush_names = _flush_kernel_names(flusher)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            flusher.flush()
            fn()
        torch.cuda.synchronize()
    total_us = 0.0
    kernels = 0
    for ev in prof.events():
        if ev.device_type.name != "CUDA" or ev.name in flush_names:
            continue
        total_us += ev.time_range.elapsed_us()
        kernels += 1
    if kernels == 0:
        raise RuntimeError("the profiler recorded no kernels for the calls")
    return total_us / calls


def _flush_kernel_names(flusher: L2Flusher) -> set[str]:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        flusher.flush()
        torch.cuda.synchronize()
    return {ev.name for ev in prof.events() if ev.device_type.name == "CUDA"}


def check_case(case: FidelityCase, cfg: MeasureConfig) -> dict[str, Any]:
    dev = torch.device("cuda:0")
    info = detect("cuda:0")
    flusher = L2Flusher(dev, info.l2_bytes)
    try:
        _inputs, planned = _prepare(case, dev)
        first = measure(
            planned.run, cfg, device=dev, flusher=flusher, graph_safe=planned.graph_safe
        )
        second = measure(
            planned.run, cfg, device=dev, flusher=flusher, graph_safe=planned.graph_safe
        )
        prof_us = profiler_kernel_us(planned.run, flusher)
    except Exception as exc:
        return {
            "case": case.name,
            "backend": case.backend,
            **({"knobs": dict(case.knobs)} if case.knobs else {}),
            "status": "error",
            "reason": f"{type(exc).__name__}: {exc}"[:400],
        }
    a, b = first.stats.median_us, second.stats.median_us
    return {
        "case": case.name,
        "backend": case.backend,
        **({"knobs": dict(case.knobs)} if case.knobs else {}),
        "resolved": planned.resolved,
        "status": "ok",
        "timer": first.timer,
        "engine_us": a,
        "engine_repeat_us": b,
        "repeat_diff": abs(b - a) / a,
        "profiler_kernel_us": prof_us,
        "profiler_diff": (a - prof_us) / prof_us,
        "total_kv_tokens": sum(case.spec.kv_lens),
        "clocks": first.clocks,
        "clocks_repeat": second.clocks,
    }


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
            _inputs, planned = _prepare(case, dev, False)
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
