"""Timers: each turns `n` calls of a zero-argument function into `n` samples in microseconds.

- `CpuTimer`: host perf_counter around each call (synchronising CUDA if the call used it).
- `CudaEventTimer`: a CUDA event pair around each call on the current stream.
- `CudaGraphTimer`: captures the call once into a CUDA graph and times each replay with events,
  which removes host launch overhead (what a serving engine's decode step sees).
- `FakeTimer`: scripted samples, runs nothing; makes the pipeline testable without a GPU.

Each timer keeps what the last timed call returned (`output`; for a graph, the tensor the capture
returned, which every replay rewrites), so the caller can check that what was timed is right.

Before each timed call the `flush` callback (if any) runs outside the timed region, e.g. a
memset of twice the L2 size for cold-cache timing. Without one (warm L2), the CUDA timers put a
GPU spin (`torch.cuda._sleep`, ~50 us) there instead, so the host enqueues the event pair and the
call while the GPU is busy: otherwise a call shorter than its own host launch time is timed at
the launch rate (H200: a 30 MB `x.sum()` read 30 us warm but 20 us cold, the GPU idling between
back-to-back launches). The flush's memset plays that part in cold-cache timing.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from itertools import cycle, islice
from typing import Protocol

import torch

SPACER_CYCLES = 100_000
"""GPU clock cycles of the warm-L2 spin before each timed call: ~50 us at 1.98 GHz."""
Fn = Callable[[], object]
Flush = Callable[[], None] | None


class Timer(Protocol):
    name: str
    output: object
    """What the last timed call returned (None before any, and for the fake timer)."""

    def prepare(self, fn: Fn) -> Fn:
        """Return the callable to time (e.g. a graph replay); may raise if `fn` cannot be used."""
        ...

    def time(self, fn: Fn, n: int, flush: Flush) -> list[float]: ...


class CpuTimer:
    name = "cpu"

    def __init__(self, sync_cuda: bool = False) -> None:
        self._sync = torch.cuda.synchronize if sync_cuda else (lambda: None)
        self.output: object = None

    def prepare(self, fn: Fn) -> Fn:
        return fn

    def time(self, fn: Fn, n: int, flush: Flush) -> list[float]:
        samples = []
        for _ in range(n):
            if flush is not None:
                flush()
            self._sync()
            t0 = time.perf_counter()
            self.output = fn()
            self._sync()
            samples.append((time.perf_counter() - t0) * 1e6)
        return samples


class CudaEventTimer:
    name = "cuda-event"
    output: object = None

    def prepare(self, fn: Fn) -> Fn:
        return fn

    def time(self, fn: Fn, n: int, flush: Flush) -> list[float]:
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        for start, end in zip(starts, ends, strict=True):
            if flush is not None:
                flush()
            else:
                torch.cuda._sleep(SPACER_CYCLES)
            start.record()
            self.output = fn()
            end.record()
        torch.cuda.synchronize()
        return [s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends, strict=True)]


class CudaGraphTimer(CudaEventTimer):
    """Capture `fn` once (after one eager warm-up call on a side stream), time replays."""

    name = "cuda-graph"

    def __init__(self) -> None:
        self.graph: torch.cuda.CUDAGraph | None = None
        self.captured: object = None
        """What `fn` returned while being captured: the buffer every replay writes."""

    def prepare(self, fn: Fn) -> Fn:
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            fn()
        torch.cuda.current_stream().wait_stream(stream)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self.captured = fn()
        torch.cuda.synchronize()
        self.graph = graph
        self.output = self.captured
        return graph.replay

    def time(self, fn: Fn, n: int, flush: Flush) -> list[float]:
        samples = super().time(fn, n, flush)
        self.output = self.captured  # a replay returns nothing: its output is the captured one
        return samples


class FakeTimer:
    """Returns the scripted samples in a cycle; never calls `fn`."""

    name = "fake"
    output: object = None

    def __init__(self, samples_us: Sequence[float] = (100.0, 101.0, 99.0, 100.5, 99.5)) -> None:
        if not samples_us:
            raise ValueError("FakeTimer needs at least one sample")
        self._samples = list(samples_us)
        self._it = cycle(self._samples)

    def prepare(self, fn: Fn) -> Fn:
        return fn

    def time(self, fn: Fn, n: int, flush: Flush) -> list[float]:
        return list(islice(self._it, n))
