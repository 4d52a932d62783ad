"""Where a user's own runs go: `runs/` (git ignores it), or the folder `$ATTNBENCH_RESULTS`
names. The committed H200 measurements stay in `results/`, the report's embedded default."""

from __future__ import annotations

import os
from pathlib import Path

RUNS_DIR = Path("runs")
RESULTS_ENV = "ATTNBENCH_RESULTS"
_PATTERN_CHARS = "*?["


def runs_dir() -> Path:
    """`$ATTNBENCH_RESULTS` when it names one folder (an existing folder, or a path that is not
    a file, a glob or a list: reading commands then find the new runs there too), else
    `runs/` of the current directory."""
    env = os.environ.get(RESULTS_ENV, "").strip()
    if not env or os.pathsep in env or any(c in env for c in _PATTERN_CHARS):
        return RUNS_DIR
    path = Path(env)
    if path.is_dir() or (not path.exists() and not path.name.endswith((".jsonl", ".json", ".gz"))):
        return path
    return RUNS_DIR
