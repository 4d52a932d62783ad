"""Paired bootstrap of `recommend --model`: one option against a baseline on the same cases.

Each case contributes the log of its latency ratio option / baseline, weighted (a decode case
carries its share of the traffic's CUDA-graph buckets; a prefill case weight 1). The estimate
is the weighted geometric mean of the ratios. Its 95% CI comes from a two-level bootstrap: each
replicate resamples the cases with replacement (the case-to-case spread) and, per case, draws a
bootstrap median of each side's timing samples (`compare.median_replicates`: the run-to-run
noise of each row). The generator is seeded (`compare.SEED`) and created per call, so the same
rows give the same interval. Two options are tied when their intervals against the same
baseline overlap. Pure: no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from attnbench.analysis.compare import SEED, Timing, median_replicates

N_REPLICATES = 500
_CACHE: dict[tuple[int, int], tuple[Timing, np.ndarray]] = {}
_CACHE_MAX = 50_000


@dataclass(frozen=True)
class Pair:
    """One case both sides ran: the option's timing, the baseline's, and the case's weight."""

    option: Timing
    baseline: Timing
    weight: float = 1.0


@dataclass(frozen=True)
class PairedEstimate:
    ratio: float
    """Weighted geometric mean of option / baseline latency (< 1: the option is faster)."""
    ci_low: float
    ci_high: float
    cases: int

    def overlaps(self, other: PairedEstimate) -> bool:
        return self.ci_low <= other.ci_high and other.ci_low <= self.ci_high

    @property
    def differs(self) -> bool:
        """The CI excludes 1: significantly faster or slower than the baseline."""
        return self.ci_high < 1.0 or self.ci_low > 1.0

    def text(self) -> str:
        """`0.87x (95% CI 0.84-0.90, 12 cases)`."""
        return (
            f"{self.ratio:.2f}x (95% CI {self.ci_low:.2f}-{self.ci_high:.2f}, "
            f"{self.cases} case{'s' if self.cases != 1 else ''})"
        )


def medians(t: Timing, n: int) -> np.ndarray:
    """`n` bootstrap medians of one row's timing (numpy resampling of its samples, else
    `compare.median_replicates`' draws from the stored CI), from a generator seeded by the
    row's own figures, so a row draws the same replicates in every pairing; cached per row."""
    hit = _CACHE.get((id(t), n))
    if hit is not None and hit[0] is t:
        return hit[1]
    k = 0 if t.samples_us is None else t.samples_us.size
    rng = np.random.default_rng([SEED, k, int(t.median_us * 1000) % 2**32])
    if t.samples_us is None:
        arr = np.asarray(median_replicates(t, rng, n))
    else:
        arr = np.asarray(np.median(t.samples_us[rng.integers(0, k, size=(n, k))], axis=1))
    arr = np.asarray(np.log(arr), dtype=np.float64)
    if len(_CACHE) >= _CACHE_MAX:
        _CACHE.clear()
    _CACHE[(id(t), n)] = (t, arr)
    return arr


def paired_ratio(
    pairs: Sequence[Pair], n: int = N_REPLICATES, seed: int = SEED
) -> PairedEstimate | None:
    """The paired estimate over `pairs` (None when there is no pair of positive weight)."""
    used = [p for p in pairs if p.weight > 0]
    if not used:
        return None
    rng = np.random.default_rng(seed)
    w = np.array([p.weight for p in used], dtype=np.float64)
    point = np.array([math.log(p.option.median_us / p.baseline.median_us) for p in used])
    reps = np.stack([medians(p.option, n) - medians(p.baseline, n) for p in used])  # cases x n
    pick = rng.integers(0, len(used), size=(n, len(used)))
    cols = np.arange(n)[:, None]
    boot = (w[pick] * reps[pick, cols]).sum(axis=1) / w[pick].sum(axis=1)
    low, high = np.percentile(boot, [2.5, 97.5])
    est = float(np.dot(w, point) / w.sum())
    return PairedEstimate(
        math.exp(est), math.exp(min(float(low), est)), math.exp(max(float(high), est)), len(used)
    )
