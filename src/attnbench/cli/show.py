"""`attnbench show FILE...`: every row of results files, readable at 80 columns and wider when
the terminal is, then the summary `run` ends with. `print_summary` is that end of `run`."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from attnbench.cli.app import app
from attnbench.cli.common import console, fail, note

if TYPE_CHECKING:
    from attnbench.results import ResultRow


@app.command()
def show(
    files: Annotated[
        list[Path],
        typer.Argument(help="Results files (.jsonl) to print.", metavar="FILE"),
    ],
    show_all: Annotated[
        bool,
        typer.Option(
            "--all",
            help="Also list the variants that did not apply to a case (unsupported), with why.",
        ),
    ] = False,
    summary: Annotated[
        bool, typer.Option("--summary/--no-summary", help="End with the summary of each file.")
    ] = True,
) -> None:
    """Print every row of results files: one heading per case, one line per variant (median,
    bandwidth, compute, fractions of the measured ceilings; more columns in a wider terminal),
    failures with their reasons, then the summary."""
    from attnbench.results import ResultsFileError, read_results

    for path in files:
        try:
            rf = read_results(path)
        except ResultsFileError as exc:
            fail(str(exc))
        for warning in rf.warnings:
            note(warning)
        header = rf.header
        device = header.gpu if header is not None else "unknown device"
        console.print(
            f"{path}: {len(rf.rows)} rows on {device}", style="bold", markup=False, highlight=False
        )
        print_rows(rf.rows, include_unsupported=show_all)
        if summary:
            print_summary(rf.rows, path, hint_all=not show_all)


def print_rows(rows: Sequence[ResultRow], include_unsupported: bool = False) -> None:
    """The listing of `report.listing` at this console's width."""
    from attnbench.report.listing import listing_lines

    for line in listing_lines(rows, console.width, include_unsupported=include_unsupported):
        console.print(line, soft_wrap=True, highlight=False)


def print_summary(
    rows: Sequence[ResultRow], path: Path, verbose: bool = False, hint_all: bool = True
) -> None:
    """The end of a run: with `verbose`, every row first (`show --all`); then the summary,
    never wider than the console (80 columns at most, so it reads in any terminal)."""
    from attnbench.report.summary import render_summary, summarize_rows

    if verbose:
        print_rows(rows, include_unsupported=True)
    hint = (
        f"`attnbench show {path} --all` lists them with the reasons"
        if hint_all and not verbose
        else "listed above"
    )
    width = min(console.width, 80)
    for line in render_summary(summarize_rows(rows), width=width, listing_hint=hint):
        console.print(line, soft_wrap=True, markup=False, highlight=False)
