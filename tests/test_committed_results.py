"""The H200 results committed under results/ are the embedded default: report, recommend,
compare and replay run on them with no GPU (this is what a user without a GPU sees)."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from attnbench.analysis.frame import resolve_paths
from attnbench.analysis.tuning import trials_paths
from attnbench.cli import app
from attnbench.replay.validation_doc import find_validation
from attnbench.results import is_document_path, is_results_path, read_json, read_results

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "results"
runner = CliRunner()


def committed() -> list[Path]:
    """results/ files under version control, plain or gzipped (a run made in this checkout may
    add others, as the README's first command does in CI)."""
    out = subprocess.run(
        ["git", "ls-files", "results"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    return [
        ROOT / p for p in out if p.count("/") == 1 and (is_results_path(p) or is_document_path(p))
    ]


@pytest.fixture(autouse=True)
def _in_repo(monkeypatch: pytest.MonkeyPatch) -> None:
    """Point the default at exactly the committed files."""
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("ATTNBENCH_RESULTS", os.pathsep.join(str(p) for p in committed()))


MIN_COPY_GBPS = {"h200": 3000.0, "h100": 2500.0}
"""Copy ceilings well below what each card measured (H200 4.2 TB/s, H100 3.0 TB/s)."""


def test_committed_results_are_real_gpu_measurements_named_for_their_gpu() -> None:
    """Every results file was measured on the GPU its name says (`h200-*` on an H200,
    `h100-*` on an H100: a call for an H200 may be given an H100)."""
    files = [p for p in committed() if is_results_path(p)]
    assert files
    for f in files:
        rf = read_results(f)
        assert rf.header is not None
        tag = f.name.split("-", 1)[0]
        assert tag in MIN_COPY_GBPS, f.name
        assert tag.upper() in rf.header.device["name"], (f.name, rf.header.device["name"])
        assert rf.header.ceilings is not None
        assert rf.header.ceilings["copy_bandwidth_gbps"] > MIN_COPY_GBPS[tag]
        ok = [r for r in rf.rows if r.status == "ok"]
        if not ok:  # a refusal file (h100-mla-pr1770-fa3: FA3's build lacks the MLA kernel)
            assert rf.rows, f.name
            assert all(r.status == "unsupported" and r.reason for r in rf.rows), f.name
        assert all(r.accuracy and r.accuracy.passed for r in ok)
        assert all(r.measurement and r.measurement.timer != "fake" for r in ok)


def read_by_default(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Every file `report`, `recommend`, `replay` and `findings` read with no RESULTS: the top
    of results/, the trials beside its tuned files, the validation documents in results/replay."""
    monkeypatch.delenv("ATTNBENCH_RESULTS")
    files = resolve_paths(None)
    tuned = [p for p in files if is_results_path(p)]
    return sorted({*files, *trials_paths(tuned), *find_validation(files)})


def test_every_file_read_by_default_names_its_commit(monkeypatch: pytest.MonkeyPatch) -> None:
    files = read_by_default(monkeypatch)
    assert any(p.parent.name == "trials" for p in files)
    for p in files:
        if is_results_path(p):
            shas = [h.provenance.get("git_sha") for h in read_results(p).headers]
        else:
            doc = read_json(p)
            shas = [(doc.get("provenance") or {}).get("git_sha") if isinstance(doc, dict) else None]
        assert shas, p.name
        assert all(s and s != "unknown" for s in shas), (p.name, shas)
    for p in sorted(RESULTS.glob("*.txt")):  # GPU test reports: findings reads them
        assert re.search(r"^=== commit \S+", p.read_text(), re.M), p.name


@pytest.mark.slow
def test_report_on_the_embedded_default(tmp_path: Path) -> None:
    res = runner.invoke(app, ["report", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    md = (tmp_path / "report.md").read_text()
    for section in (
        "Kernels per workload class",
        "Decode latency",
        "Roofline",
        "Raggedness",
        "FP8 KV cache",
        "FP8 numerics",
        "Accuracy",
        "Serving replay",
    ):
        assert f"## {section}" in md, section
    assert "This section failed" not in md
    html = (tmp_path / "report.html").read_text()
    assert "data:image/png;base64," in html
    assert "<script" not in html


@pytest.mark.slow
def test_recommend_on_the_embedded_default(tmp_path: Path) -> None:
    out = tmp_path / "decision.json"
    res = runner.invoke(app, ["recommend", "--json", str(out)])
    assert res.exit_code == 0, res.output
    assert "attnbench recommend --model llama-3.1-70b --tp 8" in res.output
    assert "vllm serve" not in res.output  # the index names no global winner
    assert json.loads(out.read_text())


def test_compare_a_run_with_itself_is_all_ties() -> None:
    f = str(RESULTS / "h200-ragged.jsonl.gz")
    res = runner.invoke(app, ["compare", f, f])
    assert res.exit_code == 0, res.output
    summary = res.output.split("summary:", 1)[1].splitlines()[0]
    assert "slower" not in summary
    assert "faster" not in summary
    assert "tie" in summary


@pytest.mark.slow
def test_replay_on_committed_results_over_a_trace_slice(tmp_path: Path) -> None:
    out = tmp_path / "replay.json"
    res = runner.invoke(
        app,
        [
            "replay",
            str(RESULTS / "h200-replay-calibration.jsonl.gz"),
            "--trace",
            "azure-code",
            "--limit",
            "200",
            "--out",
            str(out),
        ],
    )
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())
    assert doc
