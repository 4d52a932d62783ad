"""`attnbench anchors` and `analysis.aic`: the committed AIConfigurator extract, the matching of
attnbench's rows to its rows, and the view."""

from __future__ import annotations

import gzip
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from attnbench.analysis.aic import (
    AIC_PAGE_SIZE,
    AnchorKey,
    Pair,
    anchor_path,
    load_anchors,
    missing,
    pairs,
    summaries,
)
from attnbench.analysis.frame import load
from attnbench.cli import app

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "results"
runner = CliRunner()


def test_the_extract_is_small_and_names_its_wheel() -> None:
    path = anchor_path()
    assert path.stat().st_size < 200_000
    head = [ln for ln in gzip.decompress(path.read_bytes()).decode().splitlines() if ln[:1] == "#"]
    assert any(ln.startswith("# wheel: aiconfigurator_core-0.12.0-") for ln in head)
    assert any(ln.startswith("# sha256: ") and len(ln) == len("# sha256: ") + 64 for ln in head)
    assert sum(ln.startswith("# parquet: ") for ln in head) == 12
    source = load_anchors().source
    assert source.version == "0.12.0"
    assert len(source.parquet) == 12


def test_the_issue_example_is_the_extracts_row() -> None:
    """vLLM 0.24 FA3 on the H100, Llama-3.1-8B heads, bf16, batch 1 at KV 8k: 19.8 us."""
    key = AnchorKey("h100_sxm", "vllm", "decode", 32, 8, 128, 1, 1, 8192, "bfloat16")
    row = load_anchors().rows[key]
    assert row.kernel_source == "vllm_flash_attn_fa3"
    assert round(row.latency_us, 1) == 19.8


@pytest.fixture(scope="module")
def committed_pairs() -> tuple[pd.DataFrame, list[Pair]]:
    frame = load(sorted(RESULTS.glob("h*.jsonl*"))).frame
    return frame, pairs(frame, load_anchors())


def test_pairs_keep_gpus_apart_and_page_64_alone_counts(
    committed_pairs: tuple[pd.DataFrame, list[Pair]],
) -> None:
    frame, found = committed_pairs
    assert found
    for p in found:
        gpu = p.file.split("-")[0]
        assert p.key.system == f"{gpu}_sxm"
        assert p.same_page == (p.page_size == AIC_PAGE_SIZE)
    same = [p for p in found if p.same_page]
    assert same  # h200-paged64: flashinfer:xqa at page 64
    for s in summaries(found):
        assert min(s.ratios) <= s.median <= max(s.ratios)
        assert s.beyond == sum(abs(r - 1) > 0.10 for r in s.ratios)
    gone = {(m[0], m[1]) for m in missing(frame, found)}
    assert ("h100_sxm", "vllm:flash-attn") not in gone  # h100-aic-anchors: page 64
    assert ("h200_sxm", "vllm:flash-attn") in gone  # no H200 aic-anchors run yet
    assert ("h200_sxm", "flashinfer:xqa") not in gone
    matched = [p for p in same if p.key.system == "h100_sxm"]
    for variant in ("vllm:flash-attn", "sglang:fa3", "flashinfer:xqa"):
        shapes = {p.key for p in matched if p.variant == variant}
        assert len(shapes) >= 24  # the issue's floor per GPU and engine


def test_anchors_view_fits_80_columns_and_names_the_source() -> None:
    res = runner.invoke(app, ["anchors", str(RESULTS), "-v"])
    assert res.exit_code == 0, res.output
    assert "aadc4aad0a00" in res.output
    assert "H100 (h100_sxm)" in res.output
    assert "H200 (h200_sxm)" in res.output
    assert "Not matched:" in res.output
    assert max(len(ln) for ln in res.output.splitlines()) <= 80


def test_anchors_gpu_filter_and_bad_gpu_is_one_line() -> None:
    res = runner.invoke(app, ["anchors", str(RESULTS), "--gpu", "h100"])
    assert res.exit_code == 0, res.output
    assert "H200 (" not in res.output
    bad = runner.invoke(app, ["anchors", str(RESULTS), "--gpu", "a100"])
    assert bad.exit_code == 2
    assert "Traceback" not in bad.output


def test_the_findings_section_says_what_is_not_measured_at_page_64() -> None:
    from attnbench.report.findings import REGISTRY, load_inputs

    got = REGISTRY["aic-anchors"](load_inputs([RESULTS]))
    assert got is not None
    assert "vllm:flash-attn, sglang:fa3 on the H200" in got.text
    summary = got.tables[0]
    assert summary.columns[-2:] == ["file", "commit"]
    assert {row[0] for row in summary.rows} == {"H100", "H200"}
    for row in summary.rows:
        assert row[-1] not in ("", "-", "unknown")


def test_cold_and_warm_l2_are_summarised_apart_and_a_warm_match_explains_a_cold_gap(
    committed_pairs: tuple[pd.DataFrame, list[Pair]],
) -> None:
    from attnbench.analysis.aic import explanation, l2_state

    _, found = committed_pairs
    h100 = [s for s in summaries(found) if s.system == "h100_sxm" and s.same_page]
    assert {s.l2_policy for s in h100} == {"cold", "warm"}
    cold = [p for p in found if p.key.system == "h100_sxm" and l2_state(p) == "cold"]
    words = [explanation(p, found) for p in cold if p.beyond]
    assert words
    assert all(w.startswith(("explained: L2 state", "unexplained; differs:")) for w in words)
    for p in cold:
        warm = [
            q
            for q in found
            if l2_state(q) == "warm"
            and (q.key, q.variant, q.page_size) == (p.key, p.variant, p.page_size)
        ]
        if p.beyond and warm and not warm[0].beyond:
            assert explanation(p, found).startswith("explained: L2 state")


def test_recommend_verbose_sets_the_outside_figure_beside_the_answer() -> None:
    res = runner.invoke(
        app,
        ["recommend", "--model", "llama-3.1-8b", "--engine", "vllm", "--gpu", "H100", "-v"],
        env={"COLUMNS": "80"},
    )
    assert res.exit_code == 0, res.output
    out = res.output
    assert "outside anchor: attnbench / AIConfigurator on the H100" in out
    assert "vllm:flash-attn vs vllm (decode, cold L2, page 64): median" in " ".join(out.split())
    assert max(len(ln) for ln in out.splitlines()) <= 80
    plain = runner.invoke(
        app, ["recommend", "--model", "llama-3.1-8b", "--engine", "vllm", "--gpu", "H100"]
    )
    assert "outside anchor" not in plain.output
