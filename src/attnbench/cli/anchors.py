"""`attnbench anchors`: attnbench's engine-path rows beside NVIDIA AIConfigurator's published
attention tables (`analysis.aic`), per GPU, with the ratio attnbench / AIConfigurator."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from attnbench.cli.analyze import ResultsArg, _load
from attnbench.cli.app import app
from attnbench.cli.common import check_input_file, console, fail

GPUS = ("h100", "h200")


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
) -> None:
    """attnbench's engine paths (vllm:flash-attn, sglang:fa3, and flashinfer:xqa for TRT-LLM)
    beside NVIDIA AIConfigurator's decode and prefill tables for the same GPU, kernel, heads,
    batch, uniform lengths, KV dtype and page size: attnbench / AIConfigurator per GPU, its
    median and range over every matching row, and what has no match."""
    from attnbench.analysis.aic import load_anchors, missing, pairs, system_of
    from attnbench.report.anchor_tables import anchor_lines

    if gpu is not None and gpu.lower() not in GPUS:
        fail(f"--gpu={gpu}: AIConfigurator has tables of {', '.join(GPUS)}")
    if table is not None:
        check_input_file(table, "anchors")
    try:
        anchor_table = load_anchors(table)
    except (OSError, ValueError, KeyError, EOFError) as exc:
        fail(f"--table={table}: not an AIConfigurator extract ({exc})")
    frame = _load(results).frame
    if gpu is not None and not frame.empty:
        frame = frame[frame["gpu"].map(lambda g: system_of(str(g)) == f"{gpu.lower()}_sxm")]
    found = pairs(frame, anchor_table)
    lines = anchor_lines(anchor_table.source, found, missing(frame, found), verbose)
    for line in lines:
        console.print(line, markup=False, highlight=False, soft_wrap=True)
