"""The per-model answers of the recommendation ("for deepseek-v3 decode on this GPU use ..."),
shown when the rows hold several model shapes (`analysis.per_model`), one per named model preset
(anonymous head shapes are the GQA-sweep section's): in the report as their own section, and by
`attnbench recommend` before the decision matrix."""

from __future__ import annotations

from attnbench.analysis.hybrid import Recommendation
from attnbench.analysis.per_model import answers_table
from attnbench.report.blocks import Block, ReportData, Section, Table, Text, register_section
from attnbench.report.sections import REC, cached_recommendation


def model_blocks(rec: Recommendation) -> list[Block]:
    """One sentence per named model and a table of its winners, bound and model step ([]: one
    shape, or no named model)."""
    if not rec.models:
        return []
    lines = "\n".join(f"- {a.sentence(rec.gpu)}" for a in rec.models)
    headers, rows = answers_table(rec.models)
    return [
        Text(
            "**Kernels per model** (evidence; the Decision at the top is what to deploy). Each "
            "named model's decode and prefill winners, ranked on that "
            "model's rows only (as the decision matrix ranks a class; rows run without a model "
            "preset, such as the GQA sweep's head shapes, are the report's GQA-sweep section); "
            "the bound is the ceiling the decode "
            "winner's cases sit under (compute above the roofline's ridge, as MLA decode with "
            "many heads on one latent is), and the model step adds a model's layer kinds "
            "(sliding and full layers) for the winner.\n\n" + lines
        ),
        Table(headers, rows, "per model"),
    ]


@register_section("Kernels per model", order=6, shares=REC)
def per_model_section(data: ReportData) -> Section | None:
    rec = cached_recommendation(data)
    blocks = model_blocks(rec) if rec else []
    return Section("Kernels per model", blocks) if blocks else None
