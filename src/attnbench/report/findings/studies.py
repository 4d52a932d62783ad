"""Sections on the model-shape studies: MLA at DeepSeek-V3's shape, gpt-oss (sinks, sliding
windows), shared prefixes (cascades) and the GQA-ratio sweep."""

from __future__ import annotations

from collections import Counter

import pandas as pd

from attnbench.analysis.cascade import crossovers, prefix_points
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
from attnbench.report.findings.workloads import every_variant, ok_kernels

MLA, GPTOSS, GQA = "h200-mla", "h200-gptoss", "h200-gqa"
SHARED = "shared-prefix"
"""The shared-prefix suite, on every GPU (`h100-shared-prefix`, `h200-shared-prefix`)."""
MLA_FA3, MLA_FA2, SDPA_MLA = "flashinfer:mla-fa3", "flashinfer:mla-fa2", "sdpa:mla"
XQA, FA3 = "flashinfer:xqa", "flash-attn:fa3"
FAILED = ("error", "mismatch", "oom", "timeout")


def ratio_rows(ok: pd.DataFrame, a: str, b: str, by: list[str]) -> list[list[str]]:
    """Per group of `by`: the range of `a` / `b` latency over the cases both ran."""
    left = ok[ok["backend"] == a].set_index(["file", "case_id"])
    right = ok[ok["backend"] == b].set_index(["file", "case_id"])[["latency_us"]]
    both = left.join(right.add_suffix("_b"), how="inner")
    both = both.assign(ratio=both["latency_us"] / both["latency_us_b"]).reset_index()
    return [
        [
            f"{a} / {b}",
            *(str(k) for k in (key if isinstance(key, tuple) else (key,))),
            str(len(g)),
            frange(g["ratio"], fx),
            *sources(g),
        ]
        for key, g in both.groupby(by)
    ]


def _case_rows(ok: pd.DataFrame, every: pd.DataFrame) -> list[list[str]]:
    """Per case: every variant's µs (fastest first), the fastest's binding fraction, and the
    variants with no timed row: by status, and those of the file with no row at all here."""
    out = []
    variants = set(every["backend"])
    for case_id, g in ok.groupby("case_id", sort=False):
        best = g.loc[g["latency_us"].idxmin()]
        frac = max(best["bandwidth_frac_measured"] or 0, best["tflops_frac_measured"] or 0)
        mine = every[every["case_id"] == case_id]
        failed = Counter(mine[mine["status"] != "ok"]["status"])
        absent = sorted(variants - set(mine["backend"]))
        gaps = [f"{n} {s}" for s, n in sorted(failed.items())]
        gaps += [f"no row: {', '.join(absent)}"] if absent else []
        out.append(
            [case_label(best), every_variant(g), fpct(frac), "; ".join(gaps) or "-", *sources(g)]
        )
    return out


CASE_COLUMNS = [
    "case",
    "µs, every variant (fastest first)",
    "fastest, of binding ceiling",
    "no timed row",
    "file",
    "commit",
]
RATIO_COLUMNS = ["ratio", "KV", "cases", "range", "file", "commit"]


@section("mla")
def mla(inputs: Inputs) -> Section | None:
    every = kernels(inputs.of(MLA))
    ok = ok_kernels(every)
    if ok.empty:
        return None
    ratios = ratio_rows(ok, MLA_FA3, MLA_FA2, ["kv_dtype"]) + ratio_rows(
        ok, SDPA_MLA, MLA_FA3, ["kv_dtype"]
    )
    fp8 = _latent_cost(ok)
    text = (
        "DeepSeek-V3's absorbed MLA (128 query heads on one 512 + 64 latent, page 64, YaRN's "
        "softmax scale). Per case every MLA kernel's latency and the fastest's fraction of the "
        "ceiling that binds it (MLA decode is compute-bound); then latency ratios over the cases "
        "both variants ran, and the fp8 latent against the bf16 latent of the same shape."
    )
    tables = [Table(CASE_COLUMNS, _case_rows(ok, every)), Table(RATIO_COLUMNS, ratios + fp8)]
    heads = [Headline.of(f"MLA {r[0]}, {r[1]}", r[3], [r[4], r[5]]) for r in ratios[:2]]
    return Section("MLA (DeepSeek-V3)", text, tables, heads)


def _latent_cost(ok: pd.DataFrame) -> list[list[str]]:
    """fp8-latent / bf16-latent latency of `mla-fa3` on the same batch and context."""
    mine = ok[ok["backend"] == MLA_FA3]
    keys = ["kind", "batch_size", "lengths"]
    bf16 = mine[~mine["fp8"].astype(bool)].set_index(keys)[["latency_us", "file", "commit"]]
    fp8 = mine[mine["fp8"].astype(bool)].set_index(keys)
    both = fp8.join(bf16.add_suffix("_bf16"), how="inner")
    if both.empty:
        return []
    ratio = both["latency_us"] / both["latency_us_bf16"]
    src = pd.concat(
        [
            both[["file", "commit"]],
            both[["file_bf16", "commit_bf16"]].set_axis(["file", "commit"], axis=1),
        ]
    )
    return [
        [
            f"{MLA_FA3} fp8 / bf16 latent",
            "fp8_e4m3 vs bfloat16",
            str(len(both)),
            frange(ratio, fx),
            *sources(src),
        ]
    ]


