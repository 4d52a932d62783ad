"""Sections comparing kernels on the same cases: what paging costs FA3, paged FA3 against the
fastest FlashInfer variant per kind, and the fastest variant of every case of each suite."""

from __future__ import annotations

from collections import Counter

import pandas as pd

from attnbench.analysis.candidates import BASELINE_VARIANTS
from attnbench.analysis.frame import gpu_order
from attnbench.backends.variant import Variant
from attnbench.measure.metrics import binding_fraction
from attnbench.report.build import device_name
from attnbench.report.findings.core import (
    Headline,
    Inputs,
    Section,
    Table,
    case_label,
    fnum,
    fpct,
    frange,
    fx,
    kernels,
    section,
    sources,
)

FA3 = "flash-attn:fa3"
FA3_CONTIGUOUS = "flash-attn:fa3-contiguous"
FLASHINFER_DEFAULT = "flashinfer:auto"
SUITES = (
    "brief",
    "default-fresh",
    "default-warm",
    "fp8",
    "paged64",
    "traces",
    "trees",
    "read-ceiling",
)
"""Suites whose every case gets a fastest-variant row, per GPU's file (`h100-brief`,
`h200-brief`); the studies have sections of their own."""


def _library_kernel(name: str) -> bool:
    """A library's own kernel: no engine's path, no tuned row."""
    variant = Variant.maybe(name)
    return variant is None or (variant.engine is None and not variant.tuned)


def _raw(rows: pd.DataFrame) -> pd.DataFrame:
    """Kernel rows without engine variants and tuned variants."""
    rows = kernels(rows)
    if rows.empty:
        return rows
    return rows[rows["backend"].astype(str).map(_library_kernel).astype(bool)]


def _ok(rows: pd.DataFrame) -> pd.DataFrame:
    return rows[(rows["status"] == "ok") & rows["latency_us"].notna()]


def _pairs(ok: pd.DataFrame, a: str, b: str) -> pd.DataFrame:
    """Per (file, case): the rows of `a` and `b` side by side (`_b` suffix), and `ratio` a/b."""
    left = ok[ok["backend"] == a].set_index(["file", "case_id"])
    right = ok[ok["backend"] == b].set_index(["file", "case_id"])
    both = left.join(right.add_suffix("_b"), how="inner")
    return both.assign(ratio=both["latency_us"] / both["latency_us_b"])


@section("paging")
def paging(inputs: Inputs) -> Section | None:
    """Paged FA3 / FA3 on a contiguous copy of the same cache, per file and over all."""
    both = _pairs(_ok(_raw(inputs.rows)), FA3, FA3_CONTIGUOUS).reset_index()
    if both.empty:
        return None
    rows = [
        [f, str(len(g)), frange(g["ratio"], fx), *sources(g)[1:]]
        for f, g in both.groupby("file", sort=False)
    ]
    per_gpu = []
    for gpu in gpu_order(both):
        g = both[both["gpu"] == gpu]
        name = device_name(gpu)
        rows.append([f"every {name} file", str(len(g)), frange(g["ratio"], fx), sources(g)[1]])
        per_gpu.append(f"{name} {frange(g['ratio'], fx)} over {len(g)} case pairs")
    heads = [Headline.of("paged / contiguous FA3", "; ".join(per_gpu), both)]
    text = (
        f"Latency of `{FA3}` (the page table at the case's page size, as engines run it) over "
        f"`{FA3_CONTIGUOUS}` (the same build on a contiguous copy of the cache) on the same "
        "case of the same file: above 1, paging costs time. Ranges per GPU."
    )
    return Section(
        "Paging cost of FA3",
        text,
        [Table(["file", "pairs", "paged / contiguous", "commit"], rows)],
        heads,
    )


def _library(name: str) -> str | None:
    variant = Variant.maybe(name)
    return variant.library if variant is not None else None


