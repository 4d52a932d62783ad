"""Rates with units chosen for the number: `2581 GB/s` on an H200, `812 MB/s` on a CPU, never
`0 GB/s` (one rule for the run table, `show` and the summary)."""

from __future__ import annotations

import math

BANDWIDTH_UNITS = ((1.0, "GB/s"), (1e-3, "MB/s"), (1e-6, "kB/s"), (1e-9, "B/s"))
"""(scale in GB/s, unit): the first whose scale the value reaches is used."""
COMPUTE_UNITS = ((1.0, "TFLOP/s"), (1e-3, "GFLOP/s"), (1e-6, "MFLOP/s"), (1e-9, "kFLOP/s"))
"""(scale in TFLOP/s, unit), the same way."""


def fmt_bandwidth(gbps: float | None) -> str:
    """`4593 GB/s`, `38.2 GB/s`, `812 MB/s`, `3.10 kB/s`; `-` when unknown."""
    return _scaled(gbps, BANDWIDTH_UNITS)


def fmt_compute(tflops: float | None) -> str:
    """`154 TFLOP/s`, `1.25 TFLOP/s`, `812 GFLOP/s`, `3.10 MFLOP/s`; `-` when unknown."""
    return _scaled(tflops, COMPUTE_UNITS)


def _scaled(value: float | None, units: tuple[tuple[float, str], ...]) -> str:
    if value is None or not math.isfinite(value):
        return "-"
    for scale, unit in units:
        if abs(value) >= scale:
            return f"{_digits(value / scale)} {unit}"
    return f"0 {units[-1][1]}"


def _digits(x: float) -> str:
    """Three significant figures, more for numbers of 1000 and up (never in e-notation)."""
    if abs(x) >= 100:
        return f"{x:.0f}"
    if abs(x) >= 10:
        return f"{x:.1f}"
    return f"{x:.2f}"
