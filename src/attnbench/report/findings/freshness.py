"""Are the GPU tests as new as the code they test? The last full pass of groups a-d per GPU
(the `<gpu>-gpu-tests-<group>.txt` reports) against the last commit that changed the packages
that time kernels (`WATCHED`), from git history where there is one.

Not a figure of the document: how many commits ago a pass ran changes with every commit (and a
clone without history cannot count), so `attnbench findings` (and `--check`) print it, with a
warning when the pass predates the last change; the document shows each report's commit and GPU.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from attnbench.report.findings.core import UNKNOWN
from attnbench.report.findings.runs import GPU_TESTS, GROUP_LINE, PYTEST_SUMMARY, commit_before

WATCHED = ("src/attnbench/backends", "src/attnbench/measure", "src/attnbench/run")
"""The packages whose change makes the last GPU-test pass stale (issue 48)."""
FULL_PASS = ("a", "b", "c", "d")
"""The groups of `scripts/h200/gpu_tests.sh` that make a full pass."""
GIT_TIMEOUT_S = 10


@dataclass(frozen=True)
class GroupReport:
    gpu_tag: str
    group: str
    commit: str
    passed: bool
    """pytest's summary says passed (no failure or error) and the call exited 0."""


def group_report(name: str, text: str) -> GroupReport | None:
    """A GPU test report's GPU, group, commit and verdict; None for any other text file."""
    m = GPU_TESTS.match(name)
    if m is None:
        return None
    group = GROUP_LINE.search(text)
    summary = PYTEST_SUMMARY.search(text)
    passed = (
        group is not None
        and group.group(3) == "0"
        and summary is not None
        and re.search(r"\b\d+ (failed|errors?)\b", summary.group(1)) is None
    )
    return GroupReport(m.group(1), m.group(2), commit_before(text, len(text)), passed)


def last_passes(texts: Mapping[str, str]) -> dict[str, list[str]]:
    """Per GPU tag with a full pass (every group of FULL_PASS passed): the commits its groups
    ran at (one where a pass ran in one session)."""
    by_gpu: dict[str, dict[str, GroupReport]] = {}
    for name, text in texts.items():
        r = group_report(name, text)
        if r is not None:
            by_gpu.setdefault(r.gpu_tag, {})[r.group] = r
    out = {}
    for tag, groups in sorted(by_gpu.items()):
        if all(g in groups and groups[g].passed for g in FULL_PASS):
            out[tag] = list(dict.fromkeys(groups[g].commit for g in FULL_PASS))
    return out


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess[str] | None:
    try:
        return subprocess.run(
            ["git", "-C", str(repo), *args],
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None


def commits_since(repo: Path, commit: str) -> int | None:
    """How many commits HEAD is past `commit` (`git rev-list --count`); None without history."""
    r = _git(repo, "rev-list", "--count", f"{commit}..HEAD")
    return int(r.stdout) if r is not None and r.returncode == 0 and r.stdout.strip() else None


def last_change(repo: Path, paths: Sequence[str] = WATCHED) -> str | None:
    """The last commit that changed any of `paths` (short sha), or None without history."""
    r = _git(repo, "log", "-1", "--format=%h", "--", *(f":(top){p}" for p in paths))
    return r.stdout.strip() or None if r is not None and r.returncode == 0 else None


def is_ancestor(repo: Path, older: str, newer: str) -> bool | None:
    """`older` is `newer` or one of its ancestors; None where git cannot tell."""
    r = _git(repo, "merge-base", "--is-ancestor", older, newer)
    return None if r is None or r.returncode not in (0, 1) else r.returncode == 0


@dataclass(frozen=True)
class Freshness:
    """One GPU's last full pass of the GPU tests against the code's history."""

    gpu_tag: str
    commits: tuple[str, ...]
    """The commits the pass's groups ran at."""
    commits_ago: int | None
    """HEAD's distance from the oldest of them; None without git history."""
    changed_at: str | None
    """The last commit that changed WATCHED; None without git history."""
    stale: bool | None
    """The pass predates that change (None: git cannot tell)."""

    def line(self) -> str:
        """One line for the terminal: the pass, its age, and whether it is stale."""
        at = ", ".join(self.commits)
        ago = (
            f"{self.commits_ago} commits ago"
            if self.commits_ago is not None
            else ("commits ago unknown (no git history here)")
        )
        head = f"GPU tests ({self.gpu_tag}): last full pass at {at}, {ago}"
        if self.stale is None:
            return f"{head}; whether {', '.join(WATCHED)} changed since is unknown"
        if self.stale:
            return (
                f"{head}, older than the last change to {', '.join(WATCHED)} ({self.changed_at})"
                ": run groups a-d at HEAD (scripts/h200/gpu_tests.sh a b c d)"
            )
        return f"{head}; no change to {', '.join(WATCHED)} since"


def freshness(repo: Path, gpu_tag: str, commits: Sequence[str]) -> Freshness:
    """`gpu_tag`'s pass at `commits` against `repo`'s history (graceful without one)."""
    known = [c for c in commits if c != UNKNOWN]
    ages = [a for c in known if (a := commits_since(repo, c)) is not None]
    ago = max(ages) if known and len(ages) == len(known) else None
    changed = last_change(repo)
    verdicts = [is_ancestor(repo, changed, c) for c in known] if changed else []
    stale = None if not known or changed is None or None in verdicts else not all(verdicts)
    return Freshness(gpu_tag, tuple(commits), ago, changed, stale)


def gpu_test_freshness(texts: Mapping[str, str], repo: Path) -> list[Freshness]:
    """Every GPU's last full pass, from the reports among `texts`, against `repo`."""
    return [freshness(repo, tag, commits) for tag, commits in last_passes(texts).items()]
