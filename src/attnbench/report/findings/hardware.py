"""Sections on the files themselves and the GPU: which commit wrote each file, the ceilings
every run measured, the read probe, and how fast decode reads against those ceilings."""

from __future__ import annotations

import re
from typing import Any

import pandas as pd

from attnbench.analysis.frame import gpu_order
from attnbench.report.findings.core import (
    Headline,
    Inputs,
    Section,
    Table,
    case_label,
    doc_commit,
    fnum,
    fpct,
    frange,
    header_commit,
    joined,
    kernels,
    section,
    sources,
)


def _read_method(ceilings: dict[str, Any]) -> str:
    method = str((ceilings.get("method") or {}).get("read", ""))
    if method.startswith("Triton"):
        return "Triton reader"
    return "torch sum" if method.startswith("torch sum") else "-"


def _ceiling_rows(inputs: Inputs) -> pd.DataFrame:
    recs = []
    for name, headers in inputs.headers.items():
        for i, h in enumerate(headers, 1):
            c = h.ceilings or {}
            mm = c.get("matmul_tflops") or {}
            recs.append(
                {
                    "file": name,
                    "run": i,
                    "gpu": str(h.gpu or "-").removeprefix("NVIDIA "),
                    "commit": header_commit(h),
                    "copy": c.get("copy_bandwidth_gbps"),
                    "read": c.get("read_bandwidth_gbps"),
                    "method": _read_method(c),
                    "bf16": mm.get("bfloat16"),
                    "fp8": mm.get("fp8_e4m3"),
                }
            )
    return pd.DataFrame.from_records(recs)


def _ceiling_summary(df: pd.DataFrame) -> list[list[str]]:
    out = []
    for label, col, sub, unit in (
        ("copy (read + write)", "copy", df, "GB/s"),
        ("streaming read, torch sum", "read", df[df["method"] == "torch sum"], "GB/s"),
        ("streaming read, Triton reader", "read", df[df["method"] == "Triton reader"], "GB/s"),
        ("bf16 matmul", "bf16", df, "TFLOP/s"),
        ("fp8 e4m3 matmul", "fp8", df, "TFLOP/s"),
    ):
        vals = sub[col].dropna()
        if vals.empty:
            continue
        used = sub.loc[vals.index]
        span = f"{frange(vals, lambda v: fnum(v, 0))} {unit}"
        out.append([label, span, str(len(vals)), *sources(used)])
    return out


@section("ceilings")
def ceilings(inputs: Inputs) -> Section | None:
    """The ceilings each run header measured, and their ranges over every header."""
    df = _ceiling_rows(inputs)
    if df.empty:
        return None
    per_run = [
        [
            f"`{r.file}`",
            str(r.run),
            str(r.gpu),
            fnum(r.copy, 0),
            fnum(r.read, 0),
            r.method,
            fnum(r.bf16, 0),
            fnum(r.fp8, 0),
            r.commit,
        ]
        for r in df.itertuples()
    ]
    gpus = gpu_order(df)
    summary = [[g, *r] for g in gpus for r in _ceiling_summary(df[df["gpu"] == g])]
    text = (
        "Every run measures its ceilings on the GPU it runs on, before its cases: a torch "
        "copy, a streaming read (a torch sum; from the Triton reader's commit on, the fastest "
        "plain reader, checked to read every element) and bf16/fp8 matmuls. Ranges per GPU "
        "over every run header of every file."
    )
    return Section(
        "Ceilings",
        text,
        [
            Table(["GPU", "ceiling", "range", "headers", "file", "commit"], summary),
            Table(
                [
                    "file",
                    "run",
                    "GPU",
                    "copy GB/s",
                    "read GB/s",
                    "read by",
                    "bf16 TFLOP/s",
                    "fp8 TFLOP/s",
                    "commit",
                ],
                per_run,
            ),
        ],
        [
            Headline.of(
                f"ceilings measured per run, {g}",
                "; ".join(f"{r[1]} {r[2]}" for r in summary if r[0] == g),
                [
                    f"{df.loc[df['gpu'] == g, 'file'].nunique()} results files",
                    f"{df.loc[df['gpu'] == g, 'commit'].nunique()} commits",
                ],
                gated=False,
            )
            for g in gpus
        ],
    )


def _family(reader: str) -> str:
    """`triton persistent 2xSM block 4096 warps 8` -> `triton persistent`."""
    return re.sub(r"\s\d.*$", "", reader)


@section("read-probe")
def read_probe(inputs: Inputs) -> Section | None:
    found = inputs.doc("h200-read-probe")
    if found is None:
        return None
    name, doc = found
    df = pd.DataFrame.from_records(doc.get("rows", []))
    if df.empty:
        return None
    df["family"] = df["reader"].map(_family)
    rows = [
        [
            fam,
            str(g["reader"].nunique()),
            joined(f"{v:g}" for v in sorted(g["gib"].unique())),
            frange(g["gbps"], lambda v: fnum(v, 0)),
            f"`{name}`",
            doc_commit(doc),
        ]
        for fam, g in df.groupby("family", sort=False)
    ]
    text = "Readers of one buffer timed on their own (median GB/s per reader and size)."
    table = Table(["reader", "configurations", "GiB", "GB/s", "file", "commit"], rows)
    return Section("Read probe", text, [table])


def _decode_vs_ceiling(g: pd.DataFrame) -> list[str]:
    best = g.loc[g["bandwidth_gbps"].idxmax()]
    over = int((g["bandwidth_frac_measured"] > 1).sum())
    read = g["bandwidth_frac_read"].dropna()
    return [
        str(len(g)),
        frange(g["bandwidth_frac_measured"], fpct),
        frange(read, fpct) if not read.empty else "-",
        f"{best['backend']}, {case_label(best)}: {fnum(best['bandwidth_gbps'], 0)}",
        str(over),
        *sources(g),
    ]


@section("decode-bandwidth")
def decode_bandwidth(inputs: Inputs) -> Section | None:
    """Per file, 16-bit decode rows against their own run's copy and read ceilings."""
    rows = inputs.rows
    if rows.empty:
        return None
    ok = kernels(rows[(rows["status"] == "ok") & (rows["kind"] == "decode")])
    ok = ok[ok["bandwidth_gbps"].notna() & ~ok["fp8"].astype(bool) & (ok["model"] == "")]
    table_rows = [_decode_vs_ceiling(g) for _, g in ok.groupby("file", sort=False)]
    if not table_rows:
        return None
    text = (
        "Every ok decode row on a 16-bit KV cache (no model preset), per file: its achieved "
        "bandwidth as a fraction of the copy and streaming-read ceilings its own run measured, "
        "the fastest reader, and how many rows read faster than the copy ceiling."
    )
    cols = ["rows", "of copy", "of read", "fastest, GB/s", "above copy", "file", "commit"]
    return Section("Decode bandwidth against the ceilings", text, [Table(cols, table_rows)])
