"""`attnbench anchors`' second set (issue 47): flash-attention PR #1770's MLA decode figures,
suite mla-pr1770, and the view that sets attnbench's rows beside them, from rows built here."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from attnbench.analysis.frame import load
from attnbench.analysis.pr1770 import (
    SHAPE,
    SUITE,
    beside,
    lengths_label,
    load_published,
    published_path,
)
from attnbench.cli import app
from attnbench.config import Settings
from attnbench.results import ResultRow
from attnbench.workload.spec import WorkloadSpec
from attnbench.workload.suite import load_suite, suite_specs
from fixtures_results import CostModel, header, row, write_results

runner = CliRunner()
FLASHMLA = CostModel(8.0, 3000.0, 600.0, dtypes=("bfloat16",))
FI_FA3 = CostModel(10.0, 2600.0, 450.0, dtypes=("bfloat16",))
FA3_REFUSAL = (
    "tokenspeed-fa3 3.0.0 was built with FLASH_ATTENTION_DISABLE_HDIMDIFF64: no head_dim 64 / "
    "head_dim_v 512 kernel"
)


def test_the_published_figures_name_their_source_and_shape() -> None:
    published = load_published()
    assert published_path().stat().st_size < 4_000
    assert "#1770" in published.notes["source"]
    assert "benchmark_mla_decode.py" in published.notes["script"]
    assert set(published.notes) >= {"source", "script", "shape", "lengths", "timing", "gpu"}
    assert published.seqlens() == [1024, 4096, 16384]
    assert {p.backend for p in published.rows} == {"FA3", "FlashMLA"}
    assert [published.of(s, "FA3").mean_seqlen for s in published.seqlens()] == [  # type: ignore[union-attr]
        1022,
        4213,
        16593,
    ]
    for s in published.seqlens():
        fa3, mla = published.of(s, "FA3"), published.of(s, "FlashMLA")
        assert fa3 is not None
        assert mla is not None
        assert mla.latency_us < fa3.latency_us  # what the PR reported


def suite_cases() -> list[WorkloadSpec]:
    return suite_specs(load_suite(SUITE), Settings())


def test_the_suite_is_the_prs_three_cases() -> None:
    specs = suite_cases()
    published = load_published()
    assert [s.lengths for s in specs] == [lengths_label(n) for n in published.seqlens()]
    for s in specs:
        assert s.mla is not None
        assert all(getattr(s, k) == v for k, v in SHAPE.items()), s.case_id
        assert min(s.kv_lens) >= 1
        draw = published.draw(int(s.lengths.split("(")[1].split(",")[0]))
        assert draw is not None
        assert abs(s.total_kv / draw.total_seqlens - 1) < 0.05  # the same law, another draw


def _rows() -> list[ResultRow]:
    out = []
    for s in suite_cases():
        common = {"run_id": "fake-h200", "case_id": s.case_id, "spec": s.model_dump(mode="json")}
        out += [
            row(s, "flashmla:dense", model=FLASHMLA),
            ResultRow(backend="flash-attn:mla", status="unsupported", reason=FA3_REFUSAL, **common),
            row(s, "flashinfer:mla-fa3", model=FI_FA3),
        ]
    other = suite_cases()[0].model_copy(update={"page_size": 16})
    return [*out, row(other, "flashmla:dense", model=FLASHMLA)]  # not the PR's page: left out


@pytest.fixture
def results_dir(tmp_path: Path) -> Path:
    write_results(tmp_path / "h200-mla-pr1770.jsonl", _rows())
    h100 = header("fake-h100").model_copy(
        update={"device": {"name": "NVIDIA H100 80GB HBM3", "sm": 90}}
    )
    write_results(tmp_path / "h100-mla-pr1770.jsonl", _rows()[:3], h100)
    return tmp_path


def test_beside_sets_each_row_by_its_counterpart(results_dir: Path) -> None:
    frame: pd.DataFrame = load(sorted(results_dir.glob("*.jsonl"))).frame
    found = beside(frame, load_published())
    h200 = [b for b in found if b.gpu == "NVIDIA H200"]
    assert len(h200) == 9  # 3 lengths x 3 variants; the page-16 row left out
    assert [b.variant for b in h200[:3]] == [
        "flashmla:dense",
        "flash-attn:mla",
        "flashinfer:mla-fa3",
    ]
    mla, fa3, fi = h200[:3]
    assert mla.published is not None
    assert mla.published.backend == "FlashMLA"
    assert mla.ratio == pytest.approx(mla.latency_us / 107.6)  # type: ignore[operator]
    assert fa3.latency_us is None
    assert fa3.ratio is None
    assert fa3.published is not None
    assert fa3.published.backend == "FA3"
    assert "HDIMDIFF64" in fa3.reason
    assert fi.published is None
    assert fi.ratio is None
    assert {b.gpu for b in found} == {"NVIDIA H200", "NVIDIA H100 80GB HBM3"}
    assert [b.seqlen for b in h200] == [1024] * 3 + [4096] * 3 + [16384] * 3


def test_anchors_view_names_the_gpu_and_the_fa3_refusal(results_dir: Path) -> None:
    res = runner.invoke(app, ["anchors", str(results_dir), "--set", "pr1770"])
    assert res.exit_code == 0, res.output
    out = res.output
    assert "flash-attention PR #1770" in out
    assert "NVIDIA H200 (h200-mla-pr1770.jsonl; commit abc123def456)" in out
    assert "NVIDIA H100 80GB HBM3 (h100-mla-pr1770.jsonl" in out
    assert "flash-attn:mla      unsupported (PR's FA3: 131.5 µs): tokenspeed-fa3" in out
    assert "107.6 FlashMLA" in out
    assert "AIConfigurator" not in out
    assert max(len(ln) for ln in out.splitlines()) <= 80
    one = runner.invoke(app, ["anchors", str(results_dir), "--set", "pr1770", "--gpu", "h100"])
    assert one.exit_code == 0, one.output
    assert "NVIDIA H200" not in one.output
    both = runner.invoke(app, ["anchors", str(results_dir)])
    assert both.exit_code == 0, both.output
    assert "AIConfigurator" in both.output
    assert "flash-attention PR #1770" in both.output


def test_anchors_pr1770_without_rows_shows_the_published_times(tmp_path: Path) -> None:
    write_results(tmp_path / "h200-other.jsonl", [])
    res = runner.invoke(app, ["anchors", str(tmp_path), "--set", "pr1770"])
    assert res.exit_code == 0, res.output
    assert "FA3 131.5 µs, FlashMLA 107.6 µs" in res.output
    assert "No attnbench rows of suite mla-pr1770" in res.output
    bad = runner.invoke(app, ["anchors", str(tmp_path), "--set", "fa4"])
    assert bad.exit_code == 2
    assert "Traceback" not in bad.output


def test_a_refusal_by_the_librarys_rules_beats_a_missing_library(tmp_path: Path) -> None:
    """The MLA pack has no FA3 ("not installed"); the normal pack's row says why FA3 refuses."""
    s = suite_cases()[0]
    common = {"run_id": "fake-h200", "case_id": s.case_id, "spec": s.model_dump(mode="json")}
    why_missing = "FlashAttention-3 not installed: pip install tokenspeed-fa3"
    write_results(
        tmp_path / "h200-a.jsonl",
        [ResultRow(backend="flash-attn:mla", status="unsupported", reason=FA3_REFUSAL, **common)],
    )
    write_results(
        tmp_path / "h200-b.jsonl",
        [ResultRow(backend="flash-attn:mla", status="unsupported", reason=why_missing, **common)],
    )
    (kept,) = beside(load(sorted(tmp_path.glob("*.jsonl"))).frame, load_published())
    assert "HDIMDIFF64" in kept.reason
    assert kept.file == "h200-a.jsonl"


