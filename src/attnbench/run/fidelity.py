"""Measurement fidelity: does the engine's time agree with what profilers see, and with itself?

For a handful of cases (one backend variant each) this measures:
- the engine's median twice in a row (repeatability: within 2% for kernels over 50 us);
- the CUDA kernel time the torch profiler (CUPTI) records per call, L2 flushed before each call
  exactly as the engine does, flush kernels left out;
- optionally Nsight Compute (`ncu --clock-control none`): gpu__time_duration.sum per call and,
  for the gap-to-hardware analysis, DRAM throughput, achieved occupancy and waves per SM. Each
  case runs in its own child process under ncu, profiling only the window between
  cudaProfilerStart and cudaProfilerStop (the backend's kernels, after warm-up).
"""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
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
from attnbench.workload.inputs import make_inputs
from attnbench.workload.spec import WorkloadSpec

NCU_METRICS = (
    "gpu__time_duration.sum",
    "dram__bytes_read.sum",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "sm__warps_active.avg.pct_of_peak_sustained_active",
    "sm__cycles_active.avg.pct_of_peak_sustained_elapsed",
    "launch__waves_per_multiprocessor",
    "launch__grid_size",
)
NCU_CALLS = 3


@dataclass(frozen=True)
class FidelityCase:
    name: str
    backend: str
    spec: WorkloadSpec


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
        FidelityCase(f"sm-{name}", backend, spec)
        for backend in SM_ACTIVITY_BACKENDS
        for name, spec in batches.items()
    ]


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


def _prepare(case: FidelityCase, device: torch.device) -> tuple[Any, Any]:
    (backend,) = select_backends([case.backend])
    inputs = make_inputs(case.spec, device)
    planned = backend.plan(case.spec, inputs)
    out = planned.run()
    torch.cuda.synchronize()
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
            "status": "error",
            "reason": f"{type(exc).__name__}: {exc}"[:400],
        }
    a, b = first.stats.median_us, second.stats.median_us
    return {
        "case": case.name,
        "backend": case.backend,
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


def ncu_case(case: FidelityCase, timeout_s: float = 120) -> dict[str, Any]:
    """Profile one case under Nsight Compute in a child process; per-call sums of the metrics."""
    ncu = shutil.which("ncu") or "/usr/local/cuda/bin/ncu"
    if not os.path.exists(ncu):
        return {"status": "unsupported", "reason": "ncu not found"}
    cmd = [
        ncu,
        "--clock-control",
        "none",
        "--profile-from-start",
        "off",
        "--csv",
        "--metrics",
        ",".join(NCU_METRICS),
        sys.executable,
        "-m",
        "attnbench.run.fidelity",
        "--child",
        json.dumps({"backend": case.backend, "spec": case.spec.model_dump(mode="json")}),
    ]
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {"status": "timeout", "reason": f"ncu took over {timeout_s:g} s"}
    kernels = parse_ncu_csv(res.stdout)
    if not kernels:
        tail = (res.stderr or res.stdout)[-400:]
        return {
            "status": "error",
            "reason": f"ncu gave no kernel rows (rc {res.returncode}): {tail}",
        }
    total: dict[str, float] = {}
    for k in kernels:
        for m, v in k["metrics"].items():
            total[m] = total.get(m, 0.0) + v
    per_call_ns = total.get("gpu__time_duration.sum", 0.0) / NCU_CALLS
    weights = [k["metrics"].get("gpu__time_duration.sum", 0.0) for k in kernels]
    wsum = sum(weights) or 1.0

    def weighted(metric: str) -> float:
        return float(
            sum(k["metrics"].get(metric, 0.0) * w for k, w in zip(kernels, weights, strict=True))
            / wsum
        )

    return {
        "status": "ok",
        "kernels_per_call": len(kernels) / NCU_CALLS,
        "kernel_names": sorted({k["name"][:80] for k in kernels}),
        "gpu_time_us": per_call_ns / 1e3,
        "dram_read_bytes": total.get("dram__bytes_read.sum", 0.0) / NCU_CALLS,
        "dram_throughput_pct": weighted("dram__throughput.avg.pct_of_peak_sustained_elapsed"),
        "achieved_occupancy_pct": weighted("sm__warps_active.avg.pct_of_peak_sustained_active"),
        "sm_active_pct": weighted("sm__cycles_active.avg.pct_of_peak_sustained_elapsed"),
        "waves_per_sm": max(
            k["metrics"].get("launch__waves_per_multiprocessor", 0.0) for k in kernels
        ),
    }


def parse_ncu_csv(text: str) -> list[dict[str, Any]]:
    """ncu --csv rows (one per kernel x metric) grouped into kernels, values in base units
    (ns for time, bytes for bytes, percent for %)."""
    lines = [ln for ln in text.splitlines() if ln.startswith('"')]
    if not lines:
        return []
    kernels: dict[str, dict[str, Any]] = {}
    for row in csv.DictReader(io.StringIO("\n".join(lines))):
        kid = row.get("ID")
        name = row.get("Metric Name")
        if kid is None or not name:
            continue
        k = kernels.setdefault(kid, {"name": row.get("Kernel Name", ""), "metrics": {}})
        k["metrics"][name] = _to_base(row.get("Metric Value", ""), row.get("Metric Unit", ""))
    return list(kernels.values())


_UNITS = {
    "nsecond": 1.0,
    "usecond": 1e3,
    "msecond": 1e6,
    "second": 1e9,
    "byte": 1.0,
    "Kbyte": 1e3,
    "Mbyte": 1e6,
    "Gbyte": 1e9,
    "%": 1.0,
    "": 1.0,
}


def _to_base(value: str, unit: str) -> float:
    try:
        v = float(value.replace(",", ""))
    except ValueError:
        return 0.0
    return v * _UNITS.get(unit, 1.0)


def _child(payload: str) -> None:
    """Run under ncu: warm up, then profile NCU_CALLS calls between profiler start/stop."""
    data = json.loads(payload)
    case = FidelityCase("child", data["backend"], WorkloadSpec.model_validate(data["spec"]))
    _inputs, planned = _prepare(case, torch.device("cuda:0"))
    for _ in range(3):
        planned.run()
    torch.cuda.synchronize()
    cudart = torch.cuda.cudart()
    cudart.cudaProfilerStart()
    for _ in range(NCU_CALLS):
        planned.run()
    torch.cuda.synchronize()
    cudart.cudaProfilerStop()


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        _child(sys.argv[2])
