"""The report's first screen: the per-model deploy decision and one figure, the decode time
per batch-size bucket of every deployable configuration, before anything else on the page.

The decisions come from `decisions_from_engine_rank` below, the one adapter over the current
ranking (`analysis.engine_rank.rank_engine`, run on each model's rows only). The rebuilt
`recommend` will provide `analysis.deploy.answers_by_model(frame)`; the integrator swaps this
one function for it, and `first_screen_blocks` and the figure stay as they are.

Only deployable configurations appear: engine settings (`vllm:*`, `sglang:*` rows, or raw rows
that are exactly an engine's kernel path), so never a contiguous-cache variant.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from attnbench.analysis.frame import fmt_us, ok_rows, shape_label
from attnbench.report.blocks import (
    Block,
    Figure,
    ReportData,
    Section,
    Table,
    Text,
    register_section,
)

_NAMES = {"vllm": "vLLM", "sglang": "SGLang"}
FIRST_SCREEN_TITLE = "Decision"


@dataclass
class ModelDecision:
    """One model shape's deploy answer for one engine on one GPU."""

    model: str
    engine: str
    gpu: str
    choice: str | None
    """The chosen configuration's label (`FLASH_ATTN, KV auto, page 16`), None: no rows."""
    command: str = ""
    decode_us: float | None = None
    """Expected decode attention time per step and layer, over the capture buckets."""
    decode_vs_default: float | None = None
    basis: str = ""
    per_batch_us: dict[str, dict[int, float]] = field(default_factory=dict)
    """Decode time per measured batch size, per deployable configuration label."""
    engine_rows: int = 0
    """How many of this model's rows are the engine's own (not inferred from raw rows)."""


def model_key(row: pd.Series) -> str:
    """`llama-3.1-70b/tp8`, or for rows run without a preset their head shape and the presets
    that have it: `h32/8 d128 (llama-3.1-8b shape)`."""
    from attnbench.workload.models import MODELS

    key = shape_label(row)
    if row["model"]:
        return key
    same = [
        m.name
        for m in MODELS.values()
        if m.mla is None
        and (m.num_qo_heads, m.num_kv_heads, m.head_dim)
        == (row["num_qo_heads"], row["num_kv_heads"], row["head_dim"])
    ]
    return f"{key} ({', '.join(same[:2])} shape)" if same else key


def decisions_from_engine_rank(frame: pd.DataFrame) -> list[ModelDecision]:
    """ADAPTER (to be replaced by `analysis.deploy.answers_by_model`): per named model (and
    per anonymous head shape that has engine-variant rows), `rank_engine` on its rows only."""
    from attnbench.analysis.engine_rank import rank_engine
    from attnbench.engines.paths import ENGINES

    ok = ok_rows(frame)
    if ok.empty:
        return []
    keys = ok.apply(model_key, axis=1)
    own = ok["library"].isin(ENGINES)
    out = []
    for model in sorted(set(keys)):
        sub = ok[keys == model]
        if not str(sub.iloc[0]["model"]) and not own[keys == model].any():
            continue  # anonymous head shapes without engine rows are the GQA sweep's
        for engine in ENGINES:
            for rec in rank_engine(sub, engine):
                c = rec.choice
                measured = ", ".join(str(b.batch) for b in rec.batches) or "none"
                basis = f"decode at batch {measured}"
                basis += "; inferred from raw rows" if rec.inferred else ""
                out.append(
                    ModelDecision(
                        model,
                        engine,
                        rec.gpu,
                        c.config.label if c else None,
                        c.config.command if c else "",
                        c.decode_us if c else None,
                        c.decode_vs_default if c else None,
                        basis,
                        {
                            s.config.label: {b.batch: b.times_us[s.config] for b in rec.batches}
                            for s in rec.scores
                            if all(s.config in b.times_us for b in rec.batches)
                        },
                        int((sub["library"] == engine).sum()),
                    )
                )
    return out


def _engine_cell(d: ModelDecision | None) -> str:
    if d is None:
        return "-"
    if d.choice is None:
        preset = "" if " " in d.model else f" --model {d.model.split('/')[0]}"
        how = f"attnbench run{preset} -b {d.engine}"
        return f"no deployable rows: measure with `{how}`"
    vs = f", {d.decode_vs_default:.2f}x the default" if d.decode_vs_default is not None else ""
    return f"`{d.command}` · decode {fmt_us(d.decode_us)} per step and layer{vs}"


def unanswered(decisions: list[ModelDecision]) -> list[str]:
    """The models no engine has a deployable configuration for."""
    models = sorted({d.model for d in decisions})
    return [m for m in models if not any(d.choice for d in decisions if d.model == m)]


def decision_rows(decisions: list[ModelDecision]) -> list[list[str]]:
    """One line per model some engine answers for: its answer per engine, and the basis."""
    from attnbench.engines.paths import ENGINES

    out = []
    missing = set(unanswered(decisions))
    for model in sorted({d.model for d in decisions} - missing):
        mine = {d.engine: d for d in decisions if d.model == model}
        basis = "; ".join(f"{_NAMES[e]}: {d.basis}" for e, d in mine.items() if d.choice)
        cells = [_engine_cell(mine.get(e)) for e in ENGINES]
        out.append([f"**{model}**", *cells, basis or "-"])
    return out


def lead_decisions(decisions: list[ModelDecision]) -> list[ModelDecision]:
    """The decisions of the model the figure shows: the one with the most engine rows."""
    with_rows = [d for d in decisions if d.per_batch_us]
    if not with_rows:
        return []
    lead = max(with_rows, key=lambda d: (d.engine_rows, d.model)).model
    return [d for d in with_rows if d.model == lead]


def first_screen_blocks(frame: pd.DataFrame, label: str = "") -> list[Block]:
    """The decision table (one line per model and engine), then the per-bucket decode figure
    of the lead model's deployable configurations ([]: no row ranks for any engine)."""
    from attnbench.report.plots_deploy import BucketPanel, bucket_decode

    decisions = decisions_from_engine_rank(frame)
    if not decisions:
        return []
    blocks: list[Block] = [
        Table(
            ["model", *(_NAMES[e] for e in _NAMES), "basis"],
            decision_rows(decisions),
            "the deploy decision per model and engine, from committed rows "
            "(expected decode over the engine's capture buckets)",
        )
    ]
    missing = unanswered(decisions)
    if missing:
        blocks.append(
            Text(
                f"No deployable rows for {', '.join(f'`{m}`' for m in missing)}: measure them "
                "with `attnbench run --model MODEL -b vllm` (and `-b sglang`) on the GPU."
            )
        )
    lead = lead_decisions(decisions)
    panels = [
        BucketPanel(f"{_NAMES[d.engine]} · {d.model}", d.choice, d.per_batch_us) for d in lead
    ]
    png = bucket_decode(panels, label) if lead else None
    if png:
        blocks.append(
            Figure(
                png,
                f"{lead[0].model}: decode time per batch-size bucket of every deployable "
                "configuration (paged caches only), lower is better",
                "deploy-buckets",
            )
        )
    else:
        blocks.append(Text("No deployable configuration has decode rows at a batch size."))
    return blocks


@register_section(FIRST_SCREEN_TITLE, order=1)
def first_screen_section(data: ReportData) -> Section | None:
    """The page's first screen (`report.build` shows it before the navigation)."""
    blocks = first_screen_blocks(data.ok, data.label)
    return Section(FIRST_SCREEN_TITLE, blocks) if blocks else None
