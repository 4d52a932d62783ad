"""Held-out error of each variant's decode cost model, row by row.

The replay's ITL is only as good as the decode model's error on steps it was not fitted to, so
the judge is the held-out error `fit.fit_linear_choice` records per row (leave-one-out up to 40
rows, else 10-fold; each fold also re-chooses the plan's `streams`), never the training error.
The issue's bar for a variant the recommender may choose: median |error| <= 5%, p90 <= 10%.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from attnbench.replay.costmodel import AttentionCostModel, fitted_decode_rows
from attnbench.results import ResultRow

MEDIAN_BAR = 0.05
P90_BAR = 0.10


@dataclass(frozen=True)
class HeldOutRow:
    """One decode row: what it measured and what the model fitted without it predicts."""

    lengths: str
    batch_size: int
    kv_max: int
    measured_us: float
    predicted_us: float

    @property
    def rel_err(self) -> float:
        return self.predicted_us / self.measured_us - 1.0


@dataclass(frozen=True)
class DecodeHeldOut:
    """A variant's decode model judged on held-out rows."""

    backend: str
    kv_dtype: str
    streams: float
    rows: tuple[HeldOutRow, ...]

    def _abs(self) -> np.ndarray:
        return np.abs([r.rel_err for r in self.rows])

    @property
    def median(self) -> float:
        return float(np.median(self._abs())) if self.rows else math.nan

    @property
    def p90(self) -> float:
        return float(np.quantile(self._abs(), 0.9)) if self.rows else math.nan

    @property
    def max(self) -> float:
        return float(self._abs().max()) if self.rows else math.nan

    @property
    def meets_bar(self) -> bool:
        return self.median <= MEDIAN_BAR and self.p90 <= P90_BAR

    def worst(self, k: int = 5) -> list[HeldOutRow]:
        return sorted(self.rows, key=lambda r: -abs(r.rel_err))[:k]


def decode_held_out(model: AttentionCostModel, rows: Iterable[ResultRow]) -> DecodeHeldOut | None:
    """`model`'s decode fit judged row by row on the rows it was fitted to (`rows`: the same
    rows `fit_models` was given); None without a held-out error (fewer than 3 rows)."""
    fit = model.decode
    if fit is None or not fit.cv_rel_errs:
        return None
    dec = fitted_decode_rows(rows, model.backend, model.key, padded=model.padded)
    if len(dec) != len(fit.cv_rel_errs):
        raise ValueError(f"{model.backend}: {len(dec)} rows, {len(fit.cv_rel_errs)} errors")
    out = []
    for r, e in zip(dec, fit.cv_rel_errs, strict=True):
        measured = float(r.latency_us or 0.0)
        label = r.spec.lengths or r.spec.label or "-"
        out.append(
            HeldOutRow(label, r.spec.batch_size, max(r.spec.kv_lens), measured, measured * (1 + e))
        )
    return DecodeHeldOut(model.backend, model.key.kv_dtype, model.streams, tuple(out))
