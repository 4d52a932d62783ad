"""scripts/h200/headline_clean.sh (issue 48): the headline suites, the fp8 study, fidelity with
nvbench and GPU test groups a-d at a clean commit, within a budget. Its plan (DRY_RUN=1) is
checked here: every suite it runs exists, every file it writes replaces a committed one of the
same name, and it refuses a dirty or unnamed commit in one line."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from attnbench.workload.suite import builtin_suites, load_suite

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "h200" / "headline_clean.sh"
HEADLINE_FILES = {
    "brief",
    "brief70b-paged",
    "fp8",
    "paged64",
    "ragged",
    "shared-prefix",
    "traces",
    "trees",
}
"""The eight H200 files from 37881daa0bf1-dirty that issue 48 names."""

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")


def _run(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if k != "ATTNBENCH_GIT_SHA"}
    full |= {"OUT": str(tmp_path / "out"), "RESUME_DIR": str(tmp_path / "none"), **env}
    return subprocess.run(
        ["bash", str(SCRIPT), *args], cwd=ROOT, env=full, capture_output=True, text=True, timeout=60
    )


def test_a_dirty_or_unnamed_commit_is_refused(tmp_path: Path) -> None:
    res = _run(tmp_path)
    assert res.returncode == 2
    assert res.stderr.strip() == "refused: name the clean commit, ATTNBENCH_GIT_SHA=<sha>"
    res = _run(tmp_path, ATTNBENCH_GIT_SHA="37881daa0bf1-dirty")
    assert res.returncode == 2
    assert "37881daa0bf1-dirty is a dirty tree" in res.stderr


def test_the_plan_runs_every_headline_suite_the_study_fidelity_and_groups_a_to_d(
    tmp_path: Path,
) -> None:
    res = _run(tmp_path, "all", ATTNBENCH_GIT_SHA="abc1234", DRY_RUN="1")
    assert res.returncode == 0, res.stderr
    runs = re.findall(
        r"attnbench run --device cuda --suite (\S+) .* --out \S+/\w+-([\w-]+)\.jsonl", res.stdout
    )
    assert {out for _, out in runs} == HEADLINE_FILES
    committed = {p.name.split(".")[0] for p in (ROOT / "results").glob("h200-*.jsonl*")}
    assert {f"h200-{out}" for _, out in runs} <= committed
    for suite, _ in runs:  # each loads: a built-in name or a file of the checkout
        assert load_suite(suite if suite in builtin_suites() else str(ROOT / suite)).groups
    assert "attnbench fp8 --device cuda --full" in res.stdout
    assert "attnbench fidelity --ncu --resume" in res.stdout
    for g in "abcd":
        assert f"scripts/h200/gpu_tests.sh {g}" in res.stdout


def test_a_small_budget_starts_no_step_it_cannot_hold(tmp_path: Path) -> None:
    res = _run(tmp_path, "tests", ATTNBENCH_GIT_SHA="abc1234", DRY_RUN="1", BUDGET_S="200")
    assert "gpu_tests.sh" not in res.stdout  # group a needs ~185 s x 1.3
    assert "left for the next call" in res.stdout
    assert "gpu-tests-a gpu-tests-b gpu-tests-c gpu-tests-d" in res.stdout


def test_an_earlier_calls_finished_files_are_done_and_stay_out_of_the_returned_files(
    tmp_path: Path,
) -> None:
    """A call returns at most 8 files: a finished suite (its footer last) or a passed group in
    RESUME_DIR is done and not copied to $OUT; an unfinished suite is copied and continued."""
    resume = tmp_path / "resume"
    resume.mkdir()
    (resume / "gpu-ragged.jsonl").write_text('{"type": "footer", "interrupted": false}\n')
    (resume / "gpu-fp8.jsonl").write_text('{"type": "header"}\n')
    (resume / "gpu-gpu-tests-a.txt").write_text("=== group a: -m gpu: exit 0 after 151 s\n")
    res = _run(
        tmp_path, "suites tests", ATTNBENCH_GIT_SHA="abc1234", DRY_RUN="1",
        RESUME_DIR=str(resume), GPU_TAG="gpu",
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    planned = set(re.findall(r"--out \S+/gpu-([\w-]+)\.jsonl", res.stdout))
    assert planned == HEADLINE_FILES - {"ragged"}
    assert "gpu_tests.sh a" not in res.stdout
    assert "gpu_tests.sh b" in res.stdout
    returned = {p.name for p in (tmp_path / "out").iterdir()}
    assert "gpu-fp8.jsonl" in returned
    assert not returned & {"gpu-ragged.jsonl", "gpu-gpu-tests-a.txt"}
