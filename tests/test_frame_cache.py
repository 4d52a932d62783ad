"""The rows frame kept on disk between commands (`analysis.frame_cache`): the same files read
by the same code come from the cache, a changed file is read again, and a cache that cannot
be read or written only costs a fresh parse."""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd
import pytest

import attnbench.analysis.frame as frame_mod
from attnbench.analysis import frame_cache
from attnbench.analysis.frame import load
from fixtures_results import make_rows, write_results


@pytest.fixture
def on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(frame_cache.ENV, "1")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path


def _counting(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    real = frame_mod._read

    def read(paths: list[Path]) -> frame_mod.Loaded:
        calls.append(len(paths))
        return real(paths)

    monkeypatch.setattr(frame_mod, "_read", read)
    return calls


def test_the_same_files_are_parsed_once_and_a_changed_file_again(
    on: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    res = write_results(on / "rows.jsonl", make_rows())
    calls = _counting(monkeypatch)
    first, second = load([res]), load([res])
    assert calls == [1]
    pd.testing.assert_frame_equal(first.frame, second.frame)
    assert second.paths == [res]
    assert list(frame_cache.folder().glob("*.pkl"))
    st = res.stat()
    os.utime(res, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # the file changed
    load([res])
    assert calls == [1, 1]


def test_off_or_unwritable_the_files_are_parsed_each_time(
    on: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    res = write_results(on / "rows.jsonl", make_rows())
    calls = _counting(monkeypatch)
    monkeypatch.setenv(frame_cache.ENV, "0")
    load([res])
    load([res])
    assert calls == [1, 1]
    monkeypatch.setenv(frame_cache.ENV, "1")
    (on / "cache").write_text("a file where the cache folder should be")
    load([res])
    load([res])
    assert calls == [1, 1, 1, 1]


def test_a_damaged_entry_is_parsed_again(on: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    res = write_results(on / "rows.jsonl", make_rows())
    load([res])
    (entry,) = frame_cache.folder().glob("*.pkl")
    entry.write_bytes(b"not a pickle")
    calls = _counting(monkeypatch)
    assert len(load([res]).frame) == len(make_rows())
    assert calls == [1]
