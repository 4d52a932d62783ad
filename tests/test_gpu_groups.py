"""scripts/h200/gpu_tests.sh: every file with GPU tests runs in exactly one of the routine groups,
and the `gpu_slow` cases in the slow group, so a full pass (its groups, one device call each)
leaves no GPU test out."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "h200" / "gpu_tests.sh"


def _groups() -> dict[str, tuple[str, list[str]]]:
    if shutil.which("bash") is None:
        pytest.skip("no bash here")
    listed = subprocess.run(
        ["bash", str(SCRIPT), "--list"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    groups = {}
    for line in listed.splitlines():
        name, mark, files = line.split("\t")
        groups[name] = (mark, files.split())
    return groups


def _files_using(text: str) -> set[str]:
    """The test files (this one aside) whose source holds `text`."""
    here = Path(__file__).name
    return {
        f"tests/{p.name}"
        for p in (ROOT / "tests").glob("test_*.py")
        if p.name != here and text in p.read_text()
    }


def test_every_gpu_test_file_is_in_one_routine_group_and_slow_cases_in_the_slow_one() -> None:
    groups = _groups()
    assert list(groups) == ["a", "b", "c", "d"]
    routine = [files for mark, files in groups.values() if mark == "gpu and not gpu_slow"]
    assert len(routine) == 3
    listed = [f for files in routine for f in files]
    assert len(listed) == len(set(listed)), "a file in two routine groups runs twice"
    assert set(listed) == _files_using("pytest.mark.gpu")
    slow_mark, slow_files = groups["d"]
    assert slow_mark == "gpu_slow"
    assert set(slow_files) == _files_using("pytest.mark.gpu_slow")
    for _, files in groups.values():
        assert all((ROOT / f).is_file() for f in files), files


def test_unknown_group_is_refused() -> None:
    _groups()
    res = subprocess.run(
        ["bash", str(SCRIPT), "z"], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert res.returncode == 2
    assert "unknown group z (groups: a b c d)" in res.stderr
