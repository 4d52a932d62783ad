"""Which gate a row passed and from what tree: the gate is the eager accuracy check alone, or
also the timed-output check (the output the timed calls left, checked again after timing: such
rows carry `timed_rel_l2_err`); the tree is the commit its run's header names, clean or
uncommitted (a git sha ending in `-dirty`). Today's gate is both checks on a clean tree; the
findings and the report label every file, and every headline drawn from other rows says so.
Pure: rows in, labels out.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import pandas as pd

GATE_TIMED = "eager + timed output"
"""Rows that passed the accuracy gate before timing and the timed-output check after it."""
GATE_EAGER = "eager only"
"""Rows from before the timed-output check: the accuracy gate before timing only."""
DIRTY_SUFFIX = "-dirty"
"""How `results.provenance.git_sha` marks a tree with uncommitted edits."""
TIMED_COLUMN = "timed_rel_l2_err"

__all__ = [
    "DIRTY_SUFFIX",
    "GATE_EAGER",
    "GATE_TIMED",
    "Evidence",
    "caveat_by_gpu",
    "evidence",
    "evidence_of_commits",
    "is_dirty",
]


def is_dirty(sha: object) -> bool:
    """A git sha naming an uncommitted tree (`37881daa0bf1-dirty`)."""
    return str(sha).strip().strip("`").endswith(DIRTY_SUFFIX)


def _dirty_commits(commits: Iterable[object]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(str(c).strip().strip("`") for c in commits if is_dirty(c)))


@dataclass(frozen=True)
class Evidence:
    """The gate and tree of some `ok` rows (or of documents, by their commits alone)."""

    rows: int = 0
    """`ok` rows counted (0: the figure is not drawn from result rows)."""
    eager_only: int = 0
    """Of them, rows without the timed-output check."""
    dirty_rows: int = 0
    """Of them, rows whose run named an uncommitted tree."""
    dirty_commits: tuple[str, ...] = ()
    """The uncommitted trees named (`37881daa0bf1-dirty`), rows' or documents'."""

    @property
    def gate(self) -> str:
        """`eager + timed output`, `eager only`, or how many rows are eager only; `-` for none."""
        if not self.rows:
            return "-"
        if not self.eager_only:
            return GATE_TIMED
        if self.eager_only == self.rows:
            return GATE_EAGER
        return f"{GATE_EAGER}: {self.eager_only} of {self.rows} rows"

    @property
    def tree(self) -> str:
        """`clean`, `dirty (SHA)`, or how many rows are from a dirty tree."""
        if not self.dirty_commits:
            return "clean"
        shas = ", ".join(self.dirty_commits)
        if self.rows and self.dirty_rows < self.rows:
            return f"dirty ({shas}): {self.dirty_rows} of {self.rows} rows"
        return f"dirty ({shas})"

    @property
    def at_todays_gate(self) -> bool:
        return not self.eager_only and not self.dirty_commits

    def caveat(self) -> str:
        """What a headline drawn from these rows must say ("" at today's gate)."""
        parts = []
        if self.dirty_commits:
            shas = ", ".join(self.dirty_commits)
            counted = f"{self.dirty_rows} of {self.rows} rows " if self.rows else ""
            parts.append(f"{counted}from an uncommitted tree ({shas})")
        if self.eager_only:
            parts.append(
                f"{self.eager_only} of {self.rows} rows eager gate only (no timed-output check)"
            )
        return "; ".join(parts)

    def __add__(self, other: Evidence) -> Evidence:
        return Evidence(
            self.rows + other.rows,
            self.eager_only + other.eager_only,
            self.dirty_rows + other.dirty_rows,
            tuple(dict.fromkeys(self.dirty_commits + other.dirty_commits)),
        )


def _side(rows: pd.DataFrame, sha: str, suffix: str) -> Evidence:
    """One side of `rows` (`suffix` "" or a pair's `_b`): its ok rows' gate and tree."""
    if f"{sha}{suffix}" not in rows.columns:
        return Evidence()
    status = rows.get(f"status{suffix}")
    ok = rows if status is None else rows[status == "ok"]
    shas = [str(s) for s in ok[f"{sha}{suffix}"]]
    timed = ok.get(f"{TIMED_COLUMN}{suffix}")
    checked = int(timed.notna().sum()) if timed is not None else 0
    dirty = [s for s in shas if is_dirty(s)]
    return Evidence(len(shas), len(shas) - checked, len(dirty), _dirty_commits(dirty))


def evidence(rows: pd.DataFrame, sha: str = "commit") -> Evidence:
    """The gate and tree of the `ok` rows of `rows` (every row where there is no `status`),
    each row's commit in column `sha`; a frame of pairs (`x` and `x_b` columns) counts both."""
    if rows.empty:
        return Evidence()
    return _side(rows, sha, "") + _side(rows, sha, "_b")


def evidence_of_commits(commits: Iterable[object]) -> Evidence:
    """The tree of documents or reports, from the commits they name (no rows, no gate)."""
    return Evidence(dirty_commits=_dirty_commits(commits))


def caveat_by_gpu(rows: pd.DataFrame, sha: str = "commit") -> str:
    """`evidence(rows).caveat()`, told per GPU where `rows` span GPUs (column `gpu`): a
    headline over an H100 at today's gate and an H200 from an older tree says which is which
    ("H200: 214 of 555 rows from an uncommitted tree (...); H100 80GB HBM3: at today's gate")."""
    if rows.empty or "gpu" not in rows.columns or rows["gpu"].nunique() < 2:
        return evidence(rows, sha).caveat()
    behind: list[str] = []
    at_gate: list[str] = []
    for gpu, mine in rows.groupby(rows["gpu"].astype(str), sort=True):
        name = str(gpu).removeprefix("NVIDIA ").strip()
        caveat = evidence(mine, sha).caveat()
        if caveat:
            behind.append(f"{name}: {caveat.replace('; ', ', ')}")
        else:
            at_gate.append(name)
    if behind and at_gate:
        behind.append(f"{', '.join(at_gate)}: at today's gate")
    return "; ".join(behind)
