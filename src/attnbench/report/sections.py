"""The built-in report sections: overview, ceilings, recommendation, latency, roofline
(registered on import; see `report.blocks.register_section`; the rest are in `sections_detail`).

Each returns None when its rows do not exist, so a run without tree or fp8 rows simply has no
tree or fp8 panel.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pandas as pd

from attnbench.analysis.engines import export
from attnbench.analysis.evidence import evidence
from attnbench.analysis.frame import fmt_us, gpu_name
from attnbench.analysis.hybrid import Recommendation, recommend
from attnbench.analysis.recommend import (
    LARGE_BATCH_MIN,
    SHORT_PREFILL_MAX,
    SMALL_BATCH_MAX,
)
from attnbench.report import plots
from attnbench.report.blocks import (
    Block,
    Code,
    Drawing,
    ReportData,
    Section,
    Table,
    Text,
    register_section,
)
from attnbench.report.table import short_case

MAX_TABLE_ROWS = 60
REC = "recommendation"
"""The `shares` tag of the sections that read `cached_recommendation`."""


def pct(v: Any) -> str:
    return "-" if v is None or pd.isna(v) else f"{100 * float(v):.0f}%"


def cached_recommendation(data: ReportData) -> Recommendation | None:
    if "rec" not in data.cache:
        recs = [r for r in recommend(data.ok) if r.gpu == data.gpu]
        data.cache["rec"] = recs[0] if recs else None
    rec: Recommendation | None = data.cache["rec"]
    return rec


@register_section("Overview", order=10)
def overview(data: ReportData) -> Section | None:
    rows = data.rows
    blocks: list[Block] = []
    if not rows.empty:
        counts = Counter(rows["status"])
        blocks.append(
            Text(
                f"{rows['case_id'].nunique()} cases x {rows['backend'].nunique()} backend "
                f"variants = {len(rows)} rows: "
                + ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
                + ". Only `ok` rows (passed the accuracy gate against the fp64 reference, "
                "then timed) enter figures and the recommendation."
            )
        )
        statuses = sorted(counts)
        table = [
            [b, *(int((g["status"] == s).sum()) for s in statuses)]
            for b, g in rows.groupby("backend")
        ]
        blocks.append(Table(["backend", *statuses], table, "rows per backend and status"))
    prov = []
    for path, h in data.loaded.headers:
        if data.gpu and gpu_name(h) != data.gpu:
            continue
        p = h.provenance
        libs = ", ".join(f"{k} {v}" for k, v in (p.get("libraries") or {}).items())
        prov.append(
            [
                path.name,
                h.run_id,
                str(p.get("time", ""))[:19],
                f"torch {p.get('torch', '?')}",
                f"CUDA {p.get('cuda') or '-'}",
                p.get("driver", ""),
                libs,
                p.get("git_sha", ""),
            ]
        )
    if prov:
        head = ["file", "run", "time", "torch", "CUDA", "driver", "libraries", "attnbench git"]
        blocks.append(Table(head, prov, "provenance of every run"))
    gates = _gate_rows(rows)
    if gates:
        caption = (
            "the gate each file's ok rows passed (eager + timed output: the accuracy gate "
            "before timing and the timed output checked again after it; eager only: before "
            "timing alone) and the tree their runs named (dirty: uncommitted edits)"
        )
        blocks.append(Table(["file", "ok rows", "gate", "tree"], gates, caption))
    return Section("Overview", blocks) if blocks else None


def _gate_rows(rows: pd.DataFrame) -> list[list[Any]]:
    """Per results file: its ok rows, their gate and their tree (`analysis.evidence`)."""
    if rows.empty or "git_sha" not in rows.columns:
        return []
    out: list[list[Any]] = []
    for name, g in rows.groupby("source", sort=True):
        ev = evidence(g, sha="git_sha")
        if ev.rows:
            out.append([str(name), ev.rows, ev.gate, ev.tree])
    return out


@register_section("Measured ceilings", order=15)
def ceilings(data: ReportData) -> Section | None:
    c = data.ceilings
    if not c:
        return None
    rows = [["copy bandwidth (read + write)", f"{c.get('copy_bandwidth_gbps', 0):.0f} GB/s"]]
    if c.get("read_bandwidth_gbps"):
        rows.append(["streaming read bandwidth", f"{c['read_bandwidth_gbps']:.0f} GB/s"])
    rows += [[f"matmul {k}", f"{v:.0f} TFLOP/s"] for k, v in (c.get("matmul_tflops") or {}).items()]
    rows += [[f"method: {k}", v] for k, v in (c.get("method") or {}).items()]
    return Section(
        "Measured ceilings",
        [
            Text(
                "Every fraction in this report divides by these, measured on the same GPU in "
                "the same run (not the spec sheet). The copy and matmul ceilings are what plain "
                "PyTorch kernels reach (a copy, a cuBLAS matmul): the best attention kernels read "
                "memory faster than a copy moves it, so a decode row can show more than 100% of "
                "the copy ceiling. The streaming read is the fastest plain reader measured (a "
                "torch sum or a Triton reader checked to read every byte); runs before it was "
                "added measured only the torch sum, which decode kernels also pass."
            ),
            Table(["ceiling", "value"], rows),
        ],
    )


def _code_or_none(backend: str | None) -> str:
    """`flex` in code, or `none (no row passed the accuracy gate)` for a role with no winner."""
    return f"`{backend}`" if backend else "none (no row passed the accuracy gate)"


def _plan_blocks(rec: Recommendation) -> list[Block]:
    """The fastest kernels per role (the hybrid plan), its table, and the engine flags that
    would express it per phase: evidence beside the Decision (`report.first_screen`), which is
    the measured deployment answer."""
    plan = rec.plan
    kv = plan.kv_dtype if plan.kv_dtype != "auto" else f"16-bit ({plan.model_dtype})"
    blocks: list[Block] = [
        Text(
            f"**Fastest kernels**: prefill {_code_or_none(plan.prefill_backend)} · decode "
            f"{_code_or_none(plan.decode_backend)} · "
            f"KV cache {kv} · page size {plan.page_size or '-'}."
        ),
        Table(
            ["role", "choice", "why"],
            [[c.role, f"**{c.value}**", c.why] for c in plan.choices],
            "hybrid plan",
        ),
    ]
    for ex in export(plan):
        blocks.append(
            Text(
                f"**{ex.engine}**, the per-phase plan as flags (options from {ex.source}; not "
                "measured as a deployment, unlike the Decision at the top):"
            )
        )
        blocks.append(Code(ex.command))
        if ex.notes:
            blocks.append(Text("\n".join(f"- {n}" for n in ex.notes)))
    return blocks


def _matrix_rows(rec: Recommendation) -> list[list[str]]:
    """The decision matrix: per class, its rule, cases, winner, margin and top three."""
    matrix = []
    for res in rec.classes:
        if not res.n_cases:
            matrix.append([res.cls.name, res.cls.rule, "0", "-", "no rows", ""])
            continue
        evid = "; ".join(
            f"{s.backend} {fmt_us(s.median_us)} ({s.cases})" for s in res.standings[:3]
        )
        matrix.append(
            [
                res.cls.name,
                res.cls.rule,
                str(res.n_cases),
                f"**{res.winner}**",
                res.margin_text(),
                evid,
            ]
        )
    return matrix


def recommendation_blocks(rec: Recommendation) -> list[Block]:
    """The fastest kernels per role first, then the evidence: the decision matrix, crossovers
    and each choice's measurements."""
    blocks = _plan_blocks(rec)
    blocks += [
        Text(
            "**Evidence.** Per class, the best variant among rows that passed the accuracy gate, "
            "ranked by pairwise comparisons on shared cases (geometric mean of latency ratios, "
            "two-level bootstrap 95% CI; significant and above the noise, else a tie). Class "
            f"thresholds: short prefill <= {SHORT_PREFILL_MAX} tokens, small batch <= "
            f"{SMALL_BATCH_MAX}, large batch >= {LARGE_BATCH_MIN}."
        ),
        Table(
            ["class", "rule", "cases", "best", "margin over runner-up", "evidence: median (cases)"],
            _matrix_rows(rec),
            "decision matrix",
        ),
    ]
    cross = [c for res in rec.classes for c in res.crossovers]
    if cross:
        blocks.append(
            Text(
                "Crossovers (where the fastest variant changes):\n\n"
                + "\n".join(f"- {c.describe()}" for c in cross)
            )
        )
    ev = [f"- {c.role}: {e}" for c in rec.plan.choices for e in c.evidence]
    if ev:
        blocks.append(Text("Evidence per choice:\n\n" + "\n".join(ev)))
    return blocks


