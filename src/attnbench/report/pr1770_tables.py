"""`attnbench anchors`' second set: suite `mla-pr1770`'s rows beside the MLA decode figures of
flash-attention PR #1770, per GPU, in 80 columns (`analysis.pr1770` makes the rows; this
module only lays them out)."""

from __future__ import annotations

from collections.abc import Sequence

from attnbench.analysis.pr1770 import COUNTERPART, SUITE, Beside, PublishedSet
from attnbench.report.anchor_tables import tokens, wrapped

ROW_HEAD = f"    {'variant':<20}{'attnbench':>11}  {'published':<19}{'ratio':>6}"


def published_line(published: PublishedSet, seqlen: int) -> str:
    """`  s 4k: mean 4,213, 539,326 tokens (max 9,155): FA3 363.3 µs, FlashMLA 292.9 µs`"""
    rows = [p for p in published.rows if p.seqlen == seqlen]
    first = rows[0]
    times = ", ".join(f"{p.backend} {p.latency_us:,.1f} µs" for p in rows)
    return (
        f"  s {tokens(seqlen)}: mean {first.mean_seqlen:,}, {first.total_seqlens:,} tokens "
        f"(max {first.max_seqlen:,}): {times}"
    )


def row_line(b: Beside) -> str:
    """`    flashmla:dense        100.2 µs  107.6 FlashMLA        0.93x`, or the status and
    reason of a row that was not timed."""
    if b.latency_us is None:
        pub = (
            f" (PR's {b.published.backend}: {b.published.latency_us:,.1f} µs)"
            if b.published
            else ""
        )
        return f"    {b.variant:<20}{b.status}{pub}: {b.reason or '-'}"
    ours = f"{b.latency_us:,.1f} µs"
    theirs = f"{b.published.latency_us:,.1f} {b.published.backend}" if b.published else "-"
    ratio = f"{b.ratio:.2f}x" if b.ratio is not None else ""
    return f"    {b.variant:<20}{ours:>11}  {theirs:<19}{ratio:>6}"


def gpu_lines(gpu: str, rows: Sequence[Beside], published: PublishedSet) -> list[str]:
    """One GPU's block: its files and commits, then per length the two draws and the rows."""
    mine = [b for b in rows if b.gpu == gpu]
    files = ", ".join(dict.fromkeys(b.file for b in mine))
    commits = ", ".join(dict.fromkeys(b.commit or "unknown" for b in mine))
    lines = [f"{gpu} ({files}; commit {commits})"]
    for seqlen in dict.fromkeys(b.seqlen for b in mine):
        at = [b for b in mine if b.seqlen == seqlen]
        pub = published.draw(seqlen)
        theirs = f" (PR: {pub.mean_seqlen:,}, {pub.total_seqlens:,})" if pub else ""
        lines.append(
            f"  s {tokens(seqlen)}: mean {at[0].kv_mean:,.0f}, {at[0].total_kv:,} tokens{theirs}"
        )
        lines += [ROW_HEAD, *(row_line(b) for b in at)]
    return lines


def pr1770_lines(published: PublishedSet, rows: Sequence[Beside]) -> list[str]:
    """The whole view: where the figures come from, the published times, one block per GPU
    of attnbench's rows (or what to run where there are none)."""
    notes = published.notes
    lines = [
        f"attnbench / {notes.get('source', 'flash-attention PR #1770')}",
        f"Script: {notes.get('script', '-')}. Case: {notes.get('shape', '-')}.",
        f"Lengths: {notes.get('lengths', '-')}. attnbench draws them the same way, seeded "
        f"(suite {SUITE}, `normal:s,s/2`).",
        f"Timing: {notes.get('timing', '-')}. GPU: {notes.get('gpu', '-')}.",
        f"Counterparts: {', '.join(f'{v} = {k}' for k, v in COUNTERPART.items())}.",
        "",
        "Published:",
        *(published_line(published, s) for s in published.seqlens()),
        "",
    ]
    gpus = list(dict.fromkeys(b.gpu for b in rows))
    for gpu in gpus:
        lines += [*gpu_lines(gpu, rows, published), ""]
    if not gpus:
        lines += [f"No attnbench rows of suite {SUITE} here (scripts/h200/mla_flashmla.sh).", ""]
    return wrapped(lines)
