"""CUPTI's view of a call, through the torch profiler: the kernel time of each call, the span from
its first kernel's start to its last kernel's end, and how many kernels it launched.

Each call runs eagerly after an L2 flush, as the engine times it cold; the flush's kernels are
left out (their names are learnt from a profiled flush alone) and mark where one call ends and
the next begins, so a call's span includes the gaps between its kernels (a split-KV decode and
its merge), which its kernel time leaves out.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from attnbench.measure.l2 import L2Flusher

CALLS = 30


@dataclass(frozen=True)
class CuptiTimes:
    kernel_us: float
    """Mean summed kernel time per call."""
    span_us: float | None
    """Mean first-start to last-end per call (None where the calls could not be told apart)."""
    kernels_per_call: float


@dataclass(frozen=True)
class KernelEvent:
    name: str
    start_us: float
    end_us: float


def per_call(events: Sequence[KernelEvent], flush_names: set[str], calls: int) -> CuptiTimes:
    """Kernel time, span and kernel count per call from the profiled kernels in start order,
    split at the flush kernels (pure)."""
    groups: list[list[KernelEvent]] = []
    current: list[KernelEvent] = []
    for ev in sorted(events, key=lambda e: e.start_us):
        if ev.name in flush_names:
            if current:
                groups.append(current)
            current = []
            continue
        current.append(ev)
    if current:
        groups.append(current)
    kernels = [ev for g in groups for ev in g]
    if not kernels:
        raise RuntimeError("the profiler recorded no kernels for the calls")
    kernel_us = sum(ev.end_us - ev.start_us for ev in kernels) / calls
    span = None
    if len(groups) == calls:
        span = sum(max(e.end_us for e in g) - min(e.start_us for e in g) for g in groups) / calls
    return CuptiTimes(kernel_us, span, len(kernels) / calls)


def cupti_times(fn: Callable[[], object], flusher: L2Flusher, calls: int = CALLS) -> CuptiTimes:
    """`per_call` of `calls` flushed calls of `fn` under the torch profiler (CUDA activity)."""
    from torch.profiler import ProfilerActivity, profile

    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    flush_names = flush_kernel_names(flusher)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            flusher.flush()
            fn()
        torch.cuda.synchronize()
    events = [
        KernelEvent(ev.name, float(ev.time_range.start), float(ev.time_range.end))
        for ev in prof.events()
        if ev.device_type.name == "CUDA"
    ]
    return per_call(events, flush_names, calls)


_FLUSH_NAMES: dict[int, set[str]] = {}


def flush_kernel_names(flusher: L2Flusher) -> set[str]:
    """The names of the kernels one L2 flush launches (profiled once per flush size)."""
    key = flusher.nbytes
    if key not in _FLUSH_NAMES:
        _FLUSH_NAMES[key] = _profile_flush(flusher)
    return _FLUSH_NAMES[key]


def _profile_flush(flusher: L2Flusher) -> set[str]:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        flusher.flush()
        torch.cuda.synchronize()
    return {ev.name for ev in prof.events() if ev.device_type.name == "CUDA"}
