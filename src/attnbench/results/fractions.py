"""A row's bandwidth and FLOP/s fractions re-derived from what the file states: its median
latency, its bytes and FLOPs, and the ceilings of the header written before it (the measured
copy, streaming-read and matmul ceilings, and the spec sheet), with the same pure functions the
sweep used (`measure.metrics`). `attnbench findings --check` holds every quoted row to them."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from attnbench.measure import metrics
from attnbench.results.rows import Header, ResultRow

FRACTIONS = (
    "bandwidth_frac_measured",
    "bandwidth_frac_read",
    "bandwidth_frac_spec",
    "tflops_frac_measured",
    "tflops_frac_spec",
)
"""Every published fraction of a row."""
REL_TOL = 1e-9
"""Stored and re-derived fractions agree to this (JSON keeps floats exactly; the division order
may differ in the last bits)."""


def _rate(table: Mapping[str, Any] | None, key: str) -> float | None:
    value = (table or {}).get(key)
    return float(value) if isinstance(value, int | float) else None


def recomputed_fractions(
    row: ResultRow, ceilings: Mapping[str, Any] | None, spec_sheet: Mapping[str, Any] | None
) -> dict[str, float | None]:
    """What each of `FRACTIONS` should hold for a measured `row` under these ceilings (a
    header's `ceilings` and `spec_sheet`): None where the ceiling is not stated."""
    latency_us = float(row.latency_us or math.nan)
    gbps = metrics.bandwidth_gbps(row.bytes.total if row.bytes else math.nan, latency_us)
    tflops = metrics.tflops_per_s(row.flops if row.flops is not None else math.nan, latency_us)
    key = row.tflops_ceiling or metrics.MATMUL_16BIT
    matmul = (ceilings or {}).get("matmul_tflops")
    sheet_tflops = (spec_sheet or {}).get("tflops")
    return {
        "bandwidth_frac_measured": metrics.fraction(gbps, _rate(ceilings, "copy_bandwidth_gbps")),
        "bandwidth_frac_read": metrics.fraction(gbps, _rate(ceilings, "read_bandwidth_gbps")),
        "bandwidth_frac_spec": metrics.fraction(gbps, _rate(spec_sheet, "bandwidth_gbps")),
        "tflops_frac_measured": metrics.fraction(tflops, _rate(matmul, key)),
        "tflops_frac_spec": metrics.fraction(tflops, _rate(sheet_tflops, key)),
    }


def same_fraction(stored: float | None, recomputed: float | None) -> bool:
    """Both absent, or both present and equal to `REL_TOL` (NaN equals NaN)."""
    if stored is None or recomputed is None:
        return stored is None and recomputed is None
    if math.isnan(stored) or math.isnan(recomputed):
        return math.isnan(stored) and math.isnan(recomputed)
    return math.isclose(stored, recomputed, rel_tol=REL_TOL, abs_tol=0.0)


def fraction_mismatches(
    row: ResultRow, header: Header | None, extra: Mapping[str, Any] | None = None
) -> list[tuple[str, float | None, float | None]]:
    """(field, stored, re-derived) for each fraction of a measured `row` that differs from
    what `header` states; `extra`: a ceilings dict to try where the header's gives another
    value (`KNOWN_UNSTATED`). Empty for a row that was not measured."""
    if row.status != "ok" or not row.latency_us:
        return []
    ceilings = header.ceilings if header is not None else None
    sheet = header.spec_sheet if header is not None else None
    want = recomputed_fractions(row, ceilings, sheet)
    alt = recomputed_fractions(row, extra, sheet) if extra is not None else {}
    out = []
    for name in FRACTIONS:
        stored = getattr(row, name)
        if same_fraction(stored, want[name]) or (alt and same_fraction(stored, alt[name])):
            continue
        out.append((name, stored, want[name]))
    return out
