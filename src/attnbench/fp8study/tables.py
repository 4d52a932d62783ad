"""Rich tables of an fp8 study document and of the capacity scenario (rendering only)."""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING, Any

from rich import box
from rich.console import Group
from rich.table import Table
from rich.text import Text

if TYPE_CHECKING:
    from attnbench.workload.capacity import CapacityRow


def _pct(x: float | None, digits: int = 2) -> str:
    return "-" if x is None else f"{100 * x:.{digits}f}%"


def _sci(x: float | None) -> str:
    return "-" if x is None else f"{x:.2e}"


def _cosine(x: float | None) -> str:
    """NaN in memory, null once saved (strict JSON): `-` either way."""
    return "-" if x is None or x != x else f"{x:.5f}"


def study_heading(doc: dict[str, Any]) -> str:
    """One line on a saved study: where and from which commit it ran, whether it finished."""
    prov, settings = doc.get("provenance") or {}, doc.get("settings") or {}
    where = prov.get("gpu") or settings.get("device") or "an unknown device"
    parts = [f"fp8 study on {where}", f"git {prov.get('git_sha') or 'unknown'}"]
    parts.append(f"{len(doc.get('kernel') or [])} kernel records")
    if doc.get("complete") is False:  # absent in documents written before the key
        done = ", ".join(k.removesuffix("_s") for k in doc.get("timings", {})) or "none"
        parts.append(f"incomplete: the run stopped early (parts begun: {done})")
    elif doc.get("complete"):
        parts.append("complete")
    return ", ".join(parts)


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
            _cosine(r["cosine"]),
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


KERNEL_LEGEND = (
    "fp8 paged decode, kernel error apart from quantisation (rel L2 vs fp64 attention): "
    "quant = the K/V's fp8 quantisation; q quant = the query's (FA3 quantises q to fp8 too; "
    "FlashInfer keeps it bf16); kernel = the kernel vs fp64 attention on the very fp8 inputs it "
    "read (FA3: fp8 q and K/V); total = the kernel vs fp64 attention on the bf16 source; "
    "bf16 = the same kernel on the bf16 source (16-bit baseline)."
)
SCHEME_TITLES = {"tensor": "per-tensor scales", "token": "per-(token, head) scales"}


def kernel_table(doc: dict[str, Any]) -> Group:
    """The kernel records, one table per (format, scheme), one row per (shape, variant):
    FlashInfer's kernel error beside FA3's split (q quant, kernel, total). A record that did not
    run is marked `[n]`; each distinct status and reason is listed once, in full, below."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in doc["kernel"]:
        groups[r["format"], r.get("scheme", "tensor")].append(r)
    notes: dict[str, int] = {}
    tables = [_kernel_group(fmt, scheme, rows, notes) for (fmt, scheme), rows in groups.items()]
    footnotes = [Text(f"[{n}] {why}") for why, n in notes.items()]
    spaced = [part for table in tables for part in (Text(), table)]
    return Group(Text(KERNEL_LEGEND), *spaced, *([Text()] if footnotes else []), *footnotes)


def _kernel_group(
    fmt: str, scheme: str, records: list[dict[str, Any]], notes: dict[str, int]
) -> Table:
    """`notes`: footnote text -> number, shared by every group (numbered as first seen)."""
    title = f"{fmt}, {SCHEME_TITLES.get(scheme, f'{scheme} scales')}"
    t = Table(title=title, box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    t.add_column("shape", no_wrap=True)
    t.add_column("variant")
    for col in ("quant", "q quant", "kernel", "total", "bf16"):
        t.add_column(col, justify="right", no_wrap=True)

    def noted(cell: str, note: str) -> Text:
        number = notes.setdefault(note, len(notes) + 1)
        return Text(f"{cell} [{number}]")

    for r in records:

        def rel(key: str, rec: dict[str, Any] = r) -> str:
            m = rec.get(key)
            return _pct(m["rel_l2_err"], 3) if m and m.get("rel_l2_err") is not None else "-"

        variant = Text(r["variant"])
        if r["status"] != "ok" or r.get("reason"):
            variant = noted(r["variant"], f"{r['status']}: {r.get('reason') or 'no reason given'}")
        bf16: str | Text = rel("bf16_kernel")
        if r.get("bf16_reason"):
            bf16 = noted(str(bf16), f"bf16 run failed: {r['bf16_reason']}")
        t.add_row(
            f"{r['shape']} bs{r['batch_size']}",
            variant,
            rel("quant"),
            rel("q_quant"),
            rel("kernel"),
            rel("total"),
            bf16,
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
            _cosine(r["cosine_min"]),
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
    for col in ("GPU", "kv dtype", "scales", "KiB per\ntoken", "KV\nbudget", "max\ntokens"):
        t.add_column(col, justify="left" if col in ("GPU", "kv dtype", "scales") else "right")
    for label in labels:
        t.add_column(f"batch\n@{label}", justify="right")
    t.add_column("saved vs\n16-bit", justify="right")
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