KERNELS_TITLE = "Kernels per workload class"


@register_section(KERNELS_TITLE, order=5, shares=REC)
def recommendation(data: ReportData) -> Section | None:
    """The library-level ranking per workload class: evidence for the Decision above, which
    is what to deploy (`recommend --model`); raw variants here may be contiguous-cache
    baselines or per-case tuned knobs no engine exposes."""
    rec = cached_recommendation(data)
    if rec is None:
        return None
    lead = Text(
        "Evidence, not a deployment: the fastest library kernel per workload class over every "
        "row, contiguous-cache baselines and per-case tuned knobs included. What to deploy is "
        "the Decision at the top (`attnbench recommend --model M`)."
    )
    return Section(KERNELS_TITLE, [lead, *recommendation_blocks(rec)])


CASE_ORDER = ["kind", "model", "num_qo_heads", "num_kv_heads", "head_dim", "dtype", "kv_dtype"]
CASE_ORDER += ["page_size", "batch_size", "padded", "ragged", "kv_max", "total_kv", "case_id"]
"""Cases sorted as a reader scans them: shape, dtypes, uniform before ragged, then length."""


def _case_order(r: pd.Series) -> tuple[Any, ...]:
    return tuple(r[c] for c in CASE_ORDER)


def pivot_table(rows: pd.DataFrame, caption: str) -> Table | None:
    if rows.empty:
        return None
    backends = sorted(set(rows["backend"]))
    out = []
    # only the columns used: grouping slices every column of every group
    rows = rows.assign(ragged=~rows["uniform"])[[*CASE_ORDER, "backend", "latency_us", "spec"]]
    for _, g in sorted(rows.groupby("case_id"), key=lambda kv: _case_order(kv[1].iloc[0])):
        by = dict(zip(g["backend"], g["latency_us"], strict=True))
        best = min(by.values())
        out.append(
            [short_case(g.iloc[0]["spec"])]
            + [
                (
                    "-"
                    if b not in by
                    else (f"**{fmt_us(by[b])}**" if by[b] == best else fmt_us(by[b]))
                )
                for b in backends
            ]
        )
    cap = caption + (
        f" (first {MAX_TABLE_ROWS} of {len(out)})" if len(out) > MAX_TABLE_ROWS else ""
    )
    return Table(["case", *backends], out[:MAX_TABLE_ROWS], cap + "; fastest in bold")


