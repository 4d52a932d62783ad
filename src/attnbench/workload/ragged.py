"""Raggedness: batches with the same total KV tokens and rising skew, and their padded twins.

`skew:TOTAL[,LEVEL...]` (see `workload.lengths`) expands to one batch per level, every batch
holding exactly TOTAL KV tokens over `batch_size` requests, so a kernel's time on them differs
only by how the tokens are spread:

    uniform     every request TOTAL / batch_size
    sigma0.5    lognormal shape with sigma 0.5 ... sigma2: rising spread (deterministic
    sigma1      quantiles (i + 0.5) / batch_size of the lognormal, so the shape is smooth and
    sigma1.5    the same on every machine), rescaled to TOTAL
    sigma2
    mixed       the brief's agent batch: log-uniform 256..65536 with both ends present (quantiles),
                rescaled to TOTAL
    giant       one giant request plus batch_size - 1 tiny ones of 256 tokens (fewer when TOTAL is
                small): the worst case for a kernel that splits work per request

Cases come out sorted by max/mean (the skew), so each backend's degradation is a curve. Request
order inside a batch is a seeded permutation (the giant is not always first).

`padded:DIST` turns every batch of DIST into its padded twin: every request as long as the
longest. Running the same kernels on it measures what a kernel that needs a uniform batch pays
(the padding is read, not skipped); the report puts `X` beside `padded(X)`.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

import numpy as np

from attnbench.workload.cases import MAX_LEN, LengthCase

SKEW_LEVELS: tuple[str, ...] = (
    "uniform",
    "sigma0.5",
    "sigma1",
    "sigma1.5",
    "sigma2",
    "mixed",
    "giant",
)
TINY_LEN = 256
"""Length of the tiny requests beside the giant one (the brief's short validation calls)."""
MIXED_RANGE = (256, 65536)
PADDED_PREFIX = "padded("


@dataclass(frozen=True)
class LengthStats:
    """Summary of one batch's KV lengths."""

    batch_size: int
    total: int
    min: int
    p50: int
    mean: float
    max: int
    max_over_mean: float
    """The skew measure of the raggedness sweep: 1.0 for a uniform batch."""
    cv: float
    """Coefficient of variation (population std / mean)."""
    padded_total: int
    """Tokens when every request is padded to the longest (batch_size x max)."""

    @property
    def padding_waste(self) -> float:
        """Fraction of the padded batch that is padding."""
        return 1.0 - self.total / self.padded_total


def length_stats(kv_lens: tuple[int, ...] | list[int]) -> LengthStats:
    """Stats of a batch; p50 is the nearest-rank median (a value that occurs)."""
    if not kv_lens:
        raise ValueError("length_stats needs at least one length")
    ordered = sorted(kv_lens)
    n, total = len(ordered), sum(ordered)
    mean = total / n
    return LengthStats(
        batch_size=n,
        total=total,
        min=ordered[0],
        p50=ordered[math.ceil(n / 2) - 1],
        mean=mean,
        max=ordered[-1],
        max_over_mean=ordered[-1] / mean,
        cv=statistics.pstdev(ordered) / mean,
        padded_total=n * ordered[-1],
    )


def rescale(weights: np.ndarray, total: int) -> tuple[int, ...]:
    """Integer lengths >= 1 proportional to `weights` that sum to exactly `total`.

    One token each is reserved, the rest is split by the largest-remainder method.
    """
    n = len(weights)
    if weights.sum() == total and np.all(weights >= 1) and np.all(weights == np.round(weights)):
        return tuple(int(v) for v in weights)  # already exact (the giant level)
    if total < n:
        raise ValueError(f"total={total} is smaller than the batch ({n} requests of >= 1 token)")
    share = weights / weights.sum() * (total - n)
    base = np.floor(share).astype(np.int64)
    short = int(total - n - base.sum())
    order = np.argsort(-(share - base), kind="stable")
    base[order[:short]] += 1
    return tuple(int(v) + 1 for v in base)


def level_weights(level: str, batch_size: int, total: int) -> np.ndarray:
    """Relative request lengths of one skew level (before rescaling to the total)."""
    b = batch_size
    quantiles = (np.arange(b) + 0.5) / b
    if level == "uniform":
        return np.ones(b)
    if level.startswith("sigma"):
        try:
            sigma = float(level[5:])
        except ValueError:
            raise ValueError(_bad_level(level)) from None
        if not (sigma > 0 and math.isfinite(sigma)):
            raise ValueError(_bad_level(level))
        normal = statistics.NormalDist()
        return np.exp(sigma * np.array([normal.inv_cdf(float(p)) for p in quantiles]))
    if level == "mixed":
        lo, hi = MIXED_RANGE
        return np.exp(np.linspace(math.log(lo), math.log(hi), b)) if b > 1 else np.ones(1)
    if level == "giant":
        tiny = max(1, min(TINY_LEN, total // (2 * b)))
        w = np.full(b, float(tiny))
        w[-1] = float(total - (b - 1) * tiny)
        return w
    raise ValueError(_bad_level(level))


def _bad_level(level: str) -> str:
    return f"skew level {level!r} is not known; allowed: {', '.join(SKEW_LEVELS)} or sigmaS"


def skew_cases(
    total: int, batch_size: int, seed: int, levels: tuple[str, ...] | list[str] = SKEW_LEVELS
) -> list[LengthCase]:
    """Batches of exactly `total` KV tokens, one per level, sorted by rising max/mean."""
    if total > MAX_LEN * batch_size:
        raise ValueError(f"skew: total={total} exceeds {batch_size} x {MAX_LEN} tokens")
    rng = np.random.default_rng(seed)
    cases = []
    for level in levels:
        lens = rescale(level_weights(level, batch_size, total), total)
        if max(lens) > MAX_LEN:
            raise ValueError(
                f"skew: level {level} needs a {max(lens)}-token request; the limit is {MAX_LEN}"
            )
        perm = rng.permutation(batch_size)
        cases.append(LengthCase(f"skew-{level}({total})", tuple(lens[i] for i in perm)))
    return sorted(cases, key=lambda c: length_stats(c.kv_lens).max_over_mean)


def parse_skew(arg: str, batch_size: int, seed: int) -> list[LengthCase]:
    """`TOTAL[,LEVEL...]` -> `skew_cases` (every level when none is given)."""
    head, *rest = [p.strip() for p in arg.split(",")]
    if not head.isdigit() or int(head) <= 0:
        raise ValueError(
            f"lengths: skew needs TOTAL[,LEVEL...] with TOTAL a positive integer, got {arg!r}; "
            f"levels: {', '.join(SKEW_LEVELS)}"
        )
    levels = [lv.lower() for lv in rest if lv] or list(SKEW_LEVELS)
    for lv in levels:
        level_weights(lv, 1, 1)  # validates the name
    return skew_cases(int(head), batch_size, seed, levels)


def padded(case: LengthCase) -> LengthCase:
    """The padded twin of a batch: every request as long as the longest, label `padded(X)`."""
    longest = max(case.kv_lens)
    return LengthCase(
        f"{PADDED_PREFIX}{case.label})",
        (longest,) * len(case.kv_lens),
        shared_prefix_len=case.shared_prefix_len,
    )


def unpadded_label(label: str) -> str | None:
    """`padded(X)` -> `X` (to pair a padded row with its ragged twin); None if not padded."""
    if label.startswith(PADDED_PREFIX) and label.endswith(")"):
        return label[len(PADDED_PREFIX) : -1]
    return None


def parse_long(arg: str, batch_size: int) -> tuple[int, int, int, str]:
    """`K@LEN+DIST` or `K@LO-HI+DIST` -> (K, LO, HI, DIST); ValueError naming the form."""
    head, plus, rest = arg.partition("+")
    count_s, at, size_s = head.partition("@")
    lo_s, _, hi_s = size_s.partition("-")
    try:
        count, lo = int(count_s), int(lo_s)
        hi = int(hi_s) if hi_s else lo
    except ValueError:
        count = lo = hi = 0
    if not (plus and at and rest.strip()) or not 0 < count <= batch_size or not 0 < lo <= hi:
        raise ValueError(
            f"lengths=long:{arg!r}: expected long:K@LEN+DIST or long:K@LO-HI+DIST with "
            f"1 <= K <= batch_size ({batch_size}), e.g. long:2@32768-131072+lognormal:4096,1"
        )
    if hi > MAX_LEN:
        raise ValueError(f"lengths=long:{arg!r}: {hi} tokens is more than {MAX_LEN}")
    return count, lo, hi, rest


def with_long(cases: list[LengthCase], count: int, lo: int, hi: int, seed: int) -> list[LengthCase]:
    """Each batch of `cases` with `count` of its requests (at seeded positions) replaced by
    long ones: `lo` tokens each, or log-uniform over lo..hi with both ends present. A large
    batch of short requests holding one to a few long contexts: the shape where a kernel's split
    of the longest request decides its time (`long:K@LO-HI+DIST`)."""
    rng = np.random.default_rng(seed + 1)
    tag = f"long({count}@{lo}" + (f"..{hi})" if hi > lo else ")")
    out = []
    for case in cases:
        lens = list(case.kv_lens)
        inner = np.exp(rng.uniform(math.log(lo), math.log(hi), size=max(0, count - 2)))
        longs = (
            ([hi, lo][:count] + np.rint(inner).astype(int).tolist()) if hi > lo else [lo] * count
        )
        for pos, n in zip(rng.choice(len(lens), size=count, replace=False), longs, strict=True):
            lens[int(pos)] = int(n)
        out.append(LengthCase(f"{tag}+{case.label}", tuple(lens)))
    return out
