"""Is B faster than A? Ratios of medians with confidence intervals, called faster or slower only
when the difference is both statistically significant and larger than the measurement noise.

After nvbench's compare (a difference inside the noise of either measurement is "same") and
asv's `_is_result_better` (better only if faster by a factor *and* significant: Mann-Whitney U
on the samples when both sides have them, non-overlapping confidence intervals otherwise).

    ratio      = median(B) / median(A)                   (< 1: B is faster)
    CI         = 2.5/97.5 percentiles of bootstrap replicates median(B*) / median(A*)
                 (replicates from the stored samples; without samples, log-normal draws whose
                 95% interval is the stored CI of the median)
    significant= Mann-Whitney p < 0.05 and the ratio's CI excludes 1     (samples on both sides)
                 the two medians' stored 95% CIs do not overlap           (otherwise)
    beyond noise: |ratio - 1| > max(rel CI half-width of A, of B, noise floor)
    verdict    = faster / slower when significant and beyond noise, else tie

The same replicates give a geometric mean over many cases with a two-level bootstrap (cases
resampled, then each case's ratio drawn from its own replicates): `geomean_ratio`.

Across two runs (`compare_frames`), a case is called faster or slower only when, besides, its
change exceeds the case's own measured run-to-run spread, as nvbench's compare does: the range
its timed calls varied over in run A ([min, max] of the samples) and the range in run B must be
apart by more than CLEAR_GAP (nvbench-compare-robust's `clear_gap.relative`); overlapping
ranges are a tie, `within_spread`. nvbench's robust interval is [min, q3]; this one is the
whole observed range, because a GPU that changes state during one run puts that run's median
above the other's while its first calls match it: in the committed `h200-default-fresh` and
`-warm` runs of one commit, the warm run's flashinfer:auto prefill stepped from 2,078 to
2,186 us after two calls while the fresh one stayed at 2,046-2,074 us, which [min, q3] calls a
6.7% regression.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import pandas as pd

from attnbench.analysis.frame import latest, records
from attnbench.workload.spec import WorkloadSpec

ALPHA = 0.05
N_BOOT = 1000
MIN_SAMPLES = 5
NOISE_FLOOR = 0.01
"""Differences under 1% are not called, whatever the statistics say (clocks, thermals)."""
CLEAR_GAP = 0.005
"""Two runs' sample ranges must be apart by this much (relative) for a change to be called."""
Z95 = 1.959963984540054
SEED = 0

Verdict = Literal["faster", "slower", "tie"]
FAILED = ("mismatch", "error", "oom", "timeout")


@dataclass(frozen=True)
class Timing:
    """What one row says about its latency: median, CI of the median, samples."""

    median_us: float
    ci_low_us: float | None = None
    ci_high_us: float | None = None
    samples_us: np.ndarray | None = None
    min_us: float | None = None
    """The fastest timed call (of all samples, not only the stored ones), if known."""
    max_us: float | None = None
    """The slowest timed call, if known."""

    @property
    def rel_ci(self) -> float:
        """Half-width of the median's 95% CI relative to the median (0 when unknown)."""
        if self.ci_low_us is None or self.ci_high_us is None or self.median_us <= 0:
            return 0.0
        return (self.ci_high_us - self.ci_low_us) / 2 / self.median_us

    @classmethod
    def of(cls, row: Mapping[str, Any]) -> Timing:
        """From a DataFrame row of `analysis.frame.load` (latency_us, ci_*_us, samples_us)."""
        samples = row.get("samples_us")
        arr = np.asarray(samples, dtype=np.float64) if samples is not None else None
        if arr is not None and (arr.size < MIN_SAMPLES or not np.all(np.isfinite(arr))):
            arr = None
        low, high = _num(row.get("min_us")), _num(row.get("max_us"))
        if (low is None or high is None) and arr is not None:
            low, high = float(arr.min()), float(arr.max())
        return cls(
            median_us=float(row["latency_us"]),
            ci_low_us=_num(row.get("ci_low_us")),
            ci_high_us=_num(row.get("ci_high_us")),
            samples_us=arr,
            min_us=low,
            max_us=high,
        )

    @property
    def spread(self) -> tuple[float, float] | None:
        """[min, max] of the timed calls: the range this run's timings varied over."""
        if self.min_us is None or self.max_us is None or not 0 < self.min_us <= self.max_us:
            return None
        return self.min_us, self.max_us


