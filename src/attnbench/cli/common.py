"""Shared CLI helpers: one console, one way to fail, one check of output paths, exit codes."""

from __future__ import annotations

import codecs
import contextlib
import os
import re
import sys
import tempfile
from pathlib import Path
from typing import NoReturn

import typer
from rich.console import Console
from rich.markup import escape


def _width(stream: object) -> int | None:
    """A terminal's own width; else `$COLUMNS` when set (`COLUMNS=80 attnbench show F | less`);
    else 160, wide enough for result tables in a file or a CI log (rich would assume 80)."""
    if getattr(stream, "isatty", lambda: False)():
        return None
    columns = os.environ.get("COLUMNS", "").strip()
    return int(columns) if columns.isdigit() and int(columns) > 0 else 160


ASCII_SPELLING = {
    "µ": "u",
    "×": "x",
    "…": "...",
    "±": "+/-",
    "≥": ">=",
    "≤": "<=",
    "→": "->",
    "—": "-",
    "–": "-",
    "·": ".",
    "≈": "~",
}
"""What a terminal that cannot print a character gets instead (`µs` -> `us`); others: `?`."""


def _ascii_spelling(err: UnicodeError) -> tuple[str, int]:
    if not isinstance(err, UnicodeEncodeError):
        raise err
    bad = err.object[err.start : err.end]
    return "".join(ASCII_SPELLING.get(c, "?") for c in bad), err.end


codecs.register_error("attnbench-ascii", _ascii_spelling)


def tolerate_narrow_encoding() -> None:
    """On a terminal whose encoding cannot print `µ` (PYTHONIOENCODING=ascii, a latin-1 pipe),
    print its ASCII spelling instead of ending in a UnicodeEncodeError."""
    for stream in (sys.stdout, sys.stderr):
        encoding = getattr(stream, "encoding", None) or "utf-8"
        try:
            "µ×…".encode(encoding)
        except (UnicodeEncodeError, LookupError):
            reconfigure = getattr(stream, "reconfigure", None)
            if reconfigure is not None:
                reconfigure(errors="attnbench-ascii")


# No emoji codes: data such as `root:x:0` must not print as `root❌0`.
console = Console(width=_width(sys.stdout), emoji=False)
err_console = Console(stderr=True, width=_width(sys.stderr), emoji=False)

EXIT_OK = 0
"""Measured, written or printed what was asked."""
EXIT_REGRESSION = 1
"""`compare` found a significant slowdown or an ok -> failed case; `findings --check` a figure
that differs from what the files give."""
EXIT_BAD_INPUT = 2
"""A flag, setting, file or path is wrong (the one-line message names it)."""
EXIT_NOTHING_RAN = 3
"""Nothing could run here: every case was unsupported or failed, or the command needs a GPU."""
EXIT_INTERRUPTED = 130
"""Ctrl-C: finished rows are kept (`run --resume` finishes the run)."""

EXIT_CODES_HELP = (
    "Exit codes: 0 ok (measured / written); 1 `compare` found a regression (or `findings "
    "--check` a figure that differs from the files); "
    "2 bad input (the message names the flag, setting or file; `recommend`: no answer in the "
    "rows); "
    "3 nothing could run (every case unsupported or failed, the fp64 reference alone is not a "
    "run, or no GPU for a GPU-only step); "
    "130 interrupted (finished rows are kept)."
)


GIT_SHA_ENV = "ATTNBENCH_GIT_SHA"
_GIT_REF = re.compile(r"[0-9A-Za-z][0-9A-Za-z._/+-]{0,99}")


def check_git_sha_env() -> None:
    """`ATTNBENCH_GIT_SHA` goes verbatim into every file header: refuse a value that is not
    one commit name (hex, a ref such as v1.2 or main, `-dirty` allowed), before any work."""
    value = os.environ.get(GIT_SHA_ENV)
    if value and not _GIT_REF.fullmatch(value):
        fail(
            f"{GIT_SHA_ENV}={value!r} is not a commit name: allowed one line of letters, "
            "digits and . _ / + - (e.g. 1a2b3c4d5e6f, 1a2b3c4d5e6f-dirty, v1.2), at most 100"
        )


def fail(message: str, code: int = EXIT_BAD_INPUT) -> NoReturn:
    """Print one clear line (no traceback) and exit. The message is plain text, not markup."""
    err_console.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def every_if_all(names: list[str] | None, flag: str = "--backend") -> list[str]:
    """The variant names a filter keeps; `all` (what `run --help` shows as the default) keeps
    every one, as an empty filter. `all` beside other names is refused, as `run` refuses it."""
    names = list(names or [])
    rest = [n for n in names if n.strip().lower() != "all"]
    if len(rest) == len(names):
        return names
    if rest:
        fail(f"{flag}: all (every variant) cannot be combined with {', '.join(rest)}")
    return []