def _fastest_flashinfer(raw: pd.DataFrame) -> pd.DataFrame:
    fi = _ok(raw[raw["backend"].astype(str).map(_library).eq("flashinfer")])
    if fi.empty:
        return fi
    return fi.loc[fi.groupby(["file", "case_id"])["latency_us"].idxmin()].set_index(
        ["file", "case_id"]
    )


def _extreme(g: pd.DataFrame, idx: tuple[str, str]) -> str:
    r = g.loc[idx]
    return (
        f"{case_label(r)} in {idx[0]}: FA3 {fnum(r['latency_us'])} µs vs "
        f"{r['backend_b']} {fnum(r['latency_us_b'])} µs ({fx(r['ratio'])})"
    )


@section("fa3-vs-flashinfer")
def fa3_vs_flashinfer(inputs: Inputs) -> Section | None:
    """Paged FA3 / the fastest FlashInfer variant on the same case, per kind."""
    raw = _raw(inputs.rows)
    if raw.empty:
        return None
    fa3 = _ok(raw[raw["backend"] == FA3]).set_index(["file", "case_id"])
    both = fa3.join(_fastest_flashinfer(raw).add_suffix("_b"), how="inner")
    if both.empty:
        return None
    both = both.assign(ratio=both["latency_us"] / both["latency_us_b"])
    rows: list[list[str]] = []
    per_kind: dict[str, list[str]] = {}
    order = {gpu: i for i, gpu in enumerate(gpu_order(both))}
    groups = sorted(both.groupby(["gpu", "kind"]), key=lambda kv: (order[kv[0][0]], kv[0][1]))
    for (gpu, kind), g in groups:
        wins = Counter(g["backend_b"]).most_common()
        faster = int((g["ratio"] < 1).sum())
        rows.append(
            [
                device_name(str(gpu)),
                str(kind),
                frange(g["ratio"], fx),
                f"{faster} of {len(g)}",
                ", ".join(f"{b.split(':')[1]} {n}" for b, n in wins),
                _extreme(g, g["ratio"].idxmin()),
                _extreme(g, g["ratio"].idxmax()),
                *sources(g.reset_index()),
            ]
        )
        per_kind.setdefault(str(kind), []).append(
            f"{device_name(str(gpu))} {frange(g['ratio'], fx)} (FA3 faster in {faster} of {len(g)})"
        )
    text = (
        f"Latency of paged `{FA3}` over the fastest FlashInfer variant (untuned, no engine "
        "variant) on the same case of the same file; below 1, FA3 is faster. Extremes name "
        "their case and file. Ranges per GPU and kind."
    )
    cols = [
        "GPU",
        "kind",
        "FA3 / FlashInfer",
        "FA3 faster",
        "fastest FlashInfer variant (cases)",
        "lowest",
        "highest",
        "file",
        "commit",
    ]
    heads = [
        Headline.of(
            f"paged FA3 / fastest FlashInfer, {kind}",
            "; ".join(per_kind[kind]),
            both[both["kind"] == kind].reset_index(),
        )
        for kind in sorted(per_kind)
    ]
    return Section("Paged FA3 against FlashInfer", text, [Table(cols, rows)], heads)


def _binding(r: pd.Series) -> str:
    got = binding_fraction(r.get("bandwidth_frac_measured"), r.get("tflops_frac_measured"))
    if got is None:
        return "-"
    bound, frac = got
    return f"{fpct(frac)} of {'copy' if bound == 'memory' else 'matmul'}"


