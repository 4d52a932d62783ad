"""The deployable recommendation per engine (`analysis.engine_rank`) as report blocks: the
engine's command line first, then its expected decode and prefill time against the engine's
default configuration, the per-bucket ranking and its regret, and, apart, what a raw library
variant would gain if the engine exposed it. `recommend --engine` prints the same blocks."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd

from attnbench.analysis.engine_rank import EngineRecommendation, rank_engine
from attnbench.analysis.frame import fmt_us
from attnbench.engines.paths import ENGINES, Engine
from attnbench.report.blocks import Block, Code, Table, Text

REGRET_GOAL = 0.05
"""The server-wide choice should be within this of choosing per capture bucket."""
_NAMES = {"vllm": "vLLM", "sglang": "SGLang"}


def _x(ratio: float | None) -> str:
    return "-" if ratio is None else f"{ratio:.2f}x"


def _choice_blocks(rec: EngineRecommendation) -> list[Block]:
    """The deployable choice: what to run, its expected decode time, its command and regret."""
    name = _NAMES[rec.engine]
    choice = rec.choice
    if choice is None:
        return [Text(f"**{name}**: no deployable configuration has decode rows to rank.")]
    c = choice.config
    base = f"the engine default ({rec.default.label})" if rec.default else "the engine default"
    versus = (
        f"{_x(choice.decode_vs_default)} {base}"
        if choice.decode_vs_default is not None
        else f"no decode rows of {base} at every batch to compare with"
    )
    prefill = (
        f"prefill {_x(choice.prefill_vs_default)} on {choice.prefill_cases} shared cases"
        if choice.prefill_vs_default is not None
        else "prefill: no case shared with the default"
    )
    origin = (
        f" (inferred from raw variant {', '.join(choice.inferred_from)})"
        if choice.inferred_from
        else ""
    )
    blocks: list[Block] = [
        Text(
            f"**Deploy on {name}**: `{c.label}`{origin}: expected decode attention "
            f"{fmt_us(choice.decode_us)} per step and layer, {versus}; {prefill}."
        ),
        Code(c.command),
    ]
    if rec.regret is not None:
        verdict = "within" if rec.regret <= REGRET_GOAL else "above"
        blocks.append(
            Text(
                f"One server-wide choice vs the best configuration per capture bucket: "
                f"regret {100 * rec.regret:.1f}% ({verdict} the {100 * REGRET_GOAL:.0f}% goal)."
            )
        )
    return blocks


def _score_table(rec: EngineRecommendation) -> Table:
    """Every deployable configuration by expected decode time, the choice in bold."""
    return Table(
        ["configuration", "decode / step", "decode vs default", "prefill vs default"],
        [
            [
                f"**{s.config.label}**" if s is rec.choice else s.config.label,
                fmt_us(s.decode_us) if s.decode_us is not None else "not at every batch",
                _x(s.decode_vs_default),
                _x(s.prefill_vs_default),
            ]
            for s in rec.scores
        ],
        f"{_NAMES[rec.engine]}: deployable configurations, by expected decode time",
    )


def _bucket_table(rec: EngineRecommendation) -> Table:
    """Decode per capture bucket, priced at the nearest measured batch size."""
    return Table(
        ["measured batch", "capture buckets", "weight", "best", "per configuration"],
        [
            [
                str(b.batch),
                f"{min(b.buckets)}..{max(b.buckets)} ({len(b.buckets)})",
                f"{100 * b.weight:.0f}%",
                b.best.label if b.best else "-",
                "; ".join(f"{c.label} {fmt_us(t)}" for c, t in sorted(b.times_us.items())),
            ]
            for b in rec.batches
        ],
        f"{_NAMES[rec.engine]}: decode per capture bucket (priced at the nearest measured "
        "batch size)",
    )


def _raw_gain_text(rec: EngineRecommendation) -> Text:
    """What a raw library variant would gain if the engine exposed it."""
    lines = [
        f"- batch {g.batch}: `{g.raw}` {fmt_us(g.raw_us)} vs {fmt_us(g.engine_us)}: "
        f"{g.ratio:.2f}x faster" + (f" ({g.note})" if g.note else "")
        for g in rec.raw_gains
    ]
    return Text(
        f"What a raw library variant would gain if {_NAMES[rec.engine]} exposed it (worth "
        "reporting upstream; not deployable today):\n\n" + "\n".join(lines)
    )


def engine_blocks(rec: EngineRecommendation) -> list[Block]:
    """Blocks for one engine on one GPU: the deployable choice first."""
    blocks = _choice_blocks(rec)
    if rec.scores:
        blocks.append(_score_table(rec))
    if rec.batches:
        blocks.append(_bucket_table(rec))
    if rec.raw_gains:
        blocks.append(_raw_gain_text(rec))
    if rec.notes:
        blocks.append(Text("\n".join(f"- {n}" for n in rec.notes)))
    return blocks


def deployable_blocks(
    frame: pd.DataFrame, gpu: str, engines: Sequence[Engine] = ENGINES
) -> list[Block]:
    """Every engine's deployable choice on `gpu` (the report's recommendation leads with it)."""
    out: list[Block] = []
    for engine in engines:
        for rec in rank_engine(frame, engine):
            if rec.gpu == gpu:
                out += engine_blocks(rec)
    return out


def engine_json(rec: EngineRecommendation) -> dict[str, Any]:
    """`recommend --engine --json`: the same decision as data."""

    def score(s: Any) -> dict[str, Any]:
        c = s.config
        return {
            "setting": c.setting.name,
            "variant": c.variant,
            "kv_dtype": c.kv_dtype,
            "page_size": c.page_size,
            "command": c.command,
            "decode_us": s.decode_us,
            "decode_vs_default": s.decode_vs_default,
            "prefill_vs_default": s.prefill_vs_default,
            "prefill_cases": s.prefill_cases,
            "inferred_from": list(s.inferred_from),
        }

    return {
        "engine": rec.engine,
        "gpu": rec.gpu,
        "inferred": rec.inferred,
        "choice": score(rec.choice) if rec.choice else None,
        "default": rec.default.label if rec.default else None,
        "regret": rec.regret,
        "weighting": rec.weighting,
        "configurations": [score(s) for s in rec.scores],
        "batches": [
            {
                "batch": b.batch,
                "weight": b.weight,
                "buckets": b.buckets,
                "best": b.best.label if b.best else None,
                "times_us": {c.label: t for c, t in b.times_us.items()},
            }
            for b in rec.batches
        ],
        "raw_gains": [g.__dict__ | {"ratio": g.ratio} for g in rec.raw_gains],
        "notes": rec.notes,
    }
