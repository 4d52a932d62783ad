"""The repeat engine: warm up, then time in batches until the median is known well enough.

Algorithm (after triton's do_bench and nvbench's noise criterion):
1. Pick the timer (CUDA graph for graph-safe GPU work, CUDA events otherwise, perf_counter on
   CPU) and let it prepare the callable (graph capture; on failure fall back to events and say
   why).
2. Warm up for `warmup_ms` (at least two calls), which also estimates the time per call.
3. Time batches of calls, each preceded by an L2 flush outside the timed region, until at least
   `min_runs` samples exist and the 95% CI of the median is within `target_rel_ci` of it, or
   `max_runs` samples or `max_time_ms` of timed work are reached (then `converged` is False).

What the last timed call returned is kept (`Measurement.output`). Before warm-up, the output
buffers named in `poison` (and a graph's captured output) are filled with NaN after the timer
prepared the callable, so the output after timing is what the timed calls wrote, never what the
accuracy gate's call or the capture's eager warm-up left there.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import torch

from attnbench.measure.clocks import ClockLog, ClockMonitor, record_batch
from attnbench.measure.config import MeasureConfig
from attnbench.measure.l2 import L2Flusher
from attnbench.measure.stats import Stats, summarize
from attnbench.measure.timers import (
    CpuTimer,
    CudaEventTimer,
    CudaGraphTimer,
    FakeTimer,
    Fn,
    Timer,
)


@dataclass
class Measurement:
    stats: Stats
    samples_us: list[float]
    timer: str
    l2_policy: str
    warmup_runs: int
    converged: bool
    notes: list[str] = field(default_factory=list)
    clocks: dict[str, Any] = field(default_factory=dict)
    """The SM clock around the timed batches (`measure.clocks`)."""
    output: object = None
    """What the last timed call returned (a graph: its captured output); not written."""

    def as_dict(self) -> dict[str, object]:
        return {
            "timer": self.timer,
            "l2_policy": self.l2_policy,
            "warmup_runs": self.warmup_runs,
            "repeats": self.stats.n,
            "converged": self.converged,
            "notes": self.notes,
            "clocks": self.clocks,
        }


def choose_timer(cfg: MeasureConfig, device: torch.device, graph_safe: bool) -> Timer:
    name = cfg.timer
    if name == "fake":
        return FakeTimer(cfg.fake_samples_us) if cfg.fake_samples_us else FakeTimer()
    if device.type != "cuda":
        return CpuTimer()
    if name == "auto":
        name = "cuda-graph" if graph_safe else "cuda-event"
    if name == "cuda-graph" and graph_safe:
        return CudaGraphTimer()
    if name == "cpu":
        return CpuTimer(sync_cuda=True)
    return CudaEventTimer()


def measure(
    fn: Fn,
    cfg: MeasureConfig,
    *,
    device: torch.device,
    flusher: L2Flusher | None = None,
    graph_safe: bool = True,
    poison: Sequence[torch.Tensor] = (),
) -> Measurement:
    """Time `fn` as the module docstring describes and summarise the samples; `poison`: the
    output buffers `fn` writes, filled with NaN once the timer has prepared `fn`."""
    notes: list[str] = []
    timer, timed = _prepare(fn, cfg, device, graph_safe, notes)
    flush: Callable[[], None] | None = (
        flusher.flush if (cfg.cold_l2 and flusher is not None) else None
    )
    l2_policy = flusher.policy if flush is not None and flusher is not None else "warm"

    if isinstance(timer, FakeTimer):
        fake = timer.time(timed, max(cfg.min_runs, 1), None)
        return Measurement(summarize(fake), fake, timer.name, l2_policy, 0, True, notes)
    _poison([*poison, getattr(timer, "captured", None)])

    warmup_runs, _ = _warm_up(timer, timed, cfg.warmup_ms, device)
    monitor = clock_monitor(_gpu_index(device))
    clocks = monitor.new_log()
    samples: list[float] = []
    converged = False
    batch = max(1, min(cfg.min_runs, cfg.max_runs))
    while True:
        before = monitor.read()
        got = timer.time(timed, batch, flush)
        record_batch(clocks, before, monitor.read(), len(got))
        samples += got
        stats = summarize(samples)
        converged = len(samples) >= cfg.min_runs and stats.rel_ci <= cfg.target_rel_ci
        batch = 0 if converged else _next_batch(samples, stats.median_us, cfg)
        if batch == 0:
            break
    if not converged:
        notes.append(
            f"noise target not met: median 95% CI ±{stats.rel_ci:.1%} after {stats.n} runs"
        )
    notes += _throttle_note(clocks)
    return Measurement(
        stats,
        samples,
        timer.name,
        l2_policy,
        warmup_runs,
        converged,
        notes,
        clocks.summary(),
        timer.output,
    )


def _prepare(
    fn: Fn, cfg: MeasureConfig, device: torch.device, graph_safe: bool, notes: list[str]
) -> tuple[Timer, Fn]:
    """The timer for `fn` and the callable it times (a captured graph's replay, or `fn`); a
    failed graph capture falls back to CUDA events, with a note saying why."""
    timer = choose_timer(cfg, device, graph_safe)
    if cfg.timer == "cuda-graph" and not graph_safe:
        notes.append("backend not graph-capturable: timed with CUDA events")
    try:
        return timer, timer.prepare(fn)
    except Exception as exc:  # graph capture failed: time eagerly, record why
        if not isinstance(timer, CudaGraphTimer):
            raise
        notes.append(f"graph capture failed ({type(exc).__name__}: {_short(exc)}); CUDA events")
        torch.cuda.synchronize()
        return CudaEventTimer(), fn


def _next_batch(samples: Sequence[float], median_us: float, cfg: MeasureConfig) -> int:
    """How many calls to time next: 0 once the run limit or the time budget is reached, else
    up to as many as taken so far, within both."""
    spent_ms = sum(samples) / 1e3
    if len(samples) >= cfg.max_runs or spent_ms >= cfg.max_time_ms:
        return 0
    left_ms = cfg.max_time_ms - spent_ms
    per_call_ms = max(median_us / 1e3, 1e-3)
    batch = int(min(cfg.max_runs - len(samples), max(1, len(samples)), left_ms / per_call_ms))
    return max(1, batch)


def _poison(buffers: Sequence[object]) -> None:
    """Fill each floating-point tensor among `buffers` with NaN (others are left alone)."""
    for t in buffers:
        if isinstance(t, torch.Tensor) and t.is_floating_point():
            t.fill_(float("nan"))


@cache
def clock_monitor(index: int | None) -> ClockMonitor:
    """One NVML monitor per GPU and process (CUDA's index; None on the CPU)."""
    return ClockMonitor(index)


def _gpu_index(device: torch.device) -> int | None:
    if device.type != "cuda":
        return None
    return device.index if device.index is not None else torch.cuda.current_device()


def _throttle_note(log: ClockLog) -> list[str]:
    n = sum(log.flags)
    if not n:
        return []
    reasons = ", ".join(log.summary()["slowdowns"])
    return [f"{n} of {len(log.flags)} samples timed while the GPU was held back ({reasons})"]


def _warm_up(timer: Timer, fn: Fn, warmup_ms: float, device: torch.device) -> tuple[int, float]:
    """Call `fn` for about `warmup_ms` (at least twice); return (calls, ms per call)."""
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    runs = 0
    t0 = time.perf_counter()
    while True:
        fn()
        runs += 1
        if runs >= 2:
            sync()
            elapsed_ms = (time.perf_counter() - t0) * 1e3
            if elapsed_ms >= warmup_ms or runs >= 10_000:
                return runs, elapsed_ms / runs


def _short(exc: BaseException, limit: int = 160) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return text[:limit]
