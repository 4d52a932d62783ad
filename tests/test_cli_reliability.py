"""Issue 16 (reliability), the CLI's part: output paths checked before any work, no silent
success, exit codes as documented, messages that keep their square brackets, results files that
stay readable after an interrupted write."""

from __future__ import annotations

import errno
import os
import re
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

import replay_rows as rr
from attnbench.cli import app
from attnbench.cli.common import (
    EXIT_BAD_INPUT,
    EXIT_CODES_HELP,
    EXIT_INTERRUPTED,
    EXIT_NOTHING_RAN,
    EXIT_OK,
    EXIT_REGRESSION,
    check_output_dir,
    check_output_file,
    fail,
    note,
)
from attnbench.results import Header, ResultWriter, drop_torn_tail, read_results

pytestmark = pytest.mark.usefixtures("isolated", "fake_timer")

runner = CliRunner()
USAGE = Path(__file__).resolve().parent.parent / "docs" / "usage.md"
"""Where the exit codes are documented for users (the README links it)."""
TINY = ["--device", "cpu", "-b", "reference", "--batch-size", "1", "--kv-dtype", "bf16"]
TINY += ["--max-time-ms", "1"]


@pytest.fixture
def rows(tmp_path: Path) -> Path:
    return rr.write(tmp_path / "rows.jsonl")


def _never(what: str) -> Any:
    def called(*args: object, **kw: object) -> None:
        raise AssertionError(f"{what} ran although the output path is bad")

    return called


def _clean(res: Any, code: int) -> str:
    assert res.exit_code == code, res.output
    assert res.exception is None or isinstance(res.exception, SystemExit), res.output
    assert "Traceback" not in res.output
    return str(res.output)


# -- output paths, checked before any work -----------------------------------------------------


@pytest.mark.parametrize("command", [["run", *TINY, "-l", "16"], ["fp8", "--device", "cpu"]])
def test_out_naming_a_directory_is_refused_first(command: list[str], tmp_path: Path) -> None:
    out = _clean(runner.invoke(app, [*command, "--out", str(tmp_path)]), EXIT_BAD_INPUT)
    assert f"--out={tmp_path} is a directory" in out
    assert not list(tmp_path.glob("*.json*"))