@section("gpt-oss")
def gpt_oss(inputs: Inputs) -> Section | None:
    every = kernels(inputs.of(GPTOSS))
    ok = ok_kernels(every)
    if ok.empty:
        return None
    fastest = ok.loc[ok.groupby("case_id")["latency_us"].idxmin()]
    wins = [
        [
            str(kind),
            ", ".join(f"{b} {n}" for b, n in Counter(g["backend"]).most_common()),
            str(len(g)),
            *sources(g),
        ]
        for kind, g in fastest.groupby("kind")
    ]
    ratios = ratio_rows(ok, FA3, XQA, ["kind"]) + ratio_rows(ok, "flex", FA3, ["kind"])
    ratios += ratio_rows(ok, "sdpa:cudnn", FA3, ["kind"])
    refused = _refusals(every)
    text = (
        "gpt-oss-120b: head_dim 64, learned attention sinks, full and 128-token sliding-window "
        "layers (one case per layer kind). Per case every variant; which variant is fastest per "
        "kind; latency ratios over the cases both ran; and every variant's refusals."
    )
    tables = [
        Table(CASE_COLUMNS, _case_rows(ok, every)),
        Table(["kind", "fastest (cases)", "cases", "file", "commit"], wins),
        Table(["ratio", "kind", "cases", "range", "file", "commit"], ratios),
        Table(["variant", "status", "rows", "reason", "file", "commit"], refused),
    ]
    return Section("gpt-oss-120b", text, tables)


def _refusals(every: pd.DataFrame) -> list[list[str]]:
    not_ok = every[every["status"] != "ok"]
    return [
        [str(b), str(s), str(len(g)), str(g["reason"].iloc[0])[:160], *sources(g)]
        for (b, s), g in not_ok.groupby(["backend", "status"])
    ]


@section("shared-prefix")
def shared_prefix(inputs: Inputs) -> Section | None:
    rows: list[list[str]] = []
    cross: list[list[str]] = []
    for _, ok in ok_kernels(inputs.of_suite(SHARED)).groupby("file"):  # each GPU's file
        points = prefix_points(ok)
        src = sources(ok)
        rows += [
            [
                p.group,
                str(p.prefix_len),
                str(p.batch_size),
                f"{p.cascade} {fnum(p.cascade_us)}",
                f"{p.plain} {fnum(p.plain_us)}",
                fx(p.speedup),
                p.verdict,
                *src,
            ]
            for p in points
        ]
        cross += [
            [c.group, str(n), str(c.min_batch(n) or "never"), *src]
            for c in crossovers(points)
            for n in c.prefix_lens
        ]
    if not rows:
        return None
    text = (
        "A prefix shared by every request, with short suffixes: the best cascade (FlashInfer's, "
        "or FA3 run twice and merged) against the best plain decode, per prefix length and "
        "batch; `wins` only when significant and beyond the noise. Then the smallest batch from "
        "which the cascade wins at every larger batch measured."
    )
    tables = [
        Table(
            [
                "group",
                "prefix",
                "batch",
                "best cascade µs",
                "best plain µs",
                "plain / cascade",
                "cascade",
                "file",
                "commit",
            ],
            rows,
        ),
        Table(["group", "prefix", "cascade wins from batch", "file", "commit"], cross),
    ]
    return Section("Shared prefixes", text, tables)


@section("gqa")
def gqa(inputs: Inputs) -> Section | None:
    every = kernels(inputs.of(GQA, "h200-gqa-flex"))
    if every.empty:
        return None
    every = every.assign(group=every["num_qo_heads"] // every["num_kv_heads"])
    rows = []
    for b, g in every.groupby("backend"):
        status = Counter(g["status"])
        refused = sorted(set(g[g["status"] == "unsupported"]["group"]))
        bad = g[g["status"].isin(FAILED)]
        rows.append(
            [
                str(b),
                ", ".join(f"{n} {s}" for s, n in sorted(status.items())),
                ", ".join(map(str, refused)) or "-",
                str(bad["reason"].iloc[0])[:120] if not bad.empty else "-",
                *sources(g),
            ]
        )
    ok = ok_kernels(every)
    fastest = ok.loc[ok.groupby(["file", "case_id"])["latency_us"].idxmin()]
    wins = [
        [str(n), ", ".join(f"{b} {c}" for b, c in Counter(g["backend"]).most_common()), *sources(g)]
        for n, g in fastest.groupby("group")
    ]
    text = (
        "Decode over group sizes (query heads per KV head) 1-16 and Qwen2.5-7B's 28/4: per "
        "variant its rows by status, the group sizes it refused, and its first failure's reason; "
        "then the fastest variant per group size."
    )
    tables = [
        Table(["variant", "rows", "refused group sizes", "first failure", "file", "commit"], rows),
        Table(["group size", "fastest (cases)", "file", "commit"], wins),
    ]
    return Section("GQA ratios", text, tables)
