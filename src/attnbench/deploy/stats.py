"""The paired, stratified estimate of `recommend`: one option against a baseline on the same
cases, and its 95% interval.

Estimand (decode): the traffic-weighted mean attention time per decode step of the option over
the baseline's, over this trace's decode steps on this GPU,
    theta = sum_h W_h mu_h(option) / sum_h W_h mu_h(baseline),
with h the CUDA-graph buckets (strata), W_h each bucket's share of the decode steps and
mu_h the mean step time over the bucket's steps. It is the ratio of total decode attention
time, what a serving engineer's capacity and latency budget move with (a geometric mean of
per-step ratios is not a time anyone spends). Prefill: the mean time of one prompt's prefill
over the trace's prompts (one stratum).

Design: within each stratum, steps drawn at random without replacement (`deploy.plan`), both
sides timed on the same batch (paired). Estimator: the combined ratio estimator
R = sum W_h ybar_h / sum W_h xbar_h. Its variance is linearised: the residuals
d = y - R x of each stratum (their spread holds the step-to-step spread and each row's timing
noise alike) give V_s = sum W_h^2 s_h^2 / n_h / X^2, with Satterthwaite's degrees of freedom.
A stratum of one case is pooled with its neighbour for its variance (collapsed strata). The
histogram's own uncertainty enters as a further variance: the spread of R under the replicate
weights of `Traffic` (a block bootstrap of the replay's steps, and replays at the step-cost
model's held-out p90 error either way, taken as a 90% range). The interval is
exp(log R +- t_df * sqrt(V) / R). Fewer than `MIN_CASES` cases: no interval. Cases that were
not drawn at random (a committed suite's fixed grid) are each their own stratum, and only
their timing noise enters. Deterministic: the same rows and weights give the same digits.
Pure: no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from attnbench.analysis.compare import Timing

ESTIMAND = (
    "the traffic-weighted mean attention time per decode step of the option over the "
    "default's, over this trace's decode steps on this GPU (strata: the CUDA-graph buckets, "
    "weighted by their shares of the steps): the ratio of total decode attention time"
)
METHOD = (
    "stratified ratio estimator on paired steps drawn at random per bucket; 95% CI from the "
    "within-bucket spread of the paired residuals (timing noise included), Satterthwaite t"
)
MIN_CASES = 3
"""Fewer cases than this print no interval."""
Z975 = 1.959963984540054
Z90 = 1.6448536269514722
"""A 90% range of a normal spans +-Z90 standard deviations."""


@dataclass(frozen=True)
class Pair:
    """One case both sides ran: the option's timing, the baseline's, its stratum's weight
    (share of the decode steps) and its stratum (the CUDA-graph bucket; 0: one stratum)."""

    option: Timing
    baseline: Timing
    weight: float = 1.0
    stratum: int = 0


@dataclass(frozen=True)
class WeightReplicates:
    """The histogram's uncertainty as replicate stratum weights: `boot`, a block bootstrap of
    the replay's steps; `band`, the replays at step costs of (1 - p90, 1 + p90)."""

    boot: tuple[Mapping[int, float], ...] = ()
    band: tuple[Mapping[int, float], ...] = ()


