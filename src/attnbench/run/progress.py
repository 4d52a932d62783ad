"""What is running now, for the progress line: which case and variant each worker is on, in
which phase, since when, and when a first plan was long enough to be a kernel compile.

The pool (or the in-process path) turns the workers' `Started`/`Planned`/row messages into
`Activity` values; `Board` keeps the latest per worker and renders one line. Pure: the clock is
an argument, so the CLI redraws the elapsed time without new messages.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Phase = Literal["plan", "run", "idle"]

COMPILE_NOTE_S = 2.0
"""A first-use plan at least this long is reported as a compile (FlashInfer JIT: 15-100 s)."""


@dataclass(frozen=True)
class Activity:
    worker: int
    case_id: str
    backend: str
    phase: Phase
    """`plan` (plan() running: JIT compiles happen here), `run` (gate and measurement), `idle`."""
    since_s: float
    """time.monotonic() when the phase began."""
    first_use: bool = False
    """The variant's first plan on this shape family in its worker process."""
    plan_s: float | None = None
    """For `run`: how long the plan() call took."""


def fmt_s(seconds: float) -> str:
    """`42 s`, `3 min 05 s`."""
    s = max(int(seconds), 0)
    return f"{s} s" if s < 60 else f"{s // 60} min {s % 60:02d} s"


class Board:
    """The latest activity of every worker."""

    def __init__(self) -> None:
        self.activities: dict[int, Activity] = {}

    def update(self, a: Activity) -> str | None:
        """Record `a`; return a note when it ends a first-use plan of COMPILE_NOTE_S or more."""
        self.activities = {**self.activities, a.worker: a}  # replaced whole: safe to render
        if a.phase == "run" and a.first_use and (a.plan_s or 0.0) >= COMPILE_NOTE_S:
            return (
                f"{a.backend}: first plan on this shape took {a.plan_s:.1f} s "
                f"(kernels compiled or loaded on first use); case {a.case_id}"
            )
        return None

    def line(self, now_s: float, width: int = 0) -> str:
        """`case variant: phase 12 s` for the longest-running worker, `(+N more)` for others;
        an empty string when nothing runs. `width` > 0 shortens the case label to fit."""
        busy = sorted(
            (a for a in self.activities.values() if a.phase != "idle"), key=lambda a: a.since_s
        )
        if not busy:
            return ""
        a = busy[0]
        if a.phase == "plan":
            what = "plan, first use (may compile kernels)" if a.first_use else "plan"
        else:
            what = "run"
        tail = f" {a.backend}: {what} {fmt_s(now_s - a.since_s)}"
        if len(busy) > 1:
            tail += f" (+{len(busy) - 1} more)"
        case = a.case_id
        if width and len(case) + len(tail) > width:
            keep = max(width - len(tail) - 1, 8)
            case = case[: keep - 1] + "…" if len(case) > keep else case
        return case + tail
