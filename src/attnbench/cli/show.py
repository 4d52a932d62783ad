"""`attnbench show FILE...`: every row of results files, readable at 80 columns and wider when
the terminal is, then the summary `run` ends with. `print_summary` is that end of `run`. A saved
fp8 study (`attnbench fp8 --out`, .json or .json.gz) prints as the study's tables; a replay,
replay-validation or fidelity document as its tables (`cli.show_documents`)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from attnbench.cli.app import app
from attnbench.cli.common import check_input_file, console, fail, note, print_fitted

if TYPE_CHECKING:
    from attnbench.results import ResultRow


@app.command()
def show(
    files: Annotated[
        list[Path],
        typer.Argument(
            help="Results files (.jsonl), fp8 studies, replay, replay-validation or fidelity "
            "documents (.json) to print.",
            metavar="FILE",
        ),
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
    failures with their reasons, then the summary. An fp8 study: its tables (quantisation
    error, needle recall, one row per kernel record, the summary). A replay document: the
    tables `replay` printed; a replay validation: each variant's error; a fidelity document:
    one line per case."""
    from attnbench.results import ResultsFileError, is_document_path, read_results

    for path in files:
        check_input_file(path, "show")
        if is_document_path(path):
            print_study(path, summary)
            continue
        try:
            rf = read_results(path)
        except ResultsFileError as exc:
            fail(str(exc))
        for warning in rf.warnings:
            note(warning)
        note_invalid(path, rf.rows)
        header = rf.header
        device = header.gpu if header is not None else "unknown device"
        console.print(
            f"{path}: {len(rf.rows)} rows on {device}", style="bold", markup=False, highlight=False
        )
        print_rows(rf.rows, include_unsupported=show_all)
        if summary:
            print_summary(rf.rows, path, hint_all=not show_all)


def note_invalid(path: Path, rows: Sequence[ResultRow]) -> None:
    """Say so when `ok` rows carry a latency that is no measurement (negative, zero, NaN)."""
    from attnbench.report.table import INVALID, invalid

    bad = [r for r in rows if invalid(r)]
    if bad:
        first = bad[0]
        note(
            f"{path}: {len(bad)} ok rows have a latency_us that is not a positive finite "
            f"number (first: {first.backend} on {first.case_id}: {first.latency_us}): invalid "
            f"data, shown as {INVALID} and left out of the summary"
        )


def print_study(path: Path, summary: bool = True) -> None:
    """A saved fp8 study: a heading (device, commit, whether it finished), then its tables;
    the kernel table has one row per record, FA3's error split beside FlashInfer's."""
    from attnbench.cli.show_documents import KINDS, print_other_document
    from attnbench.fp8study.tables import (
        errors_table,
        kernel_table,
        needle_table,
        study_heading,
        summary_table,
    )
    from attnbench.results import FP8_STUDY_TYPE, read_json

    try:
        doc = read_json(path)
    except OSError as exc:
        fail(f"{path}: {exc.strerror or exc}")
    except ValueError as exc:  # not JSON
        fail(f"{exc} (`attnbench show` reads {KINDS})")
    if not isinstance(doc, dict) or doc.get("type") != FP8_STUDY_TYPE:
        print_other_document(path, doc)  # a replay, validation or fidelity document
        return
    console.print(f"{path}: {study_heading(doc)}", style="bold", markup=False, highlight=False)
    if doc.get("errors"):
        print_fitted(errors_table(doc), 3, console)
    if doc.get("needle"):
        print_fitted(needle_table(doc), 3, console)
    if doc.get("kernel"):
        for part in kernel_table(doc).renderables:
            print_fitted(part, 2, console)
    if doc.get("kernel_skipped"):
        note(f"{path}: kernel records: {doc['kernel_skipped']}")
    if summary and doc.get("summary"):
        print_fitted(summary_table(doc), 2, console)


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
