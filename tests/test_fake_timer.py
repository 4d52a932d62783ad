"""The fake timer is for tests only (issue 32): no flag or setting reaches it, and a row it timed
never reaches `report`, `recommend`, `compare` or `replay`."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from attnbench.cli import app
from attnbench.measure.config import FAKE_TIMER, TIMERS, MeasureConfig
from attnbench.results import ResultsFileError, read_for_analysis, read_results

pytestmark = pytest.mark.usefixtures("isolated")

runner = CliRunner()
TINY = ["run", "--device", "cpu", "-b", "reference", "-l", "16", "--batch-size", "1"]
TINY += ["--kv-dtype", "bf16", "--max-time-ms", "1"]


def test_no_setting_names_the_fake_timer() -> None:
    assert FAKE_TIMER not in TIMERS
    assert MeasureConfig(timer="fake").timer == FAKE_TIMER  # code (a test) may still build it
    for argv, env in ((["run", "--timer", "fake"], {}), (["run"], {"ATTNBENCH_TIMER": "fake"})):
        res = runner.invoke(app, argv, env=env)
        assert res.exit_code == 2
        lines = [ln for ln in res.output.splitlines() if ln.strip()]
        assert len(lines) == 1, res.output
        assert "timer='fake'" in lines[0]
        assert "allowed: 'auto', 'cpu', 'cuda-event' or 'cuda-graph'" in lines[0]


@pytest.mark.usefixtures("fake_timer")
@pytest.mark.slow
def test_rows_the_fake_timer_timed_never_reach_analysis(tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    assert runner.invoke(app, [*TINY, "--out", str(out)]).exit_code == 0
    rows = read_results(out).rows  # the file itself stays readable (show, resume)
    assert {r.measurement.timer for r in rows if r.measurement} == {FAKE_TIMER}
    with pytest.raises(ResultsFileError, match="timed by the test-only fake timer"):
        read_for_analysis(out)
    for argv in (
        ["report", str(out), "--out", str(tmp_path / "rep")],
        ["recommend", str(out)],
        ["compare", str(out), str(out)],
        ["replay", str(out), "--limit", "5"],
    ):
        res = runner.invoke(app, argv)
        assert res.exit_code == 2, (argv, res.output)
        assert "timed by the test-only fake timer" in res.output, argv
        assert "Traceback" not in res.output
    assert not (tmp_path / "rep").exists()


@pytest.mark.slow
def test_a_real_cpu_run_is_analysed(tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    assert runner.invoke(app, [*TINY, "--out", str(out)]).exit_code == 0
    assert {r.measurement.timer for r in read_results(out).rows if r.measurement} == {"cpu"}
    assert read_for_analysis(out).rows
