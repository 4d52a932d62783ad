"""The Typer `app` every command module registers its commands on (`from attnbench.cli.app
import app`); `cli/__init__` imports the command modules, so nothing imports back up."""

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


def main() -> None:
    app()
