"""nvbench's timer on attnbench's calls: `cuda-bench` (NVIDIA's nvbench, Python API `cuda.bench`),
a second timer beside the engine and the torch profiler for `attnbench fidelity`.

Each call is the zero-argument callable the engine timed, with the same plan (the planned run
itself, in this process). nvbench launches it on its own stream: the launcher makes that stream
torch's current one (`torch.cuda.ExternalStream` of the handle `launch.get_stream()` gives), so
every library launches its kernels there. nvbench's cold measurement flushes L2 before each
sample and times it with CUDA events; its stopping criterion (`stdrel`) runs until the samples'
relative standard deviation settles below `max_noise` after `min_time_s` of GPU time, or
`timeout_s`. Batch (hot) timing is off (`exec(batched=False)`); only GPU 0 runs (the calls'
tensors live there).

nvbench runs its registered benchmarks once per process (`run_all_benchmarks` refuses a second
call), so `time_calls` takes every call of a fidelity run at once: one benchmark whose string
axis names them. `summaries` reads its JSON output (pure).
"""

from __future__ import annotations

import json
import math
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

NVBENCH = "cuda-bench"
"""The package (pip install cuda-bench==0.3.0); the module is `cuda.bench`."""
AXIS = "call"
MIN_TIME_S = 0.05
MAX_NOISE = 0.01
TIMEOUT_S = 1.5
TAGS = {
    "gpu_median_us": "nv/cold/time/gpu/median",
    "gpu_mean_us": "nv/cold/time/gpu/mean",
    "gpu_min_us": "nv/cold/time/gpu/min",
    "gpu_max_us": "nv/cold/time/gpu/max",
}
"""nvbench's cold GPU-time summaries (seconds), read as microseconds."""
PLAIN = {
    "gpu_noise": "nv/cold/time/gpu/stdev/relative",
    "samples": "nv/cold/sample_size",
    "sm_clock_hz": "nv/cold/sm_clock_rate/mean",
}
_ran = False


def unavailable() -> str | None:
    """None when `cuda.bench` imports here, else why not (the column then says so)."""
    try:
        import cuda.bench  # noqa: F401
    except Exception as exc:  # missing, or its native part cannot load (no CUDA)
        why = f"{type(exc).__name__}: {exc}"
        return f"nvbench not available ({NVBENCH} 0.3.0, `cuda.bench`): {why}"[:300]
    if _ran:
        return "nvbench already ran in this process (it runs its benchmarks once per process)"
    return None


def time_calls(
    calls: Mapping[str, Callable[[], object]],
    *,
    min_time_s: float = MIN_TIME_S,
    max_noise: float = MAX_NOISE,
    timeout_s: float = TIMEOUT_S,
) -> dict[str, dict[str, Any]]:
    """nvbench's record for each named call: `status` ok with its cold GPU-time summaries, or
    `missing`/`error` with a reason (for every call, when nvbench could not run at all)."""
    global _ran
    why = unavailable()
    if why is not None:
        return {name: {"status": "missing", "reason": why} for name in calls}
    _ran = True
    try:
        doc = _run(dict(calls), min_time_s, max_noise, timeout_s)
    except Exception as exc:
        reason = f"{type(exc).__name__}: {exc}"[:400]
        return {name: {"status": "error", "reason": reason} for name in calls}
    found = summaries(doc)
    settings = {"min_time_s": min_time_s, "max_noise": max_noise, "timeout_s": timeout_s}
    return {
        name: (found[name] | {"settings": settings})
        if name in found
        else {"status": "error", "reason": "nvbench reported no state for this call"}
        for name in calls
    }


def _run(
    calls: dict[str, Callable[[], object]], min_time_s: float, max_noise: float, timeout_s: float
) -> dict[str, Any]:
    """Register one benchmark over `calls`, run it, and return nvbench's JSON document."""
    import cuda.bench as bench
    import torch

    streams: dict[int, torch.cuda.ExternalStream] = {}

    def torch_stream(launch: Any) -> torch.cuda.ExternalStream:
        handle = int(launch.get_stream().__cuda_stream__()[1])
        if handle not in streams:
            streams[handle] = torch.cuda.ExternalStream(handle)
        return streams[handle]

    def benchmark(state: Any) -> None:
        fn = calls[state.get_string(AXIS)]

        def launcher(launch: Any) -> None:
            with torch.cuda.stream(torch_stream(launch)):
                fn()

        state.exec(launcher, batched=False)

    b = bench.register(benchmark)
    b.set_name("attnbench-fidelity")
    b.add_string_axis(AXIS, list(calls))
    b.set_stopping_criterion("stdrel")
    b.set_criterion_param_float64("min-time", min_time_s)
    b.set_criterion_param_float64("max-noise", max_noise)
    b.set_timeout(timeout_s)
    torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "nvbench.json"
        bench.run_all_benchmarks(["attnbench-fidelity", "--devices", "0", "--json", str(path)])
        doc: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return doc


def _value(summary: Mapping[str, Any]) -> float | None:
    """A summary's `value` entry as a float (nvbench writes numbers as strings)."""
    for item in summary.get("data") or ():
        if item.get("name") == "value":
            try:
                v = float(item.get("value"))
            except (TypeError, ValueError):
                return None
            return v if math.isfinite(v) else None
    return None


def _call_name(state: Mapping[str, Any]) -> str | None:
    for axis in state.get("axis_values") or ():
        if axis.get("name") == AXIS:
            return str(axis.get("value"))
    return None


def summaries(doc: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Per call (the `call` axis value), from an nvbench JSON document: `status` ok with
    gpu_median_us (mean where no median was written), gpu_mean/min/max_us, gpu_noise (relative
    standard deviation), samples and sm_clock_hz; or `skipped` with nvbench's reason."""
    out: dict[str, dict[str, Any]] = {}
    for bench in doc.get("benchmarks") or ():
        for state in bench.get("states") or ():
            name = _call_name(state)
            if name is None:
                continue
            if state.get("is_skipped"):
                out[name] = {"status": "skipped", "reason": str(state.get("skip_reason") or "")}
                continue
            by_tag = {s.get("tag"): _value(s) for s in state.get("summaries") or ()}
            rec: dict[str, Any] = {"status": "ok"}
            for key, tag in TAGS.items():
                if by_tag.get(tag) is not None:
                    rec[key] = by_tag[tag] * 1e6  # type: ignore[operator]
            for key, tag in PLAIN.items():
                if by_tag.get(tag) is not None:
                    rec[key] = by_tag[tag]
            if "gpu_median_us" not in rec and "gpu_mean_us" in rec:
                rec["gpu_median_us"] = rec["gpu_mean_us"]
                rec["center"] = "mean"
            if "gpu_median_us" not in rec:
                rec = {"status": "error", "reason": "no cold GPU time in nvbench's output"}
            out[name] = rec
    return out
