"""The report's first screen: the answers measured on traffic, then one figure, the decode
time per batch-size bucket of every deployable configuration, before anything else on the page.

The answers are the findings' answer table (`deploy.table.answer_table`, through `deploy.ask`:
the decider `recommend --model M --engine E --trace T` calls), per GPU that measured traffic
(`recommend --measure` rows), model, engine, traffic and KV dtype, whichever GPU measured them;
the report puts that GPU's sections first (`lead_gpu`). Rows without traffic measured on them
fall back to `recommend --model`'s answer without a trace (`deploy.decide.answers_by_model`):
the same deployable options, pairing on shared cases and 95% CIs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from attnbench.analysis.frame import fmt_us, latest, ok_rows
from attnbench.deploy.decide import Answer, ModelShape
from attnbench.deploy.options import Option
from attnbench.report.blocks import (
    Block,
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
    decode_ci: tuple[float, float] | None = None
    """The 95% CI of `decode_vs_default` (`deploy.stats`)."""
    tied: bool = False
    """Other options tie the choice (CIs overlap)."""
    keeps_default: bool = False
    fp8: str = ""
    """fp8 KV as its own decision: time against 16-bit KV (paired CI), memory, error."""
    basis: str = ""
    per_batch_us: dict[str, dict[int, float]] = field(default_factory=dict)
    """Decode time per measured batch size, per deployable configuration label."""
    engine_rows: int = 0
    """How many of this model's rows are the engine's own (not inferred from raw rows)."""


def _per_batch_us(option: Option) -> dict[int, float]:
    """Decode µs per measured batch size: the geometric mean of the option's cases there."""
    by: dict[int, list[float]] = {}
    for case in option.cases("decode").values():
        by.setdefault(case.batch, []).append(case.timing.median_us)
    return {b: float(np.exp(np.mean(np.log(v)))) for b, v in sorted(by.items())}


def _basis(ans: Answer) -> str:
    c = ans.choice
    n = len(c.cases("decode")) if c is not None else 0
    sizes = ", ".join(str(b) for b in ans.measured_batches) or "none"
    text = f"{n} decode cases at batch {sizes}"
    share = ans.extrapolated_share
    if share:
        text += f"; {share:.0%} of the weight priced by extrapolation"
    if c is not None and c.inferred_from:
        text += "; inferred from raw rows"
    return text


def _fp8_text(ans: Answer) -> str:
    f = ans.fp8
    if f is None or f.decode is None:
        return ""
    d = f.decode
    text = (
        f"fp8 KV ({f.option.key.kv}): decode {d.ratio:.2f}x the 16-bit KV [95% CI "
        f"{d.ci_low:.2f}-{d.ci_high:.2f}], KV memory {f.kv_bytes_ratio:.2f}x"
    )
    err = f.error.get("total_rel_l2_max")
    if err is not None:
        text += f", rel. L2 error <= {100 * err:.1f}% (fp8 study)"
    recall = f.error.get("needle_recall_min")
    if recall is not None:
        text += f", needle recall >= {100 * recall:.0f}%"
    return text


def _decision(shape: ModelShape, ans: Answer) -> ModelDecision:
    c = ans.choice
    est = c.decode if c is not None else None
    us = ans.default_decode_us * est.ratio if est is not None and ans.default_decode_us else None
    return ModelDecision(
        model=shape.label,
        engine=ans.engine,
        gpu=ans.gpu,
        choice=c.key.text if c is not None else None,
        command=" ".join(c.command) if c is not None else "",
        decode_us=us,
        decode_vs_default=est.ratio if est is not None else None,
        decode_ci=(est.ci_low, est.ci_high) if est is not None else None,
        tied=bool(ans.tied),
        keeps_default=ans.keeps_default,
        fp8=_fp8_text(ans),
        basis=_basis(ans),
        per_batch_us={o.key.text: _per_batch_us(o) for o in ans.options if o.cases("decode")},
        engine_rows=sum(len(o.cases("decode")) for o in ans.options),
    )


def decisions_from_answers(frame: pd.DataFrame) -> list[ModelDecision]:
    """Per model shape of the rows, the vLLM and SGLang answers `recommend --model` gives
    (`deploy.decide.answers_by_model`: the same options, pairing and CIs)."""
    from attnbench.deploy.decide import answers_by_model

    return [_decision(shape, a) for shape, answers in answers_by_model(frame) for a in answers]


ANSWER_COLUMNS = ["GPU", "model", "engine", "traffic", "KV", "deploy", "decode vs default"]
ANSWER_COLUMNS += ["prefill vs default", "basis"]


def traffic_rows(ok: pd.DataFrame) -> pd.DataFrame:
    """The passed rows `recommend --measure` timed on a trace's own batches (decode labels)."""
    from attnbench.deploy.decide import parse_label

    if ok.empty or "label" not in ok:
        return ok.iloc[0:0]
    return ok[ok["label"].astype(str).map(lambda s: parse_label(s) is not None).astype(bool)]


def traffic_answers(
    ok: pd.DataFrame,
    paths: list[Path],
    gpu: str | None = None,
    rows: pd.DataFrame | None = None,
) -> list[list[str]]:
    """The answers measured on traffic, per GPU, model, engine, traffic and KV dtype: the
    findings' answer table (`deploy.table.answer_table`) with the traffic kept beside the rows
    (`deploy.traffic.committed_traffic`), in `ANSWER_COLUMNS`' order; [] without such rows.
    `gpu`: that GPU's answers only; `rows`: every row, refusals too (an engine default that
    refused every case makes a stand-in answer), else `ok`."""
    from attnbench.deploy.table import answer_table
    from attnbench.deploy.traffic import committed_traffic

    measured = traffic_rows(ok)
    if gpu is not None and not measured.empty:
        measured = measured[measured["gpu"].astype(str) == gpu]
    if measured.empty:
        return []
    models = sorted({(str(m), int(t)) for m, t in measured[["model", "tp"]].itertuples(False)})
    table = answer_table(ok if rows is None else rows, measured, models, committed_traffic(paths))
    return [[r[4], *r[:4], *r[5:9]] for r in table]


