"""`attnbench report` and `compare`: stored results in, documents out (no GPU); `recommend`
is `cli.recommend`."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape

from attnbench.cli.app import app
from attnbench.cli.common import (
    check_output_dir,
    console,
    fail,
    note,
)

if TYPE_CHECKING:
    from attnbench.analysis.frame import Loaded

ResultsArg = Annotated[
    list[Path] | None,
    typer.Argument(
        help="Results files or folders (default: $ATTNBENCH_RESULTS, else ./results/*.jsonl). "
        ".json documents (fp8 numerics, replay) are passed to the report's sections."
    ),
]


def _load(results: list[Path] | None) -> Loaded:
    from attnbench.analysis.frame import NoResultsError, load, resolve_paths
    from attnbench.results import ResultsFileError

    try:
        loaded = load(resolve_paths(results))
    except (NoResultsError, FileNotFoundError, ResultsFileError) as exc:
        fail(str(exc))
    for w in loaded.warnings:
        note(w)
    return loaded


@app.command()
def report(
    results: ResultsArg = None,
    out: Annotated[Path, typer.Option("--out", "-o", help="Output folder.")] = Path(
        "attnbench-report"
    ),
) -> None:
    """Markdown + self-contained HTML report with plots, from stored results."""
    from attnbench.report.build import write_report

    check_output_dir(out, "--out")
    loaded = _load(results)
    from attnbench.results import is_document_path

    named = {p for p in results or [] if is_document_path(p)}
    documents = _documents(loaded.extras, named)
    if loaded.frame.empty and not documents:
        what = "no result rows (only headers)" if loaded.headers else "no result rows"
        fail(
            f"{_names(loaded.paths)}: {what} and no fp8 study or replay document: nothing to report"
        )
    try:
        with console.status("building the report (figures, statistics)"):
            md, page = write_report(loaded, out)
    except OSError as exc:
        fail(f"--out={out}: writing the report failed: {exc.strerror or exc}")
    console.print(
        f"report: {escape(str(md))} and {escape(str(page))} ({len(loaded.frame)} rows)",
        highlight=False,
    )


def _documents(paths: list[Path], named: set[Path]) -> list[Path]:
    """The .json files the report has a section for (fp8 studies, replay documents). A file
    named on the command line that is neither is said to be skipped (files found in a folder,
    such as `attnbench hw --out` facts, are skipped quietly)."""
    from attnbench.replay.study import SCHEMA
    from attnbench.replay.validate import SCHEMA as VALIDATION_SCHEMA
    from attnbench.results import FP8_STUDY_TYPE, read_json_shared

    found: list[Path] = []
    for p in paths:
        try:
            data = read_json_shared(p)  # parsed here once, inherited by the workers
        except (OSError, ValueError) as exc:  # UnicodeDecodeError is a ValueError
            why = f"not a JSON document ({type(exc).__name__})"
        else:
            known = isinstance(data, dict) and (
                data.get("schema") in (SCHEMA, VALIDATION_SCHEMA)
                or data.get("type") == FP8_STUDY_TYPE
            )
            if known:
                found.append(p)
                continue
            why = "neither an fp8 study nor a replay document"
        if p in named:
            note(f"{p}: {why}: skipped")
    return found


def _names(paths: list[Path]) -> str:
    shown = ", ".join(str(p) for p in paths[:3])
    return shown + (f" and {len(paths) - 3} more" if len(paths) > 3 else "")


@app.command()
def compare(
    a: Annotated[Path, typer.Argument(help="Baseline results file or folder.")],
    b: Annotated[Path, typer.Argument(help="New results file or folder.")],
    threshold: Annotated[
        str, typer.Option(help="Exit 1 when a significant slowdown exceeds this (5% or 0.05).")
    ] = "5%",
    noise_floor: Annotated[
        str, typer.Option(help="Differences below this are never called.")
    ] = "1%",
    show_all: Annotated[bool, typer.Option("--all", help="List ties too.")] = False,
) -> None:
    """Per (case, backend): B/A with a 95% CI; faster/slower only when significant and beyond
    the noise. Exit 1 on a regression past --threshold or ok -> failed; 2 on bad input."""
    from attnbench.analysis.compare import compare_frames, parse_threshold

    try:
        thr = parse_threshold(threshold, "--threshold")
        floor = parse_threshold(noise_floor, "--noise-floor")
    except ValueError as exc:
        fail(str(exc))
    fa, fb = _load([a]).frame, _load([b]).frame
    if fa.empty or fb.empty:
        fail(f"{a if fa.empty else b}: no result rows to compare")
    comp = compare_frames(fa, fb, threshold=thr, noise_floor=floor)
    if not any(e.status_a and e.status_b for e in comp.entries):
        fail(f"{a} and {b} share no (case, backend) pair: nothing to compare")
    from attnbench.cli.compare_view import print_comparison

    print_comparison(comp, show_all)
    raise typer.Exit(1 if comp.regressions else 0)
