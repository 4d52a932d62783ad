"""Sections on serving-shaped workloads: raggedness at a fixed total of KV tokens, Llama-3.1-70B
per generated token, and what an fp8 KV cache buys each variant."""

from __future__ import annotations

import pandas as pd

from attnbench.analysis.frame import add_key, unpadded
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
    stem,
)

RAGGED = "ragged"
MODEL_70B = "brief70b-paged"
FP8_FILES = ("brief70b-paged", "fp8", "ragged", "default-fresh", "default-warm")
"""Suites whose files pair each fp8-KV case with its 16-bit case, on every GPU (`h100-fp8`)."""
UNIFORM, GIANT = "skew-uniform", "skew-giant"
HEADLINE_VARIANTS = ("flash-attn:fa3", "flashinfer:tc", "flashinfer:xqa", "flashinfer:fa2")


def ok_kernels(rows: pd.DataFrame) -> pd.DataFrame:
    rows = kernels(rows)
    return rows[(rows["status"] == "ok") & rows["latency_us"].notna()]


def every_variant(g: pd.DataFrame, col: str = "latency_us", digits: int = 1) -> str:
    """`flash-attn:fa3 71.3, flashinfer:tc 92.5, ...`: every variant's value, smallest first."""
    g = g.sort_values(col)
    return ", ".join(f"{b} {fnum(v, digits)}" for b, v in zip(g["backend"], g[col], strict=True))


def _at(g: pd.DataFrame, lengths_prefix: str) -> str:
    hit = g[g["lengths"].astype(str).str.startswith(lengths_prefix)]
    return fnum(hit["latency_us"].iloc[0]) if not hit.empty else "-"


def _padding_cost(ok: pd.DataFrame, variant: str, kv_dtype: str) -> str:
    mine = ok[(ok["backend"] == variant) & (ok["kv_dtype"] == kv_dtype)]
    padded = mine[mine["padded"]].assign(base=lambda d: d["lengths"].map(unpadded))
    plain = mine[~mine["padded"]].set_index("lengths")["latency_us"]
    ratios = [r.latency_us / plain[r.base] for r in padded.itertuples() if r.base in plain]
    return frange(ratios, fx)


@section("ragged")
def ragged(inputs: Inputs) -> Section | None:
    """Per variant and KV dtype over the ragged suite: latency, copy fraction, the uniform and
    one-giant-request ends, and what padding to the longest request costs."""
    ok = ok_kernels(inputs.of_suite(RAGGED))
    if ok.empty:
        return None
    rows = []
    by_file: dict[str, list[list[str]]] = {}
    for (file, variant, kv), g in ok.groupby(["file", "backend", "kv_dtype"]):
        plain = g[~g["padded"]]
        rows.append(
            [
                str(variant),
                str(kv),
                str(len(plain)),
                frange(plain["latency_us"], fnum),
                frange(plain["bandwidth_frac_measured"], fpct),
                _at(plain, UNIFORM),
                _at(plain, GIANT),
                _padding_cost(ok[ok["file"] == file], str(variant), str(kv)),
                *sources(g),
            ]
        )
        by_file.setdefault(str(file), []).append(rows[-1])
    text = (
        "32 decode requests always holding the same total of KV tokens, from uniform lengths "
        "to one giant request beside tiny ones (`skew-*`), and each batch padded to its longest "
        "request (`padded(...)`). Per variant: the range over the unpadded batches, both ends, "
        "and padded / unpadded latency of the same batch."
    )
    cols = [
        "variant",
        "KV",
        "batches",
        "µs",
        "of copy",
        "uniform µs",
        "one giant µs",
        "padded / ragged",
        "file",
        "commit",
    ]
    heads = []
    for file, file_rows in by_file.items():  # one headline per GPU's file
        bf16 = [r for r in file_rows if r[1] == "bfloat16" and r[0] in HEADLINE_VARIANTS]
        if bf16:
            heads.append(
                Headline.of(
                    "raggedness, bf16 decode at a fixed total of KV tokens",
                    "µs from uniform to one giant request: "
                    + ", ".join(f"{r[0]} {r[5]} -> {r[6]}" for r in bf16),
                    ok[ok["file"] == file],
                )
            )
    return Section("Raggedness", text, [Table(cols, rows)], heads)


