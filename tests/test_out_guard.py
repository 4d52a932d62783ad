"""Issue 49: the committed evidence is read-only to commands, and one results file has one
writer at a time.

The CLI's command set runs against a copy of results/ (protected as the checkout's is) and
against the checkout's own results/; the hash of every file, and the set of files, is the same
after. Two writers of one `--out` cannot interleave: the second fails at once, naming the
first. A `.gz` name is written as gzip, also when appended to.
"""

from __future__ import annotations

import errno
import gzip
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from attnbench.cli import app
from attnbench.results import Header, ResultWriter, read_results
from attnbench.results.writer import OutputBusy, drop_torn_tail, lock_path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "results"
TINY = ["--device", "cpu", "-b", "sdpa:math", "-l", "16", "--batch-size", "1"]
TINY += ["--no-fp8-mode", "--max-time-ms", "1"]
runner = CliRunner()


def _hashes(*folders: Path) -> dict[str, str]:
    return {
        str(p): hashlib.sha256(p.read_bytes()).hexdigest()
        for folder in folders
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


@pytest.fixture
def copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of results/, protected as the checkout's results/ is."""
    folder = tmp_path / "copy" / "results"
    shutil.copytree(RESULTS, folder)
    monkeypatch.setattr(
        "attnbench.cli.outpath.committed_folders", lambda: [folder.resolve(), RESULTS]
    )
    monkeypatch.chdir(folder.parent)  # `results/` here is the copy (deploy.fp8 reads it so)
    return folder


def _command_set(r: Path, out: Path) -> list[tuple[list[str], int]]:
    """(argv, exit code) of every command that reads or could write results files."""
    brief, flex = str(r / "h200-brief.jsonl.gz"), str(r / "h200-gqa-flex.jsonl")
    warm, fresh = str(r / "h200-default-warm.jsonl.gz"), str(r / "h200-default-fresh.jsonl.gz")
    return [
        (["run", *TINY, "--out", brief], 2),
        (["run", *TINY, "--out", brief, "--append"], 2),
        (["run", *TINY, "--out", flex, "--resume"], 2),
        (["run", *TINY, "--out", str(r / "new.jsonl.gz")], 2),
        (["run", *TINY, "--out", str(RESULTS / "new.jsonl")], 2),
        (["tune", *TINY, "-b", "flex", "--out", str(r / "t.jsonl")], 2),
        (["run", *TINY, "--out", str(out / "mine.jsonl.gz")], 0),
        (["recommend", str(r)], 0),
        (["recommend", str(r), "--model", "llama-3.1-8b"], 0),
        (["show", flex], 0),
        (["compare", warm, fresh], 0),
        (["export", flex, "--csv", str(out / "x.csv")], 0),
        (["report", flex, "--out", str(out / "rep")], 0),
        (["fp8", "--capacity"], 0),
        (["replay-validate", str(r), "--device", "cpu", "--out", str(out / "v.json")], 3),
        (["findings", brief, "--check", "--out", str(out / "f.md")], 1),
    ]


def test_no_command_changes_a_committed_file(copy: Path, tmp_path: Path) -> None:
    out = tmp_path / "mine"
    before = _hashes(copy, RESULTS)
    for argv, code in _command_set(copy, out):
        res = runner.invoke(app, argv)
        assert "Traceback" not in res.output, (argv, res.output)
        assert res.exit_code == code, (argv, res.output)
    assert _hashes(copy, RESULTS) == before
    assert len(read_results(out / "mine.jsonl.gz").rows) == 1


def test_recommend_measure_refuses_the_committed_folder(copy: Path) -> None:
    args = ["recommend", "--model", "llama-3.1-8b", "--trace", "azure-conv", "--measure"]
    before = _hashes(copy)
    res = runner.invoke(app, [*args, "--dry-run", "--out", str(copy / "m.jsonl")])
    assert _hashes(copy) == before
    assert res.exit_code == 2, res.output
    assert "--into-results" in res.output


# -- one writer at a time --------------------------------------------------------------------

HOLD = """
import sys
from pathlib import Path
from attnbench.results import Header, ResultWriter
w = ResultWriter(Path(sys.argv[1]))
w.write(Header(run_id="first", provenance={}))
print("ready", flush=True)
sys.stdin.read()
w.write(Header(run_id="first-again", provenance={}))
w.close()
"""


def test_two_writers_of_one_out_cannot_interleave(tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    env = os.environ | {"PYTHONPATH": str(ROOT / "src")}
    first = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(out)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
        text=True,
    )
    try:
        assert first.stdout is not None
        assert first.stdout.readline() == "ready\n"
        res = runner.invoke(app, ["run", *TINY, "--out", str(out), "--append"])
        assert res.exit_code == 2, res.output
        assert f"is being written by pid {first.pid} on " in " ".join(res.output.split())
        with pytest.raises(OutputBusy, match=f"pid {first.pid}"):
            ResultWriter(out)
    finally:
        first.communicate("", timeout=30)
    assert not lock_path(out).exists()
    res = runner.invoke(app, ["run", *TINY, "--out", str(out), "--append"])
    assert res.exit_code == 0, res.output
    f = read_results(out)
    assert [h.run_id for h in f.headers] == ["first", "first-again", "r"]
    assert len(f.rows) == 1
    assert f.row_headers == [2]


def test_the_lock_is_released_when_the_writer_closes(tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    with ResultWriter(out) as w:
        w.write(Header(run_id="a", provenance={}))
        assert f"pid {os.getpid()} on " in lock_path(out).read_text()
        with pytest.raises(OutputBusy, match=r"r\.jsonl is being written by pid"):
            ResultWriter(out)
    with ResultWriter(out) as w:  # free again
        w.write(Header(run_id="b", provenance={}))
    assert [h.run_id for h in read_results(out).headers] == ["a", "b"]


# -- gzip --------------------------------------------------------------------------------------


def test_a_gz_name_is_gzip_also_when_appended_to(tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl.gz"
    for run_id in ("a", "b"):
        with ResultWriter(out) as w:
            w.write(Header(run_id=run_id, provenance={}))
    assert out.read_bytes()[:2] == b"\x1f\x8b"
    with gzip.open(out, "rt") as f:  # any gzip reader reads every member
        assert [line.count('"type": "header"') for line in f] == [1, 1]
    assert [h.run_id for h in read_results(out).headers] == ["a", "b"]


def test_a_torn_gzip_member_is_cut_and_its_complete_lines_kept(tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl.gz"
    with ResultWriter(out) as w:
        w.write(Header(run_id="a", provenance={}))
    kept = Header(run_id="b", provenance={}).model_dump_json() + "\n"
    torn = gzip.compress((kept + '{"type": "res').encode())
    out.write_bytes(out.read_bytes() + torn[: len(torn) - 9])  # the member's end is lost
    assert read_results(out).warnings
    drop_torn_tail(out)
    f = read_results(out)
    assert ([h.run_id for h in f.headers], f.warnings) == (["a", "b"], [])


def test_run_writes_gzip_for_a_gz_name(tmp_path: Path) -> None:
    out = tmp_path / "new.jsonl.gz"
    res = runner.invoke(app, ["run", *TINY, "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert out.read_bytes()[:2] == b"\x1f\x8b"
    res = runner.invoke(app, ["show", str(out)])
    assert res.exit_code == 0, res.output


# -- a full disk -------------------------------------------------------------------------------


def test_a_full_disk_raises_once_from_write_and_close_is_quiet(tmp_path: Path) -> None:
    w = ResultWriter(tmp_path / "r.jsonl")
    real_fd = w._fd
    w._fd = os.open("/dev/full", os.O_WRONLY)  # the kernel's ENOSPC, not a mock
    with pytest.raises(OSError, match="No space left") as exc:
        w.write(Header(run_id="a", provenance={}))
    assert exc.value.errno == errno.ENOSPC
    w.close()  # nothing buffered: nothing to fail on
    os.close(real_fd)


def test_a_full_disk_during_run_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = ResultWriter.write
    calls = {"n": 0}

    def full_after_one(self: ResultWriter, row: Any) -> None:
        calls["n"] += 1
        if calls["n"] == 2:  # the header fits; then the disk is full
            os.close(self._fd)
            self._fd = os.open("/dev/full", os.O_WRONLY)
        real(self, row)

    monkeypatch.setattr(ResultWriter, "write", full_after_one)
    res = runner.invoke(app, ["run", *TINY, "--out", str(tmp_path / "r.jsonl")])
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output
    assert res.exception is None or isinstance(res.exception, SystemExit)
    errors = [ln for ln in res.output.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1
    assert "No space left on device" in " ".join(res.output.split())