def note(message: str) -> None:
    """One plain-text message on stderr, wrapped at spaces to the terminal's width (square
    brackets in it are kept, not read as markup)."""
    err_console.print(f"[yellow]note:[/] {escape(message)}", highlight=False)


def print_fitted(renderable: object, keys: int = 1, out: Console | None = None) -> None:
    """A rich table split by columns into parts that fit the console `out` (default: the
    one console; `keys` leading columns repeat in each part: `report.table.fit_columns`);
    anything else printed as it is."""
    from rich.table import Table

    from attnbench.report.table import fit_columns

    out = out or console
    if not isinstance(renderable, Table):
        out.print(renderable)
        return
    for part in fit_columns(renderable, out.width, out, keys=keys):
        out.print(part)


def check_input_file(path: Path, command: str) -> None:
    """Fail unless `path` is a file to read: a folder or a missing path is one line saying
    which (`show` and `export` read files; `report` and `recommend` take folders)."""
    if path.is_dir():
        fail(
            f"{path}: is a folder; `attnbench {command}` reads results files: give them, "
            f"e.g. `attnbench {command} {path / '*.jsonl*'}`"
        )
    if not path.exists():
        fail(f"{path}: no such file")


def check_output_file(path: Path, flag: str) -> None:
    """Fail now, before any work, unless `path` can be written as a file.

    Rejects a directory, something that is not a regular file (a device such as /dev/full, a
    pipe), a parent that is a file, and a place this process cannot create or write the file.
    Nothing is left behind: a probe file or folder made here is removed again.
    """
    if path.is_dir():
        fail(f"{flag}={path} is a directory; give a file path, e.g. {path / 'out.json'}")
    if path.exists() and not path.is_file():
        fail(f"{flag}={path} is not a regular file; give a file path")
    made = _make_parents(path.parent, flag, path)
    try:
        existed = path.exists()
        try:
            with path.open("a", encoding="utf-8"):
                pass
        except OSError as exc:
            fail(f"{flag}={path} cannot be written: {exc.strerror or exc}")
        if not existed:
            path.unlink(missing_ok=True)
    finally:
        _remove_dirs(made)


def check_output_dir(path: Path, flag: str) -> None:
    """Fail now, before any work, unless files can be written inside the folder `path`."""
    if path.exists() and not path.is_dir():
        fail(f"{flag}={path} is an existing file; give a folder (it is created if missing)")
    made = _make_parents(path, flag, path)
    try:
        try:
            with tempfile.TemporaryFile(dir=path):
                pass
        except OSError as exc:
            fail(f"{flag}={path} cannot be written: {exc.strerror or exc}")
    finally:
        _remove_dirs(made)


def write_output(path: Path, text: str, flag: str) -> None:
    """Write a whole output file; a failure (disk full, removed folder) is one line naming
    the flag, not a traceback."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        fail(f"{flag}={path}: writing failed: {exc.strerror or exc}")


class RowWriteFailed(Exception):
    """A results file could not take a row (disk full, file gone read-only...); the OSError
    is its cause. Raised from the row callbacks so the command can say so in one line."""

    def describe(self) -> str:
        err = self.__cause__
        return err.strerror if isinstance(err, OSError) and err.strerror else str(err)


def _make_parents(folder: Path, flag: str, path: Path) -> list[Path]:
    """Create `folder` and its missing parents; return those created (deepest last)."""
    missing: list[Path] = []
    p = folder
    while not p.exists():
        missing.append(p)
        if p.parent == p:
            break
        p = p.parent
    if p.exists() and not p.is_dir():
        fail(f"{flag}={path}: {p} is a file, not a folder")
    made: list[Path] = []
    for d in reversed(missing):
        try:
            d.mkdir()
        except FileExistsError:
            continue
        except OSError as exc:
            _remove_dirs(made)
            fail(f"{flag}={path}: cannot create folder {d}: {exc.strerror or exc}")
        made.append(d)
    return made


def _remove_dirs(made: list[Path]) -> None:
    for d in reversed(made):
        with contextlib.suppress(OSError):
            d.rmdir()


def flag_for(name: str, source: str) -> str:
    """`--out` when the value came from the command line, else the setting and its source."""
    if source == "cli":
        return "--" + name.replace("_", "-")
    env = f"ATTNBENCH_{name.upper()}"
    where = {"env": f"environment {env}", ".env": f".env {env}"}.get(source, source)
    return f"{name} (from {where})"
