"""`attnbench findings --check` holds the figures to what they rest on: every row's bandwidth
and FLOP/s fractions to its latency and its header's ceilings, every replay-validation figure
to the rows it was measured from, and the held-out count to its stated rule."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from attnbench.cli import app
from attnbench.replay.loto import count_rule
from attnbench.replay.validate import MIN_STEPS, TARGET_MEDIAN, TARGET_P90, target_text
from attnbench.report.findings import build, load_inputs
from attnbench.report.findings.basis import check_basis
from attnbench.results import read_results
from attnbench.results.fractions import FRACTIONS, fraction_mismatches

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "results"
ROWS = "h200-ragged.jsonl.gz"
CUDNN = "h200-replay-validation-cudnn"
HELDOUT = "h200-replay-validation-heldout"
runner = CliRunner()


def _lines(path: Path) -> list[dict[str, object]]:
    with gzip.open(path, "rt") as f:
        return [json.loads(line) for line in f]


def _write_lines(path: Path, lines: list[dict[str, object]]) -> None:
    with gzip.open(path, "wt") as f:
        f.writelines(json.dumps(d) + "\n" for d in lines)


def _doc(path: Path) -> dict[str, object]:
    with gzip.open(path, "rt") as f:
        data: dict[str, object] = json.load(f)
    return data


def _write_doc(path: Path, doc: dict[str, object]) -> None:
    with gzip.open(path, "wt") as f:
        json.dump(doc, f)


def _validation_copy(tmp_path: Path, name: str, rows: str) -> tuple[Path, Path]:
    """A validation document in `tmp_path` and its rows in `tmp_path/replay/`."""
    (tmp_path / "replay").mkdir()
    doc = tmp_path / f"{name}.json.gz"
    shutil.copy(RESULTS / doc.name, doc)
    rows_path = tmp_path / "replay" / f"{rows}.jsonl.gz"
    shutil.copy(RESULTS / "replay" / rows_path.name, rows_path)
    return doc, rows_path


def test_the_committed_figures_are_what_their_rows_give() -> None:
    basis = check_basis([RESULTS])
    assert basis.lines == []
    assert basis.rows > 5000
    assert basis.documents == 5
    assert basis.steps == 2080


def test_every_fraction_of_a_committed_file_is_rederived() -> None:
    rf = read_results(RESULTS / ROWS)
    measured = [(i, r) for i, r in enumerate(rf.rows) if r.status == "ok" and r.latency_us]
    assert measured
    for i, r in measured:
        assert fraction_mismatches(r, rf.header_at(i)) == []
    i, r = measured[0]
    assert all(getattr(r, f) is not None for f in FRACTIONS)
    r.latency_us = float(r.latency_us or 0) * 1.01
    assert [m[0] for m in fraction_mismatches(r, rf.header_at(i))] == list(FRACTIONS)


def test_a_fraction_its_latency_does_not_give_fails_in_one_line(tmp_path: Path) -> None:
    lines = _lines(RESULTS / ROWS)
    row = next(d for d in lines if d.get("type") == "result" and d.get("status") == "ok")
    stored = float(str(row["bandwidth_frac_measured"]))
    row["bandwidth_frac_measured"] = stored * 1.5
    path = tmp_path / ROWS
    _write_lines(path, lines)
    basis = check_basis([path])
    assert len(basis.lines) == 1
    line = basis.lines[0]
    assert line.startswith(f"{ROWS}: {row['case_id']} {row['backend']}: bandwidth_frac_measured")
    assert f"stored {stored * 1.5:.10g}" in line
    assert f"recomputed {stored:.10g} (" in line
    res = runner.invoke(app, ["findings", str(path), "--out", str(tmp_path / "f.md"), "--check"])
    assert res.exit_code == 1
    assert "bandwidth_frac_measured stored" in res.output


def test_a_validation_step_its_row_does_not_give_fails(tmp_path: Path) -> None:
    doc_path, _ = _validation_copy(tmp_path, CUDNN, CUDNN)
    assert check_basis([tmp_path]).lines == []
    doc = _doc(doc_path)
    steps = doc["steps"]
    assert isinstance(steps, list)
    steps[0]["measured_us"] *= 0.5
    _write_doc(doc_path, doc)
    lines = check_basis([tmp_path]).lines
    s = steps[0]
    assert lines[0].startswith(
        f"{doc_path.name}: step {s['trace']}:{s['step']} {s['backend']} measured_us: stated"
    )
    assert not any("rel_err" in line for line in lines)  # the error follows the new time


def test_a_validation_statistic_its_rows_do_not_give_fails(tmp_path: Path) -> None:
    doc_path, _ = _validation_copy(tmp_path, CUDNN, CUDNN)
    doc = _doc(doc_path)
    summary = doc["summary"]
    assert isinstance(summary, dict)
    summary["sdpa:cudnn"]["p90_abs_err"] = 0.05
    _write_doc(doc_path, doc)
    (line,) = check_basis([tmp_path]).lines
    assert line.startswith(f"{doc_path.name}: summary sdpa:cudnn p90_abs_err: stated 0.05")


def test_a_heldout_trace_verdict_its_rows_do_not_give_fails(tmp_path: Path) -> None:
    doc_path, rows = _validation_copy(tmp_path, HELDOUT, "h200-replay-heldout")
    assert check_basis([doc_path]).lines == []
    doc = _doc(doc_path)
    per_trace = doc["per_trace"]
    assert isinstance(per_trace, dict)
    trace, name = next(
        (t, n) for t, by in per_trace.items() for n, s in by.items() if not s["meets_target"]
    )
    per_trace[trace][name]["meets_target"] = True
    _write_doc(doc_path, doc)
    (line,) = check_basis([doc_path]).lines
    assert line == f"{doc_path.name}: {trace} {name} meets_target: stated True, from the rows False"
    rows.unlink()
    (line,) = check_basis([doc_path]).lines
    assert line.startswith(f"{doc_path.name}: its rows (h200-replay-heldout.jsonl[.gz]) are not")


def test_a_validation_row_that_is_gone_is_named(tmp_path: Path) -> None:
    doc_path, rows = _validation_copy(tmp_path, CUDNN, CUDNN)
    lines = _lines(rows)
    last = max(i for i, d in enumerate(lines) if d.get("type") == "result")
    gone = lines.pop(last)
    _write_lines(rows, lines)
    found = check_basis([doc_path]).lines
    missing = [line for line in found if "no row in" in line]
    assert len(missing) == 1
    assert str(gone["backend"]) in missing[0]


@pytest.fixture(scope="module")
def heldout_text() -> str:
    inputs = load_inputs([RESULTS / f"{HELDOUT}.json.gz"])
    (sec,) = [s for s in build(inputs) if s.title == "Replay validation"]
    cells = [c for t in sec.tables for r in t.rows for c in r]
    return "\n".join([sec.text, *(h.figure for h in sec.headlines), *cells])


def test_the_heldout_count_is_shown_with_its_rule(heldout_text: str) -> None:
    target = target_text(TARGET_MEDIAN, TARGET_P90, MIN_STEPS)
    assert target == "median |error| <= 5%, p90 <= 10%, over >= 50 measured steps"
    assert f"variants within the target ({target}): {HELDOUT} 3 of 5 ({count_rule()}; " in (
        heldout_text
    )
    assert "pooled, 4 of 5" in heldout_text
    assert "no (1 of 4 traces)" in heldout_text


def test_wherever_the_docs_show_the_heldout_count_they_state_the_rule() -> None:
    for doc in (ROOT / "docs" / "findings.md", ROOT / "README.md"):
        for line in doc.read_text(encoding="utf-8").splitlines():
            if f"{HELDOUT} " in line and " of " in line:
                assert count_rule() in line, f"{doc.name}: {line[:120]}"
