"""`attnbench anchors`' text: attnbench's engine-path rows beside AIConfigurator's, per GPU, in
80 columns (`analysis.aic` makes the pairs; this module only lays them out)."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

from attnbench.analysis.aic import (
    AIC_PAGE_SIZE,
    COUNTERPART,
    METHOD,
    TOLERANCE,
    AnchorSource,
    Pair,
    Summary,
    explanation,
    summaries,
)

GPU_LABELS = {"h100_sxm": "H100", "h200_sxm": "H200"}
SUMMARY_HEAD = (
    f"  {'variant':<16}{'vs':<7}{'phase':<8}{'L2':<5}{'page':>4}{'rows':>6}{'median':>8}  "
    f"{'range':<13}{f'>{TOLERANCE:.0%}':>5}"
)


def gpu_label(system: str) -> str:
    return GPU_LABELS.get(system, system)


def ratio_range(values: Sequence[float]) -> str:
    lo, hi = min(values), max(values)
    return f"{lo:.2f}x" if round(lo, 2) == round(hi, 2) else f"{lo:.2f}x-{hi:.2f}x"


def tokens(n: int) -> str:
    return f"{n // 1024}k" if n >= 1024 and n % 1024 == 0 else str(n)


def summary_line(s: Summary) -> str:
    page = str(AIC_PAGE_SIZE) if s.same_page else "other"
    return (
        f"  {s.variant:<16}{COUNTERPART[s.variant]:<7}{s.kind:<8}{s.l2_policy:<5}{page:>5}"
        f"{len(s.ratios):>5}{s.median:>7.2f}x  {ratio_range(s.ratios):<13}{s.beyond:>5}"
    )


def pair_line(p: Pair) -> str:
    """`  fp8  b32 kv16k q1 p16   422.3 /  345.9 = 1.22x  file`"""
    k = p.key
    kv = "bf16" if k.kv_dtype == "bfloat16" else k.kv_dtype
    shape = f"{k.num_qo_heads}/{k.num_kv_heads}"
    q = "" if k.kind == "decode" else f" q{tokens(k.qo_len)}"
    what = f"{shape:<5}{kv:<5}b{k.batch_size:<4}kv{tokens(k.kv_len):<5}{q} p{p.page_size}"
    return f"    {what:<34}{p.latency_us:>9,.1f} /{p.anchor.latency_us:>9,.1f} = {p.ratio:.2f}x"


def gpu_lines(system: str, found: Sequence[Pair], verbose: bool) -> list[str]:
    mine = [p for p in found if p.key.system == system]
    lines = [f"{gpu_label(system)} ({system})", SUMMARY_HEAD]
    lines += [summary_line(s) for s in summaries(mine)]
    return lines + (pair_lines(mine) if verbose else [])


def pair_lines(found: Sequence[Pair]) -> list[str]:
    """Every pair, under one heading per (variant, phase, file); a pair beyond the tolerance
    is followed by the differences in method between the two sides."""
    lines: list[str] = []
    block: tuple[str, str, str] | None = None
    for p in found:
        if (p.variant, p.key.kind, p.file) != block:
            block = (p.variant, p.key.kind, p.file)
            lines.append(f"  {p.variant} {p.key.kind} ({p.file})")
        lines.append(pair_line(p))
        if p.beyond:
            lines.append(f"      beyond {TOLERANCE:.0%}, {explanation(p, found)}")
    return lines


def missing_lines(missing: Sequence[tuple[str, str, str]]) -> list[str]:
    lines = []
    for system in dict.fromkeys(m[0] for m in missing):
        for why in dict.fromkeys(m[2] for m in missing if m[0] == system):
            names = ", ".join(m[1] for m in missing if m[0] == system and m[2] == why)
            lines.append(f"  {gpu_label(system)}: {names}: {why}")
    return lines


def anchor_lines(
    source: AnchorSource,
    found: Sequence[Pair],
    missing: Sequence[tuple[str, str, str]],
    verbose: bool = False,
) -> list[str]:
    """The whole view: the source, one block per GPU, what has no match, the method notes."""
    lines = [
        f"attnbench / {source.label()}",
        "Same GPU, kernel, heads, head_dim, batch, uniform lengths and KV dtype. Page",
        f"{AIC_PAGE_SIZE} is AIConfigurator's; `other`: attnbench's page differs (not matched).",
        "",
    ]
    for system in dict.fromkeys(p.key.system for p in found):
        lines += [*gpu_lines(system, found, verbose), ""]
    if missing:
        lines += ["Not matched:", *missing_lines(missing), ""]
    if verbose:
        lines += [f"Method: {METHOD}"]
    else:
        lines += ["-v: every pair, and the differences in method of those beyond 10%."]
    return wrapped(lines)


def wrapped(lines: Sequence[str], width: int = 80) -> list[str]:
    """Each line cut at spaces to `width`, its continuation indented 2 past its own indent."""
    out = []
    for line in lines:
        indent = " " * (len(line) - len(line.lstrip()) + 2)
        out += textwrap.wrap(line, width, subsequent_indent=indent, break_on_hyphens=False) or [""]
    return out


def answer_anchor_lines(found: Sequence[Pair], variants: Sequence[str], gpu: str) -> list[str]:
    """`recommend -v`'s outside figure: for each of the answer's options that AIConfigurator
    times on the answer's GPU at these heads (`COUNTERPART`), attnbench / AIConfigurator over
    the matched shapes, median and range, cold and warm L2 apart; [] where none matches."""
    from attnbench.analysis.aic import system_of

    system = system_of(gpu)
    mine = [p for p in found if p.key.system == system and p.variant in variants and p.same_page]
    if not mine:
        return []
    lines = ["", f"outside anchor: attnbench / AIConfigurator on the {gpu_label(system or '')}"]
    for s in summaries(mine):
        lines.append(
            f"  {s.variant} vs {COUNTERPART[s.variant]} ({s.kind}, {s.l2_policy} L2, page "
            f"{AIC_PAGE_SIZE}): median {s.median:.2f}x, {ratio_range(s.ratios)} over "
            f"{len(s.ratios)} shapes; {s.beyond} beyond {TOLERANCE:.0%} (`attnbench anchors -v`)"
        )
    return wrapped(lines)
