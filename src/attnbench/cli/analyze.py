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
    from attnbench.analysis.compare import Comparison
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
    from attnbench.results import FP8_STUDY_TYPE, read_json

    found: list[Path] = []
    for p in paths:
        try:
            data = read_json(p)
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
    _print_comparison(comp, show_all)
    raise typer.Exit(1 if comp.regressions else 0)


_STYLE = {"faster": "green", "slower": "red", "broken": "bold red", "fixed": "green"}


def _print_comparison(comp: Comparison, show_all: bool) -> None:
    from rich.table import Table

    from attnbench.analysis.frame import fmt_us
    from attnbench.report.table import short_case

    quiet = {"tie", "still failing"}
    shown = [
        e for e in comp.entries if show_all or len(comp.entries) <= 40 or e.outcome not in quiet
    ]
    t = Table(title=escape(f"B vs A ({comp.gpus[1]} vs {comp.gpus[0]})"), header_style="bold")
    for col in ("case", "backend", "A", "B", "B/A [95% CI]", "p", "verdict"):
        t.add_column(col, justify="right" if col in ("A", "B", "p") else "left", overflow="fold")
    order = {"broken": 0, "slower": 1, "status changed": 2, "faster": 3, "fixed": 4}
    for e in sorted(shown, key=lambda e: (order.get(e.outcome, 9), e.case_id, e.backend)):
        est = e.estimate
        ratio = f"{est.ratio:.3f} [{est.ci_low:.3f}-{est.ci_high:.3f}]" if est else "-"
        p = f"{est.p_value:.3g}" if est and est.p_value is not None else "-"
        verdict = str(e.outcome)
        if e.outcome in ("broken", "fixed", "status changed"):
            verdict += f" ({e.status_a} -> {e.status_b})"
        if e.within_spread:
            verdict += " (within spread)"
        if e.regression:
            verdict += " REGRESSION"
        style = _STYLE.get(e.outcome, "")
        t.add_row(
            escape(short_case(e.spec) if e.spec else e.case_id),
            escape(e.backend),
            fmt_us(e.median_a_us),
            fmt_us(e.median_b_us),
            ratio,
            p,
            f"[{style}]{verdict}[/]" if style else verdict,
        )
    console.print(t)
    if len(shown) < len(comp.entries):
        console.print(f"({len(comp.entries) - len(shown)} ties not listed; --all lists them)")
    counts = comp.counts()
    console.print("summary: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    if comp.overall:
        o = comp.overall
        console.print(
            f"overall B/A geomean {o.ratio:.3f} (95% CI {o.ci_low:.3f}-{o.ci_high:.3f}) over "
            f"{o.method.split()[-2]} timed pairs: {o.verdict}"
        )
    for n in comp.notes:
        note(n)
    thr = f"{100 * comp.threshold:g}%"
    if comp.regressions:
        console.print(
            f"[bold red]{len(comp.regressions)} regression(s)[/] (slower beyond "
            f"{thr} and significant, or ok -> failed): exit 1"
        )
    else:
        console.print(f"no regression beyond {thr}: exit 0")
