"""Report sections for the serving workloads beyond plain decode: speculative-decoding trees
(latency per tree shape and context, the fastest variant of each) and shared prefixes (where a
cascade kernel starts to beat plain decode). Registered on import, like `report.sections`.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from attnbench.analysis.cascade import Crossover, PrefixPoint, crossovers, prefix_points
from attnbench.analysis.compare import SEED, Timing, estimate_ratio
from attnbench.analysis.frame import dtype_label, fmt_us, human_tokens, shape_label
from attnbench.report import plots_serving, plots_studies
from attnbench.report.blocks import (
    Block,
    ReportData,
    Section,
    Table,
    Text,
    register_section,
)


def _clip(text: str, limit: int) -> str:
    """At most `limit` characters, cut at a word boundary."""
    return text if len(text) <= limit else text[:limit].rsplit(" ", 1)[0] + " …"


def _coverage(rows: pd.DataFrame, kind: str) -> str:
    """`flash-attn:fa3 20 ok; flashinfer:fa3 20 unsupported (reason)`: who ran the workload."""
    mine = rows[rows["kind"] == kind]
    parts = []
    for backend, g in mine.groupby("backend"):
        counts = g["status"].value_counts()
        text = ", ".join(f"{n} {s}" for s, n in counts.items())
        bad = g[g["status"] != "ok"]
        if not bad.empty and counts.get("ok", 0) == 0:
            text += f" ({_clip(str(bad.iloc[0]['reason']), 160)})"
        parts.append(f"`{backend}` {text}")
    return "; ".join(parts)


def _fastest_cell(g: pd.DataFrame, rng: np.random.Generator) -> tuple[str, str]:
    """(winner, cell text): the fastest variant, and its margin over the runner-up when it is
    significant (else a tie with the runner-up)."""
    g = g.sort_values("latency_us")
    best = g.iloc[0]
    text = f"**{best['backend']}** {fmt_us(float(best['latency_us']))}"
    if len(g) < 2:
        return str(best["backend"]), text + " (alone)"
    second = g.iloc[1]
    est = estimate_ratio(Timing.of(best), Timing.of(second), rng)  # runner-up / best
    if est.verdict == "slower":
        return str(best["backend"]), text + f", {est.ratio:.2f}x ahead of {second['backend']}"
    return str(best["backend"]), text + f", tie with {second['backend']}"


def tree_table(ok: pd.DataFrame) -> tuple[Table | None, str]:
    """Fastest variant per tree shape (rows) x context (columns), and a sentence counting wins."""
    rows = ok[(ok["kind"] == "tree") & ~ok["fp8"]]
    if rows.empty:
        return None, ""
    rows = rows.assign(context=rows["kv_max"] - rows["tree_nodes"])
    contexts = sorted(set(rows["context"]))
    rng = np.random.default_rng(SEED)
    table: list[list[str]] = []
    wins: dict[str, int] = {}
    keys = ["tree_nodes", "tree", "batch_size", "num_qo_heads", "num_kv_heads", "head_dim"]
    keys += ["model", "tp", "dtype", "kv_dtype", "page_size"]
    for _, g in rows.groupby(keys):
        r = g.iloc[0]
        label = f"{r['tree']} ({r['tree_nodes']} tokens), bs{r['batch_size']}"
        if rows[keys[2:]].drop_duplicates().shape[0] > 1:
            label += f", {shape_label(r)} {dtype_label(r)}"
        cells = []
        for ctx in contexts:
            at = g[g["context"] == ctx]
            if at.empty:
                cells.append("-")
                continue
            winner, text = _fastest_cell(at, rng)
            wins[winner] = wins.get(winner, 0) + 1
            cells.append(text)
        table.append([label, *cells])
    total = sum(wins.values())
    sentence = "Fastest variant per tree shape and context: " + ", ".join(
        f"`{b}` in {n} of {total}" for b, n in sorted(wins.items(), key=lambda kv: -kv[1])
    )
    head = ["tree shape", *(f"context {human_tokens(c)}" for c in contexts)]
    caption = (
        "fastest variant per tree shape x context (margin over the runner-up when significant)"
    )
    return Table(head, table, caption), sentence + "."


@register_section("Speculative trees", order=70)
def trees(data: ReportData) -> Section | None:
    if data.ok.empty and (data.rows.empty or not (data.rows["kind"] == "tree").any()):
        return None
    drawing = plots_serving.by_axis(data.ok, "tree", data.label) if not data.ok.empty else None
    table, sentence = tree_table(data.ok) if not data.ok.empty else (None, "")
    if drawing is None and table is None:
        return None
    blocks: list[Block] = []
    if sentence:
        blocks.append(Text(sentence))
    if table is not None:
        blocks.append(table)
    if drawing:
        blocks.append(
            drawing.figure(
                "Draft-tree verification latency per tree shape against context, every variant "
                "whose rows passed the gate (median, 95% CI)",
                "speculative-trees",
            )
        )
    blocks.append(Text("Rows per variant: " + _coverage(data.rows, "tree") + "."))
    return Section("Speculative trees", blocks)


def _point_text(p: PrefixPoint) -> str:
    return (
        f"{p.speedup:.2f}x: `{p.cascade}` {fmt_us(p.cascade_us)} vs `{p.plain}` "
        f"{fmt_us(p.plain_us)}"
    )


def _prefix_bullets(c: Crossover) -> list[str]:
    out = []
    for pl in c.prefix_lens:
        start = c.min_batch(pl)
        below = [
            p.batch_size
            for p in c.points
            if p.prefix_len == pl and start is not None and p.batch_size < start
        ]
        if start is None:
            wins = c.wins_at(pl)
            tail = f" (it wins only at batch {', '.join(map(str, wins))})" if wins else ""
            out.append(f"- prefix {human_tokens(pl)}: the cascade never wins for good{tail}")
            continue
        p = c.at(pl, start)
        assert p is not None
        lost = ""
        if below:
            verdicts = sorted(
                {q.verdict for q in c.points if q.prefix_len == pl and q.batch_size in below}
            )
            lost = f"; below it ({', '.join(map(str, below))}) it {' or '.join(verdicts)}"
        out.append(
            f"- prefix {human_tokens(pl)}: cascade wins from batch {start} ({_point_text(p)}){lost}"
        )
    return out


def crossover_blocks(c: Crossover) -> list[Block]:
    batches, prefixes = c.batch_sizes, c.prefix_lens
    grid = []
    for pl in prefixes:
        cells = []
        for b in batches:
            p = c.at(pl, b)
            cells.append("-" if p is None else f"{p.speedup:.2f}x {p.verdict}")
        start = c.min_batch(pl)
        grid.append([human_tokens(pl), *cells, "never" if start is None else f"batch {start}"])
    per_batch = []
    for b in batches:
        start = c.min_prefix(b)
        p = c.at(start, b) if start is not None else None
        per_batch.append(
            [b, "never" if start is None else human_tokens(start), _point_text(p) if p else "-"]
        )
    return [
        Text(f"**{c.group}**:\n\n" + "\n".join(_prefix_bullets(c))),
        Table(
            ["prefix", *(f"bs {b}" for b in batches), "cascade wins from"],
            grid,
            f"{c.group}: best cascade speedup over the best plain decode variant "
            "(wins/loses: significant beyond the noise, else tie)",
        ),
        Table(
            ["batch size", "cascade wins from prefix", "there"],
            per_batch,
            f"{c.group}: per batch size, the shortest prefix from which the cascade wins",
        ),
    ]


@register_section("Shared prefix", order=75)
def shared_prefix(data: ReportData) -> Section | None:
    if data.ok.empty:
        return None
    groups = crossovers(prefix_points(data.ok))
    latency = plots_serving.by_axis(data.ok, "shared_prefix", data.label)
    if not groups and latency is None:
        return None
    blocks: list[Block] = []
    if groups:
        blocks.append(
            Text(
                "Where a cascade kernel (the shared prefix read once for the batch: "
                "`flashinfer:cascade`, `flash-attn:fa3-cascade`) beats the best plain decode "
                "variant (every request reads the prefix pages itself), per case from the "
                "measured rows: a win is significant (bootstrap CI and Mann-Whitney U on the "
                'samples) and beyond the noise. "Wins from batch N": at N and every larger '
                "batch measured."
            )
        )
        drawing = plots_studies.cascade_speedup(groups, data.label)
        for c in groups:
            blocks += crossover_blocks(c)
        if drawing:
            blocks.append(
                drawing.figure(
                    "Best cascade speedup over the best plain decode variant against batch size, "
                    "per prefix length (filled: significant win; dashed: 1x)",
                    "cascade-crossover",
                )
            )
    if latency:
        blocks.append(latency.figure("Shared-prefix decode latency per variant", "shared-prefix"))
    return Section("Shared prefix", blocks)
