"""The Typer `app` every command module registers its commands on (`from attnbench.cli.app
import app`); `cli/__init__` imports the command modules, so nothing imports back up."""

from __future__ import annotations

from typing import Annotated

import typer

from attnbench.cli.common import EXIT_CODES_HELP, check_git_sha_env
from attnbench.cli.options import DocumentedGroup

app = typer.Typer(
    name="attnbench",
    cls=DocumentedGroup,
    help="Measure, check and choose LLM-serving attention kernels on this machine.",
    epilog=EXIT_CODES_HELP,
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)


def version_text() -> str:
    """`attnbench 0.1.0 (commit 1a2b3c4d5e6f)`; the commit when the source is a git checkout
    (or `ATTNBENCH_GIT_SHA` names it)."""
    from attnbench import __version__
    from attnbench.results.provenance import git_sha

    sha = git_sha()
    return f"attnbench {__version__}" + (f" (commit {sha})" if sha != "unknown" else "")


def _print_version(value: bool) -> None:
    if value:
        check_git_sha_env()
        typer.echo(version_text())
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            callback=_print_version,
            is_eager=True,
            help="Print the version (and the commit, when known) and exit.",
        ),
    ] = False,
) -> None:
    """Measure, check and choose LLM-serving attention kernels on this machine."""
    check_git_sha_env()


def main() -> None:
    from attnbench.cli.common import tolerate_narrow_encoding

    tolerate_narrow_encoding()
    app()
