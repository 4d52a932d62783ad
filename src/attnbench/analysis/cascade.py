"""Shared prefixes: where a cascade kernel starts to beat plain decode, found from the rows.

For every shared-prefix case (one prefix length, one batch size, one suffix distribution, one
head shape and dtype) the fastest cascade variant (`flashinfer:cascade`, `flash-attn:fa3-cascade`:
the prefix read once for the whole batch) is compared with the fastest plain decode variant
(every request reads its own copy of the prefix pages) through `compare.estimate_ratio`, so a
cascade "wins" only when it is significantly faster and beyond the noise of both rows. The
crossover is then read off the grid: per prefix length, the smallest batch from which the
cascade wins at every larger batch measured; per batch size, the smallest such prefix length.
Nothing here is assumed: a grid with no win has no crossover.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from attnbench.analysis.compare import SEED, RatioEstimate, Timing, estimate_ratio
from attnbench.analysis.frame import dtype_label, shape_label

CASCADE_VARIANTS = frozenset({"flashinfer:cascade", "flash-attn:fa3-cascade"})
"""Variants that read the shared prefix once for the batch (two passes, merged)."""

SHAPE_KEYS: tuple[str, ...] = ("model", "tp", "num_qo_heads", "num_kv_heads", "head_dim")
SHAPE_KEYS += ("dtype", "kv_dtype", "page_size")


def is_cascade(backend: str) -> bool:
    """`flashinfer:cascade`, `flash-attn:fa3-cascade` (a `+tuned` suffix kept out)."""
    return backend.partition("+")[0] in CASCADE_VARIANTS


def family(lengths: str) -> str:
    """What the prefix is shared with, without the prefix length: `prefix4096+uniform(1..256)`
    -> `suffixes uniform(1..256)`, `trace-prefix(mooncake-conv,74240)` -> `mooncake-conv trace`."""
    m = re.fullmatch(r"trace-prefix\(([^,()]+).*\)", lengths)
    if m:
        return f"{m.group(1)} trace"
    if lengths.startswith("prefix") and "+" in lengths:
        return "suffixes " + lengths.partition("+")[2]
    return lengths or "shared prefix"


@dataclass(frozen=True)
class PrefixPoint:
    """One shared-prefix case: its best cascade against its best plain decode variant."""

    group: str
    """Head shape, dtypes and suffix family: the points of one group form one grid."""
    prefix_len: int
    batch_size: int
    cascade: str
    cascade_us: float
    plain: str
    plain_us: float
    estimate: RatioEstimate
    """cascade latency / plain latency (below 1: the cascade is faster)."""

    @property
    def speedup(self) -> float:
        """Best plain latency / best cascade latency (above 1: the cascade is faster)."""
        return self.plain_us / self.cascade_us

    @property
    def speedup_ci(self) -> tuple[float, float]:
        return 1 / self.estimate.ci_high, 1 / self.estimate.ci_low

    @property
    def verdict(self) -> str:
        """`wins`, `loses` or `tie` for the cascade (significant and beyond the noise)."""
        v = self.estimate.verdict
        return "wins" if v == "faster" else "loses" if v == "slower" else "tie"


def _best(rows: pd.DataFrame) -> pd.Series | None:
    if rows.empty:
        return None
    return rows.loc[rows["latency_us"].astype(float).idxmin()]


def _group_name(r: pd.Series) -> str:
    return f"{shape_label(r)} {dtype_label(r)} p{r['page_size']}, {family(str(r['lengths']))}"


def prefix_points(ok: pd.DataFrame) -> list[PrefixPoint]:
    """Every shared-prefix case with at least one cascade and one plain decode row that passed
    the gate, sorted by group, prefix length, batch size."""
    rows = ok[(ok["kind"] == "shared_prefix") & (ok["shared_prefix_len"] > 0)]
    if rows.empty:
        return []
    rows = rows[rows["latency_us"].notna()]
    keys = ["gpu", *SHAPE_KEYS, "lengths", "batch_size", "shared_prefix_len"]
    rng = np.random.default_rng(SEED)
    out: list[PrefixPoint] = []
    for _, g in rows.groupby(keys, sort=False):
        cascade = g["backend"].map(is_cascade)
        c, p = _best(g[cascade]), _best(g[~cascade])
        if c is None or p is None:
            continue
        est = estimate_ratio(Timing.of(p), Timing.of(c), rng)
        out.append(
            PrefixPoint(
                _group_name(c),
                int(c["shared_prefix_len"]),
                int(c["batch_size"]),
                str(c["backend"]),
                float(c["latency_us"]),
                str(p["backend"]),
                float(p["latency_us"]),
                est,
            )
        )
    return sorted(out, key=lambda q: (q.group, q.prefix_len, q.batch_size))


def _wins_from(values: Sequence[int], wins: Sequence[bool]) -> int | None:
    """The smallest value from which every larger value wins (None when the largest loses)."""
    start = None
    for v, w in sorted(zip(values, wins, strict=True), reverse=True):
        if not w:
            break
        start = v
    return start


@dataclass(frozen=True)
class Crossover:
    """The crossover of one group (head shape, dtypes, suffix family)."""

    group: str
    points: list[PrefixPoint]

    @property
    def prefix_lens(self) -> list[int]:
        return sorted({p.prefix_len for p in self.points})

    @property
    def batch_sizes(self) -> list[int]:
        return sorted({p.batch_size for p in self.points})

    def at(self, prefix_len: int, batch_size: int) -> PrefixPoint | None:
        return next(
            (p for p in self.points if (p.prefix_len, p.batch_size) == (prefix_len, batch_size)),
            None,
        )

    def min_batch(self, prefix_len: int) -> int | None:
        """Smallest batch from which the cascade wins at every larger batch measured."""
        pts = sorted((p for p in self.points if p.prefix_len == prefix_len), key=_batch)
        return _wins_from([p.batch_size for p in pts], [p.verdict == "wins" for p in pts])

    def min_prefix(self, batch_size: int) -> int | None:
        """Smallest prefix length from which the cascade wins at every longer prefix measured."""
        pts = sorted((p for p in self.points if p.batch_size == batch_size), key=_prefix)
        return _wins_from([p.prefix_len for p in pts], [p.verdict == "wins" for p in pts])

    def wins_at(self, prefix_len: int) -> list[int]:
        """Every batch size at which the cascade wins for this prefix length."""
        return [
            p.batch_size
            for p in sorted(self.points, key=_batch)
            if p.prefix_len == prefix_len and p.verdict == "wins"
        ]


def _batch(p: PrefixPoint) -> int:
    return p.batch_size


def _prefix(p: PrefixPoint) -> int:
    return p.prefix_len


def crossovers(points: Iterable[PrefixPoint]) -> list[Crossover]:
    """One Crossover per group; groups with more cases first."""
    groups: dict[str, list[PrefixPoint]] = {}
    for p in points:
        groups.setdefault(p.group, []).append(p)
    return sorted(
        (Crossover(g, pts) for g, pts in groups.items()), key=lambda c: (-len(c.points), c.group)
    )