def _winner_row(g: pd.DataFrame, failed: int) -> list[str]:
    """The fastest deployable (paged) variant of a case, its runner-up, FlashInfer's default
    and the contiguous-copy baseline as multiples of its time (a baseline is named the
    fastest only where nothing else ran)."""
    g = g.sort_values("latency_us")
    is_baseline = g["backend"].isin(BASELINE_VARIANTS)
    ranked = g[~is_baseline] if not is_baseline.all() else g
    best = ranked.iloc[0]
    second = ranked.iloc[1] if len(ranked) > 1 else None
    auto = g[g["backend"] == FLASHINFER_DEFAULT]
    base = g[is_baseline] if not is_baseline.all() else g.iloc[0:0]
    return [
        case_label(best),
        str(best["backend"]),
        fnum(best["latency_us"]),
        _binding(best),
        f"{second['backend']} {fx(second['latency_us'] / best['latency_us'])}"
        if second is not None
        else "-",
        fx(auto["latency_us"].iloc[0] / best["latency_us"]) if not auto.empty else "-",
        fx(base["latency_us"].iloc[0] / best["latency_us"]) if not base.empty else "-",
        f"{len(g)} ok, {failed} failed",
        *sources(g),
    ]


WINNER_FIELDS = [
    "file",
    "commit",
    "case_id",
    "backend",
    "library",
    "status",
    "latency_us",
    "bandwidth_frac_measured",
    "tflops_frac_measured",
    "kind",
    "batch_size",
    "lengths",
    "dtype",
    "kv_dtype",
    "model",
    "tp",
    "page_size",
    "spec",
]


def winners(rows: pd.DataFrame) -> list[list[str]]:
    """One row per case: its fastest ok variant, the runner-up, and flashinfer:auto's ratio."""
    out = []
    raw = _raw(rows[WINNER_FIELDS])
    for _, g in raw.groupby("case_id", sort=False):
        ok = _ok(g)
        failed = int(g["status"].isin(["error", "mismatch", "oom", "timeout"]).sum())
        if not ok.empty:
            out.append(_winner_row(ok, failed))
    return out


WINNER_COLUMNS = [
    "case",
    "fastest",
    "µs",
    "of ceiling",
    "runner-up (x slower)",
    "flashinfer:auto (x slower)",
    "contiguous baseline (x)",
    "variants",
    "file",
    "commit",
]


@section("suites")
def suites(inputs: Inputs) -> Section | None:
    """The fastest variant of every case of each suite file."""
    tables = []
    for name in (s for suite in SUITES for s in inputs.stems_of(suite)):
        rows = inputs.of(name)
        if not rows.empty:
            tables.append(Table(WINNER_COLUMNS, winners(rows), title=f"`{name}`"))
    if not tables:
        return None
    text = (
        "Per case, the fastest variant that passed the accuracy gate (engine variants, tuned "
        "variants, the oracle and the baseline left out), its fraction of the ceiling that "
        "binds it in its own run, the runner-up and FlashInfer's default path as multiples of "
        "its time, and how many variants ran and failed. The baseline, "
        f"`{'`, `'.join(sorted(BASELINE_VARIANTS))}`, reads a contiguous copy of the KV cache "
        "that no engine keeps: it prices paging, as a multiple of the fastest's time (below "
        "1x it was faster)."
    )
    return Section("Fastest variant per case", text, tables)


@section("variants-per-case")
def variants_per_case(inputs: Inputs) -> Section | None:
    """Every variant of the brief suite's prefill cases (where the kernels differ most)."""
    ok = _ok(_raw(inputs.of_suite("brief")))
    ok = ok[ok["kind"] == "prefill"]
    if ok.empty:
        return None
    rows = [
        [
            case_label(r),
            str(r["backend"]),
            fnum(r["latency_us"]),
            _binding(r),
            *sources(
                ok[
                    (ok["file"] == r["file"])
                    & (ok["case_id"] == r["case_id"])
                    & (ok["backend"] == r["backend"])
                ]
            ),
        ]
        for _, r in ok.sort_values(["file", "case_id", "latency_us"]).iterrows()
    ]
    text = "Every ok variant of each prefill case of the brief suite, fastest first."
    cols = ["case", "variant", "µs", "of ceiling", "file", "commit"]
    return Section("Brief suite: prefill, every variant", text, [Table(cols, rows)])
