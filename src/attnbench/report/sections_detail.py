"""The report's detail sections: raggedness, FP8 KV cache, accuracy and the cases that did
not run (registered on import, like `report.sections`; trees and shared prefixes are in
`report.sections_workloads`).
"""

from __future__ import annotations

from attnbench.analysis.frame import records
from attnbench.analysis.recommend import padding_cost
from attnbench.report import plots_serving
from attnbench.report.blocks import (
    Block,
    ReportData,
    Section,
    Table,
    Text,
    register_section,
)
from attnbench.report.sections import (
    MAX_TABLE_ROWS,
    REC,
    cached_recommendation,
    figure_section,
)
from attnbench.report.table import short_case


@register_section("Raggedness", order=50)
def raggedness(data: ReportData) -> Section | None:
    if data.ok.empty:
        return None
    drawing = plots_serving.raggedness(data.ok, data.label)
    dec = data.ok[data.ok["kind"] == "decode"]
    cost = padding_cost(dec[dec["padded"]], dec[~dec["padded"]])
    extra: list[Block] = []
    if cost:
        rows = [
            [
                c.backend,
                c.kv_dtype,
                c.batch,
                f"{c.skew:.1f}",
                f"{c.estimate.ratio:.2f}x",
                f"{c.estimate.ci_low:.2f}-{c.estimate.ci_high:.2f}",
            ]
            for c in cost
        ]
        extra.append(
            Table(
                [
                    "backend",
                    "KV dtype",
                    "ragged batch",
                    "skew (max/mean)",
                    "padded / ragged latency",
                    "95% CI",
                ],
                rows,
                "what padding every request to the longest costs, per batch",
            )
        )
    return figure_section(
        "Raggedness",
        drawing,
        "Latency at the same total KV tokens with rising skew; dashed: the padded twin",
        extra,
    )


@register_section("FP8 KV cache", order=60, shares=REC)
def fp8(data: ReportData) -> Section | None:
    if data.rows.empty or not data.rows["fp8"].any():
        return None
    drawing = plots_serving.fp8_vs_16bit(data.ok, data.rows, data.label)
    rec = cached_recommendation(data)
    extra: list[Block] = []
    if rec:
        kv = next(c for c in rec.plan.choices if c.role == "kv_dtype")
        extra.append(
            Text(
                f"Decision: **{kv.value}**: {kv.why}\n\n" + "\n".join(f"- {e}" for e in kv.evidence)
            )
        )
    failed = data.rows[data.rows["fp8"] & (data.rows["status"] != "ok")]
    if not failed.empty:
        counts = failed.groupby(["backend", "status"]).size()
        listed = "; ".join(f"{b} {s} ({n})" for (b, s), n in counts.items())
        extra.append(Text(f"fp8 rows with no timing (no bar in the figure): {listed}."))
    return figure_section(
        "FP8 KV cache", drawing, "fp8 vs 16-bit KV: speed-up per backend and along context", extra
    )


@register_section("Accuracy", order=80)
def accuracy(data: ReportData) -> Section | None:
    rows = data.rows
    if rows.empty:
        return None
    checked = rows[rows["status"].isin(["ok", "mismatch"])]
    if checked.empty:
        return None
    out = []
    for (b, kv), g in checked.groupby(["backend", "kv_dtype"]):
        err = g["rel_l2_err"].astype(float)
        worst = (err / g["budget"].astype(float)).idxmax() if err.notna().any() else None
        out.append(
            [
                b,
                kv,
                len(g),
                int((g["status"] == "ok").sum()),
                int((g["status"] == "mismatch").sum()),
                f"{err.max():.2e}" if err.notna().any() else "-",
                f"{g.loc[worst, 'budget']:.2e}" if worst is not None else "-",
                f"{(err / g['budget']).max():.2f}" if worst is not None else "-",
            ]
        )
    blocks: list[Block] = [
        Text(
            "Every backend's output against the fp64 reference before timing: relative L2 error "
            "and the budget (4x the error of rounding the reference to the output precision). "
            "A row over budget is a `mismatch` and is never timed."
        ),
        Table(
            [
                "backend",
                "KV dtype",
                "checked",
                "passed",
                "mismatch",
                "max rel err",
                "budget there",
                "worst err / budget",
            ],
            out,
            "accuracy gate",
        ),
    ]
    bad = checked[checked["status"] == "mismatch"]
    if not bad.empty:
        blocks.append(
            Table(
                ["backend", "case", "reason"],
                [[r["backend"], short_case(r["spec"]), r["reason"]] for r in records(bad)][
                    :MAX_TABLE_ROWS
                ],
                "mismatches",
            )
        )
    return Section("Accuracy", blocks)


@register_section("Unsupported and failed", order=90)
def failures(data: ReportData) -> Section | None:
    rows = data.rows
    if rows.empty:
        return None
    bad = rows[rows["status"] != "ok"]
    if bad.empty:
        return None
    out = []
    for (b, s, reason), g in bad.groupby(["backend", "status", "reason"]):
        out.append([b, s, len(g), str(reason)[:200], short_case(g.iloc[0]["spec"])])
    out.sort(key=lambda r: (r[1] == "unsupported", r[0], -int(r[2])))
    return Section(
        "Unsupported and failed",
        [Table(["backend", "status", "cases", "reason", "example case"], out[:MAX_TABLE_ROWS])],
    )
