"""One case of an `attnbench fidelity` document as a `KernelTiming`: the engine's median beside
CUPTI's (torch profiler), nvbench's and Nsight Compute's times of the same call, the SM clocks
and the plan mode; which timers the tolerance judges it against and whether it agrees. Pure."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from attnbench.analysis.sm_activity import variant_label

FIDELITY_MIN_US = 10.0
"""Kernels at least this long must agree between engine and profilers (10-50 us decode kernels
are a large share of serving steps) ..."""
EVENT_RESOLUTION_US = 0.5
"""A CUDA event timestamp's resolution (CUDA programming guide: around half a microsecond)."""
FIDELITY_TOLERANCE = 0.03
"""... within this relative difference (issue 15)."""


def _num(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        return None
    return float(v)


def rel_diff(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b <= 0 else (a - b) / b


@dataclass(frozen=True)
class KernelTiming:
    """One case of a fidelity document: the engine against the torch profiler and ncu."""

    case: str
    backend: str
    status: str
    reason: str = ""
    engine_us: float | None = None
    repeat_diff: float | None = None
    profiler_us: float | None = None
    ncu_us: float | None = None
    ncu_status: str = ""
    sm_mhz_min: float | None = None
    sm_mhz_median: float | None = None
    max_sm_mhz: float | None = None
    throttled_samples: int | None = None
    samples: int | None = None
    slowdowns: tuple[str, ...] = ()
    """NVML's clock-event reasons seen while the engine timed (e.g. `sw_power_cap`)."""
    variant: str = ""
    """The backend variant without its knobs (`backend` is the label with them)."""
    plan_mode: str = ""
    """`cuda-graph` or `eager` (empty in documents from before it was recorded)."""
    timer: str = ""
    engine_eager_us: float | None = None
    """The engine's time of eager launches (CUDA events) where its median replayed a graph."""
    span_us: float | None = None
    """CUPTI's first-kernel-start to last-kernel-end per call."""
    kernels_per_call: float | None = None
    nvbench_us: float | None = None
    nvbench_status: str = ""

    @property
    def profiler_diff(self) -> float | None:
        """(engine - profiler) / profiler."""
        return rel_diff(self.engine_us, self.profiler_us)

    @property
    def ncu_diff(self) -> float | None:
        """(engine - ncu) / ncu."""
        return rel_diff(self.engine_us, self.ncu_us)

    @property
    def nvbench_diff(self) -> float | None:
        """(engine - nvbench) / nvbench."""
        return rel_diff(self.engine_us, self.nvbench_us)

    @property
    def long(self) -> bool:
        """FIDELITY_MIN_US or more: the tolerance applies."""
        return self.engine_us is not None and self.engine_us >= FIDELITY_MIN_US

    @property
    def comparator(self) -> str:
        """The timer the tolerance judges the engine against: nvbench where it ran (its CUDA
        events hold the same launch and event overhead per call as the engine's), else Nsight
        Compute, else CUPTI's kernel time (through the torch profiler); "" for none."""
        for name, diff in (
            ("nvbench", self.nvbench_diff),
            ("ncu", self.ncu_diff),
            ("CUPTI", self.profiler_diff),
        ):
            if diff is not None:
                return name
        return ""

    @property
    def judged_diff(self) -> float | None:
        """(engine - comparator) / comparator: the difference the tolerance judges."""
        by_name = {"nvbench": self.nvbench_diff, "ncu": self.ncu_diff, "CUPTI": self.profiler_diff}
        return by_name.get(self.comparator)

    @property
    def references(self) -> list[tuple[str, float]]:
        """(comparator, the engine's relative difference from it): the one timer judged."""
        d = self.judged_diff
        return [] if d is None else [(self.comparator, d)]

    @property
    def below_kernel_time(self) -> bool:
        """Judged against nvbench, the engine's time is below CUPTI's kernel time (the lower
        bound beside it: the kernels alone, without launch and events) by more than the
        tolerance, which an event timer cannot be."""
        d = self.profiler_diff
        return self.comparator == "nvbench" and d is not None and d < -FIDELITY_TOLERANCE

    @property
    def disagrees(self) -> bool:
        """A judged kernel whose engine time differs from its comparator's by more than the
        tolerance, or lies below CUPTI's kernel time where nvbench is the comparator."""
        over = any(abs(d) > FIDELITY_TOLERANCE for _, d in self.references)
        return self.long and (over or self.below_kernel_time)

    @property
    def agrees(self) -> bool:
        """A judged kernel with a profiler time, within the tolerance of every one."""
        return self.long and bool(self.references) and not self.disagrees

    @property
    def power_capped(self) -> bool:
        """NVML saw a power or thermal slowdown while the engine timed this kernel."""
        return bool(self.throttled_samples) and any(
            "power" in s or "thermal" in s for s in self.slowdowns
        )


def kernel_timing(case: Mapping[str, Any]) -> KernelTiming:
    ncu = case.get("ncu") or {}
    clocks = case.get("clocks") or {}
    ncu_ok = ncu.get("status") == "ok"
    samples = _num(clocks.get("samples"))
    throttled = _num(clocks.get("throttled_samples"))
    nvb = case.get("nvbench") or {}
    nvb_ok = nvb.get("status") == "ok"
    return KernelTiming(
        case=str(case.get("case", "")),
        backend=variant_label(case),
        variant=str(case.get("backend", "")),
        plan_mode=str(case.get("plan_mode", "")),
        timer=str(case.get("timer", "")),
        engine_eager_us=_num(case.get("engine_eager_us")),
        span_us=_num(case.get("profiler_span_us")),
        kernels_per_call=_num(case.get("profiler_kernels_per_call")),
        nvbench_us=_num(nvb.get("gpu_median_us")) if nvb_ok else None,
        nvbench_status=str(nvb.get("status", "")) + ("" if nvb_ok else _why(nvb)) if nvb else "",
        status=str(case.get("status", "")),
        reason=str(case.get("reason", "")),
        engine_us=_num(case.get("engine_us")),
        repeat_diff=_num(case.get("repeat_diff")),
        profiler_us=_num(case.get("profiler_kernel_us")),
        ncu_us=_num(ncu.get("gpu_time_us")) if ncu_ok else None,
        ncu_status=str(ncu.get("status", "not run")) + ("" if ncu_ok else _why(ncu)),
        sm_mhz_min=_num(clocks.get("sm_mhz_min")),
        sm_mhz_median=_num(clocks.get("sm_mhz_median")),
        max_sm_mhz=_num(clocks.get("max_sm_mhz")),
        throttled_samples=None if throttled is None else int(throttled),
        samples=None if samples is None else int(samples),
        slowdowns=tuple(str(x) for x in clocks.get("slowdowns") or ()),
    )


def _why(ncu: Mapping[str, Any]) -> str:
    return f": {ncu['reason']}" if ncu.get("reason") else ""


def kernel_timings(doc: Mapping[str, Any]) -> list[KernelTiming]:
    """The timing cases of a document (sm-activity cases are timed too, and listed)."""
    return [kernel_timing(c) for c in doc.get("cases", [])]
