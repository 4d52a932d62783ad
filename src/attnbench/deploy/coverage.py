"""Interval coverage on the GPU's own rows (issue 45): every committed `--measure` answer is
split in two halves, each bucket's drawn steps dealt alternately (in case order) to half A and
half B, and we count how often the 95% interval from one half covers the other half's point
estimate, both ways. When the halves are independent and of equal size the other half's
estimate carries noise of its own, so a calibrated 95% interval covers it about 83% of the
time (P(|N(0, 2)| < 1.96) = 0.834), not 95%. Only sampling enters (both halves share the
histogram). Pure: answers in, counts out."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from attnbench.deploy.decide import Answer, decode_pairs
from attnbench.deploy.stats import Pair, paired_ratio

EXPECTED = 2 * 0.5 * (1 + math.erf(1.959963984540054 / math.sqrt(2) / math.sqrt(2))) - 1
"""Coverage of the other half's estimate by a calibrated 95% interval: P(|N(0,2)| < 1.96)."""


@dataclass(frozen=True)
class HalfSplit:
    """Of `trials` interval-vs-other-half checks, how many covered; `skipped`: options whose
    halves held fewer than 3 cases."""

    trials: int
    covered: int
    skipped: int

    @property
    def rate(self) -> float:
        return self.covered / self.trials if self.trials else math.nan

    def __add__(self, other: HalfSplit) -> HalfSplit:
        return HalfSplit(
            self.trials + other.trials, self.covered + other.covered, self.skipped + other.skipped
        )


def halves(pairs: Sequence[Pair]) -> tuple[list[Pair], list[Pair]]:
    """Each stratum's pairs dealt alternately to two halves, in the given (case) order."""
    a: list[Pair] = []
    b: list[Pair] = []
    seen: dict[int, int] = {}
    for p in pairs:
        i = seen.get(p.stratum, 0)
        (a if i % 2 == 0 else b).append(p)
        seen[p.stratum] = i + 1
    return a, b


def split_check(pairs: Sequence[Pair]) -> HalfSplit:
    """Both directions of one option's half-split check."""
    a, b = halves(pairs)
    ea, eb = paired_ratio(a), paired_ratio(b)
    if ea is None or eb is None or not (ea.has_interval and eb.has_interval):
        return HalfSplit(0, 0, 1)
    hits = int(ea.ci_low <= eb.ratio <= ea.ci_high) + int(eb.ci_low <= ea.ratio <= eb.ci_high)
    return HalfSplit(2, hits, 0)


def half_split(answers: Iterable[Answer]) -> HalfSplit:
    """Every non-default option of every answer, split in halves (`split_check`)."""
    total = HalfSplit(0, 0, 0)
    for ans in answers:
        for o in ans.options:
            if ans.default is not None and o.key != ans.default.key:
                total = total + split_check(decode_pairs(ans, o))
    return total
