"""`attnbench run`: settings -> cases -> sweep -> results file and table (the pipeline itself is
`cli.session`, shared with `tune`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape

from attnbench.cli.app import app
from attnbench.cli.common import EXIT_NOTHING_RAN, console, fail, note
from attnbench.cli.outpath import OutFlags
from attnbench.cli.run_options import FLAGS_WIN, RunOptions, with_run_options
from attnbench.cli.run_suite import WORKLOAD_FIELDS  # re-exported: older callers import it here
from attnbench.cli.session import (  # re-exported: older callers import them from here
    check_timer,
    execute_session,
)

if TYPE_CHECKING:
    from attnbench.results import ResultRow

__all__ = ["WORKLOAD_FIELDS", "check_timer", "execute", "run"]


@app.command(
    help="Benchmark every installed backend on a suite: each row goes to a results file "
    f"(--out; default a new file in runs/), then the summary. {FLAGS_WIN}"
)
@with_run_options
def run(
    opts: RunOptions,
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="Every row before the summary (`show --all`).")
    ] = False,
) -> None:
    execute(opts.overrides(), opts.config, verbose, opts.out_flags())


def execute(
    cli: dict[str, Any],
    config_file: Path | None = None,
    verbose: bool = False,
    out_flags: OutFlags | None = None,
) -> Path:
    """The whole `run` pipeline; returns the results path. Exits with one line on bad input,
    with EXIT_NOTHING_RAN when no (case, variant) could be measured."""
    import time

    from attnbench.cli.show import print_summary

    t0 = time.monotonic()
    outcome = execute_session(cli, config_file, out_flags=out_flags)
    wall_s = time.monotonic() - t0
    rows = outcome.rows
    print_summary(rows, outcome.out_path, verbose=verbose)
    counts = {s: sum(r.status == s for r in rows) for s in {r.status for r in rows}}
    summary = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
    console.print(
        f"rows: {summary} in {wall_s:.0f} s -> {escape(str(outcome.out_path))}", highlight=False
    )
    _exit_if_nothing_ran(rows, outcome.todo, outcome.resume, outcome.out_path, summary)
    return outcome.out_path


def _exit_if_nothing_ran(
    rows: list[ResultRow], todo: int, resume: bool, out_path: Path, summary: str
) -> None:
    """Exit EXIT_NOTHING_RAN when no serving kernel was measured (the fp64 oracle alone is
    nothing ran, unless it is all the run asked for), unless --resume found nothing left to do
    or measured rows from before are in the file."""
    from attnbench.report.summary import ORACLE
    from attnbench.results import read_results

    if measured(rows):
        return
    if resume:
        if todo == 0:
            note(f"nothing left to run: every (case, variant) is finished in {out_path}")
            return
        if measured(read_results(out_path).rows):
            return
    only_oracle = any(r.status == "ok" and r.backend == ORACLE for r in rows)
    what = (
        "only the reference (the fp64 oracle every kernel is checked against) was measured; "
        "every serving kernel was refused or failed"
        if only_oracle
        else f"none of {todo} (case, variant) pairs was measured"
    )
    fail(
        f"nothing could run: {what} ({summary or 'no rows'}); the summary above says why, "
        f"every reason is in {out_path}; `attnbench backends` says what runs here",
        EXIT_NOTHING_RAN,
    )


def measured(rows: list[ResultRow]) -> bool:
    """Whether a serving kernel has an `ok` row with a real latency; where the run asked for
    nothing but the oracle (`-b reference`), whether the oracle has one."""
    from attnbench.report.summary import ORACLE
    from attnbench.report.table import valid_latency

    ok = [r for r in rows if r.status == "ok" and valid_latency(r.latency_us)]
    if all(r.backend == ORACLE for r in rows):
        return bool(ok)
    return any(r.backend != ORACLE for r in ok)
