"""The findings page per GPU: every section is headed by the GPUs whose rows it holds (and by no
other), and every generated table whose rows come from more than one GPU has a GPU column; the
same over the README's answer table and the page's headlines."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from attnbench.report.findings import Inputs, Section, Table, readme_block
from attnbench.report.findings.gpus import (
    ACROSS,
    CPU,
    GPU_COLUMN,
    by_gpu,
    file_gpus,
    named_gpus,
    short,
    table_gpus,
)
from attnbench.report.findings.render import TITLE, document, headline_table

ROOT = Path(__file__).resolve().parents[1]
H100, H200 = "NVIDIA H100 80GB HBM3", "NVIDIA H200"


@pytest.fixture(scope="module")
def committed(committed_findings: tuple[Inputs, list[Section]]) -> tuple[Inputs, list[Section]]:
    return committed_findings


def _heading_gpus(title: str, known: set[str]) -> set[str]:
    named = named_gpus(title, known)
    return named | ({CPU} if title.endswith((f"({CPU})", f", {CPU})")) or f"({CPU}," in title
                    else set())  # fmt: skip


def _column_gpus(cell: str, mine: set[str]) -> set[str]:
    """The GPUs of `mine` a GPU cell names (`H100` names `NVIDIA H100 80GB HBM3`)."""
    names = [c.strip() for c in cell.split(",") if c.strip() not in ("", "-")]
    return {g for g in mine - {CPU} if any(short(g).startswith(short(n)) for n in names)}


def _check_table(t: Table, files: dict[str, str], known: set[str], where: str) -> set[str]:
    rows = table_gpus(t, files)
    gpus: set[str] = set().union(*rows) if rows else set()
    if len(gpus) > 1:
        assert GPU_COLUMN in t.columns, (where, t.title, t.columns)
    if GPU_COLUMN in t.columns:
        at = t.columns.index(GPU_COLUMN)
        for row, mine in zip(t.rows, rows, strict=True):
            assert _column_gpus(row[at], mine) == mine - {CPU}, (where, row)
    if t.title:
        assert named_gpus(t.title, known) <= gpus, (where, t.title)
    return gpus


def test_every_section_is_headed_by_its_gpus_and_multi_gpu_tables_have_a_gpu_column(
    committed: tuple[Inputs, list[Section]],
) -> None:
    inputs, sections = committed
    files = file_gpus(inputs)
    known = set(files.values())
    parts = by_gpu(sections, inputs)
    assert {H100, H200} <= {p.gpu for p in parts}
    for part in parts:
        for s in part.sections:
            gpus = set().union(*(_check_table(t, files, known, s.title) for t in s.tables))
            assert gpus, s.title
            assert _heading_gpus(s.title, known) == gpus, (s.title, gpus)
            if part.gpu != ACROSS:
                assert gpus == {part.gpu}, (part.gpu, s.title)
    _check_table(headline_table(parts, files, ""), files, known, "headlines")


def test_no_cpu_study_or_h100_row_sits_under_an_h200_heading(
    committed: tuple[Inputs, list[Section]],
) -> None:
    inputs, sections = committed
    files = file_gpus(inputs)
    assert files["fp8-study-cpu-full.json.gz"] == CPU
    assert files["h100-deploy.jsonl.gz"] == H100
    for part in by_gpu(sections, inputs):
        for s in part.sections:
            if "(H200)" in s.title:
                cells = [c for t in s.tables for r in t.rows for c in r]
                assert not any("h100-" in c or "cpu" in c for c in cells), s.title


def test_the_document_is_organised_per_gpu(committed: tuple[Inputs, list[Section]]) -> None:
    inputs, sections = committed
    text = document(sections, "`results/`", inputs)
    assert text.startswith(TITLE)
    parts = [ln[3:] for ln in text.splitlines() if ln.startswith("## ")]
    assert parts[:2] == ["Headlines", "Contents"]
    assert H100 in parts
    assert H200 in parts
    assert all(ln.endswith(")") for ln in text.splitlines() if ln.startswith("### "))


def test_the_readme_answer_table_names_the_gpu_of_each_row(
    committed: tuple[Inputs, list[Section]],
) -> None:
    inputs, sections = committed
    block = readme_block(sections, "docs/findings.md", inputs)
    rows = [ln.split(" | ") for ln in block.splitlines() if ln.startswith("| ")][2:]
    known = set(file_gpus(inputs).values())
    assert rows
    assert all(len(named_gpus(r[0], known)) == 1 for r in rows), rows


def _inputs(rows: list[tuple[str, str]]) -> Inputs:
    return Inputs(pd.DataFrame(rows, columns=["file", "gpu"]))


def test_a_section_of_two_gpus_is_split_and_a_mixed_row_keeps_a_gpu_column() -> None:
    inputs = _inputs([("a-1.jsonl", H100), ("b-1.jsonl", H200)])
    split = Section("S", tables=[Table(["x", "file"], [["1", "a-1.jsonl"], ["2", "b-1.jsonl"]])])
    mixed = Section("M", tables=[Table(["x", "file"], [["1", "a-1.jsonl, b-1.jsonl"]])])
    parts = {p.gpu: p for p in by_gpu([split, mixed], inputs)}
    assert [s.title for s in parts[H100].sections] == ["S (H100 80GB HBM3)"]
    assert [s.title for s in parts[H200].sections] == ["S (H200)"]
    assert parts[H100].sections[0].tables[0].rows == [["1", "a-1.jsonl"]]
    (m,) = parts[ACROSS].sections
    assert m.title == "M (H100 80GB HBM3, H200)"
    assert m.tables[0].columns[0] == GPU_COLUMN
    assert m.tables[0].rows == [["H100 80GB HBM3, H200", "1", "a-1.jsonl, b-1.jsonl"]]


def test_a_suite_is_read_on_every_gpu_that_measured_it(
    committed: tuple[Inputs, list[Section]],
) -> None:
    """`Inputs.stems_of`: the GPU tag, a dash, the suite's name, and nothing after it; the
    raggedness section then gives one headline per GPU, each from its own file."""
    inputs, sections = committed
    assert inputs.stems_of("ragged") == ["h100-ragged", "h200-ragged"]
    assert "h200-brief70b-paged" not in inputs.stems_of("brief")
    assert inputs.stems_of("fp8-study") == ["h100-fp8-study", "h200-fp8-study"]
    assert set(inputs.of_suite("ragged")["file"]) == {
        "h100-ragged.jsonl.gz",
        "h200-ragged.jsonl.gz",
    }
    ragged = next(s for s in sections if s.key == "ragged")
    assert sorted(h.file for h in ragged.headlines) == [
        "h100-ragged.jsonl.gz",
        "h200-ragged.jsonl.gz",
    ]
    h100 = next(h for h in ragged.headlines if h.file.startswith("h100"))
    assert h100.caveat == ""  # measured at a clean commit with the timed-output check