@dataclass(frozen=True)
class PairedEstimate:
    ratio: float
    """Ratio of the weighted mean times, option / baseline (< 1: the option is faster)."""
    ci_low: float
    ci_high: float
    cases: int
    strata: int = 1
    df: float = math.inf
    """Degrees of freedom of the interval's t quantile (Satterthwaite)."""

    @property
    def has_interval(self) -> bool:
        return self.cases >= MIN_CASES and self.ci_high > self.ci_low

    def overlaps(self, other: PairedEstimate) -> bool:
        """Not told apart: the intervals overlap, or either rests on too few cases. (Zero
        spread over enough cases, as an option against itself, is an exact point.)"""
        if self.cases < MIN_CASES or other.cases < MIN_CASES:
            return True
        return self.ci_low <= other.ci_high and other.ci_low <= self.ci_high

    @property
    def differs(self) -> bool:
        """The interval excludes 1: significantly faster or slower than the baseline."""
        return self.has_interval and (self.ci_high < 1.0 or self.ci_low > 1.0)

    @property
    def verdict(self) -> str:
        """`faster`, `slower` (the interval lies above 1) or `no clear difference`."""
        if not self.differs:
            return "no clear difference"
        return "faster" if self.ci_high < 1.0 else "slower"

    def interval(self) -> str:
        """`0.84-0.90`, or `N case(s): no interval`."""
        if not self.has_interval:
            return f"{self.cases} case{'s' if self.cases != 1 else ''}: no interval"
        return f"{self.ci_low:.2f}-{self.ci_high:.2f}"

    def text(self) -> str:
        """`0.87x (95% CI 0.84-0.90, 12 cases)`, or `0.87x (2 cases: no interval)`."""
        if not self.has_interval:
            return f"{self.ratio:.2f}x ({self.interval()})"
        return f"{self.ratio:.2f}x (95% CI {self.interval()}, {self.cases} cases)"

    def short(self) -> str:
        """`0.87x [0.84-0.90]`, or `0.87x (2 cases)`: no interval."""
        if not self.has_interval:
            return f"{self.ratio:.2f}x ({self.cases} case{'s' * (self.cases != 1)})"
        return f"{self.ratio:.2f}x [{self.interval()}]"


def paired_ratio(
    pairs: Sequence[Pair], replicates: WeightReplicates | None = None, drawn: bool = True
) -> PairedEstimate | None:
    """The stratified paired estimate over `pairs` (module docstring); None without a pair of
    positive weight. `drawn`: the cases were drawn at random within their strata (`--measure`
    rows); otherwise they are a fixed grid (committed suites), each case is its own stratum
    and only each row's timing noise (its median's CI) enters the interval."""
    used = [p for p in pairs if p.weight > 0 and p.baseline.median_us > 0]
    if not used:
        return None
    if not drawn:
        return _fixed_design(used)
    strata = _strata(used)
    r = _ratio(strata, {h: s.weight for h, s in strata.items()})
    v_s, df = _sampling_variance(strata, r)
    v_h = _histogram_variance(strata, replicates) if replicates else 0.0
    v = v_s + v_h
    n = len(used)
    if n < MIN_CASES or not v > 0:
        return PairedEstimate(r, r, r, n, len(strata))
    df_all = v**2 / (v_s**2 / df) if v_s > 0 and math.isfinite(df) else math.inf
    t = t975(df_all)
    half = t * math.sqrt(v) / r
    return PairedEstimate(
        r, r * math.exp(-half), r * math.exp(half), n, len(strata), round(df_all, 1)
    )


def _fixed_design(pairs: Sequence[Pair]) -> PairedEstimate:
    """A fixed grid of cases: the ratio of the weighted sums (each pair weighted by its
    stratum's weight shared among the stratum's cases) and an interval from the rows' timing
    noise alone (each median's 95% CI as +-1.96 standard errors), normal quantile."""
    per: dict[int, int] = {}
    for p in pairs:
        per[p.stratum] = per.get(p.stratum, 0) + 1
    w = np.array([p.weight / per[p.stratum] for p in pairs])
    y = np.array([p.option.median_us for p in pairs])
    x = np.array([p.baseline.median_us for p in pairs])
    sy = np.array([p.option.rel_ci for p in pairs]) * y / Z975
    sx = np.array([p.baseline.rel_ci for p in pairs]) * x / Z975
    den = float(np.dot(w, x))
    r = float(np.dot(w, y)) / den
    v = float(np.sum(w**2 * (sy**2 + r**2 * sx**2))) / den**2
    n = len(pairs)
    if n < MIN_CASES or not v > 0:
        return PairedEstimate(r, r, r, n, n)
    half = Z975 * math.sqrt(v) / r
    return PairedEstimate(r, r * math.exp(-half), r * math.exp(half), n, n)


