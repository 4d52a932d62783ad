"""The GPU's SM clock while it is timed, read through NVML (`nvidia-ml-py`), so a sample taken
while the chip was held back (power cap, heat, a hardware slowdown) is flagged, not silently
averaged in.

NVML is read before and after each timed batch: a batch is `throttled` when an active clock
event reason is one that slows the chip (power brake or cap, thermal, hardware slowdown),
whatever the clock read. The readings say what the chip did, not why a kernel was slow: a
kernel can be slow at full clock. Without NVML (no package, no driver library, a CPU run) the
monitor reads nothing and says so.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# nvmlClocksEventReason* bits that mean the chip was held back (idle and the application
# clock setting are not slowdowns; software power cap, thermal and hardware slowdowns are).
SLOWDOWN_REASONS: dict[int, str] = {
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x20: "sw_thermal",
    0x40: "hw_thermal",
    0x80: "hw_power_brake",
}


@dataclass(frozen=True)
class ClockReading:
    sm_mhz: int
    reasons: int
    """Bit mask of active clock event reasons (NVML)."""

    @property
    def slowdowns(self) -> list[str]:
        return [name for bit, name in SLOWDOWN_REASONS.items() if self.reasons & bit]


@dataclass
class ClockLog:
    """Readings around each timed batch; `flags[i]` is True when sample i was throttled."""

    max_sm_mhz: int | None = None
    readings: list[ClockReading] = field(default_factory=list)
    flags: list[bool] = field(default_factory=list)
    note: str = ""

    def summary(self) -> dict[str, Any]:
        if not self.readings:
            return {"source": "none", "note": self.note}
        mhz = sorted(r.sm_mhz for r in self.readings)
        reasons = sorted({name for r in self.readings for name in r.slowdowns})
        return {
            "source": "nvml",
            "sm_mhz_min": mhz[0],
            "sm_mhz_median": mhz[len(mhz) // 2],
            "sm_mhz_max": mhz[-1],
            "max_sm_mhz": self.max_sm_mhz,
            "throttled_samples": sum(self.flags),
            "samples": len(self.flags),
            "slowdowns": reasons,
        }


class ClockMonitor:
    """NVML handle of one GPU; `read()` returns None when NVML cannot be used."""

    def __init__(self, index: int | None) -> None:
        self._nvml: Any = None
        self._handle: Any = None
        self.max_sm_mhz: int | None = None
        self.note = ""
        if index is None:
            self.note = "not a GPU"
            return
        try:
            import pynvml

            pynvml.nvmlInit()
            self._handle = pynvml.nvmlDeviceGetHandleByIndex(_physical_index(index))
            self.max_sm_mhz = int(
                pynvml.nvmlDeviceGetMaxClockInfo(self._handle, pynvml.NVML_CLOCK_SM)
            )
            self._nvml = pynvml
        except Exception as exc:  # no package, no driver library, no permission
            self.note = f"NVML unavailable ({type(exc).__name__}: {exc})"[:200]

    def read(self) -> ClockReading | None:
        if self._nvml is None:
            return None
        try:
            mhz = int(self._nvml.nvmlDeviceGetClockInfo(self._handle, self._nvml.NVML_CLOCK_SM))
            reasons = int(self._nvml.nvmlDeviceGetCurrentClocksEventReasons(self._handle))
        except Exception:
            return None
        return ClockReading(mhz, reasons)

    def new_log(self) -> ClockLog:
        return ClockLog(max_sm_mhz=self.max_sm_mhz, note=self.note)


def record_batch(
    log: ClockLog, before: ClockReading | None, after: ClockReading | None, n: int
) -> None:
    """Add the readings around a batch of `n` samples and flag them if either was throttled."""
    seen = [r for r in (before, after) if r is not None]
    log.readings += seen
    log.flags += [any(r.slowdowns for r in seen)] * n


def _physical_index(index: int) -> int:
    """NVML numbers GPUs physically; CUDA_VISIBLE_DEVICES renumbers them for CUDA."""
    import os

    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    ids = [v.strip() for v in visible.split(",") if v.strip()]
    if ids and index < len(ids) and ids[index].isdigit():
        return int(ids[index])
    return index
