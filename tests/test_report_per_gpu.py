"""The report per GPU: the GPU that measured traffic leads the page, its first screen is the
answers measured on traffic (the findings' answer table), and the sections that are no one
GPU's (the fp8 study, which may have run on a CPU) sit under no GPU's name."""

from __future__ import annotations

from pathlib import Path

from attnbench.analysis.frame import load, ok_rows
from attnbench.report.blocks import Table
from attnbench.report.build import ACROSS_GPUS, build_sections
from attnbench.report.first_screen import (
    ANSWER_COLUMNS,
    FIRST_SCREEN_TITLE,
    lead_gpu,
    traffic_answers,
)

RESULTS = Path(__file__).resolve().parents[1] / "results"
FILES = ["h100-deploy.jsonl.gz", "h200-brief-engines.jsonl.gz", "fp8-study-cpu-full.json.gz"]


def test_the_page_leads_with_the_answers_measured_on_traffic() -> None:
    loaded = load([RESULTS / f for f in FILES])
    ok = ok_rows(loaded.frame)
    assert lead_gpu(ok) == "NVIDIA H100 80GB HBM3"
    groups = build_sections(loaded)
    assert [g for g, _ in groups] == ["NVIDIA H100 80GB HBM3", "NVIDIA H200", ACROSS_GPUS]
    first = groups[0][1][0]
    assert first.title == FIRST_SCREEN_TITLE
    table = first.blocks[0]
    assert isinstance(table, Table)
    assert list(table.headers) == ANSWER_COLUMNS
    assert table.rows == traffic_answers(ok, loaded.paths)
    assert {r[0] for r in table.rows} == {"H100 80GB HBM3"}
    assert {r[3] for r in table.rows} >= {"azure-conv", "mooncake-conv"}
    across = dict(groups)[ACROSS_GPUS]
    assert "FP8 numerics" in [s.title for s in across]
    for gpu, sections in groups[:2]:
        assert "FP8 numerics" not in [s.title for s in sections], gpu
