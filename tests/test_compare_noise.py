"""`compare` knows the noise (issue 32): on two runs of one commit (the committed
h200-default-fresh and -warm runs, 423bf31) it reports no regression at the default threshold,
while a 10% slowdown planted on one variant of the same rows is caught."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from attnbench.analysis.compare import CLEAR_GAP, Timing, compare_frames, spread_gap
from attnbench.analysis.frame import load
from attnbench.cli import app
from attnbench.results import ResultRow, ResultWriter, read_results

ROOT = Path(__file__).resolve().parent.parent
FRESH = ROOT / "results" / "h200-default-fresh.jsonl.gz"
WARM = ROOT / "results" / "h200-default-warm.jsonl.gz"
PLANTED = ("prefill/h32-8-d128/bs8/ctx4096/bfloat16/kv=bfloat16/p16/NHD#e0304c56", "flashinfer:fa2")
runner = CliRunner()


def _slower(row: ResultRow, factor: float) -> ResultRow:
    """The row with every timing `factor` times longer (samples, median, its statistics)."""
    assert row.latency is not None
    assert row.samples_us is not None
    stats = row.latency.model_dump()
    for key, value in stats.items():
        if key.endswith("_us"):
            stats[key] = value * factor
    return row.model_copy(
        update={
            "latency_us": (row.latency_us or 0.0) * factor,
            "latency": stats,
            "samples_us": [x * factor for x in row.samples_us],
        }
    )


def _planted(tmp_path: Path, factor: float = 1.10) -> Path:
    rf = read_results(WARM)
    out = tmp_path / "warm-planted.jsonl"
    with ResultWriter(out) as w:
        for h in rf.headers:
            w.write(h)
        for r in rf.rows:
            w.write(_slower(r, factor) if r.key == PLANTED else r)
    return out


def test_two_runs_of_one_commit_compare_clean() -> None:
    fresh, warm = read_results(FRESH), read_results(WARM)
    assert fresh.header is not None
    assert warm.header is not None
    sha = {h.provenance.get("git_sha") for h in (*fresh.headers, *warm.headers)}
    assert len(sha) == 1  # one commit: every difference is run-to-run noise
    comp = compare_frames(load([FRESH]).frame, load([WARM]).frame)
    assert comp.regressions == []
    moved = [e for e in comp.entries if e.within_spread]
    assert max(e.estimate.ratio for e in moved if e.estimate) > 1.13  # the noise is that large
    res = runner.invoke(app, ["compare", str(FRESH), str(WARM)])
    assert res.exit_code == 0, res.output
    assert "no regression beyond 5%: exit 0" in res.output


@pytest.mark.slow
def test_a_planted_ten_percent_slowdown_is_caught(tmp_path: Path) -> None:
    planted = _planted(tmp_path)
    comp = compare_frames(load([FRESH]).frame, load([planted]).frame)
    assert [(e.case_id, e.backend) for e in comp.regressions] == [PLANTED]
    (e,) = comp.regressions
    assert e.estimate is not None
    assert e.estimate.ratio == pytest.approx(1.111, abs=0.005)
    assert e.gap is not None
    assert e.gap > CLEAR_GAP
    res = runner.invoke(app, ["compare", str(FRESH), str(planted)])
    assert res.exit_code == 1, res.output
    assert "1 regression(s)" in res.output


def test_the_spread_gap_is_the_distance_between_the_two_ranges() -> None:
    def t(lo: float, hi: float) -> Timing:
        return Timing((lo + hi) / 2, samples_us=np.array([lo, hi] * 3), min_us=lo, max_us=hi)

    assert spread_gap(t(100, 102), t(110, 120)) == pytest.approx(8 / 102)
    assert spread_gap(t(100, 102), t(90, 95)) == pytest.approx(-5 / 100)
    assert spread_gap(t(100, 110), t(105, 120)) == 0.0
    assert spread_gap(Timing(100.0), t(1, 2)) is None
