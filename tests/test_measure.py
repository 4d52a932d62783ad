from __future__ import annotations

import numpy as np
import pytest
import torch

from attnbench.measure.config import MeasureConfig
from attnbench.measure.engine import measure
from attnbench.measure.stats import median_ci, outlier_mask, summarize
from attnbench.measure.timers import CpuTimer, FakeTimer


def test_summary_statistics() -> None:
    s = summarize([1.0, 2.0, 3.0, 4.0, 100.0])
    assert s.median_us == 3.0
    assert s.min_us == 1.0
    assert s.max_us == 100.0
    assert s.num_outliers == 1
    assert s.ci_low_us <= s.median_us <= s.ci_high_us


def test_median_ci_covers_the_true_median() -> None:
    rng = np.random.default_rng(0)
    hits = 0
    for _ in range(400):
        x = np.sort(rng.exponential(size=41))
        lo, hi = median_ci(x)
        hits += lo <= np.log(2) <= hi
    assert hits / 400 > 0.92  # nominal 95%


def test_outliers_by_modified_z() -> None:
    x = np.array([10.0] * 20 + [10.5, 9.5, 30.0])
    mask = outlier_mask(x)
    assert mask.tolist()[-1]
    assert mask.sum() == 1


def test_summarize_rejects_bad_samples() -> None:
    with pytest.raises(ValueError, match="no samples"):
        summarize([])
    with pytest.raises(ValueError, match="finite"):
        summarize([1.0, float("nan")])


def test_engine_with_fake_timer_is_deterministic() -> None:
    cfg = MeasureConfig(timer="fake", fake_samples_us=(5.0, 6.0, 7.0), min_runs=6)
    m = measure(lambda: None, cfg, device=torch.device("cpu"))
    assert m.timer == "fake"
    assert m.samples_us == [5.0, 6.0, 7.0, 5.0, 6.0, 7.0]
    assert m.stats.median_us == 6.0


def test_engine_stops_on_noise_target_or_budget() -> None:
    calls = []
    cfg = MeasureConfig(
        timer="cpu", warmup_ms=1, min_runs=5, max_runs=50, max_time_ms=50, target_rel_ci=1.0
    )
    m = measure(lambda: calls.append(1), cfg, device=torch.device("cpu"))
    assert m.converged
    assert m.stats.n >= 5
    assert len(calls) >= m.stats.n + m.warmup_runs
    cfg = MeasureConfig(timer="cpu", warmup_ms=1, min_runs=5, max_runs=30, target_rel_ci=1e-9)
    m = measure(lambda: sum(range(2000)), cfg, device=torch.device("cpu"))
    assert not m.converged
    assert m.stats.n <= 30
    assert "noise target not met" in m.notes[0]


def test_cpu_timer_calls_flush_outside_timing() -> None:
    flushed = []
    samples = CpuTimer().time(lambda: None, 3, lambda: flushed.append(1))
    assert len(samples) == 3
    assert len(flushed) == 3


def test_fake_timer_cycles() -> None:
    t = FakeTimer([1.0, 2.0])
    assert t.time(lambda: None, 5, None) == [1.0, 2.0, 1.0, 2.0, 1.0]


def test_cuda_event_timer_spins_the_gpu_before_each_warm_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Warm L2: a GPU spin precedes each event pair, so a short call is not timed at the host's
    launch rate; cold L2: the flush takes that place (no spin)."""
    from attnbench.measure import timers

    log: list[str] = []

    class Event:
        def __init__(self, enable_timing: bool) -> None:
            self.t = 0.0

        def record(self) -> None:
            log.append("event")

        def elapsed_time(self, end: object) -> float:
            return 0.001

    monkeypatch.setattr(timers.torch.cuda, "Event", Event)
    monkeypatch.setattr(timers.torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(timers.torch.cuda, "_sleep", lambda cycles: log.append(f"spin{cycles}"))
    timer = timers.CudaEventTimer()
    assert timer.time(lambda: log.append("call"), 2, None) == [1.0, 1.0]
    spin = f"spin{timers.SPACER_CYCLES}"
    assert log == [spin, "event", "call", "event"] * 2
    log.clear()
    timer.time(lambda: log.append("call"), 1, lambda: log.append("flush"))
    assert log == ["flush", "event", "call", "event"]
