"""`attnbench anchors`: attnbench's rows beside published figures, per GPU: its engine paths
beside NVIDIA AIConfigurator's attention tables (`analysis.aic`), with the ratio attnbench /
AIConfigurator, and suite mla-pr1770's MLA decode rows beside flash-attention PR #1770's FA3
and FlashMLA times (`analysis.pr1770`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from attnbench.cli.analyze import ResultsArg, _load
from attnbench.cli.app import app
from attnbench.cli.common import check_input_file, console, fail

if TYPE_CHECKING:
    import pandas as pd

    from attnbench.analysis.aic import AnchorTable

GPUS = ("h100", "h200")
SETS = ("all", "aic", "pr1770")


@app.command()
def anchors(
    results: ResultsArg = None,
    gpu: Annotated[
        str | None,
        typer.Option(
            "--gpu", help=f"Only this GPU's rows ({', '.join(GPUS)}); default: every GPU."
        ),
    ] = None,
    verbose: Annotated[
        bool,
        typer.Option("--verbose", "-v", help="Every pair, and how the two sides time a call."),
    ] = False,
    table: Annotated[
        Path | None,
        typer.Option(
            "--table",
            help="An extract made by scripts/aic_extract.py (default: the one attnbench ships).",
        ),
    ] = None,
    anchor_set: Annotated[
        str,
        typer.Option(
            "--set",
            help="aic: AIConfigurator's tables; pr1770: flash-attention PR #1770's MLA decode "
            "figures (suite mla-pr1770); all: both.",
        ),
    ] = "all",
) -> None:
    """attnbench's engine paths (vllm:flash-attn, sglang:fa3, and flashinfer:xqa for TRT-LLM)
    beside NVIDIA AIConfigurator's decode and prefill tables for the same GPU, kernel, heads,
    batch, uniform lengths, KV dtype and page size: attnbench / AIConfigurator per GPU, its
    median and range over every matching row, and what has no match. Then suite mla-pr1770's
    MLA decode rows beside the FA3 and FlashMLA times flash-attention PR #1770 published."""
    from attnbench.analysis.aic import load_anchors, system_of

    if gpu is not None and gpu.lower() not in GPUS:
        fail(f"--gpu={gpu}: AIConfigurator has tables of {', '.join(GPUS)}")
    if anchor_set not in SETS:
        fail(f"--set={anchor_set}: allowed: {', '.join(SETS)}")
    if table is not None:
        check_input_file(table, "anchors")
    try:
        anchor_table = load_anchors(table) if anchor_set != "pr1770" else None
    except (OSError, ValueError, KeyError, EOFError) as exc:
        fail(f"--table={table}: not an AIConfigurator extract ({exc})")
    frame = _load(results).frame
    if gpu is not None and not frame.empty:
        frame = frame[frame["gpu"].map(lambda g: system_of(str(g)) == f"{gpu.lower()}_sxm")]
    lines = _aic_lines(frame, anchor_table, verbose) if anchor_table is not None else []
    if anchor_set != "aic":
        lines += ([""] if lines else []) + _pr1770_lines(frame)
    for line in lines:
        console.print(line, markup=False, highlight=False, soft_wrap=True)


def _aic_lines(frame: pd.DataFrame, anchor_table: AnchorTable, verbose: bool) -> list[str]:
    from attnbench.analysis.aic import missing, pairs
    from attnbench.report.anchor_tables import anchor_lines

    found = pairs(frame, anchor_table)
    return anchor_lines(anchor_table.source, found, missing(frame, found), verbose)


def _pr1770_lines(frame: pd.DataFrame) -> list[str]:
    from attnbench.analysis.pr1770 import beside, load_published
    from attnbench.report.pr1770_tables import pr1770_lines

    published = load_published()
    return pr1770_lines(published, beside(frame, published))
