"""`recommend --measure`'s plan: the real batches to time for one deployment on one trace.

The trace's replay (`deploy.traffic.replay_trace`, the engine's scheduling) gives a running
batch per decode step; each step pads to the engine's CUDA-graph capture size (`engine_buckets`).
Every bucket holding at least `deploy.MEASURE_SHARE` of the steps (and, with `cover`, the
heaviest smaller ones until that share of the steps is covered) gets `per_bucket` of its own
steps, at evenly spaced quantiles of their total KV (`live.step_spec`: the step's exact decode
batch, its requests' KV lengths, on the deployment's shard), and each is timed with every
deployable configuration of the engine (its attention backends at the asked KV dtype and the
page size the engine runs). Pure: a simulation in, cases out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from attnbench.analysis.engine_buckets import bucket_of, capture_sizes
from attnbench.deploy.decide import MEASURE_SHARE, deploy_label
from attnbench.engines.paths import SETTINGS, Engine
from attnbench.replay.deployment import Deployment
from attnbench.replay.live import step_spec
from attnbench.replay.simresult import SimResult
from attnbench.workload.spec import WorkloadSpec

PER_BUCKET = 2
SGLANG_PAGE = 1
"""SGLang's default `--page-size` (its flashinfer backend indexes tokens whatever it is)."""


@dataclass(frozen=True)
class PlannedCase:
    trace: str
    bucket: int
    weight: float
    """The bucket's share of the trace's decode steps."""
    step: int
    spec: WorkloadSpec
    backends: tuple[str, ...]

    def as_dict(self) -> dict[str, object]:
        return {
            "trace": self.trace,
            "bucket": self.bucket,
            "weight": self.weight,
            "step": self.step,
            "case_id": self.spec.case_id,
            "batch_size": self.spec.batch_size,
            "kv_max": max(self.spec.kv_lens),
            "kv_total": self.spec.total_kv,
            "kv_dtype": self.spec.kv_dtype,
            "page_size": self.spec.page_size,
            "backends": list(self.backends),
        }


def engine_variants(engine: Engine, kv_dtype: str) -> tuple[str, ...]:
    kv = "auto" if not kv_dtype.startswith("fp8") else kv_dtype
    return tuple(s.variant for s in SETTINGS if s.engine == engine and kv in s.kv_dtypes)


def heavy_buckets(
    histogram: Mapping[int, int], sizes: Sequence[int], cover: float = 0.0
) -> dict[int, float]:
    """Capture buckets with at least MEASURE_SHARE of the steps, and their share; with
    `cover`, also the heaviest smaller ones until the buckets taken hold that share of the
    steps (a trace whose running batch spreads over many buckets: 39-58% of the 70B tp8
    mooncake and agents steps on the H100 fell in buckets under 5%)."""
    counts: dict[int, float] = {}
    for b, n in histogram.items():
        if b >= 1 and n > 0:
            counts[bucket_of(b, sizes)] = counts.get(bucket_of(b, sizes), 0.0) + n
    total = sum(counts.values()) or 1.0
    share = {s: c / total for s, c in counts.items()}
    taken = {s for s, w in share.items() if w >= MEASURE_SHARE}
    for s in sorted(share, key=lambda s: (-share[s], s)):
        if sum(share[t] for t in taken) >= cover - 1e-12:
            break
        taken.add(s)
    return {s: share[s] for s in sorted(taken)}


def plan_cases(
    sim: SimResult,
    dep: Deployment,
    engine: Engine,
    trace: str,
    kv_dtype: str = "auto",
    per_bucket: int = PER_BUCKET,
    cover: float = 0.0,
) -> list[PlannedCase]:
    """The batches to time (module docstring), bucket by bucket, smallest first."""
    sizes = capture_sizes(engine)
    n = sim.features.n_decode
    hist = {int(b): int(c) for b, c in zip(*np.unique(n[n > 0], return_counts=True), strict=True)}
    variants = engine_variants(engine, kv_dtype)
    kv = dep.dtype if kv_dtype == "auto" else kv_dtype
    page = SGLANG_PAGE if engine == "sglang" else dep.page_size
    out: list[PlannedCase] = []
    for size, weight in heavy_buckets(hist, sizes, cover).items():
        for step in _steps_in(sim, size, sizes, per_bucket):
            spec = step_spec(sim, step, dep).model_copy(
                update={
                    "kv_dtype": kv,
                    "page_size": page,
                    "lengths": f"{trace}-step{step}",
                    "label": deploy_label(trace, size, weight),
                }
            )
            out.append(PlannedCase(trace, size, weight, step, spec, variants))
    return out


def _steps_in(sim: SimResult, size: int, sizes: Sequence[int], k: int) -> list[int]:
    f = sim.features
    grid = np.asarray(sizes)
    at_size = grid[np.minimum(np.searchsorted(grid, f.n_decode), grid.size - 1)]
    pads = np.where(f.n_decode > 0, at_size, 0)
    steps = np.flatnonzero(pads == size)
    if not steps.size:
        return []
    order = steps[np.argsort(f.kv_total[steps], kind="stable")]
    at = np.unique(np.rint(np.linspace(0, order.size - 1, min(k, order.size))).astype(int))
    return sorted(int(order[i]) for i in at)
