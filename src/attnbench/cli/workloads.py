"""`attnbench lengths`: what a length-distribution string expands to, with its stats."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from attnbench.cli.app import app
from attnbench.cli.common import console, fail, print_fitted
from attnbench.measure.limits import MAX_SEED

_EXAMPLES = """Examples: 1024,4096 | mixed | trace:azure-code | prompts:mooncake-conv |
skew:131072 | padded:skew:131072,giant | prefix:16384+uniform:1-256 |
trace-prefix:mooncake-conv,2"""


@app.command()
def lengths(
    dist: Annotated[str, typer.Argument(help="Length distribution. " + _EXAMPLES)],
    batch_size: Annotated[int, typer.Option("--batch-size", "-n", help="Requests per batch.")] = 32,
    seed: Annotated[int, typer.Option(min=0, max=MAX_SEED, help="Seed of the sampling.")] = 0,
    show: Annotated[
        bool, typer.Option("--show/--no-show", help="Also print every request's length.")
    ] = False,
) -> None:
    """Expand a length distribution into its batches and print their stats."""
    from attnbench.workload.lengths import DISTRIBUTIONS, parse_lengths
    from attnbench.workload.ragged import length_stats

    if batch_size <= 0:
        fail(f"--batch-size={batch_size} must be positive")
    try:
        cases = parse_lengths(dist, batch_size, seed)
    except ValueError as exc:
        message = str(exc)
        if "allowed" not in message:
            message += f" (forms: {', '.join(DISTRIBUTIONS)})"
        fail(message)
    table = Table(title=escape(f"lengths {dist!r} (batch_size={batch_size}, seed={seed})"))
    columns = ("case", "requests", "total", "min", "p50", "mean", "max", "max/mean", "cv")
    for col in columns:
        table.add_column(col, justify="left" if col == "case" else "right")
    table.add_column("padding", justify="right")
    table.add_column("shared prefix", justify="right")
    for case in cases:
        s = length_stats(case.kv_lens)
        table.add_row(
            escape(case.label),
            str(s.batch_size),
            f"{s.total:,}",
            f"{s.min:,}",
            f"{s.p50:,}",
            f"{s.mean:,.0f}",
            f"{s.max:,}",
            f"{s.max_over_mean:.2f}",
            f"{s.cv:.2f}",
            f"{s.padding_waste:.0%}",
            f"{case.shared_prefix_len:,}" if case.shared_prefix_len else "",
        )
    print_fitted(table)
    if show:
        import textwrap

        for case in cases:
            text = f"{case.label}: {', '.join(str(n) for n in case.kv_lens)}"
            for line in textwrap.wrap(
                text, width=80, subsequent_indent="  ", break_on_hyphens=False
            ):
                console.print(line, soft_wrap=True, markup=False, highlight=False)