def lead_gpu(ok: pd.DataFrame) -> str | None:
    """The GPU whose sections lead the report: the one with the most rows measured on
    traffic, None when no GPU has any."""
    measured = traffic_rows(ok)
    if measured.empty:
        return None
    return str(measured["gpu"].astype(str).value_counts().index[0])


def _engine_cell(d: ModelDecision | None) -> str:
    if d is None:
        return "-"
    if d.choice is None:
        model, _, tp = d.model.partition(" tp")
        how = f"attnbench recommend --model {model} --tp {tp} --engine {d.engine} --measure"
        return f"no deployable rows: measure with `{how}`"
    vs = ""
    if d.keeps_default:
        vs = ", the engine's default: no option is faster beyond its 95% CI"
    elif d.decode_vs_default is not None and d.decode_ci is not None:
        lo, hi = d.decode_ci
        vs = f", {d.decode_vs_default:.2f}x the default [95% CI {lo:.2f}-{hi:.2f}]"
        vs += " (tied)" if d.tied else ""
    if d.fp8:
        vs += f"; {d.fp8}"
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
    """The decisions of the model the figure shows: of the models an engine answers for (a
    choice), the one with the most decode rows."""
    with_rows = [d for d in decisions if d.per_batch_us and d.choice is not None]
    if not with_rows:
        return []
    lead = max(with_rows, key=lambda d: (d.engine_rows, d.model)).model
    return [d for d in with_rows if d.model == lead]


def elsewhere(others: pd.DataFrame) -> dict[str, list[str]]:
    """Per model shape (`llama-3.1-70b tp8`): the other GPUs whose passed rows hold engine
    decode rows of it (their own Decision answers for it)."""
    if others.empty:
        return {}
    rows = others[others["library"].isin(_NAMES) & (others["kind"] == "decode")]
    out: dict[str, set[str]] = {}
    for model, tp, gpu in rows[["model", "tp", "gpu"]].itertuples(index=False):
        if model and pd.notna(tp):
            out.setdefault(f"{model} tp{int(tp)}", set()).add(str(gpu).removeprefix("NVIDIA "))
    return {m: sorted(g) for m, g in out.items()}


def _missing_text(missing: list[str], others: dict[str, list[str]]) -> str:
    names = ", ".join(
        f"`{m}`" + (f" (measured on {', '.join(others[m])}: its Decision)" if m in others else "")
        for m in missing
    )
    return (
        f"No deployable rows for {names}: measure them on the GPU with `attnbench recommend "
        "--model MODEL --engine vllm --trace T --measure` (and `--engine sglang`)."
    )


def first_screen_blocks(
    frame: pd.DataFrame,
    label: str = "",
    others: dict[str, list[str]] | None = None,
    answers: list[list[str]] | None = None,
) -> list[Block]:
    """The answers measured on traffic (`traffic_answers`) where there are any, else the
    decision table (one line per model and engine, without a trace); then the per-bucket
    decode figure of the lead model's deployable configurations ([]: no answer and no row
    ranks for any engine); `others`: the model shapes other GPUs' rows answer for."""
    decisions = decisions_from_answers(frame)
    if answers:
        blocks: list[Block] = [
            Table(
                ANSWER_COLUMNS,
                answers,
                "the answer per GPU, model, engine and traffic, measured on the traffic's own "
                "batches (`recommend --model M --engine E --trace T`; decode against the "
                "engine default: ratio of traffic-weighted mean step times, 95% CI; `the "
                "default` where no option beats it beyond its interval)",
            )
        ]
        return blocks + _bucket_figure(decisions, label)
    if not decisions:
        return []
    blocks = [
        Table(
            ["model", *(_NAMES[e] for e in _NAMES), "basis"],
            decision_rows(decisions),
            "the deploy decision per model and engine, from committed rows "
            "(expected decode over the engine's capture buckets)",
        )
    ]
    missing = unanswered(decisions)
    if missing:
        blocks.append(Text(_missing_text(missing, others or {})))
    return blocks + _bucket_figure(decisions, label)


def _bucket_figure(decisions: list[ModelDecision], label: str) -> list[Block]:
    """The per-bucket decode figure of the lead model's deployable configurations."""
    from attnbench.report.plots_deploy import BucketPanel, bucket_decode

    blocks: list[Block] = []
    lead = lead_decisions(decisions)
    panels = [
        BucketPanel(f"{_NAMES[d.engine]} · {d.model}", d.choice, d.per_batch_us) for d in lead
    ]
    drawing = bucket_decode(panels, label) if lead else None
    if drawing:
        blocks.append(
            drawing.figure(
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
    everything = ok_rows(data.loaded.frame)
    others = everything[everything["gpu"] != data.gpu] if data.gpu else everything.iloc[0:0]
    lead = not data.gpu or data.gpu == lead_gpu(everything)
    answers = traffic_answers(
        everything, data.loaded.paths, None if lead else data.gpu, latest(data.loaded.frame)
    )
    blocks = first_screen_blocks(data.ok, data.label, elsewhere(others), answers)
    return Section(FIRST_SCREEN_TITLE, blocks) if blocks else None
