"""Sections on the head_dim zoo (issue 36): per head_dim and kernel its rows by status and
timing, the wrong answers the gate caught, and the Gemma-2 (soft-cap) and Phi-3 presets."""

from __future__ import annotations

from collections import Counter

import pandas as pd

from attnbench.analysis.frame import gpu_order
from attnbench.report.findings.core import (
    Headline,
    Inputs,
    Section,
    Table,
    fnum,
    frange,
    kernels,
    section,
    sources,
)

ZOO = (
    "h200-headdim",
    "h200-headdim-fa2",
    "h100-headdim",
    "h100-headdim-fi",
    "h100-headdim-xqa",
)
PRESETS = ("h200-gemma-2-9b", "h200-phi-3-mini", "h100-headdim-models")
"""The files of each section; one table per GPU (cases are compared within a GPU only)."""
REASON_CHARS = 90


def _statuses(g: pd.DataFrame) -> str:
    return ", ".join(f"{n} {s}" for s, n in sorted(Counter(g["status"]).items()))


def _first_reason(g: pd.DataFrame) -> str:
    bad = g[g["status"] != "ok"]
    if bad.empty:
        return "-"
    text = str(bad["reason"].iloc[0])
    return text if len(text) <= REASON_CHARS else text[:REASON_CHARS].rsplit(" ", 1)[0] + " …"


def _wins(every: pd.DataFrame, keys: list[str]) -> Counter[tuple[object, ...]]:
    """Cases won, per `keys` + backend: the fastest timed row of each (file-less) case."""
    ok = every[every["status"] == "ok"]
    if ok.empty:
        return Counter()
    best = ok.loc[ok.groupby("case_id")["latency_us"].idxmin()]
    return Counter(tuple(r) for r in best[[*keys, "backend"]].itertuples(index=False))


def _variant_rows(every: pd.DataFrame, keys: list[str]) -> list[list[str]]:
    """Per `keys` + variant: rows by status, the µs range of its timed rows, cases it was the
    fastest of (across every file the rows come from), its first failure's reason."""
    wins = _wins(every, keys)
    cases = every.groupby(keys)["case_id"].nunique()
    out = []
    for key, g in every.groupby([*keys, "backend"], sort=True):
        ok = g[g["status"] == "ok"]
        won = wins.get(tuple(key), 0)
        head = [str(k) for k in key]
        out.append(
            [
                *head,
                _statuses(g),
                frange(ok["latency_us"], fnum),
                f"{won} of {cases[key[:-1]]}",
                _first_reason(g),
                *sources(g),
            ]
        )
    return out


def _wrong_headline(every: pd.DataFrame) -> Headline | None:
    wrong = every[every["status"] == "mismatch"]
    if wrong.empty:
        return None
    dims = ", ".join(f"d{d}" for d in sorted(set(wrong["head_dim"])))
    lib = ", ".join(sorted(set(wrong["backend"])))
    err = frange(wrong["rel_l2_err"], lambda v: f"{v:.2f}")
    return Headline.of(f"head_dim zoo: wrong answers ({lib})", f"{dims} (rel. error {err})", wrong)


def by_gpu(every: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """The rows per GPU, the GPU with the most rows first."""
    return [(gpu, every[every["gpu"].astype(str) == gpu]) for gpu in gpu_order(every)]


@section("head-dim")
def head_dim(inputs: Inputs) -> Section | None:
    every = kernels(inputs.of(*ZOO))
    if every.empty:
        return None
    cols = ["kind", "head_dim", "variant", "rows", "µs (timed)", "fastest in", "first failure"]
    tables = [
        Table([*cols, "file", "commit"], _variant_rows(g, ["kind", "head_dim"]), title=gpu)
        for gpu, g in by_gpu(every)
    ]
    text = (
        "The headdim suite: decode at GQA groups 1, 4 and 8 (32 query heads) on the brief's "
        "mixed 256..64k batch of 32 and a uniform 32 x 8k, and causal prefill at group 4; per "
        "GPU, kind, head_dim and variant its rows by status, the latency range of those that "
        "passed the gate, the cases it was fastest in, and why the others have no timing."
    )
    heads = [h for h in [_wrong_headline(every)] if h is not None]
    return Section("Head dims", text, tables, heads)


@section("head-dim-presets")
def head_dim_presets(inputs: Inputs) -> Section | None:
    every = kernels(inputs.of(*PRESETS))
    if every.empty:
        return None
    every = every.assign(layer=every["spec"].map(lambda s: s.layer_type or "-"))
    keys = ["model", "layer", "kv_dtype"]
    cols = ["model", "layer", "KV", "variant", "rows", "µs (timed)", "fastest in"]
    tables = [
        Table(
            [*cols, "file", "commit"],
            [r[:-3] + r[-2:] for r in _variant_rows(g, keys)],  # no failure column: below
            title=gpu,
        )
        for gpu, g in by_gpu(every)
    ]
    failing = [f"{b}: {_first_reason(g)}" for b, g in every.groupby("backend")
               if (g["status"] != "ok").any()]  # fmt: skip
    text = (
        "Decode on the head-dim model presets: Gemma-2-9b (16/8 heads, d256) and Gemma-2-27b "
        "(32/16 heads, d128), logit soft-cap 50, their sliding and full layers; Phi-3-mini "
        "(32/32 heads, d96, window 2047). Per GPU, layer and KV dtype, each variant's rows by "
        "status and timing. Refusals and wrong answers: " + "; ".join(sorted(failing))
    )
    return Section("Head-dim presets", text, tables)
