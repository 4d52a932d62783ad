"""The decode interval of `recommend` covers what it claims (issue 45): simulated deployments
with a known true ratio, built like the measured ones, drawn with `deploy.plan`'s design."""

from __future__ import annotations

import numpy as np
import pytest

from attnbench.analysis.compare import Timing
from attnbench.deploy.stats import MIN_CASES, Pair, PairedEstimate, paired_ratio

SHARES = (0.42, 0.24, 0.15, 0.08, 0.05, 0.03, 0.02, 0.01)
"""Bucket shares like azure-conv's on vLLM (a heavy small-batch head, a thin tail)."""
BASE_US = (12.0, 15.0, 22.0, 35.0, 60.0, 110.0, 200.0, 380.0)
RATIO = (0.84, 0.86, 0.91, 0.83, 1.05, 1.2, 1.1, 0.95)
STEPS = 2000
"""Steps per bucket in the simulated trace."""


def _population(rng: np.random.Generator) -> tuple[list[np.ndarray], list[np.ndarray], float]:
    """Per bucket the default's and the option's true step times, and the true ratio of the
    traffic-weighted means."""
    xs, ys = [], []
    for base, ratio in zip(BASE_US, RATIO, strict=True):
        x = base * rng.lognormal(0.0, 0.3, STEPS)  # steps of one bucket differ in KV length
        y = x * ratio * rng.lognormal(0.0, 0.05, STEPS)  # and in how much the option gains
        xs.append(x)
        ys.append(y)
    num = sum(w * y.mean() for w, y in zip(SHARES, ys, strict=True))
    den = sum(w * x.mean() for w, x in zip(SHARES, xs, strict=True))
    return xs, ys, num / den


def _draw(
    rng: np.random.Generator, xs: list[np.ndarray], ys: list[np.ndarray], noise: float
) -> list[Pair]:
    """5 random steps per bucket of >= 5%, 2 per smaller one, each side timed with noise."""
    out = []
    for h, (w, x, y) in enumerate(zip(SHARES, xs, ys, strict=True)):
        at = rng.choice(STEPS, size=5 if w >= 0.05 else 2, replace=False)
        for i in at:
            t_x = x[i] * rng.lognormal(0.0, noise)
            t_y = y[i] * rng.lognormal(0.0, noise)
            out.append(Pair(Timing(float(t_y)), Timing(float(t_x)), w, h + 1))
    return out


@pytest.mark.parametrize("noise", [0.01, 0.05])
def test_the_95_interval_covers_the_true_ratio_93_to_97_percent(noise: float) -> None:
    rng = np.random.default_rng(45)
    trials, hits = 1500, 0
    for _ in range(trials):
        xs, ys, truth = _population(rng)
        est = paired_ratio(_draw(rng, xs, ys, noise))
        assert est is not None
        assert est.has_interval
        hits += est.ci_low <= truth <= est.ci_high
    assert 0.93 <= hits / trials <= 0.97, f"coverage {hits / trials:.3f}"


def test_fewer_than_three_cases_print_no_interval() -> None:
    pairs = [Pair(Timing(9.0), Timing(10.0)), Pair(Timing(9.5), Timing(10.0))]
    est = paired_ratio(pairs)
    assert est is not None
    assert est.cases == 2 < MIN_CASES
    assert not est.has_interval
    assert not est.differs
    assert est.text() == "0.93x (2 cases: no interval)"


def test_identical_sides_print_no_degenerate_interval() -> None:
    pairs = [Pair(Timing(t), Timing(t)) for t in (10.0, 11.0, 12.0, 13.0)]
    est = paired_ratio(pairs)
    assert est is not None
    assert est.ratio == 1.0
    assert "1.00-1.00" not in est.text()
    assert "no interval" in est.text()


def test_a_clear_loss_in_the_heaviest_bucket_is_slower_not_a_tie() -> None:
    """Issue 45's long-context trace: 1.7x in the bucket of 62% of the steps, faster only in
    small buckets: the interval lies above 1 and the verdict says slower."""
    pairs = []
    for h, (w, base, r) in enumerate([(0.62, 900.0, 1.7), (0.2, 300.0, 1.1), (0.18, 40.0, 0.9)]):
        for j, wiggle in enumerate((0.97, 0.99, 1.0, 1.02, 1.04)):
            x = base * (1 + 0.1 * j)
            pairs.append(Pair(Timing(x * r * wiggle), Timing(x), w, h + 1))
    est = paired_ratio(pairs)
    assert isinstance(est, PairedEstimate)
    assert est.ci_low > 1.0
    assert est.verdict == "slower"


def test_the_same_pairs_give_the_same_digits() -> None:
    rng = np.random.default_rng(7)
    xs, ys, _ = _population(rng)
    pairs = _draw(rng, xs, ys, 0.02)
    assert paired_ratio(pairs) == paired_ratio(list(pairs))


def test_half_split_coverage_of_a_calibrated_interval_is_about_83_percent() -> None:
    """The GPU check's yardstick (`deploy.coverage`): one half's interval covers the other
    half's estimate about 83% of the time for large halves; with 3 steps per bucket and half,
    the t quantile of few degrees of freedom widens the interval (89% here)."""
    from attnbench.deploy.coverage import EXPECTED, HalfSplit, split_check

    rng = np.random.default_rng(83)
    total = HalfSplit(0, 0, 0)
    for _ in range(800):
        xs, ys, _ = _population(rng)
        pairs = []
        for h, (w, x, y) in enumerate(zip(SHARES, xs, ys, strict=True)):
            for i in rng.choice(STEPS, size=6 if w >= 0.05 else 4, replace=False):
                pairs.append(Pair(Timing(float(y[i])), Timing(float(x[i])), w, h + 1))
        total = total + split_check(pairs)
    assert total.skipped == 0
    assert EXPECTED - 0.03 <= total.rate <= 0.93, f"{total.rate:.3f} vs {EXPECTED:.3f}"
