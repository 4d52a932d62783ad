"""Shared CLI helpers: one console, one way to fail."""

from __future__ import annotations

import sys
from typing import NoReturn

import typer
from rich.console import Console

# Wide enough for result tables when output goes to a file or a CI log (rich assumes 80).
console = Console(width=None if sys.stdout.isatty() else 160)
err_console = Console(stderr=True, width=None if sys.stderr.isatty() else 160)


def fail(message: str, code: int = 2) -> NoReturn:
    """Print one clear line (no traceback) and exit."""
    err_console.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def note(message: str) -> None:
    err_console.print(f"[yellow]note:[/] {message}", highlight=False, soft_wrap=True)
