"""SM clock readings around timed batches: throttled samples are flagged and named."""

from __future__ import annotations

import sys
import types

import pytest

from attnbench.measure.clocks import ClockLog, ClockMonitor, ClockReading, record_batch


def _fake_nvml(monkeypatch: pytest.MonkeyPatch, readings: list[tuple[int, int]]) -> None:
    it = iter(readings)
    mod = types.SimpleNamespace(
        NVML_CLOCK_SM=1,
        nvmlInit=lambda: None,
        nvmlDeviceGetHandleByIndex=lambda i: f"gpu{i}",
        nvmlDeviceGetMaxClockInfo=lambda h, kind: 1980,
    )
    state: dict[str, int] = {}

    def clock(h: str, kind: int) -> int:
        state["mhz"], state["reasons"] = next(it)
        return state["mhz"]

    mod.nvmlDeviceGetClockInfo = clock
    mod.nvmlDeviceGetCurrentClocksEventReasons = lambda h: state["reasons"]
    monkeypatch.setitem(sys.modules, "pynvml", mod)


def test_a_batch_with_a_power_cap_reading_is_flagged(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_nvml(monkeypatch, [(1980, 0), (1980, 0x1), (1980, 0), (1500, 0x4)])
    mon = ClockMonitor(0)
    assert mon.max_sm_mhz == 1980
    log = mon.new_log()
    record_batch(log, mon.read(), mon.read(), 3)  # idle bit only: not a slowdown
    record_batch(log, mon.read(), mon.read(), 2)  # software power cap
    assert log.flags == [False, False, False, True, True]
    s = log.summary()
    assert s["source"] == "nvml"
    assert s["throttled_samples"] == 2
    assert s["sm_mhz_min"] == 1500
    assert s["slowdowns"] == ["sw_power_cap"]


def test_without_nvml_nothing_is_read_and_the_log_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails
    mon = ClockMonitor(0)
    assert mon.read() is None
    log = mon.new_log()
    record_batch(log, mon.read(), mon.read(), 4)
    assert log.flags == [False] * 4
    assert log.summary()["source"] == "none"
    assert "NVML unavailable" in log.summary()["note"]
    assert ClockMonitor(None).note == "not a GPU"


def test_reading_names_every_slowdown_bit() -> None:
    r = ClockReading(1000, 0x4 | 0x40 | 0x1)
    assert r.slowdowns == ["sw_power_cap", "hw_thermal"]
    assert ClockLog().summary()["source"] == "none"
