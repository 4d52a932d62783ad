"""The `attnbench` command line: parsing and wiring only. Each command lives in its own module
and imports torch and the kernel libraries inside the command, so `attnbench --help` is instant.
"""

from __future__ import annotations

import typer

from attnbench.cli.common import EXIT_CODES_HELP

app = typer.Typer(
    name="attnbench",
    help="Measure, check and choose LLM-serving attention kernels on this machine.",
    epilog=EXIT_CODES_HELP,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)

from attnbench.cli import analyze, fidelity, fp8, info, replay, run, tune, workloads  # noqa: E402  (commands register on `app`)

__all__ = [
    "analyze",
    "app",
    "fidelity",
    "fp8",
    "info",
    "main",
    "replay",
    "run",
    "tune",
    "workloads",
]


def main() -> None:
    app()
