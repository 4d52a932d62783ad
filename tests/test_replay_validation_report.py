"""The report's replay-validation part: a `replay-validate` document (built through
`replay.validate` with a fake timer) becomes a table per variant and the predicted-vs-measured
figure; a replay document with trust shows it and its ranking; bad files are one line."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

import replay_rows as rr
import replay_validation as rv
from attnbench.cli.app import app
from attnbench.replay.document import ReplayConfig
from attnbench.replay.pipeline import run_replay
from attnbench.report import replay_section
from attnbench.report.blocks import Figure, ReportData, Table, Text


def _data(*extras: Path) -> ReportData:
    empty = pd.DataFrame()
    return ReportData(
        loaded=None,  # type: ignore[arg-type]
        gpu=rr.GPU,
        rows=empty,
        ok=empty,
        label="test",
        ceilings={},
        extras=list(extras),
    )


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    here = tmp_path_factory.mktemp("validated")
    rows = rr.write(here / "rows.jsonl", rr.rows(noise=0.03))
    rv.write(here / "replay" / "validation.json", rv.build(rows, spread=0.08))
    return here


def test_a_validation_document_is_a_table_per_variant_and_a_figure(folder: Path) -> None:
    pytest.importorskip("matplotlib")
    vpath = folder / "replay" / "validation.json"
    raw = json.loads(vpath.read_text())
    section = replay_section.replay_section(_data(vpath))
    assert section is not None
    (table,) = [b for b in section.blocks if isinstance(b, Table)]
    assert list(table.headers[:4]) == ["variant", "steps measured", "median |err|", "p90 |err|"]
    assert [r[0] for r in table.rows] == sorted(rr.COEFS)
    for row in table.rows:
        s = raw["summary"][row[0]]
        assert row[1] == f"{s['measured']}/{s['steps']}"
        assert row[2] == f"{100 * s['median_abs_err']:.1f}%"
        assert row[3] == f"{100 * s['p90_abs_err']:.1f}%"
        assert row[6] == f"{100 * s['outside_share']:.0f}%"
        assert row[7] == ("yes" if s["meets_target"] else "no")
    (fig,) = [b for b in section.blocks if isinstance(b, Figure)]
    assert fig.png.startswith(b"\x89PNG")
    assert "predicted vs measured" in fig.caption
    text = " ".join(b.markdown for b in section.blocks if isinstance(b, Text))
    assert "median |error| <= 5%" in text
    assert rr.GPU in text


def test_a_replay_with_trust_shows_it_and_its_ranking(folder: Path, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    doc = run_replay(ReplayConfig(trace="azure-code", limit=120), [folder / "rows.jsonl"])
    assert doc.document.trust is not None
    assert doc.document.trust.validation == str(folder / "replay" / "validation.json")
    out = tmp_path / "replay.json"
    out.write_text(doc.document.to_json())
    section = replay_section.replay_section(_data(out))
    assert section is not None
    text = " ".join(b.markdown for b in section.blocks if isinstance(b, Text))
    for c in doc.document.candidates:
        assert f"- {c.name}: " in text
    assert text.count("validated on 60 live steps") == len(doc.document.candidates)
    ranking = next(b for b in section.blocks if isinstance(b, Table) and "rank" in b.headers)
    assert {r[0] for r in ranking.rows} == {"ITL p50", "ITL p99", "TTFT p50"}
    assert len(ranking.rows) == 3 * len(doc.document.candidates)


def test_a_broken_validation_document_is_one_line(folder: Path, tmp_path: Path) -> None:
    raw = json.loads((folder / "replay" / "validation.json").read_text())
    raw["steps"][0]["predicted_us"] = "slow"
    bad = tmp_path / "validation-bad.json"
    bad.write_text(json.dumps(raw))
    section = replay_section.replay_section(_data(bad))
    assert section is not None
    (block,) = section.blocks
    assert isinstance(block, Text)
    assert "steps.0.predicted_us" in block.markdown
    assert "\n" not in block.markdown


def test_report_takes_a_validation_document_named_on_the_command_line(
    folder: Path, tmp_path: Path
) -> None:
    pytest.importorskip("matplotlib")
    vpath = folder / "replay" / "validation.json"
    out = tmp_path / "report"
    res = CliRunner().invoke(
        app, ["report", str(folder / "rows.jsonl"), str(vpath), "-o", str(out)]
    )
    assert res.exit_code == 0, res.output
    assert "skipped" not in res.output
    md = (out / "report.md").read_text()
    assert "Replay cost models against live GPU steps" in md
    assert "predicted vs measured per step" in md