def test_fp8_checks_out_before_the_study(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("attnbench.fp8study.run_study", _never("the fp8 study"))
    out = _clean(runner.invoke(app, ["fp8", "--device", "cpu", "--out", "/dev/full"]), 2)
    assert "--out=/dev/full is not a regular file" in out


def test_replay_checks_out_before_the_replay(
    rows: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("attnbench.replay.pipeline.run_replay", _never("the replay"))
    res = runner.invoke(app, ["replay", str(rows), "--out", str(tmp_path)])
    assert f"--out={tmp_path} is a directory" in _clean(res, EXIT_BAD_INPUT)


def test_recommend_checks_json_before_ranking(
    rows: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("attnbench.analysis.hybrid.recommend", _never("the recommender"))
    (tmp_path / "file").write_text("x")
    res = runner.invoke(app, ["recommend", str(rows), "--json", "file/x.json"])
    assert "--json=file/x.json: file is a file, not a folder" in _clean(res, EXIT_BAD_INPUT)


def test_run_with_unwritable_out_names_the_flag() -> None:
    res = runner.invoke(app, ["run", *TINY, "-l", "16", "--out", "/proc/no/r.jsonl"])
    assert "--out=/proc/no/r.jsonl: cannot create folder /proc/no" in _clean(res, 2)


def test_report_out_naming_an_existing_file(
    rows: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("attnbench.report.build.write_report", _never("the report"))
    (tmp_path / "taken").write_text("x")
    res = runner.invoke(app, ["report", str(rows), "--out", "taken"])
    assert "--out=taken is an existing file; give a folder" in _clean(res, EXIT_BAD_INPUT)


def test_output_checks_leave_nothing_behind(tmp_path: Path) -> None:
    check_output_file(tmp_path / "a" / "b" / "r.jsonl", "--out")
    check_output_dir(tmp_path / "c" / "d", "--out")
    check_output_file(tmp_path / "e.json", "--out")
    assert list(tmp_path.iterdir()) == []
    kept = tmp_path / "kept.jsonl"
    kept.write_text("data\n")
    check_output_file(kept, "--out")
    assert kept.read_text() == "data\n"


def test_a_full_disk_mid_run_is_one_line_and_keeps_the_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = ResultWriter.write
    calls = {"n": 0}

    def full_after_two(self: ResultWriter, row: Any) -> None:
        calls["n"] += 1
        if calls["n"] > 2:  # header and one row fit; the disk is full after that
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(self, row)

    monkeypatch.setattr(ResultWriter, "write", full_after_two)
    out = tmp_path / "r.jsonl"
    res = runner.invoke(app, ["run", *TINY, "-l", "16,32,48", "--out", str(out)])
    text = _clean(res, EXIT_BAD_INPUT)
    assert "writing a row failed (No space left on device)" in text
    assert "the 1 rows written before are kept" in text
    assert len(read_results(out).rows) == 1


# -- no silent success ------------------------------------------------------------------------


def test_run_where_every_variant_is_unsupported_exits_3(tmp_path: Path) -> None:
    out = tmp_path / "u.jsonl"
    args = ["run", "--device", "cpu", "-b", "sdpa:flash", "-l", "16", "--batch-size", "1"]
    text = _clean(runner.invoke(app, [*args, "--out", str(out)]), EXIT_NOTHING_RAN)
    assert "nothing could run: none of 2 (case, variant) pairs was measured" in text
    assert {r.status for r in read_results(out).rows} == {"unsupported"}


@pytest.mark.slow
def test_resume_with_nothing_left_is_ok(tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    args = ["run", *TINY, "-l", "16", "--out", str(out)]
    _clean(runner.invoke(app, args), EXIT_OK)
    text = _clean(runner.invoke(app, [*args, "--resume"]), EXIT_OK)
    assert "nothing left to run" in text


def test_report_of_a_file_without_rows(tmp_path: Path) -> None:
    path = tmp_path / "h.jsonl"
    with ResultWriter(path) as w:
        w.write(Header(run_id="h", provenance={}))
    text = _clean(runner.invoke(app, ["report", str(path), "--out", "rep"]), EXIT_BAD_INPUT)
    assert "no result rows (only headers) and no fp8 study or replay document" in text
    assert not (tmp_path / "rep").exists()


def test_report_of_a_json_file_it_cannot_read(tmp_path: Path) -> None:
    (tmp_path / "x.json").write_text('{"a": 1}\n')
    text = _clean(runner.invoke(app, ["report", "x.json"]), EXIT_BAD_INPUT)
    assert "x.json: neither an fp8 study nor a replay document: skipped" in text
    assert "nothing to report" in text


def test_capacity_with_negative_memory_is_refused() -> None:
    res = runner.invoke(app, ["fp8", "--capacity", "--hbm-gib", "-1"])
    assert "--hbm-gib=-1: must be a positive number" in _clean(res, EXIT_BAD_INPUT)


def test_cuda_timers_on_the_cpu_are_refused(tmp_path: Path) -> None:
    for timer in ("cuda-graph", "cuda-event"):
        res = runner.invoke(app, ["run", *TINY, "-l", "16", "--timer", timer, "--out", "r.jsonl"])
        text = _clean(res, EXIT_BAD_INPUT)
        assert f"--timer={timer} needs a CUDA device" in text
    assert not (tmp_path / "r.jsonl").exists()


def test_replay_live_without_a_gpu_is_checked_before_the_replay(
    rows: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    monkeypatch.setattr("attnbench.replay.pipeline.run_replay", _never("the replay"))
    res = runner.invoke(app, ["replay", str(rows), "--live", "2"])
    assert "--live needs a CUDA GPU" in _clean(res, EXIT_NOTHING_RAN)


# -- unclear messages -------------------------------------------------------------------------


def test_replay_memory_error_is_a_sentence_not_a_dict(rows: Path) -> None:
    res = runner.invoke(app, ["replay", str(rows), "--limit", "5", "--gpu-mem-gib", "10"])
    text = _clean(res, EXIT_BAD_INPUT)
    assert "raise --gpu-mem-gib or --tp" in text
    assert "{" not in text
    res = runner.invoke(app, ["replay", str(rows), "--gpu-mem-gib", "-1"])
    assert "--gpu-mem-gib=-1: must be a positive number" in _clean(res, EXIT_BAD_INPUT)


def test_seed_names_the_flag() -> None:
    res = runner.invoke(app, ["run", "--seed", "-5"])
    assert "seed=-5: must be an integer from 0 to" in _clean(res, EXIT_BAD_INPUT)


def test_square_brackets_survive_fail_and_note(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(typer.Exit):
        fail("suite s.toml: needs at least one [[group]] table")
    note("flash-attn:fa3 [padded] at 1x: 12% of steps beyond the rows [bold]")
    note("header has: 'root:x:0:0'")
    err = capsys.readouterr().err
    assert "[[group]]" in err
    assert "[padded]" in err
    assert "[bold]" in err
    assert "root:x:0:0" in err  # no emoji codes either


def test_square_brackets_survive_the_results_table() -> None:
    from rich.console import Console

    from attnbench.report.table import results_table
    from attnbench.results import ResultRow

    row = ResultRow(
        run_id="r",
        case_id="c",
        backend="x [padded]",
        status="unsupported",
        reason="needs [cyan]more[/]",
        spec={"kind": "decode", "num_qo_heads": 4, "num_kv_heads": 2, "head_dim": 16}
        | {"kv_lens": [16], "qo_lens": [1], "dtype": "bfloat16", "kv_dtype": "bfloat16"},
    )
    console = Console(width=200, record=True)
    console.print(results_table([row]))
    text = console.export_text()
    assert "x [padded]" in text
    assert "[cyan]more[/]" in text


def test_suite_without_groups_keeps_its_brackets(tmp_path: Path) -> None:
    (tmp_path / "s.toml").write_text('name = "s"\n')
    res = runner.invoke(app, ["run", "--suite", "s.toml", "--device", "cpu"])
    assert "needs at least one [[group]] table" in _clean(res, EXIT_BAD_INPUT)


# -- exit codes -------------------------------------------------------------------------------


def test_exit_codes_are_documented_in_help_and_usage() -> None:
    help_text = " ".join(_clean(runner.invoke(app, ["--help"]), EXIT_OK).split())
    readme = USAGE.read_text(encoding="utf-8")
    for code in (EXIT_OK, EXIT_REGRESSION, EXIT_BAD_INPUT, EXIT_NOTHING_RAN, EXIT_INTERRUPTED):
        assert re.search(rf"\b{code} ", " ".join(EXIT_CODES_HELP.split())), code
        assert re.search(rf"\b{code} ", help_text), code
        assert re.search(rf"^\|\s*{code}\s*\|", readme, re.MULTILINE), code
    assert "nothing could run" in help_text


# -- results files stay readable after an interrupted write ----------------------------------


@pytest.mark.slow
def test_a_torn_last_line_is_cut_before_appending(tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    args = ["run", *TINY, "-l", "16", "--out", str(out)]
    _clean(runner.invoke(app, args), EXIT_OK)
    with out.open("a") as f:
        f.write('{"type": "result", "run_id": "x", "ca')  # killed mid-write
    assert read_results(out).warnings  # readable, the fragment skipped
    _clean(runner.invoke(app, ["run", *TINY, "-l", "16,32", "--out", str(out), "--resume"]), 0)
    f = read_results(out)
    assert not f.warnings
    assert sorted(r.spec.kv_lens[0] for r in f.rows) == [16, 32]


@pytest.mark.parametrize("resume", [True, False])
def test_a_run_killed_while_writing_its_header_is_started_afresh(
    tmp_path: Path, resume: bool
) -> None:
    out = tmp_path / "r.jsonl"
    out.write_text('{"type": "header", "schema_version": 1, "run_id": "x", "prov')
    args = ["run", *TINY, "-l", "16", "--out", str(out)] + (["--resume"] if resume else [])
    _clean(runner.invoke(app, args), EXIT_OK)
    f = read_results(out)
    assert (len(f.headers), len(f.rows), f.warnings) == (1, 1, [])


def test_a_complete_last_line_without_newline_gets_one(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    with ResultWriter(path) as w:
        w.write(Header(run_id="a", provenance={}))
    path.write_text(path.read_text().rstrip("\n"))
    drop_torn_tail(path)
    assert path.read_text().endswith("}\n")
    foreign = tmp_path / "f.txt"
    foreign.write_text("not results")
    drop_torn_tail(foreign)
    assert foreign.read_text() == "not results"  # not ours: left alone