@section("llama-70b")
def llama_70b(inputs: Inputs) -> Section | None:
    """Llama-3.1-70B at TP 8: attention per generated token, every variant, per case and dtype."""
    ok = ok_kernels(inputs.of_suite(MODEL_70B))
    ok = ok[ok["per_token_ms"].notna()]
    if ok.empty:
        return None
    rows = []
    for _, g in ok.groupby(["file", "case_id"], sort=False):
        rows.append([case_label(g.iloc[0]), every_variant(g, "per_token_ms", 2), *sources(g)])
    text = (
        "Attention per generated token (`per_token_ms` = one plan + 80 layers x one run, paged "
        "KV) for every case: each dtype and KV dtype is its own row, never an average."
    )
    cols = ["case", "per-token ms, every variant (fastest first)", "file", "commit"]
    return Section("Llama-3.1-70B per generated token", text, [Table(cols, rows)])


def _fp8_pairs(ok: pd.DataFrame) -> pd.DataFrame:
    """Each fp8-KV row beside the same variant's 16-bit-KV row of the same case otherwise."""
    keyed = add_key(ok, "pair", drop=("kv_dtype",))
    fp8 = keyed[keyed["fp8"].astype(bool)]
    base = keyed[~keyed["fp8"].astype(bool)]
    both = fp8.merge(base, on=["file", "pair", "backend"], suffixes=("", "_16"))
    return both.assign(speedup=both["latency_us_16"] / both["latency_us"])


def _err(g: pd.DataFrame, col: str) -> str:
    return frange(g[col].dropna(), lambda v: fpct(v, 2))


@section("fp8-kv")
def fp8_kv(inputs: Inputs) -> Section | None:
    """Per file, variant and fp8 format: 16-bit KV latency / fp8 KV latency of the same case."""
    ok = ok_kernels(inputs.of_suite(*FP8_FILES))
    if ok.empty:
        return None
    both = _fp8_pairs(ok)
    rows: list[list[str]] = []
    heads: dict[str, list[str]] = {}
    for (f, variant, kv), g in both.groupby(["file", "backend", "kv_dtype"], sort=False):
        faster = int((g["speedup"] > 1).sum())
        rows.append(
            [
                str(variant),
                str(kv),
                str(len(g)),
                frange(g["speedup"], fx),
                f"{faster} of {len(g)}",
                _err(g, "rel_l2_err"),
                _err(g, "rel_l2_err_16"),
                f,
                joined_commits(g),
            ]
        )
        if stem(str(f)).endswith(f"-{MODEL_70B}") and kv == "fp8_e4m3":  # a headline per GPU
            heads.setdefault(str(f), []).append(f"{variant} {frange(g['speedup'], fx)}")
    text = (
        "The same case with a 16-bit and an fp8 KV cache, same variant, same file: 16-bit "
        "latency / fp8 latency (above 1: fp8 is faster), with each side's relative L2 error "
        "against the fp64 reference."
    )
    cols = [
        "variant",
        "fp8 KV",
        "pairs",
        "speed-up",
        "fp8 faster",
        "fp8 error",
        "16-bit error",
        "file",
        "commit",
    ]
    head = [
        Headline.of(
            "fp8 e4m3 KV speed-up, Llama-3.1-70B",
            ", ".join(figures),
            [f, joined_commits(both[(both["file"] == f) & (both["kv_dtype"] == "fp8_e4m3")])],
        )
        for f, figures in heads.items()
    ]
    return Section("FP8 KV cache: speed-up per variant", text, [Table(cols, rows)], head)


def joined_commits(g: pd.DataFrame) -> str:
    return sources(
        pd.concat(
            [g[["file", "commit"]], g[["file", "commit_16"]].set_axis(["file", "commit"], axis=1)]
        )
    )[1]
