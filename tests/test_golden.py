"""Unchanged behaviour: views rendered from committed files match committed golden text.

Each view is `attnbench ARGS` at 80 columns, run from the repository root, compared line by
line with tests/golden/NAME.txt. A refactor that changes what a command prints fails here. When
a change of output is meant, rewrite the golden files and commit them with it:

    ATTNBENCH_UPDATE_GOLDEN=1 python -m pytest -q tests/test_golden.py

The report's first screen (its decision table, from the committed rows) is one more view,
rendered in process. `backends` says what runs on this machine, so its golden text is the CPU
machine's (skipped where CUDA is present).
"""

from __future__ import annotations

import difflib
import os
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from attnbench.cli import app, common

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = Path(__file__).resolve().parent / "golden"
WIDTH = 80

VIEWS: dict[str, list[str]] = {
    "show-h200-brief": ["show", "results/h200-brief.jsonl.gz"],
    "show-h200-fp8-study": ["show", "results/h200-fp8-study.json.gz"],
    "compare-default-fresh-warm": [
        "compare",
        "results/h200-default-fresh.jsonl.gz",
        "results/h200-default-warm.jsonl.gz",
    ],
    "replay-azure-code-120": [
        "replay",
        "results/h200-replay-calibration.jsonl.gz",
        "--trace",
        "azure-code",
        "--limit",
        "120",
    ],
    "recommend-index": ["recommend"],
    "recommend-llama-3.1-8b-vllm": ["recommend", "--model", "llama-3.1-8b", "--engine", "vllm"],
    "recommend-llama-3.1-70b-tp8-none": [
        "recommend",
        "--model",
        "llama-3.1-70b",
        "--tp",
        "8",
        "--engine",
        "none",
    ],
    "models": ["models"],
    "suites": ["suites"],
    "backends-cpu": ["backends"],
}

runner = CliRunner()


def render(args: list[str], monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(common.console, "width", WIDTH)
    monkeypatch.setattr(common.err_console, "width", WIDTH)
    res = runner.invoke(app, args, env={"COLUMNS": str(WIDTH)})
    assert res.exit_code == 0, res.output
    return res.output


@pytest.mark.parametrize("name", sorted(VIEWS))
def test_golden_view(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if name == "backends-cpu" and torch.cuda.is_available():
        pytest.skip("the golden `backends` is the CPU machine's")
    out = render(VIEWS[name], monkeypatch)
    path = GOLDEN / f"{name}.txt"
    if os.environ.get("ATTNBENCH_UPDATE_GOLDEN") == "1":
        path.write_text(out, encoding="utf-8")
    want = path.read_text(encoding="utf-8")
    diff = "".join(
        difflib.unified_diff(
            want.splitlines(keepends=True),
            out.splitlines(keepends=True),
            f"tests/golden/{name}.txt",
            f"attnbench {' '.join(VIEWS[name])}",
            n=1,
        )
    )
    assert out == want, f"output changed (see the module docstring to accept it):\n{diff[:4000]}"


def test_golden_views_are_all_used() -> None:
    """No golden file without its view (a renamed view leaves no stale text behind)."""
    assert {p.stem for p in GOLDEN.glob("*.txt")} == {*VIEWS, "report-first-screen"}


def test_golden_report_first_screen() -> None:
    """The report's decision table: the rows `first_screen_blocks` puts first on the page."""
    from attnbench.analysis.frame import load
    from attnbench.report.first_screen import decision_rows, decisions_from_answers

    frame = load(sorted((ROOT / "results").glob("h200-*.jsonl.gz"))).frame
    out = "".join(" | ".join(r) + "\n" for r in decision_rows(decisions_from_answers(frame)))
    path = GOLDEN / "report-first-screen.txt"
    if os.environ.get("ATTNBENCH_UPDATE_GOLDEN") == "1":
        path.write_text(out, encoding="utf-8")
    assert out == path.read_text(encoding="utf-8"), "the report's first screen changed"
