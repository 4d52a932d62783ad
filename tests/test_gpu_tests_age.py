"""The GPU tests' age (`report.findings.freshness`): each GPU's last full pass of groups a-d,
how many commits ago it ran, and whether it predates the last change to the packages that time
kernels, on a synthetic git history (and gracefully without one)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from attnbench.cli import app
from attnbench.report.findings.freshness import (
    Freshness,
    freshness,
    gpu_test_freshness,
    last_passes,
)

needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="no git")


def _report(group: str, commit: str, summary: str = "3 passed", rc: int = 0) -> str:
    return (
        f"...\n{summary} in 12.50s\n=== group {group}: -m gpu: exit {rc} after 14 s\n"
        f"=== commit {commit}; 2026-01-01T00:00:00Z\n"
    )


def _reports(commit: str, tag: str = "h200", **override: str) -> dict[str, str]:
    return {f"{tag}-gpu-tests-{g}.txt": override.get(g, _report(g, commit)) for g in "abcd"}


def test_a_full_pass_needs_every_group_passed() -> None:
    assert last_passes(_reports("1234abc")) == {"h200": ["1234abc"]}
    failed = _reports("1234abc", c=_report("c", "1234abc", "2 failed, 3 passed", rc=1))
    assert last_passes(failed) == {}
    cut = _reports("1234abc", d=_report("d", "1234abc", rc=124))
    assert last_passes(cut) == {}
    missing = {k: v for k, v in _reports("1234abc").items() if not k.endswith("-b.txt")}
    assert last_passes(missing) == {}
    two = _reports("1234abc") | _reports("5678def", tag="h100")
    assert last_passes(two) == {"h100": ["5678def"], "h200": ["1234abc"]}


def _git(repo: Path, *args: str) -> str:
    cmd = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args]
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip()


def _commit(repo: Path, path: str, text: str) -> str:
    f = repo / path
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_text(text)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", path)
    return _git(repo, "rev-parse", "--short", "HEAD")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    _git(tmp_path, "init", "-q")
    return tmp_path


@needs_git
def test_a_pass_after_the_last_change_is_fresh_and_one_before_it_is_stale(repo: Path) -> None:
    changed = _commit(repo, "src/attnbench/run/sweep.py", "v1")
    tested = _commit(repo, "docs/notes.md", "a doc change")
    fresh = freshness(repo, "h200", [tested])
    assert fresh == Freshness("h200", (tested,), 0, changed, False)
    assert "0 commits ago; no change to" in fresh.line()

    _commit(repo, "README.md", "unwatched")
    later = _commit(repo, "src/attnbench/measure/engine.py", "v2")
    stale = freshness(repo, "h200", [tested])
    assert stale == Freshness("h200", (tested,), 2, later, True)
    assert "older than the last change to src/attnbench/backends" in stale.line()
    assert f"({later}): run groups a-d at HEAD" in stale.line()
    # a pass whose groups ran at two commits is as old as its oldest
    mixed = freshness(repo, "h200", [tested, later])
    assert (mixed.commits_ago, mixed.stale) == (2, True)
    assert freshness(repo, "h200", [later]).stale is False


@needs_git
def test_without_the_commit_in_history_the_age_is_unknown(repo: Path) -> None:
    _commit(repo, "src/attnbench/backends/x.py", "v1")
    age = freshness(repo, "h200", ["0123abc"])  # a shallow clone lacks the pass's commit
    assert (age.commits_ago, age.stale) == (None, None)
    assert "commits ago unknown" in age.line()


def test_outside_a_git_repository_nothing_fails(tmp_path: Path) -> None:
    (age,) = gpu_test_freshness(_reports("1234abc"), tmp_path / "nowhere")
    assert (age.commits_ago, age.changed_at, age.stale) == (None, None, None)
    assert age.line().startswith("GPU tests (h200): last full pass at 1234abc, commits ago")


@needs_git
def test_findings_warns_when_the_pass_is_stale_and_keeps_its_exit_status(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tested = _commit(repo, "src/attnbench/backends/x.py", "v1")
    for name, text in _reports(tested).items():
        (repo / "results").mkdir(exist_ok=True)
        (repo / "results" / name).write_text(text)
    later = _commit(repo, "src/attnbench/run/sweep.py", "v2")
    monkeypatch.chdir(repo)
    res = CliRunner().invoke(app, ["findings", "results", "-o", "doc.md"])
    assert res.exit_code == 0, res.output
    flat = " ".join(res.output.split())
    assert f"warning: GPU tests (h200): last full pass at {tested}, 1 commits ago" in flat
    assert f"({later})" in flat


def test_a_failing_group_is_listed_and_its_headline_names_the_failure() -> None:
    """The findings' GPU-tests table keeps a failing group's report (failures are data), and
    its headline says `1 failed, 133 passed`, not a pass."""
    import pandas as pd

    from attnbench.report.findings import Inputs
    from attnbench.report.findings.runs import gpu_tests

    summary = "1 failed, 133 passed, 3 skipped, 245 deselected, 2 warnings"
    texts = {
        "h100-gpu-tests-a.txt": _report("a", "5dde9ff", summary, rc=1),
        "h100-gpu-tests-b.txt": _report("b", "5dde9ff", "21 passed, 107 deselected"),
    }
    sec = gpu_tests(Inputs(rows=pd.DataFrame(), texts=texts))
    assert sec is not None
    assert [r[2] for r in sec.tables[0].rows] == [summary, "21 passed, 107 deselected"]
    assert sec.headlines[0].figure == "a: 1 failed, 133 passed; b: 21 passed; at 5dde9ff"
