"""Which measured rows the replay's cost models are fitted on, and what they bound: `ok` rows
with a latency, a shape's decode rows, the shapes present (for errors), and the bandwidth no
decode fit may exceed."""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np

from attnbench.replay.shape import ShapeKey
from attnbench.results import ResultRow
from attnbench.workload.spec import WorkloadSpec


def padded_label(spec: WorkloadSpec) -> bool:
    """Rows of the workload `padded:` transform (lengths `padded(X)`, or a `padded` label)."""
    from attnbench.analysis.frame import is_padded

    return is_padded(spec.label, spec.lengths)


def usable_rows(rows: Iterable[ResultRow]) -> list[ResultRow]:
    return [r for r in rows if r.status == "ok" and r.latency_us and r.latency_us > 0]


def shapes_in(rows: Iterable[ResultRow]) -> list[str]:
    """Shapes (as ShapeKey.describe) present among `ok` rows, for error messages."""
    seen = set()
    for r in usable_rows(rows):
        key = ShapeKey.of(r.spec)
        seen.add(key.describe())
    return sorted(seen)


def bandwidth_ceiling(
    rows: Iterable[ResultRow], key: ShapeKey, measured_gbps: float | None
) -> float:
    """The bandwidth no decode fit may exceed, GB/s: the larger of the GPU's measured ceiling
    (streaming read or copy, from the results headers) and the highest KV read rate any `ok`
    decode row of this shape attains (a kernel's measured rate is a measurement of what the
    memory delivers; a fit above both would be a bandwidth nothing measured)."""
    best = 0.0
    for r in usable_rows(rows):
        if r.spec.kind == "decode" and key.matches(r.spec, any_page=True) and r.latency_us:
            kv = np.asarray(r.spec.kv_lens, dtype=np.float64)
            total = kv.size * kv.max() if padded_label(r.spec) else kv.sum()
            best = max(best, total * key.kv_bytes_per_token / (r.latency_us * 1e3))
    return max(best, measured_gbps or 0.0) or math.inf
