"""Measurement settings (no torch import: the CLI and config read this)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

TimerName = Literal["auto", "cpu", "cuda-event", "cuda-graph"]
TIMERS: tuple[str, ...] = ("auto", "cpu", "cuda-event", "cuda-graph")
"""The timers a run may choose (`--timer`, `ATTNBENCH_TIMER`, the settings file)."""
DEFAULT_TIMER: TimerName = "auto"
FAKE_TIMER = "fake"
"""The scripted timer (`measure.timers.FakeTimer`): it runs nothing and returns the samples it
was given, so the pipeline can be tested without a GPU. It is not a setting: only a
`MeasureConfig` built in code (a test) names it, and a row it timed is refused by every reader
that analyses rows (`results.read_for_analysis`)."""


@dataclass(frozen=True)
class MeasureConfig:
    timer: TimerName | Literal["fake"] = DEFAULT_TIMER
    cold_l2: bool = True
    warmup_ms: float = 20.0
    min_runs: int = 10
    max_runs: int = 2000
    max_time_ms: float = 400.0
    """Budget of timed work per case (samples x latency), excluding flushes."""
    target_rel_ci: float = 0.01
    fake_samples_us: tuple[float, ...] = ()
    """The fake timer's samples (tests only)."""