def figure_section(
    title: str, drawing: Drawing | None, caption: str, extra: list[Block]
) -> Section | None:
    blocks: list[Block] = [drawing.figure(caption, title)] if drawing else []
    blocks += [b for b in extra if b is not None]
    return Section(title, blocks) if blocks else None


@register_section("Decode latency", order=30)
def decode_latency(data: ReportData) -> Section | None:
    if data.ok.empty:  # a report of documents alone (an fp8 study): no latency rows
        return None
    drawing = plots.latency_vs_context(data.ok, data.label)
    rel = plots.latency_vs_context(data.ok, data.label, relative=True)
    dec = data.ok[data.ok["kind"] == "decode"] if not data.ok.empty else data.ok
    table = pivot_table(dec, "decode: median latency per call") if not dec.empty else None
    extra: list[Block] = []
    if rel:
        extra.append(
            rel.figure(
                "Decode latency relative to the fastest backend per context", "decode-relative"
            )
        )
    if table:
        extra.append(table)
    return figure_section(
        "Decode latency",
        drawing,
        "Decode latency vs context length (uniform batches, log-log)",
        extra,
    )


@register_section("Prefill and append latency", order=35)
def prefill_latency(data: ReportData) -> Section | None:
    if data.ok.empty:
        return None
    blocks: list[Block] = []
    for kind in ("prefill", "append"):
        t = pivot_table(data.ok[data.ok["kind"] == kind], f"{kind}: median latency per call")
        if t:
            blocks.append(t)
    return Section("Prefill and append latency", blocks) if blocks else None


@register_section("Roofline", order=40)
def roofline(data: ReportData) -> Section | None:
    if data.ok.empty:
        return None
    drawing = plots.roofline(data.ok, data.ceilings, data.label)
    rows = []
    for b, g in data.ok.groupby("backend"):
        d, p = g[g["kind"] == "decode"], g[g["kind"] == "prefill"]
        rows.append(
            [
                b,
                pct(d["bandwidth_frac_measured"].max() if not d.empty else None),
                f"{d['bandwidth_gbps'].max():.0f}" if not d.empty else "-",
                pct(p["tflops_frac_measured"].max() if not p.empty else None),
                f"{p['tflops'].max():.0f}" if not p.empty else "-",
            ]
        )
    table = Table(
        [
            "backend",
            "decode best % copy",
            "decode best GB/s",
            "prefill best % matmul",
            "prefill best TFLOP/s",
        ],
        rows,
        "best fraction of the measured ceilings",
    )
    return figure_section(
        "Roofline",
        drawing,
        "Roofline with the measured copy-bandwidth and matmul ceilings; decode and prefill "
        "fractions of them",
        [table],
    )
