"""`ATTNBENCH_PROFILE=DIR`: a run's processes write their cProfile statistics there; off
unless set, and accepted by the settings' check of `ATTNBENCH_*` names."""

from __future__ import annotations

import pstats
from pathlib import Path

import pytest

from attnbench.config import OTHER_ENV_VARS
from attnbench.run.profiling import PROFILE_ENV, profiled


def _work() -> int:
    return sum(i * i for i in range(1000))


def test_a_profiled_block_writes_its_statistics(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(PROFILE_ENV, str(tmp_path / "prof"))
    with profiled("worker"):
        _work()
    (written,) = (tmp_path / "prof").glob("worker-*.prof")
    names = {fn for (_, _, fn) in pstats.Stats(str(written)).stats}  # type: ignore[attr-defined]
    assert "_work" in names


def test_unset_it_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(PROFILE_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    with profiled("run"):
        _work()
    assert list(tmp_path.iterdir()) == []


def test_it_is_a_known_variable() -> None:
    assert PROFILE_ENV in OTHER_ENV_VARS
