"""`attnbench compare`'s table and lines, fitted to the terminal: a case's name and a verdict
wrap between words, the ratio sits above its confidence interval, and columns that do not fit
beside the case and backend go to a second table (`report.table.fit_columns`), so at 80
columns no word or number is split."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.markup import escape

from attnbench.cli.common import console, note, print_fitted

if TYPE_CHECKING:
    from rich.table import Table

    from attnbench.analysis.compare import Comparison, Entry

STYLE = {"faster": "green", "slower": "red", "broken": "bold red", "fixed": "green"}
QUIET = ("tie", "still failing")
"""Outcomes left out of the table when there are more than 40 entries (unless --all)."""
CASE_WIDTH = 12


def print_comparison(comp: Comparison, show_all: bool) -> None:
    shown = [
        e for e in comp.entries if show_all or len(comp.entries) <= 40 or e.outcome not in QUIET
    ]
    if shown:
        print_fitted(comparison_table(comp, shown), keys=2)
    hidden = [e for e in comp.entries if e not in shown]
    if hidden:
        counts = {o: sum(e.outcome == o for e in hidden) for o in QUIET}
        plural = {"tie": "ties"}
        what = " and ".join(
            f"{n} {plural.get(o, o) if n > 1 else o}" for o, n in counts.items() if n
        )
        console.print(f"(not listed: {what}; --all lists them)", highlight=False)
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


def comparison_table(comp: Comparison, shown: list[Entry]) -> Table:
    from rich.table import Table

    from attnbench.analysis.frame import fmt_us
    from attnbench.report.table import short_case, wrap_words

    t = Table(title=escape(f"B vs A ({comp.gpus[1]} vs {comp.gpus[0]})"), header_style="bold")
    for col in ("case", "backend", "A", "B", "B/A\n95% CI", "p", "verdict"):
        t.add_column(col, justify="right" if col in ("A", "B", "p") else "left")
    order = {"broken": 0, "slower": 1, "status changed": 2, "faster": 3, "fixed": 4}
    for e in sorted(shown, key=lambda e: (order.get(e.outcome, 9), e.case_id, e.backend)):
        est = e.estimate
        ratio = f"{est.ratio:.3f}\n[{est.ci_low:.3f}-{est.ci_high:.3f}]" if est else "-"
        p = f"{est.p_value:.3g}" if est and est.p_value is not None else "-"
        style = STYLE.get(e.outcome, "")
        verdict = escape(_verdict(e))
        t.add_row(
            escape(wrap_words(short_case(e.spec) if e.spec else e.case_id, CASE_WIDTH)),
            escape(e.backend),
            fmt_us(e.median_a_us),
            fmt_us(e.median_b_us),
            escape(ratio),
            p,
            f"[{style}]{verdict}[/]" if style else verdict,
        )
    return t


def _verdict(e: Entry) -> str:
    """The outcome, then each qualifier on a line of its own."""
    lines = [str(e.outcome)]
    if e.outcome in ("broken", "fixed", "status changed"):
        lines.append(f"({e.status_a} -> {e.status_b})")
    if e.within_spread:
        lines.append("(within spread)")
    if e.regression:
        lines.append("REGRESSION")
    return "\n".join(lines)