def spread_gap(a: Timing, b: Timing) -> float | None:
    """How far apart the two runs' ranges are, relative: (min B - max A) / max A > 0 when every
    call of B was slower than every call of A, (max B - min A) / min A < 0 when every call of B
    was faster, 0 when the ranges overlap. None when a side has no range."""
    ra, rb = a.spread, b.spread
    if ra is None or rb is None:
        return None
    if rb[0] > ra[1]:
        return (rb[0] - ra[1]) / ra[1]
    if rb[1] < ra[0]:
        return (rb[1] - ra[0]) / ra[0]
    return 0.0


def _num(v: Any) -> float | None:
    if v is None:
        return None
    f = float(v)
    return None if math.isnan(f) else f


def mann_whitney_p(a: np.ndarray, b: np.ndarray) -> float:
    """Two-sided p-value of the Mann-Whitney U test: the normal approximation with tie and
    continuity corrections, fine for the 5..256 samples rows keep; 1.0 when every value ties.

    The same arithmetic as scipy's `mannwhitneyu(a, b, method="asymptotic")` (its `_get_mwu_z`;
    `tests/test_compare.py` checks agreement), without its argument handling, which took most
    of the report's 126 crossover tests' 1.2 s."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    both = np.concatenate([a, b])
    if np.ptp(both) == 0:
        return 1.0
    n1, n2, n = len(a), len(b), len(both)
    _, inverse, counts = np.unique(both, return_inverse=True, return_counts=True)
    avg_rank = np.cumsum(counts) - (counts - 1) / 2.0  # ranks from 1, ties averaged
    u1 = float(avg_rank[inverse[:n1]].sum()) - n1 * (n1 + 1) / 2.0
    u = max(u1, n1 * n2 - u1)
    ties = float((counts**3 - counts).sum())
    sd = math.sqrt(n1 * n2 / 12.0 * ((n + 1) - ties / (n * (n - 1))))
    z = (u - n1 * n2 / 2.0 - 0.5) / sd
    return min(1.0, math.erfc(z / math.sqrt(2.0)))


def median_replicates(t: Timing, rng: np.random.Generator, n: int = N_BOOT) -> np.ndarray:
    """Bootstrap replicates of the median: resampled samples, else log-normal draws matching
    the stored 95% CI, else the median repeated (no information about noise).

    The resampling is scipy's `bootstrap(..., method="percentile", vectorized=True)` without
    its interval: the same index draws from `rng`, so the same replicates, at a fifth of the
    time (the report computes thousands; `resampled_medians`)."""
    if t.samples_us is not None:
        samples = np.asarray(t.samples_us, dtype=float)
        index = rng.integers(0, samples.shape[-1], (n, samples.shape[-1]))
        return resampled_medians(samples, index)
    if t.ci_low_us and t.ci_high_us and t.ci_high_us > t.ci_low_us > 0:
        sigma = (math.log(t.ci_high_us) - math.log(t.ci_low_us)) / (2 * Z95)
        return np.asarray(t.median_us * np.exp(rng.normal(0.0, sigma, n)))
    return np.full(n, t.median_us)


def resampled_medians(samples: np.ndarray, index: np.ndarray) -> np.ndarray:
    """`np.median(samples[index], axis=-1)`, the same values, from sorted small integers: a
    resample's order statistics are the sorted samples at the order statistics of its ranks,
    and numpy sorts int16 ranks several times faster than it partitions the floats."""
    size = index.shape[-1]
    order = np.argsort(samples, kind="stable")
    rank = np.empty(size, dtype=np.int16 if size <= np.iinfo(np.int16).max else np.intp)
    rank[order] = np.arange(size)
    ranks = np.sort(rank[index], axis=-1)
    ordered = samples[order]
    upper: np.ndarray = ordered[ranks[:, size // 2]]
    if size % 2:
        return upper
    return np.asarray((ordered[ranks[:, size // 2 - 1]] + upper) / 2)


@dataclass(frozen=True)
class RatioEstimate:
    ratio: float
    """median(B) / median(A): below 1, B is faster."""
    ci_low: float
    ci_high: float
    p_value: float | None
    """Mann-Whitney two-sided p, None when a side has no samples."""
    significant: bool
    noise: float
    """The noise factor the difference must exceed (relative)."""
    method: str

    @property
    def beyond_noise(self) -> bool:
        return abs(math.log(self.ratio)) > math.log1p(self.noise)

    @property
    def verdict(self) -> Verdict:
        if self.significant and self.beyond_noise:
            return "faster" if self.ratio < 1 else "slower"
        return "tie"


def estimate_ratio(
    a: Timing,
    b: Timing,
    rng: np.random.Generator | None = None,
    *,
    noise_floor: float = NOISE_FLOOR,
    n_boot: int = N_BOOT,
) -> RatioEstimate:
    """B relative to A for one case (see the module docstring for the rules)."""
    rng = rng or np.random.default_rng(SEED)
    reps = median_replicates(b, rng, n_boot) / median_replicates(a, rng, n_boot)
    lo, hi = (float(v) for v in np.percentile(reps, [2.5, 97.5]))
    ratio = b.median_us / a.median_us
    noise = max(a.rel_ci, b.rel_ci, noise_floor)
    if a.samples_us is not None and b.samples_us is not None:
        p: float | None = mann_whitney_p(a.samples_us, b.samples_us)
        significant = bool(p is not None and p < ALPHA and (hi < 1 or lo > 1))
        method = "samples: bootstrap CI + Mann-Whitney U"
    else:
        p = None
        have_ci = None not in (a.ci_low_us, a.ci_high_us, b.ci_low_us, b.ci_high_us)
        significant = bool(
            have_ci
            and (
                (a.ci_high_us or 0) < (b.ci_low_us or 0) or (b.ci_high_us or 0) < (a.ci_low_us or 0)
            )
        )
        method = "stored CIs: overlap test" if have_ci else "medians only: never significant"
    return RatioEstimate(ratio, lo, hi, p, significant, noise, method)


def geomean_ratio(
    pairs: Sequence[tuple[Timing, Timing]],
    rng: np.random.Generator | None = None,
    *,
    noise_floor: float = NOISE_FLOOR,
    n_boot: int = N_BOOT,
) -> RatioEstimate:
    """Geometric mean over cases of median(B)/median(A), with a two-level bootstrap CI
    (cases resampled with replacement; each case's ratio drawn from its own replicates).
    Significant when the CI excludes 1; the noise factor is the largest per-side noise."""
    if not pairs:
        raise ValueError("geomean_ratio needs at least one (A, B) pair")
    rng = rng or np.random.default_rng(SEED)
    logs = np.stack(
        [
            np.log(median_replicates(b, rng, n_boot)) - np.log(median_replicates(a, rng, n_boot))
            for a, b in pairs
        ]
    )  # [cases, n_boot]
    points = np.array([math.log(b.median_us / a.median_us) for a, b in pairs])
    noise = max([noise_floor] + [max(a.rel_ci, b.rel_ci) for a, b in pairs])
    return geomean_from_logs(logs, points, noise, rng)


def geomean_from_logs(
    logs: np.ndarray, points: np.ndarray, noise: float, rng: np.random.Generator
) -> RatioEstimate:
    """The two-level bootstrap behind `geomean_ratio`, from per-case log-ratio replicates
    `logs` [cases, n_boot] and per-case point log-ratios `points` [cases]."""
    c, n_boot = logs.shape
    pick = rng.integers(0, c, size=(n_boot, c))
    boot = logs[pick, np.arange(n_boot)[:, None]].mean(axis=1)
    lo, hi = (float(math.exp(v)) for v in np.percentile(boot, [2.5, 97.5]))
    gm = float(math.exp(float(points.mean())))
    return RatioEstimate(gm, lo, hi, None, hi < 1 or lo > 1, noise, f"geomean of {c} cases")


# -- comparing two result sets ---------------------------------------------------------------

Outcome = Literal[
    "faster",
    "slower",
    "tie",
    "broken",
    "fixed",
    "status changed",
    "still failing",
    "only A",
    "only B",
]


@dataclass
class Entry:
    case_id: str
    backend: str
    spec: WorkloadSpec | None
    status_a: str | None
    status_b: str | None
    median_a_us: float | None = None
    median_b_us: float | None = None
    estimate: RatioEstimate | None = None
    outcome: Outcome = "tie"
    gap: float | None = None
    """`spread_gap` of the pair (None without ranges)."""
    within_spread: bool = False
    """Significant and beyond the CI noise, yet the two runs' ranges overlap: a tie."""
    regression: bool = False
    """Counts toward the non-zero exit: significantly slower past the threshold, or ok -> not ok."""
    reason_b: str = ""


@dataclass
class Comparison:
    entries: list[Entry]
    threshold: float
    noise_floor: float
    overall: RatioEstimate | None = None
    gpus: tuple[str, str] = ("", "")
    notes: list[str] = field(default_factory=list)

    @property
    def regressions(self) -> list[Entry]:
        return [e for e in self.entries if e.regression]

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for e in self.entries:
            out[e.outcome] = out.get(e.outcome, 0) + 1
        return out


def _index(frame: pd.DataFrame) -> dict[tuple[str, str], dict[str, Any]]:
    if frame.empty:
        return {}
    rows = latest(frame).sort_values("order")
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for rec in records(rows):
        out[(str(rec["case_id"]), str(rec["backend"]))] = rec
    return out


def compare_frames(
    a: pd.DataFrame,
    b: pd.DataFrame,
    *,
    threshold: float = 0.05,
    noise_floor: float = NOISE_FLOOR,
) -> Comparison:
    """Match rows of A and B on (case_id, backend) and classify each pair.

    `threshold`: a significant slowdown counts as a regression only when B/A - 1 exceeds it.
    A change is significant only where the two runs' ranges are apart (`spread_gap` beyond
    CLEAR_GAP); otherwise the pair is a tie `within_spread`.
    A row that was ok in A and is anything else in B (mismatch, error, oom, timeout,
    unsupported) is a regression too.
    """
    ia, ib = _index(a), _index(b)
    rng = np.random.default_rng(SEED)
    entries: list[Entry] = []
    pairs: list[tuple[Timing, Timing]] = []
    for key in sorted(set(ia) | set(ib)):
        ra, rb = ia.get(key), ib.get(key)
        spec = (rb or ra or {}).get("spec")
        e = Entry(key[0], key[1], spec, ra["status"] if ra else None, rb["status"] if rb else None)
        e.reason_b = str(rb.get("reason", "")) if rb else ""
        if ra is None:
            e.outcome = "only B"
        elif rb is None:
            e.outcome = "only A"
        elif ra["status"] == "ok" and rb["status"] == "ok":
            ta, tb = Timing.of(ra), Timing.of(rb)
            e.median_a_us, e.median_b_us = ta.median_us, tb.median_us
            e.estimate = estimate_ratio(ta, tb, rng, noise_floor=noise_floor)
            e.gap = spread_gap(ta, tb)
            e.outcome = e.estimate.verdict
            if e.outcome != "tie" and e.gap is not None and abs(e.gap) <= CLEAR_GAP:
                e.outcome, e.within_spread = "tie", True
            e.regression = e.outcome == "slower" and e.estimate.ratio - 1 > threshold
            pairs.append((ta, tb))
        elif ra["status"] == "ok":
            e.outcome, e.regression = "broken", True
            e.median_a_us = float(ra["latency_us"])
        elif rb["status"] == "ok":
            e.outcome = "fixed"
            e.median_b_us = float(rb["latency_us"])
        else:
            e.outcome = "still failing" if ra["status"] == rb["status"] else "status changed"
        entries.append(e)
    comp = Comparison(entries, threshold, noise_floor)
    spread = [e for e in entries if e.within_spread]
    if spread:
        widest = max(spread, key=lambda e: abs(math.log(e.estimate.ratio)) if e.estimate else 0)
        ratio = widest.estimate.ratio if widest.estimate else 1.0
        comp.notes.append(
            f"{len(spread)} pair(s) whose medians moved (up to {ratio:.3f}x, {widest.backend}) "
            "are ties: within the runs' own spread (the two runs' timed calls overlap)"
        )
    if pairs:
        comp.overall = geomean_ratio(pairs, rng, noise_floor=noise_floor)
    gpus_a = sorted(set(a["gpu"])) if not a.empty else []
    gpus_b = sorted(set(b["gpu"])) if not b.empty else []
    comp.gpus = (", ".join(gpus_a), ", ".join(gpus_b))
    if gpus_a and gpus_b and gpus_a != gpus_b:
        comp.notes.append(
            f"A ran on {comp.gpus[0]}, B on {comp.gpus[1]}: differences include the hardware"
        )
    return comp


def parse_threshold(text: str, name: str = "threshold") -> float:
    """`5%` or `0.05` -> 0.05; raises ValueError otherwise (and for values outside [0, 10])."""
    t = text.strip()
    try:
        value = float(t[:-1]) / 100 if t.endswith("%") else float(t)
    except ValueError:
        raise ValueError(f"{name}={text!r} is not a number; write e.g. 5% or 0.05") from None
    if not t.endswith("%") and value >= 1:
        raise ValueError(f"{name}={text!r} is ambiguous; write {t}% or {value / 100:g}")
    if not 0 <= value <= 10:
        raise ValueError(f"{name}={text!r} must be from 0% to 1000% (0 to 10)")
    return value
