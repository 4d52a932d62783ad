"""Compressed files read like plain ones: `results.textfile` (the one place that gunzips), JSON
documents as `.json.gz` in every reader (fp8 study, replay, fidelity, the report's sections,
folder expansion) and the committed results, which are stored compressed."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest
from tests.fixtures_results import decode_specs, row, write_results
from typer.testing import CliRunner

from attnbench.analysis import fidelity
from attnbench.analysis.frame import load, resolve_paths
from attnbench.cli import app
from attnbench.fp8study import load_study
from attnbench.replay.document import load_document
from attnbench.report.fp8_section import study_docs
from attnbench.report.replay_section import load_documents
from attnbench.results import (
    CompressedFileError,
    is_document_path,
    is_results_path,
    read_json,
    read_text,
)

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "results"
FP8_STUDY = RESULTS / "fp8-study-cpu-full.json.gz"
REPLAY = RESULTS / "h200-replay-agents450.json"
runner = CliRunner()


def _gz(src: Path, dst: Path) -> Path:
    dst.write_bytes(gzip.compress(src.read_bytes()))
    return dst


@pytest.mark.parametrize(
    ("name", "document", "results"),
    [
        ("a.json", True, False),
        ("a.json.gz", True, False),
        ("a.jsonl", False, True),
        ("a.jsonl.gz", False, True),
        ("a.trials.jsonl.gz", False, True),
        ("a.csv.gz", False, False),
        ("a.gz", False, False),
    ],
)
def test_names_of_documents_and_results_never_overlap(
    name: str, document: bool, results: bool
) -> None:
    assert is_document_path(name) is document
    assert is_results_path(name) is results


def test_plain_gzipped_and_appended_gzip_read_alike(tmp_path: Path) -> None:
    doc = {"schema": "x", "values": [1, 2.5, None], "name": "é"}
    plain = tmp_path / "d.json"
    plain.write_text(json.dumps(doc), encoding="utf-8")
    packed = _gz(plain, tmp_path / "d.json.gz")
    assert read_json(packed) == read_json(plain) == doc
    two = tmp_path / "two.json.gz"  # `gzip -c a >> f; gzip -c b >> f`: members concatenate
    two.write_bytes(gzip.compress(b'{"a": ') + gzip.compress(b"[1, 2]}"))
    assert read_json(two) == {"a": [1, 2]}
    assert read_text(two) == '{"a": [1, 2]}'


def test_broken_gzip_is_one_line_naming_the_file(tmp_path: Path) -> None:
    fake = tmp_path / "fake.json.gz"
    fake.write_text('{"a": 1}')
    with pytest.raises(CompressedFileError, match=r"fake\.json\.gz: not a gzip file") as e1:
        read_json(fake)
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(gzip.compress(b'{"a": 1}' * 100)[:-12])
    with pytest.raises(CompressedFileError, match=r"cut\.json\.gz: gzip stream cut short") as e2:
        read_json(cut)
    for exc in (e1.value, e2.value):
        assert isinstance(exc, ValueError)
        assert "\n" not in str(exc)


def test_every_document_reader_takes_json_gz(tmp_path: Path) -> None:
    study = load_study(FP8_STUDY)
    assert study["type"] == "fp8-study"
    assert [d["type"] for d in study_docs([FP8_STUDY])] == ["fp8-study"]
    replay_gz = _gz(REPLAY, tmp_path / "replay.json.gz")
    assert load_document(replay_gz) == load_document(REPLAY)
    docs, problems = load_documents([replay_gz, FP8_STUDY])
    assert (len(docs), problems) == (1, [])
    fid = {"provenance": {"gpu": "test"}, "cases": [{"case": "c", "backend": "b", "status": "ok"}]}
    fid_gz = tmp_path / "fid.json.gz"
    fid_gz.write_bytes(gzip.compress(json.dumps(fid).encode()))
    assert fidelity.load_documents([fid_gz, replay_gz]) == [(fid_gz, fid)]


def test_a_folder_expands_to_json_gz_documents_and_the_report_renders_them(
    tmp_path: Path,
) -> None:
    rows = [row(s, "flashinfer:tc") for s in decode_specs((1024,))]
    _gz(write_results(tmp_path / "plain" / "run.jsonl", rows), tmp_path / "run.jsonl.gz")
    shutil.copy(FP8_STUDY, tmp_path / FP8_STUDY.name)
    _gz(REPLAY, tmp_path / "replay.json.gz")
    found = resolve_paths([tmp_path])
    assert sorted(p.name for p in found) == [FP8_STUDY.name, "replay.json.gz", "run.jsonl.gz"]
    loaded = load(found)
    assert sorted(p.name for p in loaded.extras) == [FP8_STUDY.name, "replay.json.gz"]
    res = runner.invoke(app, ["report", str(tmp_path), "--out", str(tmp_path / "rep")])
    assert res.exit_code == 0, res.output
    md = (tmp_path / "rep" / "report.md").read_text()
    for section in ("Decode latency", "FP8 numerics", "Serving replay"):
        assert f"## {section}" in md, section


def test_report_of_documents_only_and_of_a_broken_json_gz(tmp_path: Path) -> None:
    res = runner.invoke(app, ["report", str(FP8_STUDY), "--out", str(tmp_path / "rep")])
    assert res.exit_code == 0, res.output
    assert "## FP8 numerics" in (tmp_path / "rep" / "report.md").read_text()
    bad = tmp_path / "x.json.gz"
    bad.write_text('{"a": 1}')
    res = runner.invoke(app, ["report", str(bad), "--out", str(tmp_path / "rep2")])
    assert res.exit_code == 2
    assert "x.json.gz: not a JSON document (CompressedFileError): skipped" in res.output
    assert "Traceback" not in res.output


def test_read_json_shared_parses_a_file_once_until_it_changes(tmp_path: Path) -> None:
    from attnbench.results import read_json_shared

    p = tmp_path / "doc.json"
    p.write_text('{"a": 1}')
    first = read_json_shared(p)
    assert read_json_shared(p) is first  # the sections and the command share one parse
    p.write_text('{"a": 22}')  # another size: read again
    assert read_json_shared(p) == {"a": 22}
