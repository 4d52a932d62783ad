"""Append-only JSONL writer of headers and result rows.

Rows are appended, flushed and fsync'ed one at a time, so a crash or Ctrl-C leaves every
finished row readable; a resumed run appends a new header and the rows it adds.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from attnbench.results.jsonsafe import dumps
from attnbench.results.loader import ResultsFileError, interrupted_first_write, read_results


class ResultWriter:
    """Append-only JSONL writer: each row is flushed and fsync'ed before `write` returns."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        drop_torn_tail(path)
        self._f = path.open("a", encoding="utf-8")

    def write(self, row: BaseModel | dict[str, Any]) -> None:
        data = row.model_dump(mode="json") if isinstance(row, BaseModel) else row
        self._f.write(dumps(data) + "\n")
        self._f.flush()
        os.fsync(self._f.fileno())

    def close(self) -> None:
        self._f.close()

    def __enter__(self) -> ResultWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def drop_torn_tail(path: Path) -> None:
    """End a results file with a newline before rows are appended: a last line an interrupted
    write left incomplete (`read_results` skips it with a warning) is cut, a complete one gets
    its newline. Otherwise the next row would glue onto it and make the file unreadable.
    Files that are not results files are left alone."""
    if not path.is_file() or path.read_bytes()[-1:] in (b"", b"\n"):
        return
    if interrupted_first_write(path):
        path.write_bytes(b"")
        return
    try:
        torn = any("torn last line" in w for w in read_results(path).warnings)
    except ResultsFileError:
        return
    with path.open("rb+") as f:
        if torn:
            f.truncate(path.read_bytes().rfind(b"\n") + 1)
        else:  # a complete last row whose newline was not written
            f.seek(0, os.SEEK_END)
            f.write(b"\n")
