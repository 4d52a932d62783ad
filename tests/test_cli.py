from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from attnbench.cli import app
from attnbench.results import read_results

pytestmark = pytest.mark.usefixtures("isolated", "fake_timer")

runner = CliRunner()


def test_run_writes_a_results_file_and_table(tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    res = runner.invoke(
        app,
        [
            "run",
            "--device",
            "cpu",
            "--backend",
            "reference",
            "--batch-size",
            "2",
            "--lengths",
            "64,128",
            "--kv-dtype",
            "bfloat16",
            "--out",
            str(out),
        ],
    )
    assert res.exit_code == 0, res.output
    f = read_results(out)
    assert f.header is not None
    assert f.header.ceilings is not None
    assert [r.status for r in f.rows] == ["ok", "ok"]
    assert all(r.accuracy and r.accuracy.passed for r in f.rows)
    assert "ctx64" in res.output
    assert "reference" in res.output


@pytest.mark.slow
def test_resume_skips_finished_cases(tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    args = [
        "run",
        "--device",
        "cpu",
        "-b",
        "reference",
        "--batch-size",
        "2",
        "-l",
        "64",
        "--kv-dtype",
        "bf16",
        "--out",
        str(out),
    ]
    assert runner.invoke(app, args).exit_code == 0
    res = runner.invoke(app, [*args, "--resume", "-l", "64,96"])
    assert res.exit_code == 0, res.output
    f = read_results(out)
    assert len(f.headers) == 2
    assert [r.spec.kv_lens[0] for r in f.rows] == [64, 96]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["run", "--num-heads", "32", "--num-kv-heads", "5"], "not divisible"),
        (["run", "--page-size", "3"], "power of two"),
        (["run", "--backend", "nope", "--device", "cpu"], "backend='nope' is not known"),
        (["run", "--lengths", "gamma:1", "--device", "cpu"], "not a known distribution"),
        (["run", "--suite", "nosuch", "--device", "cpu"], "suite='nosuch'"),
        (["run", "--dtype", "fp64"], "dtype='fp64'"),
    ],
)
def test_bad_input_is_one_line_without_traceback(args: list[str], message: str) -> None:
    res = runner.invoke(app, args)
    assert res.exit_code == 2
    assert message in res.output
    assert "Traceback" not in res.output


def test_config_shows_sources(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ATTNBENCH_PAGE_SIZE", "32")
    res = runner.invoke(app, ["config"])
    assert res.exit_code == 0
    line = next(ln for ln in res.output.splitlines() if "page_size" in ln)
    assert "32" in line
    assert "env" in line


def test_backends_lists_reference() -> None:
    res = runner.invoke(app, ["backends", "--device", "cpu"])
    assert res.exit_code == 0
    assert "reference" in res.output


def test_cli_import_is_light() -> None:
    code = "import sys, attnbench.cli; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_python_dash_m() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "attnbench", "--help"], capture_output=True, text=True, check=True
    )
    assert "run" in out.stdout


def test_hw_out_names_the_commit_and_the_read_ceilings_method(tmp_path: Path) -> None:
    import json

    out = tmp_path / "hw.json"
    res = runner.invoke(app, ["hw", "--device", "cpu", "--quick", "--out", str(out)])
    assert res.exit_code == 0, res.output
    facts = json.loads(out.read_text())
    assert facts["provenance"]["git_sha"]
    assert facts["ceilings"]["read_bandwidth_gbps"] > 0
    assert facts["ceilings"]["method"]["read"].startswith("torch sum fp32")
