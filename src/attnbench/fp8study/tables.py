"""Rich tables of an fp8 study document and of the capacity scenario (rendering only)."""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING, Any

from rich.table import Table

if TYPE_CHECKING:
    from attnbench.workload.capacity import CapacityRow


def _pct(x: float | None, digits: int = 2) -> str:
    return "-" if x is None else f"{100 * x:.{digits}f}%"


def _sci(x: float | None) -> str:
    return "-" if x is None else f"{x:.2e}"


def errors_table(doc: dict[str, Any]) -> Table:
    t = Table(title="Quantisation error: fp64 attention on dequantised K/V vs original K/V")
    for col in ("data", "format", "scheme", "rel L2", "max abs", "RMSE", "cosine"):
        t.add_column(col, justify="left" if col in ("data", "format", "scheme") else "right")
    for col in ("K underflow", "K saturated", "K subnormal", "V underflow", "V saturated"):
        t.add_column(col, justify="right")
    for r in doc["errors"]:
        k, v = r.get("k") or {}, r.get("v") or {}
        scheme = r["scheme"] if r["k_scheme"] == r["v_scheme"] else f"{r['scheme']} (V token)"
        t.add_row(
            r["data"],
            r["format"],
            scheme,
            _pct(r["rel_l2_err"]),
            _sci(r["max_abs_err"]),
            _sci(r["rmse"]),
            f"{r['cosine']:.5f}",
            _pct(k.get("underflow_fraction"), 3),
            _pct(k.get("saturated_fraction"), 3),
            _pct(k.get("subnormal_fraction"), 2),
            _pct(v.get("underflow_fraction"), 3),
            _pct(v.get("saturated_fraction"), 3),
        )
    return t


def needle_table(doc: dict[str, Any]) -> Table:
    targets = list(dict.fromkeys(r["target"] for r in doc["needle"]))
    t = Table(
        title="Needle retrieval: top-1 recall pooled over lengths and depths "
        "(worst cell: recall @ length/depth); cos = mean cos(output, needle value)"
    )
    t.add_column("data", no_wrap=True)
    t.add_column("format")
    t.add_column("scheme")
    for target in targets:
        t.add_column(f"{target} recall", justify="right")
        t.add_column(f"{target} worst", justify="right")
        t.add_column(f"{target} cos", justify="right")
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in doc["needle"]:
        groups[r["data"], r["format"], r["scheme"]].append(r)
    for (data, fmt, scheme), rows in groups.items():
        cells: list[str] = []
        for target in targets:
            sel = [r for r in rows if r["target"] == target]
            trials = sum(r["trials"] for r in sel)
            hits = sum(r["hits"] for r in sel)
            worst = min(sel, key=lambda r: (r["recall"], -r["length"]))
            cos = sum(r["needle_cosine_mean"] * r["trials"] for r in sel) / max(trials, 1)
            cells += [
                _pct(hits / trials if trials else None, 1),
                f"{100 * worst['recall']:.0f}%@{worst['length']}/{worst['depth']:g}",
                f"{cos:.3f}",
            ]
        t.add_row(data, fmt, scheme, *cells)
    return t


def kernel_table(doc: dict[str, Any]) -> Table:
    t = Table(
        title="fp8 paged decode (FlashInfer, FA3): quantisation vs kernel error (rel L2); "
        "FA3 quantises q too: q quant apart, its kernel error is against the fp64 reference "
        "on the fp8 q and K/V"
    )
    for col in ("shape", "format", "scheme", "variant", "resolved", "status"):
        t.add_column(col)
    for col in ("quant", "q quant", "kernel", "total", "bf16 kernel"):
        t.add_column(col, justify="right")
    for r in doc["kernel"]:

        def rel(key: str, rec: dict[str, Any] = r) -> str:
            m = rec.get(key)
            return _pct(m["rel_l2_err"], 3) if m else "-"

        status = r["status"] if not r.get("reason") else f"{r['status']}: {r['reason'][:60]}"
        t.add_row(
            f"{r['shape']} bs{r['batch_size']}",
            r["format"],
            r.get("scheme", "tensor"),
            r["variant"],
            r.get("resolved", ""),
            status,
            rel("quant"),
            rel("q_quant"),
            rel("kernel"),
            rel("total"),
            rel("bf16_kernel"),
        )
    return t


def summary_table(doc: dict[str, Any]) -> Table:
    cfg = doc["settings"]
    t = Table(
        title=(
            f"Summary: within bounds = worst rel L2 <= {_pct(cfg['rel_l2_bound'], 0)} "
            f"and pooled needle recall >= {_pct(cfg['recall_bound'], 0)} for every target"
        )
    )
    for col in ("format", "scheme", "worst rel L2 (data)", "min cosine", "K underflow max"):
        t.add_column(col)
    t.add_column("saturated max", justify="right")
    t.add_column("needle recall per target (pooled)", justify="left")
    t.add_column("kernel rel L2 (worst per variant)", justify="left")
    t.add_column("within bounds")
    for r in doc["summary"]:
        needle = ", ".join(f"{k} {100 * v['recall']:.1f}%" for k, v in r["needle"].items())
        rel = r["rel_l2_err_max"]
        t.add_row(
            r["format"],
            r["scheme"],
            "-" if rel is None or rel != rel else f"{_pct(rel)} ({r['rel_l2_err_max_data']})",
            "-" if r["cosine_min"] != r["cosine_min"] else f"{r['cosine_min']:.5f}",
            _pct(r["k_underflow_fraction_max"], 3),
            _pct(max(r["k_saturated_fraction_max"], r["v_saturated_fraction_max"]), 3),
            needle or "-",
            _kernel_cell(r),
            "yes" if r["within_bounds"] else "no",
        )
    return t


def _kernel_cell(row: dict[str, Any]) -> str:
    """`flashinfer:tc 0.300%, flash-attn:fa3 2.500%` (the worst per variant), or the worst over
    all variants in documents written before the per-variant key."""
    by_variant = row.get("kernel_rel_l2_err_by_variant")
    if by_variant:
        return ", ".join(f"{v} {_pct(err, 3)}" for v, err in by_variant.items())
    worst = row.get("kernel_rel_l2_err_max")
    return _pct(worst, 3) if worst else "-"


def capacity_rich_table(rows: list[CapacityRow], title: str) -> Table:
    labels = list(rows[0].max_batch) if rows else []
    t = Table(title=title)
    for col in ("GPU", "kv dtype", "scales", "KiB/token", "KV budget", "max tokens"):
        t.add_column(col, justify="left" if col in ("GPU", "kv dtype", "scales") else "right")
    for label in labels:
        t.add_column(f"batch @{label}", justify="right")
    t.add_column("saved vs 16-bit", justify="right")
    for r in rows:
        t.add_row(
            r.gpu,
            r.kv_dtype,
            r.scheme,
            f"{r.bytes_per_token / 1024:.2f}",
            f"{r.budget_bytes / (1 << 30):.1f} GiB",
            f"{r.max_tokens:,}",
            *(str(r.max_batch[label]) for label in labels),
            _pct(r.saved_fraction, 1),
        )
    return t
