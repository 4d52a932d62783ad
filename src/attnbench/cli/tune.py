"""`attnbench tune`: search each backend variant's knobs on a suite, within a time budget.

A mode of the one run path (`cli.session`): the same flags as `run` (plus --budget-s,
--grid-limit, --stage-ms), the same session, workers and watchdog. Writes `<out>` (header + one
`<variant>+tuned` row per case and variant, which `report` and `recommend` read as variants of
their own) and `<out stem>.trials.jsonl` (header + every trial).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape

from attnbench.cli.app import app
from attnbench.cli.common import EXIT_NOTHING_RAN, console, fail, note, print_fitted
from attnbench.cli.run_options import FLAGS_WIN, RunOptions, with_run_options
from attnbench.cli.session import execute_session, trials_path_for

if TYPE_CHECKING:
    from rich.table import Table

    from attnbench.results import ResultRow

__all__ = ["trials_path_for", "tune", "tune_table"]

Opt = typer.Option


@app.command(
    help="Search each variant's knobs (grid, or successive halving); rows record the winning "
    f"knobs. {FLAGS_WIN}"
)
@with_run_options
def tune(
    opts: RunOptions,
    budget_s: Annotated[
        float | None, Opt("--budget-s", help="Wall-clock budget in seconds (default: none).")
    ] = None,
    grid_limit: Annotated[
        int, Opt(help="Grids up to this size are measured in full; larger: halving.")
    ] = 8,
    stage_ms: Annotated[
        float, Opt(help="Timed work per config in the first halving stage (doubles each).")
    ] = 5.0,
) -> None:
    started = time.monotonic()
    if budget_s is not None and not budget_s > 0:
        fail(f"--budget-s={budget_s:g}: must be a positive number of seconds")
    if grid_limit < 1:
        fail(f"--grid-limit={grid_limit}: must be 1 or more")
    if not stage_ms > 0:
        fail(f"--stage-ms={stage_ms:g}: must be a positive number of milliseconds")
    from attnbench.run.plan import TunePlan

    plan = TunePlan(grid_limit=grid_limit, stage0_ms=stage_ms, budget_s=budget_s)
    outcome = execute_session(opts.overrides(), opts.config, tune=plan, out_flags=opts.out_flags())
    tuned = outcome.rows
    shown = [r for r in tuned if r.status != "unsupported"] or tuned
    title = f"tuned: {outcome.suite_name} on {outcome.device_name}"
    print_fitted(tune_table(shown, title=title))
    if outcome.skipped:
        note(
            f"budget of {budget_s:g} s ended: {len(outcome.skipped)} (case, variant) pairs "
            "not tuned"
        )
    stopped = [r for r in tuned if (r.details.get("tune") or {}).get("stopped_by_budget")]
    if stopped:
        note(f"{len(stopped)} searches stopped by the budget (best configuration so far kept)")
    elapsed = time.monotonic() - started
    console.print(
        f"{len(tuned)} tuned rows -> {escape(str(outcome.out_path))}; {outcome.trials} trials "
        f"-> {escape(str(outcome.trials_path))}; {elapsed:.0f} s",
        highlight=False,
    )
    if not any(r.status == "ok" for r in tuned):
        if outcome.resume and outcome.todo == 0:
            note(f"nothing left to tune: every (case, variant) is finished in {outcome.out_path}")
            return
        fail(
            f"nothing could be tuned: none of {len(tuned)} (case, variant) pairs has a measured "
            f"configuration; the reasons are in the table and in {outcome.out_path}",
            EXIT_NOTHING_RAN,
        )


KNOBS_WIDTH = 24
"""The knobs (or a failure's reason) wrap between words at this width."""
CASE_WIDTH = 26
"""The case wraps between words at this width, above its variant (one column that names the
row, repeated in each part of a table split to fit the terminal)."""


def tune_table(rows: list[ResultRow], title: str = "") -> Table:
    """Per (case, variant): default and tuned latency, speedup, fraction of the binding
    measured ceiling before and after, the winning knobs, and the search's counts."""
    from rich.table import Table

    from attnbench.report.table import cut_text, fmt, pct, short_case, wrap_words
    from attnbench.run.tune_search import ceiling_fraction, row_kind

    table = Table(title=title, header_style="bold")
    for name, justify in (
        ("case\nvariant", "left"),
        ("default\nµs", "right"),
        ("tuned\nµs", "right"),
        ("speedup", "right"),
        ("ceiling", "left"),
        ("before", "right"),
        ("after", "right"),
        ("knobs", "left"),
        ("search", "left"),
    ):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for r in rows:
        d = r.details
        t = d.get("tune", {})
        search = (
            f"{t.get('method', '?')} {t.get('trials', 0)}/{t.get('configs', 0)}"
            + (f" rej{t['rejected']}" if t.get("rejected") else "")
            + (f" fail{t['failed']}" if t.get("failed") else "")
            + (" [yellow]budget[/]" if t.get("stopped_by_budget") else "")
        )
        if r.status != "ok":
            reason = wrap_words(cut_text(r.reason, 60), KNOBS_WIDTH)
            knobs = f"[red]{r.status}[/] [dim]{escape(reason)}[/]"
        else:
            label = str(d.get("knobs_label", "")).replace(",", ", ")
            knobs = escape(wrap_words(label, KNOBS_WIDTH))
        table.add_row(
            f"{escape(wrap_words(short_case(r.spec), CASE_WIDTH))}\n[bold]{escape(r.backend)}[/]",
            fmt(d.get("default_latency_us"), ".1f"),
            fmt(r.latency_us, ".1f"),
            fmt(d.get("speedup_vs_default"), ".2f", "x"),
            "matmul" if row_kind(r) == "prefill" else "copy BW",
            pct(d.get("default_frac_measured")),
            pct(ceiling_fraction(r)),
            knobs,
            wrap_words(search, 12),
        )
    return table
