"""The outside anchor: attnbench's engine-path rows beside NVIDIA AIConfigurator's published
attention tables (`analysis.aic`, `attnbench anchors`), per GPU."""

from __future__ import annotations

from collections.abc import Sequence

from attnbench.analysis.aic import (
    AIC_PAGE_SIZE,
    COUNTERPART,
    TOLERANCE,
    AnchorSource,
    Pair,
    explanation,
    l2_state,
    load_anchors,
    missing,
    pairs,
    summaries,
)
from attnbench.analysis.pr1770 import Beside, PublishedSet
from attnbench.report.anchor_tables import gpu_label, ratio_range, tokens
from attnbench.report.findings.core import Inputs, Section, Table, fnum, fx, joined, section

SUMMARY_COLUMNS = [
    "GPU",
    "variant",
    "AIConfigurator",
    "phase",
    "L2",
    "page",
    "pairs",
    "median",
    "range",
    f"beyond {TOLERANCE:.0%}",
    "file",
    "commit",
]
PAIR_COLUMNS = [
    "GPU",
    "variant",
    "heads",
    "KV dtype",
    "batch",
    "KV",
    "L2",
    "attnbench µs",
    "AIConfigurator µs",
    "ratio",
    "beyond 10%: measured cause, or unexplained and the known differences",
    "file",
    "commit",
]


def _summary_rows(found: Sequence[Pair]) -> list[list[str]]:
    rows = []
    for s in summaries(found):
        mine = [
            p
            for p in found
            if (p.key.system, p.variant, p.key.kind, p.same_page, l2_state(p))
            == (s.system, s.variant, s.kind, s.same_page, s.l2_policy)
        ]
        page = str(AIC_PAGE_SIZE) if s.same_page else joined(p.page_size for p in mine)
        rows.append(
            [
                gpu_label(s.system),
                s.variant,
                f"{COUNTERPART[s.variant]} {mine[0].anchor.version}",
                s.kind,
                s.l2_policy,
                page,
                str(len(s.ratios)),
                fx(s.median),
                ratio_range(s.ratios).replace("-", "–"),
                str(s.beyond),
                joined(p.file for p in mine),
                joined(p.commit for p in mine),
            ]
        )
    return rows


def _pair_row(p: Pair, found: Sequence[Pair]) -> list[str]:
    k = p.key
    why = explanation(p, found) if p.beyond else "-"
    return [
        gpu_label(k.system),
        p.variant,
        f"{k.num_qo_heads}/{k.num_kv_heads} d{k.head_dim}",
        k.kv_dtype,
        str(k.batch_size),
        tokens(k.kv_len),
        l2_state(p),
        fnum(p.latency_us),
        fnum(p.anchor.latency_us),
        fx(p.ratio),
        why,
        p.file,
        p.commit,
    ]


def _text(source: AnchorSource, found: Sequence[Pair], gone: list[tuple[str, str, str]]) -> str:
    unmatched = [
        f"{', '.join(m[1] for m in gone if m[0] == system and m[2] == why)} on the "
        f"{gpu_label(system)}: {why}"
        for system in dict.fromkeys(m[0] for m in gone)
        for why in dict.fromkeys(m[2] for m in gone if m[0] == system)
    ]
    return (
        f"attnbench's engine paths beside {source.label()}'s decode and prefill tables "
        f"(`attnbench anchors`; the extract and `scripts/aic_extract.py` name the wheel and "
        f"its parquet files). A pair is the same GPU, kernel (TRT-LLM's rows beside "
        f"`flashinfer:xqa`), heads, head_dim, batch, uniform lengths (KV = isl + step) and KV "
        f"dtype; ratio = attnbench / AIConfigurator, median and range over every pair. "
        f"AIConfigurator's collectors run page {AIC_PAGE_SIZE}: rows at another page are "
        f"listed apart and not counted as matched; the per-pair table holds the matched ones. "
        f"A ratio beyond {TOLERANCE:.0%} is unexplained until a run measures its cause; the "
        f"known differences in method (AIConfigurator's warm L2 and its timed KV write) are "
        f"named beside it. Not measured at page {AIC_PAGE_SIZE}: " + "; ".join(unmatched) + "."
    )


@section("aic-anchors")
def aic_anchors(inputs: Inputs) -> Section | None:
    table = load_anchors()
    found = pairs(inputs.rows, table)
    if not found:
        return None
    gone = missing(inputs.rows, found)
    tables = [Table(SUMMARY_COLUMNS, _summary_rows(found), title="Ratio per GPU and variant")]
    matched = [p for p in found if p.same_page]
    if matched:
        tables.append(
            Table(
                PAIR_COLUMNS, [_pair_row(p, matched) for p in matched], title="Every matched pair"
            )
        )
    return Section(
        "Outside anchor: AIConfigurator's tables", _text(table.source, found, gone), tables
    )


MLA_COLUMNS = [
    "GPU",
    "length s",
    "mean KV (PR's)",
    "variant",
    "attnbench µs",
    "published µs",
    "ratio",
    "status: reason",
    "file",
    "commit",
]


def _mla_row(b: Beside, published: PublishedSet) -> list[str]:
    pub = published.draw(b.seqlen)
    theirs = f" ({pub.mean_seqlen:,})" if pub else ""
    timed = b.latency_us is not None
    return [
        gpu_label(b.gpu),
        tokens(b.seqlen),
        f"{b.kv_mean:,.0f}{theirs}",
        b.variant,
        fnum(b.latency_us) if timed else "-",
        f"{b.published.latency_us:,.1f} {b.published.backend}" if b.published else "-",
        fx(b.ratio) if b.ratio is not None else "-",
        "ok" if timed else f"{b.status}: {b.reason or '-'}",
        b.file,
        b.commit,
    ]


@section("mla-pr1770")
def mla_pr1770(inputs: Inputs) -> Section | None:
    """Suite mla-pr1770's rows beside flash-attention PR #1770's FA3 and FlashMLA times."""
    from attnbench.analysis.pr1770 import COUNTERPART, SUITE, beside, load_published

    published = load_published()
    found = beside(inputs.rows, published)
    if not found:
        return None
    notes = published.notes
    source = notes.get("source", "flash-attention PR #1770")
    text = (
        f"attnbench's MLA decode rows of suite {SUITE} beside {source} "
        f"(`attnbench anchors --set pr1770`). Case: {notes.get('shape', '-')}. Lengths: "
        f"{notes.get('lengths', '-')}; attnbench draws them the same way, seeded, so the mean "
        f"differs a little from the PR's (in brackets). The PR's timing: "
        f"{notes.get('timing', '-')}; its GPU: {notes.get('gpu', '-')}. Counterparts: "
        + ", ".join(f"{v} = {k}" for k, v in COUNTERPART.items())
        + "; ratio = attnbench / published. A refusal row keeps its reason."
    )
    rows = [_mla_row(b, published) for b in found]
    return Section(
        "Outside anchor: MLA decode, FlashMLA and FA3 (flash-attention PR #1770)",
        text,
        [Table(MLA_COLUMNS, rows, title="Every row of the PR's cases")],
    )