def t975(df: float) -> float:
    """The 97.5% quantile of Student's t with `df` degrees of freedom (scipy's `stdtrit`, what
    `scipy.stats.t.ppf` calls, without the second it takes to import scipy.stats; where scipy
    is absent, as on the GPU machine, the Abramowitz-Stegun 26.7.5 expansion)."""
    if not math.isfinite(df):
        return Z975
    try:
        from scipy.special import stdtrit
    except ImportError:
        z, g = Z975, max(df, 1.0)
        terms = (
            (z**3 + z) / 4,
            (5 * z**5 + 16 * z**3 + 3 * z) / 96,
            (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384,
        )
        return z + sum(c / g ** (i + 1) for i, c in enumerate(terms))
    return float(stdtrit(df, 0.975))


@dataclass(frozen=True)
class _Stratum:
    weight: float
    y: np.ndarray
    """The option's step times (µs)."""
    x: np.ndarray
    """The baseline's step times (µs), paired with `y`."""


def _strata(pairs: Sequence[Pair]) -> dict[int, _Stratum]:
    by: dict[int, list[Pair]] = {}
    for p in pairs:
        by.setdefault(p.stratum, []).append(p)
    return {
        h: _Stratum(
            max(p.weight for p in ps),
            np.array([p.option.median_us for p in ps]),
            np.array([p.baseline.median_us for p in ps]),
        )
        for h, ps in sorted(by.items())
    }


def _ratio(strata: Mapping[int, _Stratum], weights: Mapping[int, float]) -> float:
    num = sum(weights.get(h, 0.0) * float(s.y.mean()) for h, s in strata.items())
    den = sum(weights.get(h, 0.0) * float(s.x.mean()) for h, s in strata.items())
    return num / den if den > 0 else math.nan


def _sampling_variance(strata: Mapping[int, _Stratum], r: float) -> tuple[float, float]:
    """Linearised variance of R and its Satterthwaite degrees of freedom; strata of one case
    borrow the residual variance of their nearest neighbour with two or more."""
    total_w = sum(s.weight for s in strata.values())
    den = sum(s.weight / total_w * float(s.x.mean()) for s in strata.values())
    var: dict[int, tuple[float, int]] = {}
    for h, s in strata.items():
        if s.y.size >= 2:
            d = s.y - r * s.x
            var[h] = (float(np.var(d, ddof=1)), s.y.size - 1)
    if not var:
        pooled = np.concatenate([s.y - r * s.x for s in strata.values()])
        if pooled.size < 2:
            return 0.0, math.inf
        var = {h: (float(np.var(pooled, ddof=1)), pooled.size - 1) for h in strata}
    terms, dfs = [], []
    for h, s in strata.items():
        s2, df = var.get(h) or var[_nearest(h, list(var))]
        a = (s.weight / total_w) ** 2 / s.y.size * s2
        terms.append(a)
        dfs.append(df)
    v = sum(terms) / den**2
    denom = sum(a**2 / df for a, df in zip(terms, dfs, strict=True) if df > 0)
    df_s = sum(terms) ** 2 / denom if denom > 0 else math.inf
    return v, df_s


def _histogram_variance(strata: Mapping[int, _Stratum], rep: WeightReplicates) -> float:
    """Variance of R from the histogram: over the bootstrap replicate weights, plus the
    step-cost band as a 90% range."""
    keys = list(strata)
    y = np.array([float(strata[h].y.mean()) for h in keys])
    x = np.array([float(strata[h].x.mean()) for h in keys])

    def ratios(sets: Sequence[Mapping[int, float]]) -> np.ndarray:
        if not sets:
            return np.empty(0)
        w = np.array([[s.get(h, 0.0) for h in keys] for s in sets])
        den = w @ x
        r: np.ndarray = np.divide(w @ y, den, out=np.full(len(sets), np.nan), where=den > 0)
        return np.asarray(r[np.isfinite(r)], dtype=np.float64)

    v = 0.0
    boot = ratios(rep.boot)
    if boot.size >= 2:
        v += float(np.var(boot, ddof=1))
    band = ratios(rep.band)
    if band.size == 2:
        v += float((band[1] - band[0]) / (2 * Z90)) ** 2
    return v


def _nearest(h: int, have: Sequence[int]) -> int:
    """The stratum of `have` nearest `h` (log scale of bucket sizes, the smaller on ties)."""
    return min(have, key=lambda g: (abs(math.log(max(g, 1) / max(h, 1))), g))
