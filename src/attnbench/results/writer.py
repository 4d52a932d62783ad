"""Append-only JSONL writer of headers and result rows.

Rows are appended, flushed and fsync'ed one at a time, so a crash or Ctrl-C leaves every
finished row readable; a resumed run appends a new header and the rows it adds. A name ending
in `.gz` is written as gzip: each row is its own gzip member, which every gzip reader (and
`textfile.gunzip`) reads as one stream, so appending to a `.gz` file keeps it gzip.

One writer at a time: the writer holds an exclusive `flock` on the file while it is open, and
notes its pid and host in a `<name>.lock` file beside it, so a second writer of the same file
fails at once with `OutputBusy` naming the first.
"""

from __future__ import annotations

import contextlib
import fcntl
import gzip
import os
import socket
import time
import zlib
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from attnbench.results.jsonsafe import dumps
from attnbench.results.loader import ResultsFileError, interrupted_first_write, read_results
from attnbench.results.textfile import complete_gzip_prefix, gunzip, is_gzip_name


class OutputBusy(OSError):
    """Another process is writing this results file (it holds the file's lock)."""


class ResultWriter:
    """Append-only JSONL writer: each row is written and fsync'ed before `write` returns.

    Writes go straight to the file descriptor (no buffer), so a failed write (disk full) raises
    once, from `write`, and `close` has nothing left to flush."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._created = not path.exists()
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._lock = lock_path(path)
        try:
            _take_lock(self._fd, path)
            drop_torn_tail(path)
        except BaseException:
            os.close(self._fd)
            raise
        self._gzip = is_gzip_name(path)

    def write(self, row: BaseModel | dict[str, Any]) -> None:
        data = row.model_dump(mode="json") if isinstance(row, BaseModel) else row
        line = (dumps(data) + "\n").encode("utf-8")
        _write_all(self._fd, gzip.compress(line, mtime=0) if self._gzip else line)
        os.fsync(self._fd)

    def close(self) -> None:
        if self._fd < 0:
            return
        with contextlib.suppress(OSError):
            self._lock.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            if self._created and os.fstat(self._fd).st_size == 0:
                self.path.unlink()  # nothing was written: leave no empty file behind
        with contextlib.suppress(OSError):
            os.close(self._fd)  # releases the flock
        self._fd = -1

    def __enter__(self) -> ResultWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def lock_path(path: Path) -> Path:
    """`runs/x.jsonl` -> `runs/x.jsonl.lock`: who holds the lock (pid, host, since when)."""
    return path.with_name(path.name + ".lock")


def _take_lock(fd: int, path: Path) -> None:
    """An exclusive lock on `path` (open as `fd`), or OutputBusy naming the holder at once."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise OutputBusy(
            f"{path} is being written by {holder(path)}; wait for it to end, or choose another file"
        ) from None
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    with contextlib.suppress(OSError):
        lock_path(path).write_text(f"pid {os.getpid()} on {socket.gethostname()} since {stamp}\n")


def holder(path: Path) -> str:
    """Who holds `path`'s lock, as its lock file says (`pid N on HOST since TIME`)."""
    try:
        text = lock_path(path).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        text = ""
    return text or "another process"


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def drop_torn_tail(path: Path) -> None:
    """End a results file where its last complete row ends before rows are appended: a last
    line (or gzip member) an interrupted write left incomplete is cut, a complete last line
    gets its newline. Otherwise the next row would glue onto it and make the file unreadable.
    Files that are not results files are left alone."""
    if not path.is_file() or path.stat().st_size == 0:
        return
    if is_gzip_name(path):
        _drop_torn_member(path)
        return
    if path.read_bytes()[-1:] == b"\n":
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


def _drop_torn_member(path: Path) -> None:
    """A `.gz` results file: replace a last gzip member a write left incomplete by the complete
    lines it holds; end the text with a newline when its last line has none."""
    data = path.read_bytes()
    keep = complete_gzip_prefix(data)
    if keep is None:
        return  # not gzip: the reader says so
    tail = b""
    if keep < len(data):
        partial = zlib.decompressobj(zlib.MAX_WBITS | 16).decompress(data[keep:])
        tail = partial[: partial.rfind(b"\n") + 1]
        with path.open("rb+") as f:
            f.truncate(keep)
    elif keep and not gunzip(data, path)[0].endswith(b"\n"):
        tail = b"\n"
    if tail:
        with path.open("ab") as f:
            f.write(gzip.compress(tail, mtime=0))
