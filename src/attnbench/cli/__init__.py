"""The `attnbench` command line: parsing and wiring only. Each command lives in its own module
and imports torch and the kernel libraries inside the command, so `attnbench --help` is instant.
The Typer app is in `cli.app`; importing the command modules here registers their commands.
"""

from __future__ import annotations

from attnbench.cli import (
    analyze,
    anchors,
    export,
    fidelity,
    findings,
    fp8,
    info,
    recommend,
    replay,
    replay_validate,
    run,
    show,
    tune,
    workloads,
)
from attnbench.cli.app import app, main

__all__ = [
    "analyze",
    "anchors",
    "app",
    "export",
    "fidelity",
    "findings",
    "fp8",
    "info",
    "main",
    "recommend",
    "replay",
    "replay_validate",
    "run",
    "show",
    "tune",
    "workloads",
]
