"""Measurement settings (no torch import: the CLI and config read this)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

TimerName = Literal["auto", "cpu", "cuda-event", "cuda-graph", "fake"]
TIMERS: tuple[str, ...] = ("auto", "cpu", "cuda-event", "cuda-graph", "fake")


@dataclass(frozen=True)
class MeasureConfig:
    timer: TimerName = "auto"
    cold_l2: bool = True
    warmup_ms: float = 20.0
    min_runs: int = 10
    max_runs: int = 2000
    max_time_ms: float = 400.0
    """Budget of timed work per case (samples x latency), excluding flushes."""
    target_rel_ci: float = 0.01
    fake_samples_us: tuple[float, ...] = ()