def test_findings_set_the_rows_beside_the_published_times_per_gpu(results_dir: Path) -> None:
    from attnbench.report.findings.anchors import mla_pr1770
    from attnbench.report.findings.core import load_inputs

    found = mla_pr1770(load_inputs(sorted(results_dir.glob("*.jsonl"))))
    assert found is not None
    (table,) = found.tables
    gpus = {r[0] for r in table.rows}
    assert len(gpus) == 2  # one label per GPU, never pooled
    fa3 = next(r for r in table.rows if r[3] == "flash-attn:mla")
    assert fa3[4] == "-"
    assert fa3[5] == "131.5 FA3"
    assert "HDIMDIFF64" in fa3[7]
    mla = next(r for r in table.rows if r[3] == "flashmla:dense")
    assert mla[5] == "107.6 FlashMLA"
    assert mla[6].endswith("x")
    assert "PR #1770" in found.text


def test_findings_have_no_pr1770_section_without_its_rows(tmp_path: Path) -> None:
    from attnbench.report.findings.anchors import mla_pr1770
    from attnbench.report.findings.core import load_inputs

    write_results(tmp_path / "h200-other.jsonl", [row(suite_cases()[0], "sdpa:mla", model=FI_FA3)])
    assert mla_pr1770(load_inputs([tmp_path / "h200-other.jsonl"])) is None
