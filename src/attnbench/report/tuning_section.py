"""The tuning section: default knobs against tuned, per case and variant, from the `+tuned` rows
`attnbench tune` writes and, for the confidence interval, their trials files (plain or .gz)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from attnbench.analysis.frame import fmt_us, load
from attnbench.analysis.tuning import TunedPair, trials_paths, tuned_pairs
from attnbench.backends.variant import is_tuned
from attnbench.report.blocks import ReportData, Section, Table, Text, register_section
from attnbench.report.table import short_case


def _trials(data: ReportData, sources: set[str]) -> tuple[pd.DataFrame | None, list[Path]]:
    tuned_files = [p for p in data.loaded.paths if p.name in sources]
    paths = trials_paths(tuned_files, data.loaded.paths)
    if not paths:
        return None, []
    frames = [load([p]).frame for p in paths]
    return pd.concat(frames, ignore_index=True), paths


def _ci(p: TunedPair) -> str:
    if p.estimate is None:
        return "-"
    return f"{1 / p.estimate.ci_high:.2f}-{1 / p.estimate.ci_low:.2f}"


def _row(p: TunedPair) -> list[str]:
    return [
        short_case(p.row["spec"]),
        p.variant,
        p.knobs,
        fmt_us(p.default_us),
        fmt_us(p.tuned_us),
        f"**{p.speedup:.2f}x**" if p.verdict == "faster" else f"{p.speedup:.2f}x",
        _ci(p),
        p.verdict,
        p.search,
    ]


@register_section("Tuning", order=65)
def tuning(data: ReportData) -> Section | None:
    if data.ok.empty:
        return None
    tuned = data.ok[data.ok["backend"].map(is_tuned).astype(bool)]
    if tuned.empty:
        return None
    trials, paths = _trials(data, set(tuned["source"]))
    pairs = tuned_pairs(data.ok, trials)
    if not pairs:
        return None
    by_file: dict[str, list[list[str]]] = {}
    for p in pairs:
        by_file.setdefault(str(p.row["source"]), []).append(_row(p))
    faster = [p for p in pairs if p.verdict == "faster"]
    kept = sum(p.verdict == "default kept" for p in pairs)
    best = max(faster, key=lambda p: p.speedup) if faster else None
    text = (
        f"`attnbench tune` searched each variant's knobs per case: {len(faster)} of {len(pairs)} "
        f"(case, variant) pairs are significantly faster tuned"
        + (
            f" (most: `{best.variant}` {best.speedup:.2f}x with `{best.knobs}` on "
            f"{short_case(best.row['spec'])})"
            if best
            else ""
        )
        + f"; in {kept} the default knobs stayed the fastest. Default and tuned latencies are "
        "the two final measurements of one search, same process and budget."
    )
    if paths:
        text += " Trials from " + ", ".join(f"`{p.name}`" for p in paths) + "."
    else:
        text += " No trials file was found beside the tuned rows, so speedups have no CI."
    head = ["case", "variant", "tuned knobs", "default knobs: latency", "tuned: latency"]
    head += ["speedup", "95% CI", "verdict", "search"]
    tables = [
        Table(head, rows, f"{name}: before/after tuning, median latency per call")
        for name, rows in sorted(by_file.items())
    ]
    return Section("Tuning", [Text(text), *tables])
