"""Which scheme and format keep recall and error within which bounds: one row per
(format, scheme), read from the error, needle and kernel records."""

from __future__ import annotations

from collections import defaultdict
from typing import Any


def _worst(rows: list[dict[str, Any]], key: str, *, high: bool) -> tuple[float, str]:
    """(worst value of `key`, the data kind it came from); high=True: larger is worse."""
    vals = [(float(r[key]), str(r["data"])) for r in rows if r.get(key) is not None]
    if not vals:
        return float("nan"), ""
    return max(vals) if high else min(vals)


def _stat_max(rows: list[dict[str, Any]], tensor: str, key: str) -> float:
    vals = [float(r[tensor][key]) for r in rows if r.get(tensor)]
    return max(vals) if vals else 0.0


def summarize(
    errors: list[dict[str, Any]],
    needle: list[dict[str, Any]],
    kernel: list[dict[str, Any]],
    *,
    recall_bound: float,
    rel_l2_bound: float,
) -> list[dict[str, Any]]:
    """One row per (format, scheme) in the order the error records list them.

    Row fields: worst relative L2 error and lowest cosine of the attention output over data
    kinds (and which kind), largest underflow/saturation fractions of K and V, needle recall
    per target (pooled over every cell, and the worst cell with its length and depth), the
    worst kernel error (schemes a kernel ran: `kernel_rel_l2_err_max` over every variant,
    `kernel_rel_l2_err_by_variant` per variant, e.g. `flashinfer:tc`, `flash-attn:fa3`; FA3's
    is against the reference on its fp8 query), and `within_bounds`: worst rel L2
    <= rel_l2_bound and every target's pooled recall >= recall_bound (`needle_recall_min` is
    the lowest pooled recall over targets).
    """
    by_key: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in errors:
        by_key[r["format"], r["scheme"]].append(r)
    needle_by: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in needle:
        needle_by[r["format"], r["scheme"]].append(r)
    rows: list[dict[str, Any]] = []
    keys = list(by_key) + [k for k in needle_by if k not in by_key]
    for fmt, scheme in keys:
        err_rows = by_key.get((fmt, scheme), [])
        rel, rel_kind = _worst(err_rows, "rel_l2_err", high=True)
        cos, cos_kind = _worst(err_rows, "cosine", high=False)
        row: dict[str, Any] = {
            "format": fmt,
            "scheme": scheme,
            "rel_l2_err_max": rel,
            "rel_l2_err_max_data": rel_kind,
            "rel_l2_err_by_data": {r["data"]: r["rel_l2_err"] for r in err_rows},
            "cosine_min": cos,
            "cosine_min_data": cos_kind,
            "k_underflow_fraction_max": _stat_max(err_rows, "k", "underflow_fraction"),
            "v_underflow_fraction_max": _stat_max(err_rows, "v", "underflow_fraction"),
            "k_saturated_fraction_max": _stat_max(err_rows, "k", "saturated_fraction"),
            "v_saturated_fraction_max": _stat_max(err_rows, "v", "saturated_fraction"),
            "needle": _needle_summary(needle_by.get((fmt, scheme), [])),
        }
        by_variant: dict[str, float] = {}
        for r in kernel:
            if r.get("format") == fmt and r.get("scheme") == scheme and r.get("kernel"):
                err, variant = float(r["kernel"]["rel_l2_err"]), str(r.get("variant", ""))
                by_variant[variant] = max(err, by_variant.get(variant, err))
        row["kernel_rel_l2_err_max"] = max(by_variant.values()) if by_variant else None
        row["kernel_rel_l2_err_by_variant"] = by_variant
        worst_recall = min((t["recall"] for t in row["needle"].values()), default=1.0)
        row["needle_recall_min"] = worst_recall
        row["within_bounds"] = bool(
            (not err_rows or rel <= rel_l2_bound) and worst_recall >= recall_bound
        )
        rows.append(row)
    return rows


def _needle_summary(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    by_target: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        by_target[r["target"]].append(r)
    out: dict[str, dict[str, Any]] = {}
    for target, cells in by_target.items():
        trials = sum(c["trials"] for c in cells)
        hits = sum(c["hits"] for c in cells)
        worst = min(cells, key=lambda c: (c["recall"], -c["length"]))
        longest = max(c["length"] for c in cells)
        long_cells = [c for c in cells if c["length"] == longest]
        long_trials = sum(c["trials"] for c in long_cells)
        out[target] = {
            "recall": hits / trials if trials else 0.0,
            "trials": trials,
            "recall_min": worst["recall"],
            "recall_min_at": {"length": worst["length"], "depth": worst["depth"]},
            "recall_longest": (
                sum(c["hits"] for c in long_cells) / long_trials if long_trials else 0.0
            ),
            "longest": longest,
            "needle_cosine_mean": sum(c["needle_cosine_mean"] * c["trials"] for c in cells)
            / max(trials, 1),
            "output_cosine_min": min(c["output_cosine_min"] for c in cells),
        }
    return out
