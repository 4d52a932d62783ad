"""Where a command may append rows (`run`, `tune`, `recommend --measure`): the committed
evidence is read-only to commands.

`guard_out` refuses, before any work, an `--out` inside the committed `results/` folder (the
checkout's, or the one shipped in the package) unless `--into-results` is given, and an
existing file unless `--resume` (finish its run) or `--append` (add a new run to it) is given.
The writer (`results.ResultWriter`) then writes gzip for a `.gz` name and holds the file's
lock, so two writers of one file cannot interleave.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from attnbench.cli.common import fail

INTO_RESULTS = "--into-results"
"""The flag that lets a command add a file to the committed results/ folder."""
APPEND = "--append"
"""The flag that lets a command add a new run to an existing results file."""


@dataclass(frozen=True)
class OutFlags:
    """The explicit flags that widen where rows may go."""

    append: bool = False
    into_results: bool = False

    def as_kwargs(self) -> dict[str, bool]:
        return {"append": self.append, "into_results": self.into_results}


def committed_folders() -> list[Path]:
    """The folders of committed evidence: the source checkout's `results/` (beside its
    `pyproject.toml`) and the package's shipped `attnbench/data/results/`, resolved."""
    package = Path(str(resources.files("attnbench"))).resolve()
    root = package.parent.parent
    found = [package / "data" / "results"]
    if (root / "pyproject.toml").is_file():
        found.append(root / "results")
    return [f for f in found if f.is_dir()]


def committed_folder_of(path: Path) -> Path | None:
    """The committed folder `path` lies in, else None."""
    where = path.resolve()
    for folder in committed_folders():
        if where.is_relative_to(folder):
            return folder
    return None


def guard_out(
    path: Path, flag: str, *, resume: bool, append: bool = False, into_results: bool = False
) -> None:
    """Fail in one line unless rows may be appended to `path` (see the module's docstring)."""
    folder = committed_folder_of(path)
    if folder is not None and not into_results:
        fail(
            f"{flag}={path} is inside the committed results folder {folder}, which commands do "
            f"not change: write elsewhere (the default is a new file in runs/), or pass "
            f"{INTO_RESULTS} to add a file there on purpose"
        )
    if _holds_rows(path) and not (resume or append):
        fail(
            f"{flag}={path} exists: pass --resume to finish its run, {APPEND} to add a new run "
            "to it, or choose another file"
        )


def _holds_rows(path: Path) -> bool:
    """A file with content, beyond the start of a header a killed run left (started afresh)."""
    from attnbench.results import interrupted_first_write

    return path.is_file() and path.stat().st_size > 0 and not interrupted_first_write(path)
