from __future__ import annotations

import json
from pathlib import Path

import pytest

from attnbench.results import (
    SCHEMA_VERSION,
    Header,
    ResultRow,
    ResultsFileError,
    ResultWriter,
    finished_keys,
    read_results,
    thin_samples,
)


def _row(case: str, status: str = "ok", **kw: object) -> ResultRow:
    return ResultRow(
        run_id="r",
        case_id=case,
        backend="reference",
        status=status,  # type: ignore[arg-type]
        spec={"kind": "decode"},
        **kw,
    )


def _write(path: Path, rows: list[ResultRow]) -> None:
    with ResultWriter(path) as w:
        w.write(Header(run_id="r", provenance={"attnbench": "test"}))
        for r in rows:
            w.write(r)


def test_round_trip_and_resume_keys(tmp_path: Path) -> None:
    p = tmp_path / "r.jsonl"
    _write(p, [_row("a", latency_us=1.5), _row("b", "error", reason="boom"), _row("c", "mismatch")])
    f = read_results(p)
    assert [r.case_id for r in f.rows] == ["a", "b", "c"]
    assert f.rows[0].latency_us == 1.5
    assert finished_keys(p) == {("a", "reference"), ("c", "reference")}  # errors are retried


def test_nan_is_stored_as_null(tmp_path: Path) -> None:
    p = tmp_path / "r.jsonl"
    _write(p, [_row("a", accuracy={"rel_l2_err": float("nan")})])
    assert read_results(p).rows[0].accuracy == {"rel_l2_err": None}


def test_torn_last_line_is_skipped_with_a_warning(tmp_path: Path) -> None:
    p = tmp_path / "r.jsonl"
    _write(p, [_row("a"), _row("b")])
    text = p.read_text()
    p.write_text(text[:-40])  # a crash in the middle of the last write
    f = read_results(p)
    assert [r.case_id for r in f.rows] == ["a"]
    assert "torn last line" in f.warnings[0]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (
            '{"type": "header", "schema_version": 99, "run_id": "x", "provenance": {}}\n',
            "schema_version=99",
        ),
        ('{"hello": "world"}\n', "not an attnbench row"),
        ("[1, 2, 3]\n", "not an attnbench row"),
        ("not json at all\n{}\n", "not JSON"),
        ("", "no header row"),
        (json.dumps({"type": "result", "run_id": "r"}) + "\n", "before any header"),
    ],
)
def test_foreign_or_future_files_give_one_line_errors(
    tmp_path: Path, content: str, message: str
) -> None:
    p = tmp_path / "x.jsonl"
    p.write_text(content)
    with pytest.raises(ResultsFileError, match=message):
        read_results(p)


def test_bad_row_names_the_field(tmp_path: Path) -> None:
    p = tmp_path / "x.jsonl"
    header = {"type": "header", "schema_version": SCHEMA_VERSION, "run_id": "r", "provenance": {}}
    row = {
        "type": "result",
        "run_id": "r",
        "case_id": "a",
        "backend": "b",
        "status": "great",
        "spec": {},
    }
    p.write_text(json.dumps(header) + "\n" + json.dumps(row) + "\n")
    with pytest.raises(ResultsFileError, match=r"x.jsonl:2: field status"):
        read_results(p)


def test_thin_samples() -> None:
    assert len(thin_samples([1.0] * 1000, limit=256)) == 250
    assert thin_samples([1.23456]) == [1.235]
