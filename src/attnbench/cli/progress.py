"""The live progress line of `run` and `tune`: the case and variant running now with its
elapsed time (redrawn by rich's refresh, so it ticks while a kernel compiles), the bar of
finished (case, variant) pairs, and a printed note when a first plan took long enough to be a
kernel compile. The state is `run.progress.Board`; this module only draws it.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from attnbench.cli.common import console
from attnbench.run.progress import Activity, Board

if TYPE_CHECKING:
    from rich.progress import Task
    from rich.text import Text


class LiveProgress:
    """A rich progress display fed by the session's callbacks."""

    def __init__(self, total: int) -> None:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            ProgressColumn,
            TimeElapsedColumn,
        )

        self.board = Board()
        self.status = "starting"
        """Shown while no variant runs (ceilings, building a case's inputs and reference)."""
        live = self

        class NowColumn(ProgressColumn):
            def render(self, task: Task) -> Text:
                from rich.text import Text

                width = max(console.width - 40, 30)
                text = live.board.line(time.monotonic(), width) or live.status
                return Text(text[:width].ljust(min(width, 60)), no_wrap=True)

        self.progress = Progress(
            NowColumn(),
            BarColumn(bar_width=20),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
            transient=True,
        )
        self.task = self.progress.add_task("", total=total)

    def __enter__(self) -> LiveProgress:
        self.progress.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.progress.stop()

    def stop(self) -> None:
        self.progress.stop()

    def activity(self, a: Activity) -> None:
        """A worker's phase changed; prints a note when a first plan was a long compile."""
        note = self.board.update(a)
        if note:
            self.print(f"note: {note}")

    def set_status(self, text: str) -> None:
        self.status = text

    def advance(self, text: str = "") -> None:
        """One (case, variant) finished; `text` (if any) becomes the idle status."""
        self.progress.update(self.task, advance=1)
        if text:
            self.status = text

    def print(self, text: str) -> None:
        """A plain line above the progress bar (kept after it ends)."""
        self.progress.console.print(text, markup=False, highlight=False)
