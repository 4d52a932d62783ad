"""Least squares with non-negative coefficients, its cross-validated error and its valid range.

Every cost term of the replay's models is a physical cost (a fixed launch cost, a per-sequence
cost, microseconds per byte, per FLOP): none can be negative, so the fit is non-negative least
squares (scipy's Lawson-Hanson solver). Rows are weighted by 1 / latency, so the fit
minimises *relative* error: a 10 us decode and a 10 ms prefill count alike.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attnbench.replay.steps import FloatArray

CV_LEAVE_ONE_OUT_MAX = 40
"""Up to this many rows the held-out error is leave-one-out; above it, 10-fold (row i in fold i
mod 10), both deterministic."""


def nnls(a: FloatArray, b: FloatArray) -> FloatArray:
    """argmin ||a x - b||_2 subject to x >= 0 (scipy's Lawson-Hanson active-set solver).

    Args:
        a: design matrix `[m, n]`.
        b: targets `[m]`.
    Returns:
        x `[n]`, non-negative.
    """
    from scipy.optimize import nnls as scipy_nnls

    x, _ = scipy_nnls(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64))
    return np.asarray(x)


@dataclass(frozen=True)
class LinearFit:
    """latency_us = sum(coef[i] * x[i]) over `features`, fitted on rows whose feature values
    spanned [lo, hi]."""

    features: tuple[str, ...]
    coef: tuple[float, ...]
    lo: tuple[float, ...]
    hi: tuple[float, ...]
    n_rows: int
    train_rel_rmse: float
    cv_rel_rmse: float
    """Root-mean-square relative error on held-out rows (nan with fewer than 3 rows)."""
    cv_max_rel_err: float
    """Largest |predicted / measured - 1| on held-out rows."""
    dropped: tuple[str, ...] = ()
    """Features left out because the rows did not vary them (their effect is not modelled)."""
    cv_rel_errs: tuple[float, ...] = ()
    """Each row's held-out predicted / measured - 1, in the fitted rows' order."""

    @property
    def cv_median_rel_err(self) -> float:
        """Median held-out |predicted / measured - 1| (nan without held-out rows)."""
        return _quantile(self.cv_rel_errs, 0.5)

    @property
    def cv_p90_rel_err(self) -> float:
        """90th percentile of the held-out |predicted / measured - 1|."""
        return _quantile(self.cv_rel_errs, 0.9)

    def predict(self, x: FloatArray) -> FloatArray:
        """Predictions for feature rows `x` `[steps, len(features)]`."""
        out: FloatArray = np.asarray(x, dtype=np.float64) @ np.array(self.coef)
        return out

    def extrapolation(self, x: FloatArray) -> FloatArray:
        """How far each row lies beyond the fitted range: max over the features of value / hi
        where above it; 1.0 inside. (Below the range a prediction tends to the fitted fixed
        cost, which the smallest rows pin down, so it is not counted.)"""
        x = np.asarray(x, dtype=np.float64)
        out = np.ones(x.shape[0])
        for i, name in enumerate(self.features):
            if name == "const":
                continue
            hi, col = self.hi[i], x[:, i]
            if hi > 0:
                out = np.maximum(out, np.where(col > hi, col / hi, 1.0))
            else:
                out = np.maximum(out, np.where(col > 0, np.inf, 1.0))
        return out

    def as_dict(self) -> dict[str, object]:
        return {
            "features": list(self.features),
            "coef": [float(c) for c in self.coef],
            "lo": list(self.lo),
            "hi": list(self.hi),
            "n_rows": self.n_rows,
            "train_rel_rmse": self.train_rel_rmse,
            "cv_rel_rmse": self.cv_rel_rmse,
            "cv_max_rel_err": self.cv_max_rel_err,
            "dropped": list(self.dropped),
        }


def _solve(
    x: FloatArray, y: FloatArray, cols: list[int], lower: FloatArray | None = None
) -> FloatArray:
    """Relative-error NNLS on the chosen columns (scaled for conditioning); with `lower`
    (per column of x), bounded least squares (scipy's lsq_linear) with coef >= lower."""
    a = x[:, cols] / y[:, None]
    scale = np.abs(a).max(axis=0)
    scale[scale == 0] = 1.0
    lb = np.zeros(len(cols)) if lower is None else np.asarray(lower)[cols] * scale
    if (lb > 0).any():
        from scipy.optimize import lsq_linear

        res = lsq_linear(a / scale, np.ones(len(y)), bounds=(lb, np.inf), method="bvls")
        coef = np.maximum(np.asarray(res.x), lb) / scale
    else:
        coef = nnls(a / scale, np.ones(len(y))) / scale
    full = np.zeros(x.shape[1])
    full[cols] = coef
    return full


def _rel_errors(x: FloatArray, y: FloatArray, coef: FloatArray) -> FloatArray:
    return (x @ coef) / y - 1.0


def _quantile(errs: tuple[float, ...], q: float) -> float:
    return float(np.quantile(np.abs(errs), q)) if errs else float("nan")


def _columns(features: tuple[str, ...], x: FloatArray) -> tuple[list[int], list[str]]:
    """(columns fitted, features dropped): a feature constant across the rows cannot be told
    apart from `const`."""
    lo, hi = x.min(axis=0), x.max(axis=0)
    cols, dropped = [], []
    for i, name in enumerate(features):
        varies = hi[i] - lo[i] > 1e-12 * max(abs(hi[i]), 1.0)
        if name == "const" or varies:
            cols.append(i)
        else:
            dropped.append(name)
    return cols, dropped


def fit_linear(
    features: tuple[str, ...],
    x: FloatArray,
    y: FloatArray,
    *,
    lower: dict[str, float] | None = None,
) -> LinearFit:
    """Fit `y` (latency_us, > 0) on feature rows `x` `[rows, len(features)]`; `lower` gives
    features a coefficient floor above 0 (a physical bound: us per MB at the bandwidth ceiling).

    A feature that is constant across the rows cannot be told apart from `const` and is dropped
    (reported in `dropped`). Raises ValueError with fewer than two rows or a non-positive target.
    """
    return fit_linear_choice(features, [x], y, lower=lower)[1]


def fit_linear_choice(
    features: tuple[str, ...],
    xs: list[FloatArray],
    y: FloatArray,
    *,
    lower: dict[str, float] | None = None,
) -> tuple[int, LinearFit]:
    """(k, fit) on the candidate design `xs[k]` that fits the rows best (training relative RMS
    error): one non-linear parameter of the features (e.g. a plan's `streams`) chosen from a few
    values. Held-out errors count the choice: each fold chooses again on its own training rows,
    so a candidate that only suits the held-out row cannot be picked for it."""
    xs = [np.asarray(x, dtype=np.float64) for x in xs]
    y = np.asarray(y, dtype=np.float64)
    if xs[0].shape[0] < 2:
        raise ValueError(f"need at least 2 rows to fit, got {xs[0].shape[0]}")
    if (y <= 0).any() or not np.isfinite(y).all():
        raise ValueError("latencies must be positive and finite")
    floor = np.array([(lower or {}).get(f, 0.0) for f in features])
    plans = [(x, *_columns(features, x)) for x in xs]
    every = np.ones(y.size, dtype=bool)
    k, coef = _choose(plans, y, every, floor)
    x, _, dropped = plans[k]
    train = _rel_errors(x, y, coef)
    held = _held_out_errors(plans, y, floor)
    return k, LinearFit(
        features=features,
        coef=tuple(float(c) for c in coef),
        lo=tuple(float(v) for v in x.min(axis=0)),
        hi=tuple(float(v) for v in x.max(axis=0)),
        n_rows=int(x.shape[0]),
        train_rel_rmse=float(np.sqrt(np.mean(train**2))),
        cv_rel_rmse=float(np.sqrt(np.mean(held**2))) if held.size else float("nan"),
        cv_max_rel_err=float(np.abs(held).max()) if held.size else float("nan"),
        dropped=tuple(dropped),
        cv_rel_errs=tuple(float(e) for e in held),
    )


_Plan = tuple[FloatArray, list[int], list[str]]


def _choose(
    plans: list[_Plan], y: FloatArray, train: FloatArray, floor: FloatArray
) -> tuple[int, FloatArray]:
    """(index, coefficients) of the candidate with the lowest training error on rows `train`."""
    best: tuple[float, int, FloatArray] | None = None
    for k, (x, cols, _) in enumerate(plans):
        coef = _solve(x[train], y[train], cols, floor)
        err = float(np.sqrt(np.mean(_rel_errors(x[train], y[train], coef) ** 2)))
        if best is None or err < best[0] - 1e-12:
            best = (err, k, coef)
    assert best is not None
    return best[1], best[2]


def _held_out_errors(plans: list[_Plan], y: FloatArray, floor: FloatArray) -> FloatArray:
    m = y.size
    if m < 3:
        return np.zeros(0)
    folds = m if m <= CV_LEAVE_ONE_OUT_MAX else 10
    errs = np.empty(m)
    idx = np.arange(m)
    for f in range(folds):
        test = idx % folds == f
        k, coef = _choose(plans, y, ~test, floor)
        errs[test] = _rel_errors(plans[k][0][test], y[test], coef)
    return errs
