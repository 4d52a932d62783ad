"""Robust summary statistics of timing samples (microseconds).

Median with a distribution-free 95% confidence interval (order statistics of the binomial),
p10/p90, quartiles and IQR, and outliers by the modified z-score on the median absolute
deviation (Iglewicz and Hoaglin: |0.6745 (x - median) / MAD| > 3.5), as hyperfine does.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

OUTLIER_Z = 3.5


@dataclass(frozen=True)
class Stats:
    n: int
    median_us: float
    mean_us: float
    std_us: float
    min_us: float
    max_us: float
    p10_us: float
    p90_us: float
    q1_us: float
    q3_us: float
    iqr_us: float
    ci_low_us: float
    """Lower end of the 95% confidence interval of the median."""
    ci_high_us: float
    num_outliers: int

    @property
    def rel_ci(self) -> float:
        """Half-width of the median's 95% CI relative to the median (the noise figure)."""
        if self.median_us <= 0:
            return math.inf
        return (self.ci_high_us - self.ci_low_us) / 2 / self.median_us

    def as_dict(self) -> dict[str, float | int]:
        d: dict[str, float | int] = asdict(self)
        d["rel_ci"] = self.rel_ci
        return d


def median_ci(sorted_samples: np.ndarray, confidence: float = 0.95) -> tuple[float, float]:
    """Distribution-free CI of the median: order statistics j, k with
    P(X_(j) <= median <= X_(k)) >= confidence under Binomial(n, 1/2) (normal approximation with
    continuity correction; exact enough for n >= 5, and conservative below)."""
    n = len(sorted_samples)
    if n < 3:
        return float(sorted_samples[0]), float(sorted_samples[-1])
    z = 1.959963984540054 if confidence == 0.95 else _z(confidence)
    half = z * math.sqrt(n) / 2
    lo = max(0, math.floor(n / 2 - half - 0.5))
    hi = min(n - 1, math.ceil(n / 2 + half - 0.5))
    return float(sorted_samples[lo]), float(sorted_samples[hi])


def _z(confidence: float) -> float:
    from statistics import NormalDist

    return NormalDist().inv_cdf(0.5 + confidence / 2)


def outlier_mask(samples: np.ndarray) -> np.ndarray:
    """True where the modified z-score |0.6745 (x - median) / MAD| exceeds 3.5."""
    med = np.median(samples)
    dev = np.abs(samples - med)
    mad = np.median(dev)
    if mad > 0:
        return np.asarray(0.6745 * dev / mad > OUTLIER_Z)
    # More than half the samples equal the median (quantised timers): use the mean absolute
    # deviation instead, scaled to match (Iglewicz and Hoaglin; IBM SPSS's 1.253314 factor).
    mean_ad = float(dev.mean())
    if mean_ad == 0:
        return np.zeros(len(samples), dtype=bool)
    return np.asarray(dev / (1.253314 * mean_ad) > OUTLIER_Z)


def summarize(samples_us: Sequence[float]) -> Stats:
    """Summary of timing samples; raises ValueError on an empty or non-finite sample."""
    x = np.asarray(samples_us, dtype=np.float64)
    if x.size == 0:
        raise ValueError("no samples to summarize")
    if not np.all(np.isfinite(x)):
        raise ValueError("timing samples must be finite")
    s = np.sort(x)
    q = np.percentile(s, [10, 25, 50, 75, 90])
    ci_low, ci_high = median_ci(s)
    return Stats(
        n=int(x.size),
        median_us=float(q[2]),
        mean_us=float(x.mean()),
        std_us=float(x.std(ddof=1)) if x.size > 1 else 0.0,
        min_us=float(s[0]),
        max_us=float(s[-1]),
        p10_us=float(q[0]),
        p90_us=float(q[4]),
        q1_us=float(q[1]),
        q3_us=float(q[3]),
        iqr_us=float(q[3] - q[1]),
        ci_low_us=ci_low,
        ci_high_us=ci_high,
        num_outliers=int(outlier_mask(x).sum()),
    )
