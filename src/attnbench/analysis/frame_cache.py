"""The rows frame of a set of results files, kept on disk between commands: `recommend` and
`report` read the same committed files on every call, and parsing them (JSON, row validation,
flattening) is most of a warm `recommend`'s time.

An entry is keyed by every file's resolved path, size and modification time, and by the size
and modification time of every module of the installed `attnbench` (a changed reader or
migration never serves an old frame). It lives under `$XDG_CACHE_HOME/attnbench/frames/` (else
`~/.cache/...`), is written to a temporary name and renamed (a concurrent reader sees the old
file or the new one, never half of one), and at most `KEEP` entries are kept. Anything that
fails (a full disk, a read-only home, an entry from another Python) only costs a fresh parse.
`ATTNBENCH_FRAME_CACHE=0` turns it off.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import tempfile
from collections.abc import Callable, Sequence
from functools import cache
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")
KEEP = 8
"""Entries kept (the newest by modification time)."""
ENV = "ATTNBENCH_FRAME_CACHE"


def folder() -> Path:
    root = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(root) / "attnbench" / "frames"


@cache
def _code_stamp() -> str:
    """Size and modification time of every module of this package (changes with the code)."""
    pkg = Path(__file__).resolve().parent.parent
    h = hashlib.sha256()
    for f in sorted(pkg.rglob("*.py")):
        st = f.stat()
        h.update(f"{f.relative_to(pkg)}|{st.st_size}|{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def key(paths: Sequence[Path]) -> str | None:
    """The entry's name for `paths` (None: a file cannot be stat'ed; no caching)."""
    h = hashlib.sha256(_code_stamp().encode())
    try:
        for p in paths:
            st = p.stat()
            h.update(f"{p.resolve()}|{st.st_size}|{st.st_mtime_ns}\n".encode())
    except OSError:
        return None
    return h.hexdigest()[:32]


def cached(paths: Sequence[Path], build: Callable[[], T]) -> T:
    """`build()`'s value for `paths`, from the cache when an entry matches, else built and
    stored."""
    name = key(paths) if os.environ.get(ENV, "1") != "0" else None
    if name is None:
        return build()
    entry = folder() / f"{name}.pkl"
    try:
        with entry.open("rb") as f:
            value: T = pickle.load(f)
        return value
    except Exception:  # no entry, or one this Python cannot read: parse the files
        pass
    value = build()
    _store(entry, value)
    return value


def _store(entry: Path, value: object) -> None:
    tmp: str | None = None
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=entry.parent, suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            pickle.dump(value, f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, entry)
        tmp = None
        old = sorted(entry.parent.glob("*.pkl"), key=lambda p: p.stat().st_mtime, reverse=True)
        for stale in old[KEEP:]:
            stale.unlink(missing_ok=True)
    except Exception:  # a cache that cannot be written is no error
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
